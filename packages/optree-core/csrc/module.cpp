// The one binding file: thin wrappers over the C++ core. Documentation lives in the Python
// modules that re-export these.
#include <nanobind/nanobind.h>
#include <nanobind/stl/optional.h>
#include <nanobind/stl/pair.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/tuple.h>
#include <nanobind/stl/vector.h>

#include <cstdlib>
#include <string>

#include "optree_core/exceptions.h"
#include "optree_core/registry.h"
#include "optree_core/structure_cache.h"
#include "optree_core/treespec.h"

namespace nb = nanobind;
using namespace nb::literals;

namespace optree_core {

namespace {

#define OPTREE_CORE_STRINGIFY_(x) #x
#define OPTREE_CORE_STRINGIFY(x) OPTREE_CORE_STRINGIFY_(x)

nb::dict BuildInfo() {
  nb::dict info;
#if defined(__clang__)
  info["compiler"] = "clang " __clang_version__;
#elif defined(__GNUC__)
  info["compiler"] = "gcc " __VERSION__;
#else
  info["compiler"] = "unknown";
#endif
  info["cplusplus"] = static_cast<long>(__cplusplus);
  info["python_api"] = PY_VERSION;
  info["nanobind_abi"] = nb::str(OPTREE_CORE_STRINGIFY(NB_VERSION_MAJOR) "." OPTREE_CORE_STRINGIFY(
      NB_VERSION_MINOR) "." OPTREE_CORE_STRINGIFY(NB_VERSION_PATCH));
#ifdef Py_LIMITED_API
  info["stable_abi"] = true;
#else
  info["stable_abi"] = false;
#endif
#ifdef NDEBUG
  info["debug"] = false;
#else
  info["debug"] = true;
#endif
  info["cuda"] = false;
  info["abseil"] = true;
  info["max_recursion_depth"] = kMaxRecursionDepth;
  return info;
}

void BuildRegistrySubmodule(nb::module_& m) {
  m.def("register_node",
        [](nb::handle cls, nb::handle flatten_func, nb::handle unflatten_func,
           nb::handle path_entry_type, const std::string& ns) {
          PyTreeTypeRegistry::Instance().Register(cls, flatten_func, unflatten_func,
                                                  path_entry_type, ns);
        },
        "cls"_a, "flatten_func"_a, "unflatten_func"_a, "path_entry_type"_a.none(), "namespace"_a = "");
  m.def("unregister_node",
        [](nb::handle cls, const std::string& ns) {
          PyTreeTypeRegistry::Instance().Unregister(cls, ns);
        },
        "cls"_a, "namespace"_a = "");
  m.def("lookup_node",
        [](nb::handle cls, const std::string& ns) -> nb::object {
          if (!PyType_Check(cls.ptr())) return nb::none();
          const PyTreeTypeRegistration* reg = PyTreeTypeRegistry::Instance().Lookup(
              reinterpret_cast<PyTypeObject*>(cls.ptr()), ns);
          if (reg == nullptr) return nb::none();
          auto opt = [](const nb::object& o) { return o.is_valid() ? o : nb::none(); };
          return nb::make_tuple(static_cast<int>(reg->kind), opt(reg->flatten_func),
                                opt(reg->unflatten_func), opt(reg->path_entry_type),
                                nb::str(reg->ns.c_str()));
        },
        "cls"_a, "namespace"_a = "");
  m.def("is_dict_insertion_ordered",
        [](const std::string& ns, bool inherit_global) {
          return PyTreeTypeRegistry::Instance().IsDictInsertionOrdered(ns, inherit_global);
        },
        "namespace"_a = "", "inherit_global_namespace"_a = true);
  m.def("set_dict_insertion_ordered",
        [](bool mode, const std::string& ns) {
          PyTreeTypeRegistry::Instance().SetDictInsertionOrdered(mode, ns);
        },
        "mode"_a, "namespace"_a = "");
  m.def("is_namedtuple_class", [](nb::handle cls) {
    return PyType_Check(cls.ptr()) &&
           IsNamedTupleClass(reinterpret_cast<PyTypeObject*>(cls.ptr()));
  });
  m.def("is_structseq_class", [](nb::handle cls) {
    return PyType_Check(cls.ptr()) &&
           IsStructSequenceClass(reinterpret_cast<PyTypeObject*>(cls.ptr()));
  });
  m.def("get_registry_size",
        [](std::optional<std::string> ns) { return PyTreeTypeRegistry::Instance().Size(ns); },
        "namespace"_a.none() = nb::none());
  m.def("_registry_keys", [] { return PyTreeTypeRegistry::Instance().Keys(); });
  m.def("_set_python_helpers", &detail::SetPythonHelpers, "total_order_sorted"_a);
}

// PyTorch's torch.utils._cxx_pytree subclasses the metaclass of PyTreeSpec
// (`class LeafSpecMeta(type(TreeSpec))`), as optree's pybind11 metaclass allows. nanobind
// creates its metaclass without Py_TPFLAGS_BASETYPE. The options were: rebind PyTreeSpec by
// hand with CPython's type API or with pybind11 (slower calls, and a second binding style for one
// class), or keep nanobind and mark the metaclass subclassable. The last is the smallest and
// keeps nanobind's dispatch: a Python subclass of the metaclass inherits its layout and slots
// (nanobind's type_data, tp_init, tp_dealloc), and nanobind already supports Python subclasses
// of bound classes, which is what instances of such a metaclass are. The private NB_DOMAIN
// (CMakeLists.txt) confines the change to this extension's own copy of the metaclass.
void AllowMetaclassSubclasses(nb::handle bound_class) {
  PyTypeObject* meta = Py_TYPE(bound_class.ptr());
  if (meta == &PyType_Type || !PyType_HasFeature(meta, Py_TPFLAGS_HEAPTYPE)) {
    RaisePython(PyExc_ImportError, "optree_core._C: unexpected metaclass for PyTreeSpec.");
  }
  meta->tp_flags |= Py_TPFLAGS_BASETYPE;
}

// An index given as anything int-like: __index__ first, then __int__ (as optree accepts).
Py_ssize_t AsIndex(nb::handle index) {
  PyObject* number = PyNumber_Check(index.ptr()) && !PyIndex_Check(index.ptr())
                         ? PyNumber_Long(index.ptr())
                         : PyNumber_Index(index.ptr());
  if (number == nullptr) throw nb::python_error();
  const Py_ssize_t value = PyLong_AsSsize_t(number);
  Py_DECREF(number);
  if (value == -1 && PyErr_Occurred()) throw nb::python_error();
  return value;
}

PyType_Slot kPyTreeSpecSlots[] = {
    {Py_tp_traverse, reinterpret_cast<void*>(&PyTreeSpec::TpTraverse)},
    {Py_tp_clear, reinterpret_cast<void*>(&PyTreeSpec::TpClear)},
    {0, nullptr}};

void BuildTreeSpecSubmodule(nb::module_& m) {
  nb::enum_<PyTreeKind>(
      m, "PyTreeKind",
      "The kind of a pytree node: an IntEnum numbered as optree's.\n\n"
      "CUSTOM, LEAF, NONE, TUPLE, LIST, DICT, NAMEDTUPLE, ORDEREDDICT, DEFAULTDICT, DEQUE and\n"
      "STRUCTSEQUENCE (FROZENDICT is reserved). PyTreeSpec.kind is the kind of a spec's root.\n\n"
      ">>> import optree_core as optree\n"
      ">>> optree.tree_structure([1, (2, 3)]).kind\n"
      "<PyTreeKind.LIST: 4>\n"
      ">>> [child.kind.name for child in optree.tree_structure([1, (2, 3)]).children()]\n"
      "['LEAF', 'TUPLE']",
      nb::is_arithmetic())
      .value("CUSTOM", PyTreeKind::kCustom)
      .value("LEAF", PyTreeKind::kLeaf)
      .value("NONE", PyTreeKind::kNone)
      .value("TUPLE", PyTreeKind::kTuple)
      .value("LIST", PyTreeKind::kList)
      .value("DICT", PyTreeKind::kDict)
      .value("NAMEDTUPLE", PyTreeKind::kNamedTuple)
      .value("ORDEREDDICT", PyTreeKind::kOrderedDict)
      .value("DEFAULTDICT", PyTreeKind::kDefaultDict)
      .value("DEQUE", PyTreeKind::kDeque)
      .value("STRUCTSEQUENCE", PyTreeKind::kStructSequence)
      .value("FROZENDICT", PyTreeKind::kFrozenDict);
  // A plain class attribute, not a member: iterating the enum yields only real kinds.
  m.attr("PyTreeKind").attr("NUM_KINDS") = kNumPyTreeKinds;

  auto spec = nb::class_<PyTreeSpec>(
      m, "PyTreeSpec",
      "The structure of a pytree: its nodes (kinds, keys, types, metadata) without the leaves.\n\n"
      "Immutable, hashable, picklable. Made by tree_flatten / tree_structure or the treespec_*\n"
      "constructors; rebuilds trees with unflatten(leaves). num_leaves, num_nodes, children(),\n"
      "paths(), entries(), flatten_up_to(tree), compose(inner), is_prefix(other) and the\n"
      "comparison operators (a < b: a is a strict prefix of b) describe and relate structures.\n\n"
      ">>> import optree_core as optree\n"
      ">>> spec = optree.tree_structure({'a': 1, 'b': (2, 3)})\n"
      ">>> spec.num_leaves, spec.num_nodes\n"
      "(3, 5)\n"
      ">>> spec.unflatten([10, 20, 30])\n"
      "{'a': 10, 'b': (20, 30)}\n"
      ">>> spec.flatten_up_to({'a': [1], 'b': (2, 3)})\n"
      "[[1], 2, 3]\n"
      ">>> optree.tree_structure(0) < spec  # a leaf is a prefix of every tree\n"
      "True",
      // Held by weak references (caches keyed on specs, and optree's own tests).
      nb::is_weak_referenceable(), nb::type_slots(kPyTreeSpecSlots));
  AllowMetaclassSubclasses(spec);
  spec.def("unflatten", &PyTreeSpec::Unflatten, "leaves"_a)
      .def("flatten_up_to", &PyTreeSpec::FlattenUpTo, "tree"_a.none())
      .def("compose", &PyTreeSpec::Compose, "inner"_a)
      .def("broadcast_to_common_suffix", &PyTreeSpec::BroadcastToCommonSuffix, "other"_a)
      .def("walk",
           [](const PyTreeSpec& self, nb::handle leaves, nb::handle f_node, nb::handle f_leaf) {
             return self.Walk(f_node, f_leaf, leaves, /*rebuild=*/false);
           },
           "leaves"_a, "f_node"_a.none() = nb::none(), "f_leaf"_a.none() = nb::none())
      .def("traverse",
           [](const PyTreeSpec& self, nb::handle leaves, nb::handle f_node, nb::handle f_leaf) {
             return self.Walk(f_node, f_leaf, leaves, /*rebuild=*/true);
           },
           "leaves"_a, "f_node"_a.none() = nb::none(), "f_leaf"_a.none() = nb::none())
      .def("_replace_children", &PyTreeSpec::ReplaceChildren, "children"_a)
      .def("is_prefix", &PyTreeSpec::IsPrefix, "other"_a, nb::kw_only(), "strict"_a = false)
      .def("is_suffix",
           [](const PyTreeSpec& self, const PyTreeSpec& other, bool strict) {
             return other.IsPrefix(self, strict);
           },
           "other"_a, nb::kw_only(), "strict"_a = false)
      .def("paths", &PyTreeSpec::Paths)
      .def("_accessors", &PyTreeSpec::Accessors, "entry_classes"_a, "accessor_type"_a, "kinds"_a)
      .def("entries", &PyTreeSpec::Entries)
      .def("entry",
           [](const PyTreeSpec& self, nb::handle index) { return self.Entry(AsIndex(index)); },
           "index"_a)
      .def("children", &PyTreeSpec::Children)
      .def("child",
           [](const PyTreeSpec& self, nb::handle index) { return self.Child(AsIndex(index)); },
           "index"_a)
      .def("one_level",
           [](const PyTreeSpec& self) -> nb::object {
             if (self.kind() == PyTreeKind::kLeaf) return nb::none();
             return nb::cast(self.OneLevel());
           })
      .def("is_leaf",
           [](const PyTreeSpec& self, bool strict) {
             if (strict) return self.num_nodes() == 1 && self.num_leaves() == 1;
             return self.num_nodes() == 1;
           },
           nb::kw_only(), "strict"_a = true)
      .def("is_one_level",
           [](const PyTreeSpec& self) {
             // Every child is a leaf (a None child is a node, so it does not count).
             return self.kind() != PyTreeKind::kLeaf &&
                    self.num_nodes() == self.num_children() + 1 &&
                    self.num_leaves() == self.num_children();
           })
      .def_prop_ro("num_leaves", &PyTreeSpec::num_leaves)
      .def_prop_ro("num_nodes", &PyTreeSpec::num_nodes)
      .def_prop_ro("num_children", &PyTreeSpec::num_children)
      .def_prop_ro("none_is_leaf", &PyTreeSpec::none_is_leaf)
      .def_prop_ro("namespace", &PyTreeSpec::ns)
      .def_prop_ro("kind", &PyTreeSpec::kind)
      .def_prop_ro("type", &PyTreeSpec::type)
      .def("__eq__",
           [](const PyTreeSpec& a, nb::handle b) -> nb::object {
             if (!nb::isinstance<PyTreeSpec>(b)) return nb::borrow(Py_NotImplemented);
             return nb::bool_(a.Equal(nb::cast<const PyTreeSpec&>(b)));
           },
           nb::arg().none())
      .def("__ne__",
           [](const PyTreeSpec& a, nb::handle b) -> nb::object {
             if (!nb::isinstance<PyTreeSpec>(b)) return nb::borrow(Py_NotImplemented);
             return nb::bool_(!a.Equal(nb::cast<const PyTreeSpec&>(b)));
           },
           nb::arg().none())
      // Ordering is the prefix relation: a < b when a is a strict prefix of b.
      .def("__lt__", [](const PyTreeSpec& a, const PyTreeSpec& b) { return a.IsPrefix(b, true); })
      .def("__le__", [](const PyTreeSpec& a, const PyTreeSpec& b) { return a.IsPrefix(b, false); })
      .def("__gt__", [](const PyTreeSpec& a, const PyTreeSpec& b) { return b.IsPrefix(a, true); })
      .def("__ge__", [](const PyTreeSpec& a, const PyTreeSpec& b) { return b.IsPrefix(a, false); })
      .def("__hash__", &PyTreeSpec::Hash)
      .def("__len__", &PyTreeSpec::num_leaves)
      .def("__repr__",
           [](nb::handle self) -> std::string {
             // A spec reachable from its own metadata (a key holding the spec) prints as "...".
             const int entered = Py_ReprEnter(self.ptr());
             if (entered < 0) throw nb::python_error();
             if (entered > 0) return "...";
             struct Leave {
               PyObject* obj;
               ~Leave() { Py_ReprLeave(obj); }
             } leave{self.ptr()};
             return nb::cast<const PyTreeSpec&>(self).Repr();
           })
      // Pickled as a call to _treespec_from_state(state): works with every pickle protocol.
      .def("__reduce__",
           [](const PyTreeSpec& self) {
             nb::object loader = nb::module_::import_("optree_core.ops").attr("_treespec_from_state");
             return nb::make_tuple(loader, nb::make_tuple(self.GetState()));
           })
      // optree's state layout, so pickles of either package load in the other.
      .def("__getstate__", &PyTreeSpec::GetState)
      .def("__setstate__",
           [](PyTreeSpec& self, nb::handle state) {
             new (&self) PyTreeSpec(PyTreeSpec::FromState(state));
           },
           "state"_a)
      .def("__copy__", [](const PyTreeSpec& self) { return PyTreeSpec(self); })
      .def("__deepcopy__", [](const PyTreeSpec& self, nb::handle) { return PyTreeSpec(self); },
           "memo"_a.none());

  m.def("flatten",
        [](nb::handle tree, nb::handle is_leaf, bool none_is_leaf, const std::string& ns) {
          return StructureCache::Instance().Flatten(tree, is_leaf, none_is_leaf, ns);
        },
        "tree"_a.none(), "leaf_predicate"_a.none() = nb::none(),
        "none_is_leaf"_a = false, "namespace"_a = "");
  m.def("map", &TreeMap, "func"_a, "tree"_a.none(), "leaf_predicate"_a.none() = nb::none(),
        "none_is_leaf"_a = false, "namespace"_a = "");
  m.def("flatten_with_path", &PyTreeSpec::FlattenWithPath, "tree"_a.none(),
        "leaf_predicate"_a.none() = nb::none(), "none_is_leaf"_a = false, "namespace"_a = "");
  m.def("is_leaf", &PyTreeSpec::IsLeafObject, "obj"_a.none(), "leaf_predicate"_a.none() = nb::none(),
        "none_is_leaf"_a = false, "namespace"_a = "");
  m.def("flatten_one_level", &PyTreeSpec::FlattenOneLevel, "tree"_a.none(),
        "leaf_predicate"_a.none() = nb::none(), "none_is_leaf"_a = false, "namespace"_a = "");
  m.def("_clear_structure_cache", [] { StructureCache::Instance().Clear(); });
  m.def("_treespec_from_state", &PyTreeSpec::FromState, "state"_a);
  m.def("make_leaf", &PyTreeSpec::MakeLeaf, "none_is_leaf"_a = false);
  m.def("make_none", &PyTreeSpec::MakeNone, "none_is_leaf"_a = false);
  m.def("make_from_collection", &PyTreeSpec::MakeFromCollection, "collection"_a.none(),
        "none_is_leaf"_a = false, "namespace"_a = "");
}

// Build facts under the names optree's _C module gives them: optree's own test-suite and its
// clients read these. The PYBIND11_* flags describe the equivalent nanobind behaviour (its
// enums are native enum.IntEnum classes; it has no sub-interpreter support).
void AddOptreeBuildFlags(nb::module_& m) {
#ifdef Py_DEBUG
  m.attr("Py_DEBUG") = true;
#else
  m.attr("Py_DEBUG") = false;
#endif
#ifdef Py_GIL_DISABLED
  m.attr("Py_GIL_DISABLED") = true;
#else
  m.attr("Py_GIL_DISABLED") = false;
#endif
  m.attr("OPTREE_HAS_FROZENDICT") = false;
  m.attr("OPTREE_HAS_SUBINTERPRETER_SUPPORT") = false;
  m.attr("PYBIND11_HAS_NATIVE_ENUM") = true;
  m.attr("PYBIND11_HAS_SUBINTERPRETER_SUPPORT") = false;
  // Raised for a broken internal invariant (a bug of ours, never of the caller).
  m.attr("InternalError") = nb::steal(
      PyErr_NewException("optree_core._C.InternalError", PyExc_SystemError, nullptr));
}

}  // namespace

}  // namespace optree_core

NB_MODULE(_C, m) {
  m.doc() = "optree_core's C++ core (use the optree_core package, not this module).";
  // Specs that user code still holds at interpreter exit are not leaks of ours; nanobind's
  // exit-time report is for debugging reference counting (OPTREE_CORE_LEAK_WARNINGS=1).
  nb::set_leak_warnings(std::getenv("OPTREE_CORE_LEAK_WARNINGS") != nullptr);
  m.attr("MAX_RECURSION_DEPTH") = optree_core::kMaxRecursionDepth;
  m.attr("BUILD_INFO") = optree_core::BuildInfo();
  optree_core::AddOptreeBuildFlags(m);
  optree_core::BuildTreeSpecSubmodule(m);
  optree_core::BuildRegistrySubmodule(m);
}
