// Reuse of recent treespecs: flattening a tree whose structure equals one flattened recently
// only has to verify that structure and collect the leaves, and can return the same (immutable)
// spec object instead of building a new one.
#pragma once

#include <Python.h>
#include <nanobind/nanobind.h>

#include <array>
#include <cstdint>
#include <string>

#include "optree_core/treespec.h"

namespace optree_core {

namespace nb = nanobind;

// tree_map(func, tree) for one tree: flatten (through the cache), call, unflatten (map.cpp).
nb::object TreeMap(nb::handle func, nb::handle tree, nb::handle is_leaf, bool none_is_leaf,
                   const std::string& ns);

class StructureCache {
 public:
  static StructureCache& Instance();

  // flatten(tree) -> (leaves, spec object): a verified cached spec when one matches, else a
  // full flatten whose spec is remembered. is_leaf predicates bypass the cache.
  nb::tuple Flatten(nb::handle tree, nb::handle is_leaf, bool none_is_leaf,
                    const std::string& ns);

  // Drops every cached spec (called at interpreter exit, and by tests).
  void Clear();

 private:
  struct Slot {
    PyTypeObject* root_type = nullptr;
    Py_ssize_t root_size = -1;
    bool none_is_leaf = false;
    bool insertion_ordered = false;
    std::uint64_t registry_version = 0;
    std::string ns;
    nb::object spec;  // A PyTreeSpec without custom nodes.
  };
  static constexpr size_t kSlots = 16;

  std::array<Slot, kSlots> slots_;
};

}  // namespace optree_core
