#include "optree_core/registry.h"

#include <algorithm>
#include <string>

#include "optree_core/exceptions.h"

namespace optree_core {

const char* KindName(PyTreeKind kind) {
  switch (kind) {
    case PyTreeKind::kCustom: return "CUSTOM";
    case PyTreeKind::kLeaf: return "LEAF";
    case PyTreeKind::kNone: return "NONE";
    case PyTreeKind::kTuple: return "TUPLE";
    case PyTreeKind::kList: return "LIST";
    case PyTreeKind::kDict: return "DICT";
    case PyTreeKind::kNamedTuple: return "NAMEDTUPLE";
    case PyTreeKind::kOrderedDict: return "ORDEREDDICT";
    case PyTreeKind::kDefaultDict: return "DEFAULTDICT";
    case PyTreeKind::kDeque: return "DEQUE";
    case PyTreeKind::kStructSequence: return "STRUCTSEQUENCE";
    case PyTreeKind::kFrozenDict: return "FROZENDICT";
  }
  return "UNKNOWN";
}

std::string SafeRepr(nb::handle obj) {
  PyObject* r = PyObject_Repr(obj.ptr());
  if (r == nullptr) {
    PyErr_Clear();
    return "<unrepresentable object>";
  }
  Py_ssize_t size = 0;
  const char* text = PyUnicode_AsUTF8AndSize(r, &size);
  std::string out = text ? std::string(text, size) : "<unrepresentable object>";
  if (!text) PyErr_Clear();
  Py_DECREF(r);
  return out;
}

const CollectionTypes& CollectionTypes::Get() {
  static const CollectionTypes types = [] {
    nb::module_ collections = nb::module_::import_("collections");
    CollectionTypes t{};
    // The module keeps these alive for the life of the interpreter.
    t.ordered_dict = reinterpret_cast<PyTypeObject*>(collections.attr("OrderedDict").ptr());
    t.default_dict = reinterpret_cast<PyTypeObject*>(collections.attr("defaultdict").ptr());
    t.deque = reinterpret_cast<PyTypeObject*>(collections.attr("deque").ptr());
    Py_INCREF(t.ordered_dict);
    Py_INCREF(t.default_dict);
    Py_INCREF(t.deque);
    return t;
  }();
  return types;
}

PyTreeTypeRegistry& PyTreeTypeRegistry::Instance() {
  // Intentionally leaked: it holds Python objects that must not be released after finalization.
  static PyTreeTypeRegistry* registry = new PyTreeTypeRegistry();
  return *registry;
}

PyTreeTypeRegistry::PyTreeTypeRegistry() {
  RegisterBuiltin(&PyTuple_Type, PyTreeKind::kTuple);
  RegisterBuiltin(&PyList_Type, PyTreeKind::kList);
  RegisterBuiltin(&PyDict_Type, PyTreeKind::kDict);
  RegisterBuiltin(Py_TYPE(Py_None), PyTreeKind::kNone);
  const CollectionTypes& c = CollectionTypes::Get();
  RegisterBuiltin(c.ordered_dict, PyTreeKind::kOrderedDict);
  RegisterBuiltin(c.default_dict, PyTreeKind::kDefaultDict);
  RegisterBuiltin(c.deque, PyTreeKind::kDeque);
}

void PyTreeTypeRegistry::RegisterBuiltin(PyTypeObject* type, PyTreeKind kind) {
  auto reg = std::make_shared<PyTreeTypeRegistration>();
  reg->kind = kind;
  reg->type = nb::borrow(reinterpret_cast<PyObject*>(type));
  reg->serial = next_serial_++;
  global_.emplace(type, std::move(reg));
}

static std::string TypeName(nb::handle cls) {
  return SafeRepr(cls);
}

void PyTreeTypeRegistry::Register(nb::handle cls, nb::handle flatten_func,
                                  nb::handle unflatten_func, nb::handle path_entry_type,
                                  const std::string& ns) {
  if (!PyType_Check(cls.ptr())) {
    RaisePython(PyExc_TypeError, "Expected a class to register, got " + SafeRepr(cls) + ".");
  }
  if (!PyCallable_Check(flatten_func.ptr()) || !PyCallable_Check(unflatten_func.ptr())) {
    RaisePython(PyExc_TypeError, "flatten_func and unflatten_func must be callable.");
  }
  auto* type = reinterpret_cast<PyTypeObject*>(cls.ptr());
  auto builtin = global_.find(type);
  if (builtin != global_.end() && builtin->second->kind != PyTreeKind::kCustom) {
    RaisePython(PyExc_ValueError,
                "PyTree type " + TypeName(cls) + " is a built-in type and cannot be re-registered.");
  }
  if (ns.empty()) {
    if (builtin != global_.end()) {
      RaisePython(PyExc_ValueError, "PyTree type " + TypeName(cls) +
                                        " is already registered in the global namespace.");
    }
  } else if (namespaced_.contains(std::make_pair(type, ns))) {
    RaisePython(PyExc_ValueError, "PyTree type " + TypeName(cls) +
                                      " is already registered in namespace " + SafeRepr(nb::str(ns.c_str())) + ".");
  }
  auto reg = std::make_shared<PyTreeTypeRegistration>();
  reg->kind = PyTreeKind::kCustom;
  reg->type = nb::borrow(cls);
  reg->flatten_func = nb::borrow(flatten_func);
  reg->unflatten_func = nb::borrow(unflatten_func);
  reg->path_entry_type = nb::borrow(path_entry_type);
  reg->ns = ns;
  reg->serial = next_serial_++;
  ++version_;
  if (ns.empty()) {
    global_.emplace(type, std::move(reg));
  } else {
    namespaced_.emplace(std::make_pair(type, ns), std::move(reg));
    has_namespaced_ = true;
  }
}

void PyTreeTypeRegistry::Unregister(nb::handle cls, const std::string& ns) {
  if (!PyType_Check(cls.ptr())) {
    RaisePython(PyExc_TypeError, "Expected a class to unregister, got " + SafeRepr(cls) + ".");
  }
  auto* type = reinterpret_cast<PyTypeObject*>(cls.ptr());
  if (ns.empty()) {
    auto it = global_.find(type);
    if (it == global_.end()) {
      RaisePython(PyExc_ValueError, "PyTree type " + TypeName(cls) +
                                        " is not registered in the global namespace.");
    }
    if (it->second->kind != PyTreeKind::kCustom) {
      RaisePython(PyExc_ValueError,
                  "PyTree type " + TypeName(cls) + " is a built-in type and cannot be unregistered.");
    }
    ++version_;
    Entry released = std::move(it->second);
    global_.erase(it);
    released.reset();  // After the map is consistent: dropping references can run Python code.
  } else {
    auto it = namespaced_.find(std::make_pair(type, ns));
    if (it == namespaced_.end()) {
      RaisePython(PyExc_ValueError, "PyTree type " + TypeName(cls) +
                                        " is not registered in namespace " + SafeRepr(nb::str(ns.c_str())) + ".");
    }
    ++version_;
    Entry released = std::move(it->second);
    namespaced_.erase(it);
    released.reset();
  }
}

void PyTreeTypeRegistry::SetDictInsertionOrdered(bool mode, const std::string& ns) {
  ++version_;
  if (ns.empty()) {
    dict_insertion_ordered_global_ = mode;
  } else if (mode) {
    insertion_ordered_namespaces_.insert(ns);
  } else {
    insertion_ordered_namespaces_.erase(ns);
  }
}

Py_ssize_t PyTreeTypeRegistry::Size(const std::optional<std::string>& ns) const {
  Py_ssize_t count = static_cast<Py_ssize_t>(global_.size());
  for (const auto& [key, _] : namespaced_) {
    if (!ns || key.second == *ns) ++count;
  }
  return count;
}

std::vector<std::pair<nb::object, std::string>> PyTreeTypeRegistry::Keys() const {
  std::vector<const PyTreeTypeRegistration*> regs;
  regs.reserve(global_.size() + namespaced_.size());
  for (const auto& [type, reg] : global_) regs.push_back(reg.get());
  for (const auto& [key, reg] : namespaced_) regs.push_back(reg.get());
  std::sort(regs.begin(), regs.end(),
            [](const auto* a, const auto* b) { return a->serial < b->serial; });
  std::vector<std::pair<nb::object, std::string>> keys;
  keys.reserve(regs.size());
  for (const auto* reg : regs) keys.emplace_back(reg->type, reg->ns);
  return keys;
}

static bool HasIntAttr(PyObject* obj, const char* name) {
  PyObject* value = PyObject_GetAttrString(obj, name);
  if (value == nullptr) {
    PyErr_Clear();
    return false;
  }
  bool ok = PyLong_CheckExact(value);
  Py_DECREF(value);
  return ok;
}

bool IsNamedTupleClass(PyTypeObject* type) {
  if (!PyType_IsSubtype(type, &PyTuple_Type) || type == &PyTuple_Type) return false;
  PyObject* obj = reinterpret_cast<PyObject*>(type);
  PyObject* fields = PyObject_GetAttrString(obj, "_fields");
  if (fields == nullptr) {
    PyErr_Clear();
    return false;
  }
  bool ok = PyTuple_Check(fields);
  if (ok) {
    for (Py_ssize_t i = 0; i < PyTuple_GET_SIZE(fields); ++i) {
      if (!PyUnicode_Check(PyTuple_GET_ITEM(fields, i))) {
        ok = false;
        break;
      }
    }
  }
  Py_DECREF(fields);
  if (!ok) return false;
  for (const char* method : {"_make", "_asdict"}) {
    PyObject* attr = PyObject_GetAttrString(obj, method);
    if (attr == nullptr) {
      PyErr_Clear();
      return false;
    }
    bool callable = PyCallable_Check(attr);
    Py_DECREF(attr);
    if (!callable) return false;
  }
  return true;
}

bool IsStructSequenceClass(PyTypeObject* type) {
  if (!PyType_IsSubtype(type, &PyTuple_Type) || type == &PyTuple_Type) return false;
  // PyStructSequence types cannot be subclassed; that separates them from look-alikes.
  if (PyType_HasFeature(type, Py_TPFLAGS_BASETYPE)) return false;
  PyObject* obj = reinterpret_cast<PyObject*>(type);
  return HasIntAttr(obj, "n_sequence_fields") && HasIntAttr(obj, "n_fields") &&
         HasIntAttr(obj, "n_unnamed_fields");
}

}  // namespace optree_core
