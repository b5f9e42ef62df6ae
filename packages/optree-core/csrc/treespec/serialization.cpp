// Pickling: a treespec is saved as plain tuples; custom node types are looked up again on load.
#include <nanobind/stl/string.h>

#include <string>

#include "optree_core/exceptions.h"
#include "optree_core/treespec.h"

namespace optree_core {

namespace {
constexpr int kStateVersion = 1;
}

nb::tuple PyTreeSpec::GetState() const {
  nb::list nodes;
  for (const Node& node : traversal_) {
    auto opt = [](const nb::object& o) { return o.is_valid() ? o : nb::none(); };
    nb::object original_keys = nb::none();
    if (!node.insertion_order.empty()) {
      nb::handle keys = node.kind == PyTreeKind::kDefaultDict
                            ? nb::handle(PyTuple_GET_ITEM(node.node_data.ptr(), 1))
                            : nb::handle(node.node_data);
      nb::list original;
      for (Py_ssize_t i : node.insertion_order) original.append(keys[i]);
      original_keys = std::move(original);
    }
    nodes.append(nb::make_tuple(static_cast<int>(node.kind), node.arity, opt(node.node_data),
                                opt(node.node_entries),
                                node.custom ? node.custom->type : nb::none(), node.num_leaves,
                                node.num_nodes, original_keys));
  }
  return nb::make_tuple(kStateVersion, nb::tuple(nodes), none_is_leaf_,
                        nb::str(namespace_.c_str()));
}

PyTreeSpec PyTreeSpec::FromState(nb::handle state) {
  auto bad = [&](const std::string& why) {
    RaisePython(PyExc_ValueError, "Malformed pickled PyTreeSpec state (" + why + "): " +
                                      SafeRepr(state) + ".");
  };
  if (!PyTuple_Check(state.ptr()) || PyTuple_GET_SIZE(state.ptr()) != 4) bad("not a 4-tuple");
  nb::tuple st = nb::borrow<nb::tuple>(state);
  if (!nb::isinstance<nb::int_>(st[0]) || nb::cast<int>(st[0]) != kStateVersion) {
    bad("unknown version");
  }
  const bool none_is_leaf = nb::cast<bool>(st[2]);
  const std::string ns = nb::cast<std::string>(st[3]);
  NodeTraversal traversal;
  for (nb::handle item : st[1]) {
    if (!PyTuple_Check(item.ptr()) || PyTuple_GET_SIZE(item.ptr()) != 8) bad("node not an 8-tuple");
    nb::tuple t = nb::borrow<nb::tuple>(item);
    Node node;
    int kind = nb::cast<int>(t[0]);
    if (kind < 0 || kind >= kNumPyTreeKinds) bad("unknown node kind");
    node.kind = static_cast<PyTreeKind>(kind);
    node.arity = nb::cast<Py_ssize_t>(t[1]);
    if (!t[2].is_none() || node.kind == PyTreeKind::kCustom || node.kind == PyTreeKind::kDeque) {
      node.node_data = nb::borrow(t[2]);
    }
    if (!t[3].is_none()) node.node_entries = nb::borrow(t[3]);
    nb::object original_keys = t[7].is_none() ? nb::object() : nb::borrow(t[7]);
    node.num_leaves = nb::cast<Py_ssize_t>(t[5]);
    node.num_nodes = nb::cast<Py_ssize_t>(t[6]);
    if (node.arity < 0 || node.num_nodes < 1 ||
        node.num_nodes > static_cast<Py_ssize_t>(traversal.size()) + 1) {
      bad("inconsistent node counts");
    }
    const bool is_list = node.node_data.is_valid() && PyList_CheckExact(node.node_data.ptr());
    switch (node.kind) {
      case PyTreeKind::kLeaf:
      case PyTreeKind::kNone:
        if (node.arity != 0) bad("leaf or None with children");
        break;
      case PyTreeKind::kDict:
      case PyTreeKind::kOrderedDict:
        if (!is_list || PyList_GET_SIZE(node.node_data.ptr()) != node.arity) bad("dict keys");
        break;
      case PyTreeKind::kDefaultDict:
        if (!node.node_data.is_valid() || !PyTuple_CheckExact(node.node_data.ptr()) ||
            PyTuple_GET_SIZE(node.node_data.ptr()) != 2 ||
            !PyList_CheckExact(PyTuple_GET_ITEM(node.node_data.ptr(), 1)) ||
            PyList_GET_SIZE(PyTuple_GET_ITEM(node.node_data.ptr(), 1)) != node.arity) {
          bad("defaultdict data");
        }
        break;
      case PyTreeKind::kNamedTuple:
      case PyTreeKind::kStructSequence: {
        PyObject* type = node.node_data.is_valid() ? node.node_data.ptr() : nullptr;
        if (type == nullptr || !PyType_Check(type)) bad("namedtuple/structseq type");
        auto* t = reinterpret_cast<PyTypeObject*>(type);
        if (node.kind == PyTreeKind::kNamedTuple ? !IsNamedTupleClass(t)
                                                 : !IsStructSequenceClass(t)) {
          bad("not a namedtuple/structseq type");
        }
        break;
      }
      case PyTreeKind::kFrozenDict:
        bad("frozendict is not supported");
      default:
        break;
    }
    if (node.node_entries.is_valid() &&
        (node.kind != PyTreeKind::kCustom || !PyTuple_CheckExact(node.node_entries.ptr()) ||
         PyTuple_GET_SIZE(node.node_entries.ptr()) != node.arity)) {
      bad("custom node entries");
    }
    if (original_keys.is_valid()) {
      if (!PyList_CheckExact(original_keys.ptr()) ||
          PyList_GET_SIZE(original_keys.ptr()) != node.arity ||
          (node.kind != PyTreeKind::kDict && node.kind != PyTreeKind::kDefaultDict)) {
        bad("original dict keys");
      }
      nb::handle keys = node.kind == PyTreeKind::kDefaultDict
                            ? nb::handle(PyTuple_GET_ITEM(node.node_data.ptr(), 1))
                            : nb::handle(node.node_data);
      nb::dict position;
      for (Py_ssize_t i = 0; i < node.arity; ++i) position[keys[i]] = nb::int_(i);
      if (static_cast<Py_ssize_t>(nb::len(position)) != node.arity) bad("duplicate dict keys");
      for (nb::handle key : original_keys) {
        if (!position.contains(key)) bad("original dict keys differ from the keys");
        node.insertion_order.push_back(nb::cast<Py_ssize_t>(position[key]));
      }
    }
    if (node.kind == PyTreeKind::kCustom) {
      nb::handle type = t[4];
      if (!PyType_Check(type.ptr())) bad("custom node without a type");
      const PyTreeTypeRegistration* reg = PyTreeTypeRegistry::Instance().Lookup(
          reinterpret_cast<PyTypeObject*>(type.ptr()), ns);
      if (reg == nullptr || reg->kind != PyTreeKind::kCustom) {
        RaisePython(PyExc_ValueError, "Unknown custom type in pickled PyTreeSpec: " +
                                          SafeRepr(type) + " is not registered" +
                                          (ns.empty() ? "" : " in namespace '" + ns + "'") + ".");
      }
      node.custom = reg->shared_from_this();
    }
    traversal.push_back(std::move(node));
  }
  if (traversal.empty()) bad("no nodes");
  // Verify the counts describe a single well-formed tree.
  Py_ssize_t open = 0;
  for (const Node& node : traversal) {
    if (node.kind == PyTreeKind::kLeaf && node.arity != 0) bad("leaf with children");
    if (node.arity > open) bad("node with more children than available");
    open = open - node.arity + 1;
  }
  if (open != 1) bad("not a single tree");
  PyTreeSpec spec(std::move(traversal), none_is_leaf, ns);
  for (Py_ssize_t i = 0; i < spec.num_nodes(); ++i) {
    const Node& node = spec.traversal()[i];
    Py_ssize_t nodes = 1, leaves = node.kind == PyTreeKind::kLeaf ? 1 : 0;
    Py_ssize_t cursor = i - 1;
    for (Py_ssize_t c = 0; c < node.arity; ++c) {
      if (cursor < 0) bad("inconsistent node counts");
      const Node& child = spec.traversal()[cursor];
      nodes += child.num_nodes;
      leaves += child.num_leaves;
      cursor -= child.num_nodes;
    }
    if (nodes != node.num_nodes || leaves != node.num_leaves) bad("inconsistent node counts");
  }
  return spec;
}

}  // namespace optree_core
