// Equality and hashing of treespecs.
#include <algorithm>
#include <vector>

#include "optree_core/exceptions.h"
#include "optree_core/hashing.h"
#include "optree_core/treespec.h"

namespace optree_core {

namespace {

// An unset field (a spec rebuilt from a pickle) equals None (a spec from flattening).
bool ObjectsEqual(const nb::object& a, const nb::object& b) {
  PyObject* x = a.is_valid() ? a.ptr() : Py_None;
  PyObject* y = b.is_valid() ? b.ptr() : Py_None;
  if (x == y) return true;
  int eq = PyObject_RichCompareBool(x, y, Py_EQ);
  if (eq < 0) throw nb::python_error();
  return eq != 0;
}

Py_hash_t HashObject(PyObject* obj) {
  if (PyList_Check(obj)) {  // Key lists: hash their items.
    Py_hash_t seed = PyList_GET_SIZE(obj);
    for (Py_ssize_t i = 0; i < PyList_GET_SIZE(obj); ++i) {
      HashCombine(seed, HashObject(PyList_GET_ITEM(obj, i)));
    }
    return seed;
  }
  if (PyTuple_CheckExact(obj)) {
    Py_hash_t seed = PyTuple_GET_SIZE(obj) + 1;
    for (Py_ssize_t i = 0; i < PyTuple_GET_SIZE(obj); ++i) {
      HashCombine(seed, HashObject(PyTuple_GET_ITEM(obj, i)));
    }
    return seed;
  }
  Py_hash_t h = PyObject_Hash(obj);
  if (h == -1 && PyErr_Occurred()) throw nb::python_error();
  return h;
}

}  // namespace

bool PyTreeSpec::Equal(const PyTreeSpec& other) const {
  if (this == &other) return true;
  if (traversal_.size() != other.traversal_.size() || none_is_leaf_ != other.none_is_leaf_) {
    return false;
  }
  // An empty namespace (no custom node, or only global ones) matches any namespace; the hash
  // leaves the namespace out so that equal specs hash equally.
  if (!namespace_.empty() && !other.namespace_.empty() && namespace_ != other.namespace_) {
    return false;
  }
  for (size_t i = 0; i < traversal_.size(); ++i) {
    const Node& a = traversal_[i];
    const Node& b = other.traversal_[i];
    if (a.kind != b.kind || a.arity != b.arity || a.num_leaves != b.num_leaves ||
        a.num_nodes != b.num_nodes) {
      return false;
    }
    // Custom nodes match only when the same namespace's registration flattened them: a type
    // registered globally and again in `ns` flattens differently in each.
    if (a.kind == PyTreeKind::kCustom &&
        (!a.custom->type.is(b.custom->type) || a.custom->ns != b.custom->ns)) {
      return false;
    }
    if (!ObjectsEqual(a.node_data, b.node_data)) return false;
    if (a.kind == PyTreeKind::kCustom && !ObjectsEqual(a.node_entries, b.node_entries)) {
      return false;
    }
  }
  return true;
}

Py_hash_t PyTreeSpec::Hash() const {
  // A spec reachable from its own metadata is hashed once per walk: re-entering it adds a
  // constant instead of recursing forever (the same guard as repr's "...").
  static thread_local std::vector<const PyTreeSpec*> hashing;
  if (std::find(hashing.begin(), hashing.end(), this) != hashing.end()) return kNumPyTreeKinds;
  hashing.push_back(this);
  struct Pop {
    ~Pop() { hashing.pop_back(); }
  } pop;
  Py_hash_t seed = static_cast<Py_hash_t>(traversal_.size()) * 2 + (none_is_leaf_ ? 1 : 0);
  for (const Node& node : traversal_) {
    HashCombine(seed, static_cast<Py_hash_t>(node.kind));
    HashCombine(seed, node.arity);
    if (node.kind == PyTreeKind::kCustom) HashCombine(seed, HashObject(node.custom->type.ptr()));
    if (node.node_data.is_valid()) HashCombine(seed, HashObject(node.node_data.ptr()));
  }
  return seed == -1 ? -2 : seed;
}

}  // namespace optree_core
