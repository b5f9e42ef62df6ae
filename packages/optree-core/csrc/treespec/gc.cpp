// Garbage collection: a spec holds Python objects (dict keys, custom metadata, and through a
// custom node's registration the user's type and functions), so cycles through it must be
// visible to CPython's cyclic collector.
#include <absl/container/flat_hash_map.h>

#include "optree_core/treespec.h"

namespace optree_core {

int PyTreeSpec::TpTraverse(PyObject* self_py, visitproc visit, void* arg) {
  Py_VISIT(Py_TYPE(self_py));  // Instances of heap types own a reference to their type.
  if (!nb::inst_ready(self_py)) return 0;
  const PyTreeSpec& self = *nb::inst_ptr<PyTreeSpec>(self_py);
  // A registration is reported only when this spec holds every reference to it (the type was
  // unregistered and no other spec shares it); otherwise the registry or another spec owns it
  // too, and reporting it here would let the collector free objects still in use.
  absl::flat_hash_map<const PyTreeTypeRegistration*, long> held;
  for (const Node& node : self.traversal_) {
    Py_VISIT(node.node_data.ptr());
    Py_VISIT(node.node_entries.ptr());
    if (node.custom) ++held[node.custom.get()];
  }
  for (const Node& node : self.traversal_) {
    if (!node.custom) continue;
    auto it = held.find(node.custom.get());
    if (it == held.end() || it->second != node.custom.use_count()) continue;
    held.erase(it);  // Once per registration, however many nodes share it.
    const PyTreeTypeRegistration& reg = *node.custom;
    Py_VISIT(reg.type.ptr());
    Py_VISIT(reg.flatten_func.ptr());
    Py_VISIT(reg.unflatten_func.ptr());
    Py_VISIT(reg.path_entry_type.ptr());
  }
  return 0;
}

int PyTreeSpec::TpClear(PyObject* self_py) {
  if (!nb::inst_ready(self_py)) return 0;
  PyTreeSpec& self = *nb::inst_ptr<PyTreeSpec>(self_py);
  // Becomes the spec of a leaf (still valid if anything looks at it before it is freed); the
  // old nodes release their references after the swap, when the spec is consistent.
  self.unflatten_plan_.reset();
  NodeTraversal released = std::move(self.traversal_);
  self.traversal_ = MakeLeaf(self.none_is_leaf_).traversal_;
  released.clear();
  return 0;
}

}  // namespace optree_core
