// PyTreeSpec: the structure of a pytree, stored as a post-order traversal of its nodes.
#pragma once

#include <Python.h>
#include <absl/container/inlined_vector.h>
#include <nanobind/nanobind.h>

#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "optree_core/exceptions.h"
#include "optree_core/kind.h"
#include "optree_core/registry.h"

namespace optree_core {

namespace nb = nanobind;

// Deeper structures raise RecursionError instead of overflowing the C stack.
// 1000 (as optree, and as Python's default recursion limit) leaves a wide C-stack margin for
// every recursive operation (repr included) even in threads with small stacks.
constexpr Py_ssize_t kMaxRecursionDepth = 1000;

// Recursive walks over a spec check each level they descend: a spec deeper than
// kMaxRecursionDepth (only composing specs can build one) raises RecursionError instead of
// overflowing the C stack.
inline void CheckWalkDepth(size_t depth) {
  if (depth > static_cast<size_t>(kMaxRecursionDepth)) {
    RaisePython(PyExc_RecursionError,
                "Maximum recursion depth exceeded while walking a PyTreeSpec (deeper than " +
                    std::to_string(kMaxRecursionDepth) + " levels).");
  }
}

struct Node {
  PyTreeKind kind = PyTreeKind::kLeaf;
  Py_ssize_t arity = 0;  // Number of children.
  // Per-kind data: dict/OrderedDict -> list of keys in child order; defaultdict ->
  // (default_factory, keys); namedtuple/structseq -> the type; deque -> maxlen; custom -> the
  // metadata returned by the flatten function.
  nb::object node_data;
  nb::object node_entries;    // Custom nodes: the entries returned by the flatten function.
  // dict/defaultdict whose insertion order differs from the sorted child order: the child index
  // of each key in insertion order (empty when the orders agree).
  std::vector<Py_ssize_t> insertion_order;
  std::shared_ptr<const PyTreeTypeRegistration> custom;  // Custom nodes only.
  Py_ssize_t num_leaves = 0;  // Leaves in the subtree rooted here.
  Py_ssize_t num_nodes = 0;   // Nodes in the subtree rooted here, this one included.
};

// The one traversal container: most trees handled one level at a time have few nodes.
using NodeTraversal = absl::InlinedVector<Node, 1>;

// Unflatten's compact form of a traversal (defined in unflatten.cpp).
struct UnflattenPlan;

class PyTreeSpec {
 public:
  PyTreeSpec() = default;
  PyTreeSpec(NodeTraversal traversal, bool none_is_leaf, std::string ns)
      : traversal_(std::move(traversal)), none_is_leaf_(none_is_leaf), namespace_(std::move(ns)) {}

  // --- flatten.cpp ------------------------------------------------------------------------
  static std::pair<nb::list, PyTreeSpec> Flatten(nb::handle tree, nb::handle is_leaf,
                                                 bool none_is_leaf, const std::string& ns);
  static std::tuple<nb::list, nb::list, PyTreeSpec> FlattenWithPath(
      nb::handle tree, nb::handle is_leaf, bool none_is_leaf, const std::string& ns);
  // Whether `obj` is a leaf (no children) under the given options.
  static bool IsLeafObject(nb::handle obj, nb::handle is_leaf, bool none_is_leaf,
                           const std::string& ns);
  // The outermost node only: every child is a leaf.
  static std::pair<nb::list, PyTreeSpec> FlattenOneLevelSpec(nb::handle tree, nb::handle is_leaf,
                                                             bool none_is_leaf,
                                                             const std::string& ns);
  // (children, metadata, entries, kind, type) of the outermost node.
  static nb::tuple FlattenOneLevel(nb::handle tree, nb::handle is_leaf, bool none_is_leaf,
                                   const std::string& ns);
  // A one-level spec made from a container whose children are PyTreeSpecs.
  static PyTreeSpec MakeFromCollection(nb::handle collection, bool none_is_leaf,
                                       const std::string& ns);
  static PyTreeSpec MakeLeaf(bool none_is_leaf);
  static PyTreeSpec MakeNone(bool none_is_leaf);

  // --- unflatten.cpp ----------------------------------------------------------------------
  nb::object Unflatten(nb::handle leaves) const;
  // Rebuilds one node of `this` at `index` from its children.
  nb::object MakeNode(const Node& node, nb::handle* children, Py_ssize_t count) const;

  // --- flatten_up_to.cpp ------------------------------------------------------------------
  nb::list FlattenUpTo(nb::handle tree) const;

  // --- structure.cpp ----------------------------------------------------------------------
  std::vector<PyTreeSpec> Children() const;
  PyTreeSpec Child(Py_ssize_t index) const;
  PyTreeSpec OneLevel() const;
  PyTreeSpec Compose(const PyTreeSpec& inner) const;
  bool IsPrefix(const PyTreeSpec& other, bool strict) const;
  PyTreeSpec BroadcastToCommonSuffix(const PyTreeSpec& other) const;
  // Post-order fold over `leaves`. With rebuild, each node is rebuilt and passed to f_node
  // (optree's traverse); without, f_node gets (type, metadata, children) (optree's walk).
  nb::object Walk(nb::handle f_node, nb::handle f_leaf, nb::handle leaves, bool rebuild) const;
  // A spec with the same root node and the given child specs.
  PyTreeSpec ReplaceChildren(const std::vector<PyTreeSpec>& children) const;

  // --- traversal.cpp ----------------------------------------------------------------------
  nb::list Entries() const;        // Entries of the root's children.
  nb::object Entry(Py_ssize_t index) const;
  nb::list Paths() const;          // One tuple of entries per leaf.
  // One accessor per leaf: accessor_type(tuple of entry_classes[kind](entry, type, kinds[kind])),
  // custom nodes using their registered path entry type.
  nb::list Accessors(nb::handle entry_classes, nb::handle accessor_type, nb::handle kinds) const;

  // --- richcmp.cpp ------------------------------------------------------------------------
  bool Equal(const PyTreeSpec& other) const;
  Py_hash_t Hash() const;

  // --- repr.cpp ---------------------------------------------------------------------------
  std::string Repr() const;

  // --- serialization.cpp ------------------------------------------------------------------
  nb::tuple GetState() const;
  static PyTreeSpec FromState(nb::handle state);

  // --- gc.cpp -----------------------------------------------------------------------------
  // tp_traverse / tp_clear of the Python type (bound in module.cpp).
  static int TpTraverse(PyObject* self, visitproc visit, void* arg);
  static int TpClear(PyObject* self);

  // --- accessors --------------------------------------------------------------------------
  const NodeTraversal& traversal() const { return traversal_; }
  const Node& root() const { return traversal_.back(); }
  Py_ssize_t num_leaves() const { return traversal_.empty() ? 0 : root().num_leaves; }
  Py_ssize_t num_nodes() const { return static_cast<Py_ssize_t>(traversal_.size()); }
  Py_ssize_t num_children() const { return root().arity; }
  bool none_is_leaf() const { return none_is_leaf_; }
  const std::string& ns() const { return namespace_; }
  PyTreeKind kind() const { return root().kind; }
  nb::object type() const;  // The Python type of the root node (None for a leaf).
  // Indices in the traversal of the children of the node at `index`, in child order.
  absl::InlinedVector<Py_ssize_t, 8> ChildIndices(Py_ssize_t index) const;

 private:
  NodeTraversal traversal_;
  bool none_is_leaf_ = false;
  std::string namespace_;
  // Built by the first Unflatten and shared by copies (their traversals are equal); it indexes
  // traversal_, so whatever replaces traversal_ (TpClear) drops it.
  mutable std::shared_ptr<const UnflattenPlan> unflatten_plan_;
  const UnflattenPlan& GetUnflattenPlan() const;
};

// Helpers shared by several operations (flatten.cpp).
namespace detail {
// Resolves the kind of `obj` (and its registration for custom/built-in collection types).
PyTreeKind GetKind(nb::handle obj, const PyTreeTypeRegistration** custom, bool none_is_leaf,
                   const std::string& ns);
// Whether the user predicate says `obj` is a leaf (propagates its exception).
bool CallIsLeaf(nb::handle is_leaf, nb::handle obj);
// Sorts `order` (indices into `keys`, which are distinct: a dict's keys) by key; false with a
// Python error set if keys do not compare. Exact str keys compare without calling into Python.
bool SortKeyOrder(const nb::object* keys, Py_ssize_t* order, Py_ssize_t n);
// Sorted dict keys (falls back to a total order on mixed key types); a new list.
nb::list SortedKeys(PyObject* dict);
// Python type object of a kind that has a fixed type (tuple, list, dict, ...).
nb::handle KindType(PyTreeKind kind);
// A new tuple of the given objects (a path from its entries).
nb::object TupleOf(const std::vector<nb::object>& items);
// The Python path entries of the children of `node` (a tuple).
nb::tuple NodeEntries(const Node& node);
// The sequence of children produced by calling a custom flatten function, validated.
struct CustomFlattened {
  nb::tuple children;
  nb::object metadata;
  nb::object entries;  // None or a tuple with one entry per child.
};
CustomFlattened CallCustomFlatten(const PyTreeTypeRegistration& reg, nb::handle obj);
// Hooks installed from Python at import time.
void SetPythonHelpers(nb::handle total_order_sorted);
}  // namespace detail

}  // namespace optree_core
