// Entries and paths: how each child is reached from its parent.
#include <string>

#include "optree_core/exceptions.h"
#include "optree_core/treespec.h"

namespace optree_core {
namespace detail {

static nb::tuple Range(Py_ssize_t n) {
  PyObject* tuple = PyTuple_New(n);
  if (tuple == nullptr) throw nb::python_error();
  for (Py_ssize_t i = 0; i < n; ++i) PyTuple_SET_ITEM(tuple, i, PyLong_FromSsize_t(i));
  return nb::steal<nb::tuple>(tuple);
}

nb::tuple NodeEntries(const Node& node) {
  switch (node.kind) {
    case PyTreeKind::kDict:
    case PyTreeKind::kOrderedDict:
      return nb::steal<nb::tuple>(PySequence_Tuple(node.node_data.ptr()));
    case PyTreeKind::kDefaultDict:
      return nb::steal<nb::tuple>(PySequence_Tuple(PyTuple_GET_ITEM(node.node_data.ptr(), 1)));
    case PyTreeKind::kCustom:
      if (node.node_entries.is_valid() && !node.node_entries.is_none()) {
        return nb::borrow<nb::tuple>(node.node_entries);
      }
      return Range(node.arity);
    default:
      return Range(node.arity);
  }
}

nb::object TupleOf(const std::vector<nb::object>& items) {
  PyObject* tuple = PyTuple_New(static_cast<Py_ssize_t>(items.size()));
  if (tuple == nullptr) throw nb::python_error();
  for (size_t i = 0; i < items.size(); ++i) {
    PyTuple_SET_ITEM(tuple, static_cast<Py_ssize_t>(i), items[i].inc_ref().ptr());
  }
  return nb::steal(tuple);
}

}  // namespace detail

nb::list PyTreeSpec::Entries() const {
  return nb::steal<nb::list>(PySequence_List(detail::NodeEntries(root()).ptr()));
}

nb::object PyTreeSpec::Entry(Py_ssize_t index) const {
  const Py_ssize_t arity = num_children();
  if (index < -arity || index >= arity) {
    RaisePython(PyExc_IndexError, "The entry index " + std::to_string(index) +
                                      " is out of range for a node with " +
                                      std::to_string(arity) + " children.");
  }
  if (index < 0) index += arity;
  return detail::NodeEntries(root())[index];
}

namespace {

void CollectPaths(const PyTreeSpec& spec, Py_ssize_t index, std::vector<nb::object>& prefix,
                  nb::list& out) {
  CheckWalkDepth(prefix.size());
  const Node& node = spec.traversal()[index];
  if (node.kind == PyTreeKind::kLeaf) {
    nb::object path = detail::TupleOf(prefix);
    out.append(path);
    return;
  }
  nb::tuple entries = detail::NodeEntries(node);
  auto children = spec.ChildIndices(index);
  for (Py_ssize_t i = 0; i < node.arity; ++i) {
    prefix.push_back(entries[i]);
    CollectPaths(spec, children[i], prefix, out);
    prefix.pop_back();
  }
}

}  // namespace

namespace {

void CollectAccessors(const PyTreeSpec& spec, Py_ssize_t index, nb::handle entry_classes,
                      nb::handle accessor_type, nb::handle kinds,
                      std::vector<nb::object>& prefix, nb::list& out) {
  CheckWalkDepth(prefix.size());
  const Node& node = spec.traversal()[index];
  if (node.kind == PyTreeKind::kLeaf) {
    nb::object path = detail::TupleOf(prefix);
    out.append(accessor_type(path));
    return;
  }
  const int kind = static_cast<int>(node.kind);
  nb::object cls = node.kind == PyTreeKind::kCustom ? node.custom->path_entry_type
                                                    : nb::borrow(entry_classes[kind]);
  nb::object type = node.kind == PyTreeKind::kCustom ? node.custom->type
                    : (node.kind == PyTreeKind::kNamedTuple ||
                       node.kind == PyTreeKind::kStructSequence)
                        ? node.node_data
                        : nb::borrow(detail::KindType(node.kind));
  nb::tuple entries = detail::NodeEntries(node);
  auto children = spec.ChildIndices(index);
  for (Py_ssize_t i = 0; i < node.arity; ++i) {
    prefix.push_back(cls(entries[i], type, kinds[kind]));
    CollectAccessors(spec, children[i], entry_classes, accessor_type, kinds, prefix, out);
    prefix.pop_back();
  }
}

}  // namespace

nb::list PyTreeSpec::Accessors(nb::handle entry_classes, nb::handle accessor_type,
                               nb::handle kinds) const {
  nb::list out;
  std::vector<nb::object> prefix;
  CollectAccessors(*this, num_nodes() - 1, entry_classes, accessor_type, kinds, prefix, out);
  return out;
}

nb::list PyTreeSpec::Paths() const {
  nb::list out;
  std::vector<nb::object> prefix;
  CollectPaths(*this, num_nodes() - 1, prefix, out);
  return out;
}

}  // namespace optree_core
