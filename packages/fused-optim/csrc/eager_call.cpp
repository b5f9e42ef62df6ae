// The unboxed eager call path declared in eager_call.h: argument conversion, the check that the
// dispatcher would only reach the kernel, and the functions of the module fused_optim._eager.
#include "eager_call.h"

#include <ATen/PythonTorchFunctionTLS.h>
#include <ATen/core/dispatch/Dispatcher.h>
#include <ATen/core/grad_mode.h>
#include <ATen/record_function.h>
#include <c10/core/DispatchKeySet.h>
#include <c10/core/impl/LocalDispatchKeySet.h>
#include <torch/csrc/Exceptions.h>
#include <torch/csrc/autograd/python_variable.h>

#include <string>

namespace fused_optim::eager {
namespace {

struct Entry {
  std::string name;
  int num_args;
  Invoker invoke;
  std::vector<PyObject*> names;  // interned argument names, schema order (filled by AddFunctions)
  // Per argument: what an omitted one is, where its default is None or a bool (`Tensor? x=None`,
  // `bool capturable=False`: the Python singletons, borrowed), else null.
  std::vector<PyObject*> omitted;
  int num_positional = 0;  // arguments before the schema's `*`
};

std::vector<Entry>& Registry() {
  static std::vector<Entry> entries;
  return entries;
}

// fn(*args, **kwargs) with the op's schema names, an omitted argument whose default is None or a
// bool taken as that; NotImplemented where another argument is missing or one is unknown (the
// boxed path raises the error the user should see).
PyObject* Call(PyObject* self, PyObject* const* args, Py_ssize_t nargs, PyObject* kwnames) {
  const Entry& e = Registry()[PyLong_AsSsize_t(self)];
  std::vector<PyObject*> slots(e.num_args, nullptr);
  if (nargs > e.num_args) Py_RETURN_NOTIMPLEMENTED;
  for (Py_ssize_t i = 0; i < nargs; ++i) slots[i] = args[i];
  const Py_ssize_t nkw = kwnames == nullptr ? 0 : PyTuple_GET_SIZE(kwnames);
  for (Py_ssize_t k = 0; k < nkw; ++k) {
    PyObject* key = PyTuple_GET_ITEM(kwnames, k);
    int found = -1;
    for (int i = static_cast<int>(nargs); i < e.num_args && found < 0; ++i)
      if (e.names[i] == key) found = i;  // keyword names are interned, as are ours
    for (int i = static_cast<int>(nargs); i < e.num_args && found < 0; ++i)
      if (PyUnicode_Compare(e.names[i], key) == 0) found = i;
    if (found < 0 || slots[found] != nullptr) Py_RETURN_NOTIMPLEMENTED;
    slots[found] = args[nargs + k];
  }
  for (int i = 0; i < e.num_args; ++i) {
    if (slots[i] != nullptr) continue;
    if (e.omitted[i] == nullptr) Py_RETURN_NOTIMPLEMENTED;
    slots[i] = e.omitted[i];
  }
  return e.invoke(slots.data());
}

PyMethodDef kCallDef = {"call", reinterpret_cast<PyCFunction>(reinterpret_cast<void (*)()>(&Call)),
                        METH_FASTCALL | METH_KEYWORDS, nullptr};

// _flatten_lists(lists): the tensor lists of a functional op call in one pass, for the eager
// runner (fused_optim.ops._make_runner), which otherwise walks them in Python three times (the
// gradient test, the lengths, the flat argument tuple) and unwraps each tensor as
// Function.apply does (a call per tensor). Returns (flat tensors, lengths, whether grad mode is
// on and a tensor requires grad), or None where the runner must take its general path: a list
// that is not a list or tuple, an item that is not a plain torch.Tensor (or Parameter), or a
// functorch wrapper (a tensor that escaped a transform, which Function.apply would unwrap).
PyObject* FlattenLists(PyObject*, PyObject* lists) {
  if (!PyList_CheckExact(lists) && !PyTuple_CheckExact(lists)) Py_RETURN_NONE;
  const Py_ssize_t num_lists = PySequence_Fast_GET_SIZE(lists);
  PyObject** items = PySequence_Fast_ITEMS(lists);
  Py_ssize_t total = 0;
  for (Py_ssize_t i = 0; i < num_lists; ++i) {
    if (!PyList_CheckExact(items[i]) && !PyTuple_CheckExact(items[i])) Py_RETURN_NONE;
    total += PySequence_Fast_GET_SIZE(items[i]);
  }
  const bool grad_mode = at::GradMode::is_enabled();
  bool needs_grad = false;
  PyObject* flat = PyTuple_New(total);
  PyObject* sizes = flat == nullptr ? nullptr : PyTuple_New(num_lists);
  if (sizes == nullptr) {
    Py_XDECREF(flat);
    return nullptr;
  }
  Py_ssize_t k = 0;
  for (Py_ssize_t i = 0; i < num_lists; ++i) {
    PyObject** tensors = PySequence_Fast_ITEMS(items[i]);
    const Py_ssize_t n = PySequence_Fast_GET_SIZE(items[i]);
    for (Py_ssize_t j = 0; j < n; ++j) {
      PyObject* obj = tensors[j];
      const bool plain =
          THPVariable_CheckExact(obj) && !THPVariable_Unpack(obj).key_set().has(c10::DispatchKey::FuncTorchGradWrapper);
      if (!plain) {
        Py_DECREF(flat);
        Py_DECREF(sizes);
        Py_RETURN_NONE;
      }
      needs_grad = needs_grad || (grad_mode && THPVariable_Unpack(obj).requires_grad());
      Py_INCREF(obj);
      PyTuple_SET_ITEM(flat, k++, obj);
    }
    PyObject* size = PyLong_FromSsize_t(n);
    if (size == nullptr) {
      Py_DECREF(flat);
      Py_DECREF(sizes);
      return nullptr;
    }
    PyTuple_SET_ITEM(sizes, i, size);
  }
  return Py_BuildValue("(NNO)", flat, sizes, needs_grad ? Py_True : Py_False);
}

// _split_flat(flat, sizes): a tuple cut into consecutive lists of the given lengths (the node's
// flat results back into the op's output lists). Raises ValueError where the lengths do not add
// up to the tuple's.
PyObject* SplitFlat(PyObject*, PyObject* const* args, Py_ssize_t nargs) {
  if (nargs != 2 || !PyTuple_CheckExact(args[0]) || !PyTuple_CheckExact(args[1])) {
    PyErr_SetString(PyExc_TypeError, "_split_flat(flat, sizes) takes two tuples");
    return nullptr;
  }
  PyObject* flat = args[0];
  PyObject* sizes = args[1];
  const Py_ssize_t num_lists = PyTuple_GET_SIZE(sizes);
  PyObject* out = PyTuple_New(num_lists);
  if (out == nullptr) return nullptr;
  Py_ssize_t start = 0;
  for (Py_ssize_t i = 0; i < num_lists; ++i) {
    const Py_ssize_t n = PyLong_AsSsize_t(PyTuple_GET_ITEM(sizes, i));
    if (n == -1 && PyErr_Occurred()) {
      Py_DECREF(out);
      return nullptr;
    }
    if (n < 0 || start + n > PyTuple_GET_SIZE(flat)) {
      Py_DECREF(out);
      PyErr_Format(PyExc_ValueError, "_split_flat: the lengths do not fit a tuple of %zd items",
                   PyTuple_GET_SIZE(flat));
      return nullptr;
    }
    PyObject* list = PyList_New(n);
    if (list == nullptr) {
      Py_DECREF(out);
      return nullptr;
    }
    for (Py_ssize_t j = 0; j < n; ++j) {
      PyObject* item = PyTuple_GET_ITEM(flat, start + j);
      Py_INCREF(item);
      PyList_SET_ITEM(list, j, item);
    }
    PyTuple_SET_ITEM(out, i, list);
    start += n;
  }
  if (start != PyTuple_GET_SIZE(flat)) {
    Py_DECREF(out);
    PyErr_Format(PyExc_ValueError, "_split_flat: the lengths add up to %zd, the tuple has %zd items", start,
                 PyTuple_GET_SIZE(flat));
    return nullptr;
  }
  return out;
}

// _grads_if_same(params, kept): fused_optim._C._grads_if_same (the step reuse's pass over a
// group: the gradients where `params` holds exactly the `kept` list's tensors, in order, else
// None), each gradient read from the tensor rather than through Python's `.grad` getter, whose
// error and warning set-up, torch-function check and attribute lookup take ~4x as long, per
// parameter, every step. The getter still answers where it could answer otherwise: under a torch
// function mode (which it consults), for a tensor subclass, and where there is no gradient (it
// warns for a non-leaf tensor then).
PyObject* GradsIfSame(PyObject*, PyObject* const* args, Py_ssize_t nargs) {
  HANDLE_TH_ERRORS
  if (nargs != 2 || !PyList_CheckExact(args[1])) {
    PyErr_SetString(PyExc_TypeError, "_grads_if_same(params, kept) takes a sequence and a list");
    return nullptr;
  }
  PyObject* params = args[0];
  PyObject* kept = args[1];
  const Py_ssize_t count = PyList_GET_SIZE(kept);
  if (!PyList_Check(params) || PyList_GET_SIZE(params) != count) Py_RETURN_NONE;
  for (Py_ssize_t i = 0; i < count; ++i) {
    if (PyList_GET_ITEM(params, i) != PyList_GET_ITEM(kept, i)) Py_RETURN_NONE;
  }
  const bool modes = at::impl::torch_function_mode_enabled();
  PyObject* out = PyList_New(count);
  for (Py_ssize_t i = 0; out != nullptr && i < count; ++i) {
    PyObject* param = PyList_GET_ITEM(kept, i);
    const at::Tensor* grad = nullptr;
    if (!modes && THPVariable_CheckExact(param)) grad = &THPVariable_Unpack(param).unsafeGetTensorImpl()->grad();
    PyObject* g = grad != nullptr && grad->defined() ? THPVariable_Wrap(*grad) : PyObject_GetAttrString(param, "grad");
    if (g == nullptr) {
      Py_CLEAR(out);
    } else {
      PyList_SET_ITEM(out, i, g);
    }
  }
  return out;
  END_HANDLE_TH_ERRORS
}

PyMethodDef kHelperDefs[] = {
    {"_flatten_lists", reinterpret_cast<PyCFunction>(reinterpret_cast<void (*)()>(&FlattenLists)), METH_O, nullptr},
    {"_split_flat", reinterpret_cast<PyCFunction>(reinterpret_cast<void (*)()>(&SplitFlat)), METH_FASTCALL, nullptr},
    {"_grads_if_same", reinterpret_cast<PyCFunction>(reinterpret_cast<void (*)()>(&GradsIfSame)), METH_FASTCALL,
     nullptr},
    {nullptr, nullptr, 0, nullptr}};

}  // namespace

void Register(const char* schema, int num_args, Invoker invoker) {
  const std::string s(schema);
  Registry().push_back({s.substr(0, s.find('(')), num_args, std::move(invoker), {}, {}, 0});
}

bool AddFunctions(PyObject* module) {
  PyObject* ns = PyDict_New();
  if (ns == nullptr) return false;
  for (size_t i = 0; i < Registry().size(); ++i) {
    Entry& e = Registry()[i];
    const auto& schema =
        c10::Dispatcher::singleton().findSchemaOrThrow(("fused_optim::" + e.name).c_str(), "").schema();
    if (static_cast<int>(schema.arguments().size()) != e.num_args) {
      PyErr_Format(PyExc_RuntimeError, "fused_optim::%s: the schema has %d arguments, the implementation %d",
                   e.name.c_str(), static_cast<int>(schema.arguments().size()), e.num_args);
      Py_DECREF(ns);
      return false;
    }
    e.names.clear();
    e.omitted.clear();
    e.num_positional = 0;
    for (const auto& a : schema.arguments()) {
      e.names.push_back(PyUnicode_InternFromString(a.name().c_str()));
      const std::optional<c10::IValue>& d = a.default_value();
      e.omitted.push_back(!d            ? nullptr
                          : d->isNone() ? Py_None
                          : d->isBool() ? (d->toBool() ? Py_True : Py_False)
                                        : nullptr);
      if (!a.kwarg_only()) ++e.num_positional;
    }
    PyObject* index = PyLong_FromSsize_t(static_cast<Py_ssize_t>(i));
    PyObject* fn = index == nullptr ? nullptr : PyCFunction_NewEx(&kCallDef, index, nullptr);
    Py_XDECREF(index);
    if (fn == nullptr || PyDict_SetItemString(ns, e.name.c_str(), fn) != 0) {
      Py_XDECREF(fn);
      Py_DECREF(ns);
      return false;
    }
    Py_DECREF(fn);
  }
  if (PyModule_AddFunctions(module, kHelperDefs) != 0) {
    Py_DECREF(ns);
    return false;
  }
  return PyModule_AddObject(module, "_eager", ns) == 0 || (Py_DECREF(ns), false);
}

void Borrowed::PrefetchStorages() const {
  for (const at::Tensor* t : tensors_) api::PrefetchStorage(*t);
}

Borrowed::~Borrowed() {
  for (std::vector<at::Tensor>* list : borrowed_)
    for (at::Tensor& t : *list) c10::MaybeOwnedTraits<at::Tensor>::destroyBorrow(t);
}

bool Borrowed::AddList(PyObject* obj, std::vector<at::Tensor>& out) {
  if (!PyList_CheckExact(obj) && !PyTuple_CheckExact(obj)) return false;
  PyObject** items = PySequence_Fast_ITEMS(obj);
  const Py_ssize_t n = PySequence_Fast_GET_SIZE(obj);
  for (Py_ssize_t i = 0; i < n; ++i)
    if (!THPVariable_CheckExact(items[i])) return false;
  out.reserve(n);
  borrowed_.push_back(&out);
  for (Py_ssize_t i = 0; i < n; ++i) {
    out.push_back(c10::MaybeOwnedTraits<at::Tensor>::createBorrow(THPVariable_Unpack(items[i])));
    api::PrefetchImpl(out.back());
  }
  for (const at::Tensor& t : out) tensors_.push_back(&t);
  return true;
}

bool Borrowed::AddOptionalList(PyObject* obj, std::vector<std::optional<at::Tensor>>& out) {
  if (!PyList_CheckExact(obj) && !PyTuple_CheckExact(obj)) return false;
  PyObject** items = PySequence_Fast_ITEMS(obj);
  const Py_ssize_t n = PySequence_Fast_GET_SIZE(obj);
  out.reserve(n);
  for (Py_ssize_t i = 0; i < n; ++i) {
    if (items[i] == Py_None) {
      out.push_back(std::nullopt);
    } else if (THPVariable_CheckExact(items[i])) {
      const at::Tensor& t = THPVariable_Unpack(items[i]);  // owned by the Python object
      api::PrefetchImpl(t);
      tensors_.push_back(&t);
      out.push_back(t);
    } else {
      return false;
    }
  }
  return true;
}

bool Borrowed::AddOptional(PyObject* obj, std::optional<at::Tensor>& out) {
  if (obj == Py_None) return true;
  if (!THPVariable_CheckExact(obj)) return false;
  out = THPVariable_Unpack(obj);
  tensors_.push_back(&*out);
  return true;
}

bool Borrowed::ShortcutAllowed() const {
  if (at::hasCallbacks()) return false;  // the profiler (RecordFunction) wants to see the op
  // The keys the dispatcher would visit, as it computes them: the tensor's, plus those a mode or
  // transform includes for the thread (Python, functorch...), less the excluded ones; then less
  // the layers that do nothing here (autograd when no gradient is needed, ADInplaceOrView, whose
  // version bump the kernel makes itself, and BackendSelect, which every thread includes).
  const c10::impl::LocalDispatchKeySet tls = c10::impl::tls_local_dispatch_key_set();
  constexpr c10::DispatchKeySet kNothingToDo =
      c10::autograd_dispatch_keyset_with_ADInplaceOrView | c10::DispatchKeySet(c10::DispatchKey::BackendSelect);
  const bool grad = at::GradMode::is_enabled();
  for (const at::Tensor* t : tensors_) {
    if (grad && t->requires_grad()) return false;  // autograd has a say: the op's autograd kernel
    const c10::DispatchKeySet keys = ((t->key_set() | tls.included_) - tls.excluded_) - kNothingToDo;
    if (keys != c10::DispatchKeySet(c10::DispatchKey::CPU) && keys != c10::DispatchKeySet(c10::DispatchKey::CUDA))
      return false;
  }
  return true;
}

bool Arg<double>::Convert(Borrowed&, PyObject* obj) {
  if (PyFloat_CheckExact(obj)) {
    value = PyFloat_AS_DOUBLE(obj);
    return true;
  }
  if (!PyLong_CheckExact(obj)) return false;
  value = PyLong_AsDouble(obj);
  if (value == -1.0 && PyErr_Occurred()) {
    PyErr_Clear();
    return false;
  }
  return true;
}

bool Arg<bool>::Convert(Borrowed&, PyObject* obj) {
  if (obj != Py_True && obj != Py_False) return false;
  value = obj == Py_True;
  return true;
}

bool Arg<int64_t>::Convert(Borrowed&, PyObject* obj) {
  if (!PyLong_CheckExact(obj)) return false;
  int overflow = 0;
  value = PyLong_AsLongLongAndOverflow(obj, &overflow);
  if (overflow != 0 || (value == -1 && PyErr_Occurred())) {
    PyErr_Clear();
    return false;
  }
  return true;
}

PyObject* ToPython(std::vector<at::Tensor>&& list) {
  PyObject* out = PyList_New(static_cast<Py_ssize_t>(list.size()));
  if (out == nullptr) return nullptr;
  for (size_t i = 0; i < list.size(); ++i) {
    PyObject* item = THPVariable_Wrap(std::move(list[i]));
    if (item == nullptr) {
      Py_DECREF(out);
      return nullptr;
    }
    PyList_SET_ITEM(out, static_cast<Py_ssize_t>(i), item);
  }
  return out;
}

PyObject* RunTranslated(const std::function<PyObject*()>& call) {
  HANDLE_TH_ERRORS
  return call();
  END_HANDLE_TH_ERRORS
}

}  // namespace fused_optim::eager
