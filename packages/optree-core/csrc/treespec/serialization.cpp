// Pickling: a treespec is saved as plain tuples; custom node types are looked up again on load.
#include <nanobind/stl/string.h>

#include <string>

#include "optree_core/exceptions.h"
#include "optree_core/treespec.h"

namespace optree_core {

namespace {

// The layout of optree's PyTreeSpec state, so that specs pickled by either package load in
// the other: (node_states, none_is_leaf, namespace), each node state
// (kind, arity, node_data, node_entries, custom type, num_leaves, num_nodes, original_keys)
// with original_keys a dict of a dict node's keys in insertion order (None for other kinds).
// optree-core 0.1 wrote (1, node_states, none_is_leaf, namespace) with original_keys a list
// (or None when insertion order was the sorted order); FromState still reads that.
constexpr int kLegacyStateVersion = 1;

nb::handle DictKeysOf(const Node& node) {
  return node.kind == PyTreeKind::kDefaultDict ? nb::handle(PyTuple_GET_ITEM(node.node_data.ptr(), 1))
                                               : nb::handle(node.node_data);
}

nb::list CopyList(nb::handle list) { return nb::steal<nb::list>(PySequence_List(list.ptr())); }

// node_data with its mutable key list copied, so a state and a spec never share one.
nb::object CopyNodeData(PyTreeKind kind, const nb::object& data) {
  switch (kind) {
    case PyTreeKind::kDict:
    case PyTreeKind::kOrderedDict:
      return CopyList(data);
    case PyTreeKind::kDefaultDict:
      return nb::make_tuple(nb::handle(PyTuple_GET_ITEM(data.ptr(), 0)),
                            CopyList(PyTuple_GET_ITEM(data.ptr(), 1)));
    default:
      return data.is_valid() ? data : nb::none();
  }
}

}  // namespace

nb::tuple PyTreeSpec::GetState() const {
  nb::list nodes;
  for (const Node& node : traversal_) {
    nb::object original_keys = nb::none();
    if (node.kind == PyTreeKind::kDict || node.kind == PyTreeKind::kDefaultDict) {
      nb::handle keys = DictKeysOf(node);
      nb::dict original;
      for (Py_ssize_t j = 0; j < node.arity; ++j) {
        original[keys[node.insertion_order.empty() ? j : node.insertion_order[j]]] = nb::none();
      }
      original_keys = std::move(original);
    }
    nodes.append(nb::make_tuple(static_cast<int>(node.kind), node.arity,
                                CopyNodeData(node.kind, node.node_data),
                                node.node_entries.is_valid() ? node.node_entries : nb::none(),
                                node.custom ? node.custom->type : nb::none(), node.num_leaves,
                                node.num_nodes, original_keys));
  }
  return nb::make_tuple(nb::tuple(nodes), none_is_leaf_, nb::str(namespace_.c_str()));
}

PyTreeSpec PyTreeSpec::FromState(nb::handle state) {
  // A malformed state is a RuntimeError, as in optree (it is not the caller's argument error
  // but a corrupt or foreign pickle).
  auto bad = [&](const std::string& why) {
    RaisePython(PyExc_RuntimeError, "Malformed pickled PyTreeSpec state (" + why + "): " +
                                        SafeRepr(state) + ".");
  };
  if (!PyTuple_Check(state.ptr())) bad("not a tuple");
  nb::tuple st = nb::borrow<nb::tuple>(state);
  const bool legacy = PyTuple_GET_SIZE(st.ptr()) == 4 && PyLong_CheckExact(st[0].ptr()) &&
                      nb::cast<int>(st[0]) == kLegacyStateVersion;
  if (!legacy && PyTuple_GET_SIZE(st.ptr()) != 3) bad("not a 3-tuple");
  const Py_ssize_t first = legacy ? 1 : 0;
  if (!PyTuple_Check(st[first].ptr()) || !PyBool_Check(st[first + 1].ptr()) ||
      !PyUnicode_Check(st[first + 2].ptr())) {
    bad("not (node states, none_is_leaf, namespace)");
  }
  const bool none_is_leaf = nb::cast<bool>(st[first + 1]);
  const std::string ns = nb::cast<std::string>(st[first + 2]);
  NodeTraversal traversal;
  for (nb::handle item : st[first]) {
    if (!PyTuple_Check(item.ptr()) ||
        (PyTuple_GET_SIZE(item.ptr()) != 7 && PyTuple_GET_SIZE(item.ptr()) != 8)) {
      bad("a node state is not a 7- or 8-tuple");
    }
    nb::tuple t = nb::borrow<nb::tuple>(item);
    for (int field : {0, 1, 5, 6}) {
      if (!PyLong_Check(t[field].ptr())) bad("a node's kind or counts are not integers");
    }
    Node node;
    int kind = nb::cast<int>(t[0]);
    if (kind < 0 || kind >= kNumPyTreeKinds) bad("unknown node kind");
    node.kind = static_cast<PyTreeKind>(kind);
    node.arity = nb::cast<Py_ssize_t>(t[1]);
    if (!t[2].is_none() || node.kind == PyTreeKind::kCustom || node.kind == PyTreeKind::kDeque) {
      node.node_data = nb::borrow(t[2]);
    }
    if (!t[3].is_none()) node.node_entries = nb::borrow(t[3]);
    // Dict nodes name their keys in insertion order (a dict, or a list in the legacy layout).
    nb::object original_keys;
    if (PyTuple_GET_SIZE(t.ptr()) == 8 && !t[7].is_none()) {
      if (!PyDict_Check(t[7].ptr()) && !PyList_Check(t[7].ptr())) bad("original dict keys");
      original_keys = CopyList(t[7]);
    }
    node.num_leaves = nb::cast<Py_ssize_t>(t[5]);
    node.num_nodes = nb::cast<Py_ssize_t>(t[6]);
    if (node.arity < 0 || node.num_nodes < 1 ||
        node.num_nodes > static_cast<Py_ssize_t>(traversal.size()) + 1) {
      bad("inconsistent node counts");
    }
    const bool is_list = node.node_data.is_valid() && PyList_CheckExact(node.node_data.ptr());
    const bool is_dict = node.kind == PyTreeKind::kDict || node.kind == PyTreeKind::kDefaultDict;
    // optree's layout names a dict's insertion order on every dict node; only the legacy layout
    // and 7-tuple node states may leave it out (the sorted order is then the insertion order).
    if (is_dict && !legacy && PyTuple_GET_SIZE(t.ptr()) == 8 && !original_keys.is_valid()) {
      bad("a dict node without its original keys");
    }
    switch (node.kind) {
      case PyTreeKind::kNone:
        if (none_is_leaf) bad("a None node in a spec where None is a leaf");
        [[fallthrough]];
      case PyTreeKind::kLeaf:
      case PyTreeKind::kTuple:
      case PyTreeKind::kList:
        if (node.node_data.is_valid()) bad("node data on a node kind that carries none");
        if (node.kind != PyTreeKind::kTuple && node.kind != PyTreeKind::kList && node.arity != 0) {
          bad("leaf or None with children");
        }
        break;
      case PyTreeKind::kDict:
      case PyTreeKind::kOrderedDict:
        if (!is_list || PyList_GET_SIZE(node.node_data.ptr()) != node.arity) bad("dict keys");
        break;
      case PyTreeKind::kDefaultDict: {
        if (is_list) node.node_data = nb::tuple(node.node_data);  // [factory, keys] reads too
        PyObject* data = node.node_data.is_valid() ? node.node_data.ptr() : nullptr;
        if (data == nullptr || !PyTuple_CheckExact(data) || PyTuple_GET_SIZE(data) != 2 ||
            !PyList_CheckExact(PyTuple_GET_ITEM(data, 1)) ||
            PyList_GET_SIZE(PyTuple_GET_ITEM(data, 1)) != node.arity) {
          bad("defaultdict data");
        }
        PyObject* factory = PyTuple_GET_ITEM(data, 0);
        if (factory != Py_None && !PyCallable_Check(factory)) bad("defaultdict factory");
        break;
      }
      case PyTreeKind::kDeque:
        if (!node.node_data.is_none() &&
            (!PyLong_CheckExact(node.node_data.ptr()) ||
             nb::cast<Py_ssize_t>(node.node_data) < node.arity)) {
          bad("deque maxlen");
        }
        break;
      case PyTreeKind::kNamedTuple:
      case PyTreeKind::kStructSequence: {
        PyObject* type = node.node_data.is_valid() ? node.node_data.ptr() : nullptr;
        if (type == nullptr || !PyType_Check(type)) bad("namedtuple/structseq type");
        auto* t = reinterpret_cast<PyTypeObject*>(type);
        const bool named = node.kind == PyTreeKind::kNamedTuple;
        if (named ? !IsNamedTupleClass(t) : !IsStructSequenceClass(t)) {
          bad("not a namedtuple/structseq type");
        }
        const Py_ssize_t fields =
            named ? static_cast<Py_ssize_t>(nb::len(nb::object(node.node_data.attr("_fields"))))
                  : nb::cast<Py_ssize_t>(node.node_data.attr("n_sequence_fields"));
        if (fields != node.arity) {
          bad("the field count of " + SafeRepr(node.node_data) + ", " + std::to_string(fields) +
              ", does not match the arity of its node, " + std::to_string(node.arity));
        }
        break;
      }
      case PyTreeKind::kFrozenDict:
        // Not malformed, only unsupported here: a ValueError, as for other states this
        // interpreter cannot rebuild.
        RaisePython(PyExc_ValueError,
                    "This pickled PyTreeSpec holds a frozendict node, and this Python has no "
                    "frozendict type (it arrives in Python 3.15): it cannot be unpickled here.");
      default:
        break;
    }
    if (node.node_entries.is_valid() &&
        (node.kind != PyTreeKind::kCustom || !PyTuple_CheckExact(node.node_entries.ptr()) ||
         PyTuple_GET_SIZE(node.node_entries.ptr()) != node.arity)) {
      bad("custom node entries");
    }
    if (node.kind == PyTreeKind::kDict || node.kind == PyTreeKind::kOrderedDict ||
        node.kind == PyTreeKind::kDefaultDict) {
      node.node_data = CopyNodeData(node.kind, node.node_data);  // never share the caller's list
    }
    if (original_keys.is_valid() && (!is_dict || PyList_GET_SIZE(original_keys.ptr()) != node.arity)) {
      bad("original dict keys");
    }
    nb::dict position;  // A dict node's keys -> their index: each hashable and distinct.
    if (is_dict) {
      nb::handle keys = DictKeysOf(node);
      try {
        for (Py_ssize_t i = 0; i < node.arity; ++i) position[keys[i]] = nb::int_(i);
      } catch (nb::python_error& e) {
        if (!e.matches(PyExc_TypeError)) throw;
        bad("unhashable dict keys");
      }
      if (static_cast<Py_ssize_t>(nb::len(position)) != node.arity) bad("duplicate dict keys");
    }
    if (original_keys.is_valid()) {
      bool identity = true;
      for (nb::handle key : original_keys) {
        if (!position.contains(key)) bad("original dict keys differ from the keys");
        node.insertion_order.push_back(nb::cast<Py_ssize_t>(position[key]));
        identity = identity && node.insertion_order.back() ==
                                   static_cast<Py_ssize_t>(node.insertion_order.size()) - 1;
      }
      if (identity) node.insertion_order.clear();  // As flattening stores it.
    }
    if (node.kind != PyTreeKind::kCustom && !t[4].is_none()) bad("a custom type on a built-in node");
    if (node.kind == PyTreeKind::kCustom) {
      nb::handle type = t[4];
      if (!PyType_Check(type.ptr())) bad("custom node without a type");
      const PyTreeTypeRegistration* reg = PyTreeTypeRegistry::Instance().Lookup(
          reinterpret_cast<PyTypeObject*>(type.ptr()), ns);
      if (reg != nullptr && reg->kind != PyTreeKind::kCustom) {
        bad("the custom type " + SafeRepr(type) + " is a built-in node type");
      }
      if (reg == nullptr) {
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
