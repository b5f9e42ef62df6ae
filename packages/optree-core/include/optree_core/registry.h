// The registry of pytree node types: built-in containers and user-registered classes.
#pragma once

#include <Python.h>
#include <absl/container/flat_hash_map.h>
#include <absl/container/flat_hash_set.h>
#include <nanobind/nanobind.h>

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "optree_core/kind.h"

namespace optree_core {

namespace nb = nanobind;

struct PyTreeTypeRegistration : std::enable_shared_from_this<PyTreeTypeRegistration> {
  PyTreeKind kind = PyTreeKind::kCustom;
  nb::object type;             // The registered class.
  nb::object flatten_func;     // Custom nodes: obj -> (children, metadata[, entries]).
  nb::object unflatten_func;   // Custom nodes: (metadata, children) -> obj.
  nb::object path_entry_type;  // Custom nodes: the PyTreeEntry subclass used by accessors.
  std::string ns;              // "" for the global namespace.
  std::uint64_t serial = 0;    // Registration order, for listings in the order types came.
};

// All operations run with the GIL held and never call back into Python, so the GIL serializes
// them: registering and flattening from many threads at once is safe. Registrations are shared:
// a treespec with a custom node keeps its registration (and the user's functions) alive after
// the type is unregistered; otherwise unregistering releases them.
class PyTreeTypeRegistry {
 public:
  static PyTreeTypeRegistry& Instance();

  // The registration of exactly `type` visible from namespace `ns` (its own first, then the
  // global one), or nullptr. Built-in tuple/list/dict/None are resolved before calling this.
  const PyTreeTypeRegistration* Lookup(PyTypeObject* type, const std::string& ns) const {
    if (has_namespaced_ && !ns.empty()) {
      auto it = namespaced_.find(std::make_pair(type, ns));
      if (it != namespaced_.end()) return it->second.get();
    }
    auto it = global_.find(type);
    return it == global_.end() ? nullptr : it->second.get();
  }

  void Register(nb::handle cls, nb::handle flatten_func, nb::handle unflatten_func,
                nb::handle path_entry_type, const std::string& ns);
  void Unregister(nb::handle cls, const std::string& ns);

  // Whether plain dicts (and defaultdicts) keep insertion order instead of sorted keys.
  bool IsDictInsertionOrdered(const std::string& ns, bool inherit_global = true) const {
    if (inherit_global && dict_insertion_ordered_global_) return true;
    return !ns.empty() && !insertion_ordered_namespaces_.empty() &&
           insertion_ordered_namespaces_.contains(ns);
  }
  bool AnyDictInsertionOrdered() const {
    return dict_insertion_ordered_global_ || !insertion_ordered_namespaces_.empty();
  }
  void SetDictInsertionOrdered(bool mode, const std::string& ns);

  // Registrations counted as optree's get_registry_size does: the global ones (built-ins
  // included) plus those of `ns`, or of every namespace when `ns` is nullopt.
  Py_ssize_t Size(const std::optional<std::string>& ns) const;
  // (type, namespace) of every registration in the order they were made (built-ins first;
  // "" is the global namespace).
  std::vector<std::pair<nb::object, std::string>> Keys() const;

  // Bumped by every change, so lookups cached by callers can be validated cheaply.
  std::uint64_t version() const { return version_; }

 private:
  PyTreeTypeRegistry();
  void RegisterBuiltin(PyTypeObject* type, PyTreeKind kind);

  using Entry = std::shared_ptr<const PyTreeTypeRegistration>;
  absl::flat_hash_map<PyTypeObject*, Entry> global_;
  absl::flat_hash_map<std::pair<PyTypeObject*, std::string>, Entry> namespaced_;
  absl::flat_hash_set<std::string> insertion_ordered_namespaces_;
  bool dict_insertion_ordered_global_ = false;
  bool has_namespaced_ = false;
  std::uint64_t version_ = 0;
  std::uint64_t next_serial_ = 0;
};

// Types resolved once at start-up (collections.OrderedDict, defaultdict, deque).
struct CollectionTypes {
  PyTypeObject* ordered_dict;
  PyTypeObject* default_dict;
  PyTypeObject* deque;
  static const CollectionTypes& Get();
};

// Structural checks that do not need the registry.
bool IsNamedTupleClass(PyTypeObject* type);
bool IsStructSequenceClass(PyTypeObject* type);

}  // namespace optree_core
