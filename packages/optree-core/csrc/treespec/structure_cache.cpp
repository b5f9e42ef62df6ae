#include "optree_core/structure_cache.h"

#include <absl/container/inlined_vector.h>

#include <utility>

#include "optree_core/registry.h"

namespace optree_core {

namespace {

// Size of the root container when it is a plain one; part of the cache key.
Py_ssize_t RootSize(PyObject* obj) {
  if (PyDict_Check(obj)) return PyDict_GET_SIZE(obj);
  if (PyTuple_Check(obj)) return PyTuple_GET_SIZE(obj);
  if (PyList_Check(obj)) return PyList_GET_SIZE(obj);
  return -1;
}

bool SameKey(PyObject* a, PyObject* b) {
  if (a == b) return true;
  // Equal str keys are interchangeable; other keys must be the very same object, so that a
  // reused spec never swaps, say, 1 for True.
  return PyUnicode_CheckExact(a) && PyUnicode_CheckExact(b) && PyUnicode_Compare(a, b) == 0;
}

// Walks a spec and a tree together; collects the leaves if the tree has exactly this
// structure (same node types, sizes, keys and key order; leaves where the spec has leaves).
// Runs no Python code except what getting a dict's keys or a deque's items may run.
//
// Children are matched last to first. A node's children are found by stepping back from its
// last child over each child's subtree (num_nodes), a chain of dependent loads; done up front
// for a node with many children it missed the cache at every step once the traversal outgrew
// it (half of flattening a 100,000-leaf tree, benchmarks/RESULTS.md). Going backwards, each
// step lands just before the subtree matched last, in cache. The leaves are filled in from
// the end of a list of the right size.
class SpecMatcher {
 public:
  SpecMatcher(const PyTreeSpec& spec, bool none_is_leaf, const std::string& ns)
      : spec_(spec), none_is_leaf_(none_is_leaf), ns_(ns),
        leaves_(nb::steal<nb::list>(PyList_New(spec.num_leaves()))),
        next_leaf_(spec.num_leaves()) {
    if (!leaves_.is_valid()) throw nb::python_error();
    // Unfilled slots are NULL: keep the list away from the collector (and so from gc.get_objects
    // in a finalizer run by Python code during the match) until it is full.
    PyObject_GC_UnTrack(leaves_.ptr());
  }

  bool Run(nb::handle tree) {
    if (!Match(spec_.num_nodes() - 1, tree.ptr()) || next_leaf_ != 0) return false;
    PyObject_GC_Track(leaves_.ptr());
    return true;
  }
  nb::list& leaves() { return leaves_; }

 private:
  bool IsLeaf(PyObject* obj) {
    if (Py_TYPE(obj) == last_leaf_type_) return true;
    const PyTreeTypeRegistration* reg = nullptr;
    if (detail::GetKind(obj, &reg, none_is_leaf_, ns_) != PyTreeKind::kLeaf) return false;
    last_leaf_type_ = Py_TYPE(obj);
    return true;
  }

  // items[i] against the i-th child of node `index`, last child first.
  bool Children(Py_ssize_t index, PyObject* const* items) {
    const NodeTraversal& traversal = spec_.traversal();
    Py_ssize_t child = index - 1;  // The last child's root ends its parent's range.
    for (Py_ssize_t i = traversal[index].arity - 1; i >= 0; --i) {
      if (!Match(child, items[i])) return false;
      child -= traversal[child].num_nodes;
    }
    return true;
  }

  bool DictChildren(Py_ssize_t index, const Node& node, PyObject* dict, PyObject* keys) {
    if (PyDict_GET_SIZE(dict) != node.arity) return false;
    absl::InlinedVector<nb::object, 16> values(static_cast<size_t>(node.arity));
    Py_ssize_t pos = 0, j = 0;
    PyObject* key;
    PyObject* value;
    while (PyDict_Next(dict, &pos, &key, &value)) {
      const Py_ssize_t i = node.insertion_order.empty() ? j : node.insertion_order[j];
      if (!SameKey(key, PyList_GET_ITEM(keys, i))) return false;
      values[i] = nb::borrow(value);
      ++j;
    }
    return Children(index, reinterpret_cast<PyObject* const*>(values.data()));
  }

  bool Match(Py_ssize_t index, PyObject* obj) {
    const Node& node = spec_.traversal()[index];
    switch (node.kind) {
      case PyTreeKind::kLeaf:
        if (!IsLeaf(obj) || next_leaf_ == 0) return false;
        Py_INCREF(obj);
        PyList_SET_ITEM(leaves_.ptr(), --next_leaf_, obj);
        return true;
      case PyTreeKind::kNone:
        return obj == Py_None;
      case PyTreeKind::kTuple:
        return PyTuple_CheckExact(obj) && PyTuple_GET_SIZE(obj) == node.arity &&
               Children(index, &PyTuple_GET_ITEM(obj, 0));
      case PyTreeKind::kList: {
        if (!PyList_CheckExact(obj) || PyList_GET_SIZE(obj) != node.arity) return false;
        nb::object items = nb::steal(PyList_AsTuple(obj));
        return items.is_valid() && Children(index, &PyTuple_GET_ITEM(items.ptr(), 0));
      }
      case PyTreeKind::kDict:
        return PyDict_CheckExact(obj) && DictChildren(index, node, obj, node.node_data.ptr());
      case PyTreeKind::kDefaultDict: {
        if (Py_TYPE(obj) != CollectionTypes::Get().default_dict) return false;
        nb::object factory = nb::steal(PyObject_GetAttrString(obj, "default_factory"));
        if (!factory.is_valid()) return PyErr_Clear(), false;
        if (!factory.is(nb::handle(PyTuple_GET_ITEM(node.node_data.ptr(), 0)))) return false;
        return DictChildren(index, node, obj, PyTuple_GET_ITEM(node.node_data.ptr(), 1));
      }
      case PyTreeKind::kOrderedDict: {
        if (Py_TYPE(obj) != CollectionTypes::Get().ordered_dict ||
            PyDict_GET_SIZE(obj) != node.arity) {
          return false;
        }
        nb::object keys = nb::steal(PyMapping_Keys(obj));
        if (!keys.is_valid()) return PyErr_Clear(), false;
        absl::InlinedVector<nb::object, 16> values(static_cast<size_t>(node.arity));
        for (Py_ssize_t i = 0; i < node.arity; ++i) {
          PyObject* key = PyList_GET_ITEM(keys.ptr(), i);
          if (!SameKey(key, PyList_GET_ITEM(node.node_data.ptr(), i))) return false;
          PyObject* value = PyDict_GetItemWithError(obj, key);
          if (value == nullptr) return PyErr_Clear(), false;
          values[i] = nb::borrow(value);
        }
        return Children(index, reinterpret_cast<PyObject* const*>(values.data()));
      }
      case PyTreeKind::kNamedTuple:
      case PyTreeKind::kStructSequence:
        return Py_TYPE(obj) == reinterpret_cast<PyTypeObject*>(node.node_data.ptr()) &&
               PyTuple_GET_SIZE(obj) >= node.arity && Children(index, &PyTuple_GET_ITEM(obj, 0));
      case PyTreeKind::kDeque: {
        if (Py_TYPE(obj) != CollectionTypes::Get().deque) return false;
        nb::object maxlen = nb::steal(PyObject_GetAttrString(obj, "maxlen"));
        if (!maxlen.is_valid()) return PyErr_Clear(), false;
        int same = PyObject_RichCompareBool(maxlen.ptr(), node.node_data.ptr(), Py_EQ);
        if (same != 1) return PyErr_Clear(), false;
        nb::object items = nb::steal(PySequence_Tuple(obj));
        if (!items.is_valid()) return PyErr_Clear(), false;
        return PyTuple_GET_SIZE(items.ptr()) == node.arity &&
               Children(index, &PyTuple_GET_ITEM(items.ptr(), 0));
      }
      default:
        return false;  // Custom nodes are never cached.
    }
  }

  const PyTreeSpec& spec_;
  bool none_is_leaf_;
  const std::string& ns_;
  nb::list leaves_;
  Py_ssize_t next_leaf_;  // Leaves are filled in backwards: the slot below this one is next.
  PyTypeObject* last_leaf_type_ = nullptr;
};

bool PlainKeys(PyObject* keys) {
  for (Py_ssize_t i = 0; i < PyList_GET_SIZE(keys); ++i) {
    PyObject* key = PyList_GET_ITEM(keys, i);
    if (!PyUnicode_CheckExact(key) && !PyLong_CheckExact(key)) return false;
  }
  return true;
}

// A cached spec keeps its dict keys alive; only specs whose keys are plain str/int (and whose
// defaultdict factories are classes) are kept, so no user object outlives its tree.
bool Cacheable(const PyTreeSpec& spec) {
  for (const Node& node : spec.traversal()) {
    switch (node.kind) {
      case PyTreeKind::kCustom:
        return false;
      case PyTreeKind::kDict:
      case PyTreeKind::kOrderedDict:
        if (!PlainKeys(node.node_data.ptr())) return false;
        break;
      case PyTreeKind::kDefaultDict:
        if (!PyType_Check(PyTuple_GET_ITEM(node.node_data.ptr(), 0)) ||
            !PlainKeys(PyTuple_GET_ITEM(node.node_data.ptr(), 1))) {
          return false;
        }
        break;
      default:
        break;
    }
  }
  return spec.num_nodes() > 1;  // A lone leaf is cheaper to flatten than to look up.
}

}  // namespace

StructureCache& StructureCache::Instance() {
  // Leaked: it holds Python objects that must not be released after the interpreter is gone.
  static StructureCache* cache = new StructureCache();
  return *cache;
}

void StructureCache::Clear() {
  for (Slot& slot : slots_) {
    nb::object released = std::move(slot.spec);
    slot = Slot();
  }
}

nb::tuple StructureCache::Flatten(nb::handle tree, nb::handle is_leaf, bool none_is_leaf,
                                  const std::string& ns) {
  const bool predicate = is_leaf.is_valid() && !is_leaf.is_none();
  if (predicate) {
    auto [leaves, spec] = PyTreeSpec::Flatten(tree, is_leaf, none_is_leaf, ns);
    return nb::make_tuple(leaves, nb::cast(std::move(spec)));
  }
  const PyTreeTypeRegistry& registry = PyTreeTypeRegistry::Instance();
  PyTypeObject* root_type = Py_TYPE(tree.ptr());
  const Py_ssize_t root_size = RootSize(tree.ptr());
  const bool insertion_ordered = registry.IsDictInsertionOrdered(ns);
  const size_t h = (reinterpret_cast<uintptr_t>(root_type) >> 4) ^
                   static_cast<size_t>(root_size) * 0x9e3779b9u ^ (none_is_leaf ? 1u : 0u);
  Slot& slot = slots_[h % kSlots];
  if (slot.spec.is_valid() && slot.root_type == root_type && slot.root_size == root_size &&
      slot.none_is_leaf == none_is_leaf && slot.insertion_ordered == insertion_ordered &&
      slot.registry_version == registry.version() && slot.ns == ns) {
    nb::object spec_object = slot.spec;  // Keep it alive while matching.
    SpecMatcher matcher(nb::cast<const PyTreeSpec&>(spec_object), none_is_leaf, ns);
    if (matcher.Run(tree)) return nb::make_tuple(matcher.leaves(), spec_object);
    if (PyErr_Occurred()) PyErr_Clear();
  }
  auto [leaves, spec] = PyTreeSpec::Flatten(tree, is_leaf, none_is_leaf, ns);
  const bool cacheable = Cacheable(spec);
  nb::object spec_object = nb::cast(std::move(spec));
  if (cacheable) {
    slot.root_type = root_type;
    slot.root_size = root_size;
    slot.none_is_leaf = none_is_leaf;
    slot.insertion_ordered = insertion_ordered;
    slot.registry_version = registry.version();
    slot.ns = ns;
    slot.spec = spec_object;
  }
  return nb::make_tuple(leaves, spec_object);
}

}  // namespace optree_core
