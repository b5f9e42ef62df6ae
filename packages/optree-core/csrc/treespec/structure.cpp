// Operations that take specs apart or put them together: children, compose, prefixes, walk.
#include <cctype>
#include <string>
#include <utility>
#include <vector>

#include "optree_core/exceptions.h"
#include "optree_core/treespec.h"

namespace optree_core {

absl::InlinedVector<Py_ssize_t, 8> PyTreeSpec::ChildIndices(Py_ssize_t index) const {
  const Node& node = traversal_[index];
  absl::InlinedVector<Py_ssize_t, 8> children(static_cast<size_t>(node.arity));
  Py_ssize_t cursor = index - 1;  // Children end right before their parent, the last one first.
  for (Py_ssize_t i = node.arity - 1; i >= 0; --i) {
    children[i] = cursor;
    cursor -= traversal_[cursor].num_nodes;
  }
  return children;
}

static NodeTraversal Slice(const NodeTraversal& traversal, Py_ssize_t root) {
  const Py_ssize_t start = root - traversal[root].num_nodes + 1;
  return NodeTraversal(traversal.begin() + start, traversal.begin() + root + 1);
}

std::vector<PyTreeSpec> PyTreeSpec::Children() const {
  std::vector<PyTreeSpec> out;
  for (Py_ssize_t index : ChildIndices(num_nodes() - 1)) {
    out.emplace_back(Slice(traversal_, index), none_is_leaf_, namespace_);
  }
  return out;
}

PyTreeSpec PyTreeSpec::Child(Py_ssize_t index) const {
  const Py_ssize_t arity = num_children();
  if (index < -arity || index >= arity) {
    RaisePython(PyExc_IndexError, "The child index " + std::to_string(index) +
                                      " is out of range for a node with " +
                                      std::to_string(arity) + " children.");
  }
  if (index < 0) index += arity;
  return PyTreeSpec(Slice(traversal_, ChildIndices(num_nodes() - 1)[index]), none_is_leaf_,
                    namespace_);
}

PyTreeSpec PyTreeSpec::OneLevel() const {
  NodeTraversal traversal;
  const Node& root_node = root();
  if (root_node.kind == PyTreeKind::kLeaf) {
    RaisePython(PyExc_ValueError, "Cannot get a one-level PyTreeSpec of a leaf.");
  }
  for (Py_ssize_t i = 0; i < root_node.arity; ++i) {
    Node leaf;
    leaf.kind = PyTreeKind::kLeaf;
    leaf.num_leaves = 1;
    leaf.num_nodes = 1;
    traversal.push_back(std::move(leaf));
  }
  Node top = root_node;
  top.num_leaves = root_node.arity;
  top.num_nodes = root_node.arity + 1;
  traversal.push_back(std::move(top));
  return PyTreeSpec(std::move(traversal), none_is_leaf_, namespace_);
}

namespace {

// A spec that recorded no namespace resolved its custom nodes globally. Merging it into a spec of
// namespace `ns` is sound only if `ns` resolves each of those types to the same registration
// (a type registered only globally does); otherwise the result would claim `ns` while carrying
// nodes that `ns` flattens differently.
void CheckNamespaceAdoption(const NodeTraversal& nodes, const std::string& ns) {
  if (ns.empty()) return;
  const PyTreeTypeRegistry& registry = PyTreeTypeRegistry::Instance();
  for (const Node& node : nodes) {
    if (node.kind != PyTreeKind::kCustom) continue;
    auto* type = reinterpret_cast<PyTypeObject*>(node.custom->type.ptr());
    if (registry.Lookup(type, ns) != node.custom.get()) {
      RaisePython(PyExc_ValueError,
                  "Cannot merge a PyTreeSpec built in the global namespace into namespace " +
                      SafeRepr(nb::str(ns.c_str())) + ": that namespace registers " +
                      SafeRepr(node.custom->type) + " differently from the original "
                      "registration its node was built with.");
    }
  }
}

// The namespace of a spec merged from `a` and `b` (which must agree unless one is empty),
// after checking that the empty side can adopt it.
std::string MergedNamespace(const PyTreeSpec& a, const PyTreeSpec& b) {
  if (!a.ns().empty() && !b.ns().empty() && a.ns() != b.ns()) {
    RaisePython(PyExc_ValueError, "PyTreeSpecs must have the same namespace, got " +
                                      SafeRepr(nb::str(a.ns().c_str())) + " vs. " +
                                      SafeRepr(nb::str(b.ns().c_str())) + ".");
  }
  if (a.ns().empty()) CheckNamespaceAdoption(a.traversal(), b.ns());
  if (b.ns().empty()) CheckNamespaceAdoption(b.traversal(), a.ns());
  return a.ns().empty() ? b.ns() : a.ns();
}

}  // namespace

PyTreeSpec PyTreeSpec::Compose(const PyTreeSpec& inner) const {
  if (none_is_leaf_ != inner.none_is_leaf_) {
    RaisePython(PyExc_ValueError, "PyTreeSpecs must have the same none_is_leaf value.");
  }
  std::string ns = MergedNamespace(*this, inner);
  const Py_ssize_t inner_leaves = inner.num_leaves();
  const Py_ssize_t inner_nodes = inner.num_nodes();
  NodeTraversal traversal;
  for (const Node& node : traversal_) {
    if (node.kind == PyTreeKind::kLeaf) {
      traversal.insert(traversal.end(), inner.traversal_.begin(), inner.traversal_.end());
    } else {
      Node copy = node;
      copy.num_leaves = node.num_leaves * inner_leaves;
      // Each leaf below becomes the inner spec's nodes.
      copy.num_nodes = node.num_nodes + node.num_leaves * (inner_nodes - 1);
      traversal.push_back(std::move(copy));
    }
  }
  return PyTreeSpec(std::move(traversal), none_is_leaf_, std::move(ns));
}

namespace {

bool NodeDataEqual(const Node& a, const Node& b) {
  if (a.kind != b.kind || a.arity != b.arity) return false;
  if (a.kind == PyTreeKind::kCustom && a.custom->type.ptr() != b.custom->type.ptr()) return false;
  if (a.node_data.is_valid() != b.node_data.is_valid()) return false;
  if (!a.node_data.is_valid()) return true;
  int eq = PyObject_RichCompareBool(a.node_data.ptr(), b.node_data.ptr(), Py_EQ);
  if (eq < 0) throw nb::python_error();
  return eq != 0;
}

bool IsDictLike(PyTreeKind kind) {
  return kind == PyTreeKind::kDict || kind == PyTreeKind::kOrderedDict ||
         kind == PyTreeKind::kDefaultDict;
}

PyObject* DictKeys(const Node& node) {
  return node.kind == PyTreeKind::kDefaultDict ? PyTuple_GET_ITEM(node.node_data.ptr(), 1)
                                               : node.node_data.ptr();
}

// Pairs the children of two nodes: for dict-like nodes (dict, OrderedDict, defaultdict match
// one another, as in tree_map) by key, otherwise by position. Returns false if they differ.
bool PairChildren(const PyTreeSpec& a, Py_ssize_t ia, const PyTreeSpec& b, Py_ssize_t ib,
                  absl::InlinedVector<std::pair<Py_ssize_t, Py_ssize_t>, 8>& pairs) {
  const Node& na = a.traversal()[ia];
  const Node& nb_ = b.traversal()[ib];
  auto ca = a.ChildIndices(ia);
  auto cb = b.ChildIndices(ib);
  if (IsDictLike(na.kind) && IsDictLike(nb_.kind)) {
    if (na.arity != nb_.arity) return false;
    // Keys alone decide, as in tree_map: a defaultdict's factory is ignored (optree too).
    nb::dict position;
    PyObject* keys_b = DictKeys(nb_);
    for (Py_ssize_t j = 0; j < nb_.arity; ++j) {
      position[nb::handle(PyList_GET_ITEM(keys_b, j))] = nb::int_(j);
    }
    PyObject* keys_a = DictKeys(na);
    for (Py_ssize_t i = 0; i < na.arity; ++i) {
      PyObject* j = PyDict_GetItemWithError(position.ptr(), PyList_GET_ITEM(keys_a, i));
      if (j == nullptr) {
        if (PyErr_Occurred()) throw nb::python_error();
        return false;
      }
      pairs.emplace_back(ca[i], cb[PyLong_AsSsize_t(j)]);
    }
    return true;
  }
  // A deque's maxlen does not change how its children are laid out, so prefixes (and
  // broadcasting) ignore it, as optree does; equality still compares it.
  const bool deques = na.kind == PyTreeKind::kDeque && nb_.kind == PyTreeKind::kDeque;
  if (deques ? na.arity != nb_.arity : !NodeDataEqual(na, nb_)) return false;
  for (Py_ssize_t i = 0; i < na.arity; ++i) pairs.emplace_back(ca[i], cb[i]);
  return true;
}

// Whether the subtree of `a` at `ia` is a prefix of the subtree of `b` at `ib`.
bool IsPrefixAt(const PyTreeSpec& a, Py_ssize_t ia, const PyTreeSpec& b, Py_ssize_t ib,
                size_t depth = 0) {
  CheckWalkDepth(depth);
  if (a.traversal()[ia].kind == PyTreeKind::kLeaf) return true;
  absl::InlinedVector<std::pair<Py_ssize_t, Py_ssize_t>, 8> pairs;
  if (!PairChildren(a, ia, b, ib, pairs)) return false;
  for (const auto& [x, y] : pairs) {
    if (!IsPrefixAt(a, x, b, y, depth + 1)) return false;
  }
  return true;
}

}  // namespace

bool PyTreeSpec::IsPrefix(const PyTreeSpec& other, bool strict) const {
  if (none_is_leaf_ != other.none_is_leaf_) return false;
  if (!IsPrefixAt(*this, num_nodes() - 1, other, other.num_nodes() - 1)) return false;
  // Strict: not also the other way round (same-shape dict-likes are prefixes of each other).
  return !strict || !IsPrefixAt(other, other.num_nodes() - 1, *this, num_nodes() - 1);
}

namespace {

// Appends to `out` the common suffix of the subtrees of a (at ia) and b (at ib): where one is a
// leaf the other's subtree is kept; elsewhere the nodes must agree.
std::string DescribeNode(const Node& node) {
  std::string kind = KindName(node.kind);
  for (char& c : kind) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  std::string text = "a " + kind + " node with " + std::to_string(node.arity) + " children";
  if (node.kind == PyTreeKind::kDict || node.kind == PyTreeKind::kOrderedDict ||
      node.kind == PyTreeKind::kDefaultDict) {
    text += " (keys " + SafeRepr(nb::handle(DictKeys(node))) + ")";
  } else if (node.kind == PyTreeKind::kCustom || node.kind == PyTreeKind::kNamedTuple ||
             node.kind == PyTreeKind::kStructSequence) {
    text += " (" + SafeRepr(node.kind == PyTreeKind::kCustom ? node.custom->type
                                                               : node.node_data) + ")";
  }
  return text;
}

// `path` holds the entries from the roots to the current pair of nodes (for error messages).
void CommonSuffix(const PyTreeSpec& a, Py_ssize_t ia, const PyTreeSpec& b, Py_ssize_t ib,
                  NodeTraversal& out, std::vector<nb::object>& path) {
  CheckWalkDepth(path.size());
  const Node& na = a.traversal()[ia];
  const Node& nb_ = b.traversal()[ib];
  if (na.kind == PyTreeKind::kLeaf) {
    const Py_ssize_t start = ib - nb_.num_nodes + 1;
    out.insert(out.end(), b.traversal().begin() + start, b.traversal().begin() + ib + 1);
    return;
  }
  if (nb_.kind == PyTreeKind::kLeaf) {
    const Py_ssize_t start = ia - na.num_nodes + 1;
    out.insert(out.end(), a.traversal().begin() + start, a.traversal().begin() + ia + 1);
    return;
  }
  absl::InlinedVector<std::pair<Py_ssize_t, Py_ssize_t>, 8> pairs;
  if (!PairChildren(a, ia, b, ib, pairs)) {
    nb::list entries;
    for (const nb::object& entry : path) entries.append(entry);
    RaisePython(PyExc_ValueError,
                "PyTreeSpecs have no common suffix: at path " + SafeRepr(nb::tuple(entries)) +
                    " one has " + DescribeNode(na) + ", the other " + DescribeNode(nb_) + " (" +
                    a.Repr() + " vs. " + b.Repr() + ").");
  }
  const size_t before = out.size();
  Py_ssize_t leaves = 0;
  nb::tuple entries = detail::NodeEntries(na);
  Py_ssize_t position = 0;
  for (const auto& [x, y] : pairs) {  // In a's child order: the result keeps a's node.
    path.push_back(entries[position++]);
    CommonSuffix(a, x, b, y, out, path);
    path.pop_back();
    leaves += out.back().num_leaves;
  }
  Node copy = na;
  copy.num_leaves = leaves;
  copy.num_nodes = static_cast<Py_ssize_t>(out.size() - before) + 1;
  out.push_back(std::move(copy));
}

}  // namespace

PyTreeSpec PyTreeSpec::BroadcastToCommonSuffix(const PyTreeSpec& other) const {
  if (none_is_leaf_ != other.none_is_leaf_) {
    RaisePython(PyExc_ValueError, "PyTreeSpecs must have the same none_is_leaf value.");
  }
  std::string ns = MergedNamespace(*this, other);
  NodeTraversal out;
  std::vector<nb::object> path;
  CommonSuffix(*this, num_nodes() - 1, other, other.num_nodes() - 1, out, path);
  return PyTreeSpec(std::move(out), none_is_leaf_, std::move(ns));
}

nb::object PyTreeSpec::Walk(nb::handle f_node, nb::handle f_leaf, nb::handle leaves,
                            bool rebuild) const {
  // Post-order: leaves go through f_leaf (if given); each inner node calls
  // f_node(type, metadata, children_results), or is rebuilt as the original type without it.
  nb::object iterator = nb::steal(PyObject_GetIter(leaves.ptr()));
  if (!iterator.is_valid()) throw nb::python_error();
  absl::InlinedVector<nb::object, 16> agenda;
  for (const Node& node : traversal_) {
    if (node.kind == PyTreeKind::kLeaf) {
      PyObject* leaf = PyIter_Next(iterator.ptr());
      if (leaf == nullptr) {
        if (PyErr_Occurred()) throw nb::python_error();
        RaisePython(PyExc_ValueError, "Too few leaves for PyTreeSpec; expected: " +
                                          std::to_string(num_leaves()) + ".");
      }
      nb::object value = nb::steal(leaf);
      agenda.push_back(f_leaf.is_none() ? value : f_leaf(value));
      continue;
    }
    const size_t first = agenda.size() - static_cast<size_t>(node.arity);
    nb::handle* children = reinterpret_cast<nb::handle*>(agenda.data() + first);
    nb::object built;
    if (f_node.is_none() || rebuild) {
      built = MakeNode(node, children, node.arity);
      if (!f_node.is_none()) built = f_node(built);
    } else {
      nb::object type = node.kind == PyTreeKind::kCustom ? node.custom->type
                        : (node.kind == PyTreeKind::kNamedTuple ||
                           node.kind == PyTreeKind::kStructSequence)
                            ? node.node_data
                            : nb::borrow(detail::KindType(node.kind));
      nb::object metadata = node.node_data.is_valid() ? node.node_data : nb::none();
      PyObject* tuple = PyTuple_New(node.arity);
      if (tuple == nullptr) throw nb::python_error();
      for (Py_ssize_t i = 0; i < node.arity; ++i) {
        PyTuple_SET_ITEM(tuple, i, children[i].inc_ref().ptr());
      }
      built = f_node(type, metadata, nb::steal(tuple));
    }
    agenda.resize(first);
    agenda.push_back(std::move(built));
  }
  PyObject* extra = PyIter_Next(iterator.ptr());
  if (extra != nullptr) {
    Py_DECREF(extra);
    RaisePython(PyExc_ValueError, "Too many leaves for PyTreeSpec; expected: " +
                                      std::to_string(num_leaves()) + ".");
  }
  if (PyErr_Occurred()) throw nb::python_error();
  return agenda.back();
}

PyTreeSpec PyTreeSpec::ReplaceChildren(const std::vector<PyTreeSpec>& children) const {
  const Node& top_node = root();
  if (static_cast<Py_ssize_t>(children.size()) != top_node.arity) {
    RaisePython(PyExc_ValueError, "Expected " + std::to_string(top_node.arity) +
                                      " child PyTreeSpecs, got " +
                                      std::to_string(children.size()) + ".");
  }
  NodeTraversal traversal;
  Py_ssize_t leaves = 0;
  // The result's namespace merges the root's and the children's; parts built in the global
  // namespace must be able to adopt it (as for compose).
  std::string ns = namespace_;
  for (const PyTreeSpec& child : children) {
    if (child.none_is_leaf_ != none_is_leaf_) {
      RaisePython(PyExc_ValueError, "PyTreeSpecs must have the same none_is_leaf value.");
    }
    if (!child.namespace_.empty()) {
      if (!ns.empty() && ns != child.namespace_) {
        RaisePython(PyExc_ValueError, "PyTreeSpecs must have the same namespace, got " +
                                          SafeRepr(nb::str(ns.c_str())) + " vs. " +
                                          SafeRepr(nb::str(child.namespace_.c_str())) + ".");
      }
      ns = child.namespace_;
    }
    traversal.insert(traversal.end(), child.traversal_.begin(), child.traversal_.end());
    leaves += child.num_leaves();
  }
  for (const PyTreeSpec& child : children) {
    if (child.namespace_.empty()) CheckNamespaceAdoption(child.traversal_, ns);
  }
  if (namespace_.empty()) CheckNamespaceAdoption(NodeTraversal{top_node}, ns);
  Node top = top_node;
  top.num_leaves = top.kind == PyTreeKind::kLeaf ? 1 : leaves;
  top.num_nodes = static_cast<Py_ssize_t>(traversal.size()) + 1;
  traversal.push_back(std::move(top));
  return PyTreeSpec(std::move(traversal), none_is_leaf_, std::move(ns));
}

PyTreeSpec PyTreeSpec::MakeLeaf(bool none_is_leaf) {
  NodeTraversal traversal(1);
  traversal[0].kind = PyTreeKind::kLeaf;
  traversal[0].num_leaves = 1;
  traversal[0].num_nodes = 1;
  return PyTreeSpec(std::move(traversal), none_is_leaf, "");
}

PyTreeSpec PyTreeSpec::MakeNone(bool none_is_leaf) {
  if (none_is_leaf) return MakeLeaf(true);
  NodeTraversal traversal(1);
  traversal[0].kind = PyTreeKind::kNone;
  traversal[0].num_nodes = 1;
  return PyTreeSpec(std::move(traversal), false, "");
}

PyTreeSpec PyTreeSpec::MakeFromCollection(nb::handle collection, bool none_is_leaf,
                                          const std::string& ns) {
  // Flatten one level with every child a leaf, then splice in each child's own spec.
  auto [leaves, spec] = FlattenOneLevelSpec(collection, nb::none(), none_is_leaf, ns);
  NodeTraversal traversal;
  Node top = spec.root();
  if (top.kind == PyTreeKind::kLeaf) {
    // As optree: a leaf "collection" gives the leaf spec, with a warning since it is most likely
    // a mistake. A spec without custom nodes records no namespace.
    const std::string message = "treespec_from_collection() got a leaf, " +
                                SafeRepr(collection) + ", not a collection of PyTreeSpecs; "
                                "returning the spec of a leaf.";
    if (PyErr_WarnEx(PyExc_UserWarning, message.c_str(), 1) < 0) throw nb::python_error();
    return MakeLeaf(none_is_leaf);
  }
  Py_ssize_t total_leaves = 0;
  // Like flatten, the spec records a namespace only if it has a custom node (the root's
  // namespace comes from `spec`); children built in the global namespace adopt it if they can.
  std::string merged_ns = spec.ns();
  std::vector<const PyTreeSpec*> global_children;
  for (nb::handle child : leaves) {
    if (!nb::isinstance<PyTreeSpec>(child)) {
      RaisePython(PyExc_ValueError, "Expected a collection of PyTreeSpecs, got a child " +
                                        SafeRepr(child) + " in " + SafeRepr(collection) + ".");
    }
    const PyTreeSpec& sub = nb::cast<const PyTreeSpec&>(child);
    if (sub.none_is_leaf_ != none_is_leaf) {
      RaisePython(PyExc_ValueError, "Expected PyTreeSpecs with none_is_leaf=" +
                                        std::string(none_is_leaf ? "True" : "False") + ", got " +
                                        sub.Repr() + ".");
    }
    if (!sub.namespace_.empty()) {
      if (!merged_ns.empty() && merged_ns != sub.namespace_) {
        RaisePython(PyExc_ValueError, "Expected PyTreeSpecs with namespace " +
                                          SafeRepr(nb::str(merged_ns.c_str())) + ", got " +
                                          sub.Repr() + ".");
      }
      merged_ns = sub.namespace_;
    } else {
      global_children.push_back(&sub);
    }
    traversal.insert(traversal.end(), sub.traversal_.begin(), sub.traversal_.end());
    total_leaves += sub.num_leaves();
  }
  for (const PyTreeSpec* sub : global_children) CheckNamespaceAdoption(sub->traversal_, merged_ns);
  if (spec.ns().empty()) CheckNamespaceAdoption(spec.traversal_, merged_ns);
  top.num_leaves = total_leaves;
  top.num_nodes = static_cast<Py_ssize_t>(traversal.size()) + 1;
  traversal.push_back(std::move(top));
  return PyTreeSpec(std::move(traversal), none_is_leaf, merged_ns);
}

nb::object PyTreeSpec::type() const {
  const Node& node = root();
  switch (node.kind) {
    case PyTreeKind::kLeaf: return nb::none();
    case PyTreeKind::kCustom: return node.custom->type;
    case PyTreeKind::kNamedTuple:
    case PyTreeKind::kStructSequence: return node.node_data;
    default: return nb::borrow(detail::KindType(node.kind));
  }
}

}  // namespace optree_core
