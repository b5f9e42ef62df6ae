// The unboxed eager call path: in the ATen build of the op glue (torch_api.h), each op of
// FUSED_OPTIM_OPS becomes a function of the optional Python module fused_optim._eager (its
// `ops.<op>`) that converts its Python arguments straight to the C++ types of the op's
// implementation and calls it, skipping the boxed torch.ops path (Python -> IValue stack ->
// dispatcher -> the stable ABI's boxing), which costs more than a small tensor's update.
//
// It is a shortcut only where the dispatcher would do nothing but reach the CPU/CUDA kernel: every
// tensor a plain dense CPU or CUDA torch.Tensor (or Parameter), no tensor needing a gradient under
// grad mode, no dispatch key left to handle (Python modes and subclasses, functorch, autocast,
// conjugate/negative views, meta or sparse tensors), no profiler callbacks. Anything else returns
// NotImplemented and the caller takes torch.ops, where every layer runs. The kernels do their own
// checks and version-counter bumps, so both paths check and record the same.
#pragma once

#include <Python.h>

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <functional>
#include <optional>
#include <tuple>
#include <type_traits>
#include <utility>
#include <vector>

namespace fused_optim::eager {

// Calls the op with its arguments in schema order; returns a new reference, NotImplemented (new
// reference) to fall back, or nullptr with a Python error set.
using Invoker = std::function<PyObject*(PyObject* const* args)>;
void Register(const char* schema, int num_args, Invoker invoker);
// Adds the registered functions to `module` as the attribute `_eager` (a namespace of functions),
// and the eager runner's helpers `_flatten_lists` and `_split_flat` (see eager_call.cpp).
bool AddFunctions(PyObject* module);

// Tensors of the Python arguments, borrowed (no reference counting: the caller's Python objects
// keep them alive for the call), and whether all of them may take the shortcut.
class Borrowed {
 public:
  Borrowed() = default;
  Borrowed(const Borrowed&) = delete;
  Borrowed& operator=(const Borrowed&) = delete;
  ~Borrowed();
  // A list or tuple of tensors; false where an item is not a plain tensor.
  bool AddList(PyObject* obj, std::vector<at::Tensor>& out);
  // The same where an item may be None.
  bool AddOptionalList(PyObject* obj, std::vector<std::optional<at::Tensor>>& out);
  // One tensor or None.
  bool AddOptional(PyObject* obj, std::optional<at::Tensor>& out);
  // Whether every tensor added is a plain dense CPU or CUDA tensor that no layer above the kernel
  // would handle (see the note atop this file).
  bool ShortcutAllowed() const;
  // Asks for the storages of every tensor added (their TensorImpls are asked for as they are
  // added), which the op's checks read next (see eager_call.cpp).
  void PrefetchStorages() const;

 private:
  std::vector<std::vector<at::Tensor>*> borrowed_;  // lists whose entries are borrows
  std::vector<const at::Tensor*> tensors_;          // every tensor added
};

// Conversion of one Python argument to the C++ type the implementation takes. Convert returns
// false where the argument is not of the exact type (the boxed path then raises its own error).
template <typename T>
struct Arg;
template <>
struct Arg<const std::vector<at::Tensor>&> {
  std::vector<at::Tensor> value;
  bool Convert(Borrowed& b, PyObject* obj) { return b.AddList(obj, value); }
  const std::vector<at::Tensor>& Get() const { return value; }
};
template <>
struct Arg<const std::vector<std::optional<at::Tensor>>&> {
  std::vector<std::optional<at::Tensor>> value;
  bool Convert(Borrowed& b, PyObject* obj) { return b.AddOptionalList(obj, value); }
  const std::vector<std::optional<at::Tensor>>& Get() const { return value; }
};
template <>
struct Arg<const std::optional<at::Tensor>&> {
  std::optional<at::Tensor> value;
  bool Convert(Borrowed& b, PyObject* obj) { return b.AddOptional(obj, value); }
  const std::optional<at::Tensor>& Get() const { return value; }
};
template <>
struct Arg<double> {
  double value = 0.0;
  bool Convert(Borrowed&, PyObject* obj);
  double Get() const { return value; }
};
template <>
struct Arg<bool> {
  bool value = false;
  bool Convert(Borrowed&, PyObject* obj);
  bool Get() const { return value; }
};
template <>
struct Arg<int64_t> {
  int64_t value = 0;
  bool Convert(Borrowed&, PyObject* obj);
  int64_t Get() const { return value; }
};

// The results back to Python, as torch.ops returns them.
PyObject* ToPython(std::vector<at::Tensor>&& list);
inline PyObject* ToPython(int64_t value) { return PyLong_FromLongLong(value); }
template <typename... L>
PyObject* ToPython(std::tuple<L...>&& lists) {
  PyObject* out = PyTuple_New(sizeof...(L));
  if (out == nullptr) return nullptr;
  bool ok = true;
  Py_ssize_t i = 0;
  std::apply(
      [&](auto&... l) {
        ((ok = ok &&
               [&] {
                 PyObject* item = ToPython(std::move(l));
                 if (item == nullptr) return false;
                 PyTuple_SET_ITEM(out, i++, item);
                 return true;
               }()),
         ...);
      },
      lists);
  if (!ok) {
    Py_DECREF(out);
    return nullptr;
  }
  return out;
}

// Runs `call` without the GIL (the kernels may take long; other Python threads run meanwhile)
// and turns a C++ exception into the Python exception torch.ops would raise.
PyObject* RunTranslated(const std::function<PyObject*()>& call);
struct NoGil {
  PyThreadState* state = PyEval_SaveThread();
  NoGil() = default;
  NoGil(const NoGil&) = delete;
  NoGil& operator=(const NoGil&) = delete;
  ~NoGil() { PyEval_RestoreThread(state); }
};

template <typename R, typename... A>
Invoker MakeInvoker(R (*fn)(A...)) {
  return [fn](PyObject* const* args) -> PyObject* {
    return [&]<size_t... I>(std::index_sequence<I...>) -> PyObject* {
      std::tuple<Arg<A>...> converted;
      Borrowed borrowed;  // declared after `converted`: gives the borrows back before it is destroyed
      const bool ok = (std::get<I>(converted).Convert(borrowed, args[I]) && ...);
      if (!ok || !borrowed.ShortcutAllowed()) Py_RETURN_NOTIMPLEMENTED;
      borrowed.PrefetchStorages();
      return RunTranslated([&]() -> PyObject* {
        if constexpr (std::is_void_v<R>) {
          {
            NoGil released;
            fn(std::get<I>(converted).Get()...);
          }
          Py_RETURN_NONE;
        } else {
          std::optional<R> result;
          {
            NoGil released;
            result.emplace(fn(std::get<I>(converted).Get()...));
          }
          return ToPython(std::move(*result));
        }
      });
    }(std::index_sequence_for<A...>{});
  };
}

// Registers `fn` under `schema` (the op's name and arguments), its argument count taken from its
// signature.
template <typename R, typename... A>
void Register(const char* schema, R (*fn)(A...)) {
  Register(schema, static_cast<int>(sizeof...(A)), MakeInvoker(fn));
}

}  // namespace fused_optim::eager
