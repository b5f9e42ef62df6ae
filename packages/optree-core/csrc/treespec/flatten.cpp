// Flattening: one recursive walk that appends leaves (and optionally paths) and records the
// post-order node traversal.
#include <absl/container/flat_hash_map.h>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <numeric>
#include <string>
#include <utility>
#include <vector>

#include "optree_core/exceptions.h"
#include "optree_core/treespec.h"

namespace optree_core {
namespace detail {

namespace {

// Python fallback for keys that do not compare (mixed types). Leaked on purpose: a static
// nb::object would be released after the interpreter has shut down.
PyObject* g_total_order_sorted = nullptr;

// Tuple subclasses are classified once per type: hasattr() on every flatten is what makes
// namedtuple-heavy trees slow elsewhere. The cache holds a reference to each type it keys on,
// so an address is never reused while cached; it stops growing past a bound.
constexpr size_t kMaxCachedTupleTypes = 4096;
absl::flat_hash_map<PyTypeObject*, PyTreeKind>& TupleSubclassCache() {
  static auto* cache = new absl::flat_hash_map<PyTypeObject*, PyTreeKind>();
  return *cache;
}

PyTreeKind ClassifyTupleSubclass(PyTypeObject* type) {
  auto& cache = TupleSubclassCache();
  auto it = cache.find(type);
  if (it != cache.end()) return it->second;
  PyTreeKind kind = PyTreeKind::kLeaf;
  if (IsNamedTupleClass(type)) {
    kind = PyTreeKind::kNamedTuple;
  } else if (IsStructSequenceClass(type)) {
    kind = PyTreeKind::kStructSequence;
  }
  if (cache.size() < kMaxCachedTupleTypes) {
    Py_INCREF(type);
    cache.emplace(type, kind);
  }
  return kind;
}

bool IsSortedList(PyObject* keys) {
  Py_ssize_t n = PyList_GET_SIZE(keys);
  for (Py_ssize_t i = 1; i < n; ++i) {
    int lt = PyObject_RichCompareBool(PyList_GET_ITEM(keys, i), PyList_GET_ITEM(keys, i - 1),
                                      Py_LT);
    if (lt < 0) {
      PyErr_Clear();  // Incomparable keys: let the sort (and its fallback) decide.
      return false;
    }
    if (lt) return false;
  }
  return true;
}

}  // namespace

bool KeyLess(PyObject* a, PyObject* b, bool* failed) {
  if (PyUnicode_CheckExact(a) && PyUnicode_CheckExact(b)) {
    return PyUnicode_Compare(a, b) < 0;  // No Python code runs, and it cannot fail.
  }
  int lt = PyObject_RichCompareBool(a, b, Py_LT);
  if (lt < 0) {
    *failed = true;
    return false;
  }
  return lt != 0;
}

namespace {

// A one-byte-per-character str key (ASCII or Latin-1: nearly every dict key met in practice),
// with its first 8 bytes packed big-endian so that most comparisons are one integer compare.
struct ByteKey {
  std::uint64_t prefix;
  const unsigned char* data;
  Py_ssize_t size;
  Py_ssize_t index;
};

bool ByteKeyLess(const ByteKey& a, const ByteKey& b) {
  if (a.prefix != b.prefix) return a.prefix < b.prefix;
  // Bytes compare in code-point order for one-byte kinds; a proper prefix sorts first.
  const int c = std::memcmp(a.data, b.data, static_cast<size_t>(std::min(a.size, b.size)));
  return c != 0 ? c < 0 : a.size < b.size;
}

// Sorts distinct exact-str keys of one-byte kind without calling into Python; false (nothing
// touched) when some key is of another type or kind. Profiling cold-tree flattening showed
// PyUnicode_Compare and its memcmp as a quarter of the time.
bool SortByteKeys(const nb::object* keys, Py_ssize_t* order, Py_ssize_t n) {
  absl::InlinedVector<ByteKey, 16> byte_keys(static_cast<size_t>(n));
  for (Py_ssize_t i = 0; i < n; ++i) {
    PyObject* key = keys[i].ptr();
    if (!PyUnicode_CheckExact(key) || PyUnicode_KIND(key) != PyUnicode_1BYTE_KIND) return false;
    ByteKey& k = byte_keys[i];
    k.data = static_cast<const unsigned char*>(PyUnicode_DATA(key));
    k.size = PyUnicode_GET_LENGTH(key);
    k.index = i;
    k.prefix = 0;
    for (Py_ssize_t b = 0; b < std::min<Py_ssize_t>(k.size, 8); ++b) {
      k.prefix |= static_cast<std::uint64_t>(k.data[b]) << (56 - 8 * b);
    }
  }
  // Dict keys are distinct, so this order is strict and total: std::sort is safe.
  std::sort(byte_keys.begin(), byte_keys.end(), ByteKeyLess);
  for (Py_ssize_t i = 0; i < n; ++i) order[i] = byte_keys[i].index;
  return true;
}

}  // namespace

bool SortKeyOrder(const nb::object* keys, Py_ssize_t* order, Py_ssize_t n) {
  if (n > 1 && SortByteKeys(keys, order, n)) return true;
  bool failed = false;
  auto less = [&](Py_ssize_t x, Py_ssize_t y) {
    return !failed && KeyLess(keys[x].ptr(), keys[y].ptr(), &failed);
  };
  if (n <= 32) {
    // Insertion sort: the common small dicts, and safe with any comparator.
    for (Py_ssize_t i = 1; i < n; ++i) {
      Py_ssize_t value = order[i];
      Py_ssize_t j = i;
      for (; j > 0 && less(value, order[j - 1]); --j) order[j] = order[j - 1];
      order[j] = value;
    }
  } else {
    // Merge sort stays in bounds even if a user __lt__ is inconsistent.
    std::stable_sort(order, order + n, less);
  }
  return !failed;
}

void SetPythonHelpers(nb::handle total_order_sorted) {
  Py_XDECREF(g_total_order_sorted);
  g_total_order_sorted = total_order_sorted.inc_ref().ptr();
}

nb::list SortedKeys(PyObject* dict) {
  nb::list keys = nb::steal<nb::list>(PyDict_Keys(dict));
  if (!keys.is_valid()) throw nb::python_error();
  if (IsSortedList(keys.ptr())) return keys;
  if (PyList_Sort(keys.ptr()) == 0) return keys;
  if (!PyErr_ExceptionMatches(PyExc_TypeError) || g_total_order_sorted == nullptr) {
    throw nb::python_error();
  }
  PyErr_Clear();
  nb::list fresh = nb::steal<nb::list>(PyDict_Keys(dict));
  return nb::list(nb::handle(g_total_order_sorted)(fresh));
}

nb::handle KindType(PyTreeKind kind) {
  switch (kind) {
    case PyTreeKind::kNone: return reinterpret_cast<PyObject*>(Py_TYPE(Py_None));
    case PyTreeKind::kTuple: return reinterpret_cast<PyObject*>(&PyTuple_Type);
    case PyTreeKind::kList: return reinterpret_cast<PyObject*>(&PyList_Type);
    case PyTreeKind::kDict: return reinterpret_cast<PyObject*>(&PyDict_Type);
    case PyTreeKind::kOrderedDict:
      return reinterpret_cast<PyObject*>(CollectionTypes::Get().ordered_dict);
    case PyTreeKind::kDefaultDict:
      return reinterpret_cast<PyObject*>(CollectionTypes::Get().default_dict);
    case PyTreeKind::kDeque: return reinterpret_cast<PyObject*>(CollectionTypes::Get().deque);
    default: return nb::none();
  }
}

PyTreeKind GetKind(nb::handle handle, const PyTreeTypeRegistration** custom, bool none_is_leaf,
                   const std::string& ns) {
  PyObject* obj = handle.ptr();
  PyTypeObject* type = Py_TYPE(obj);
  if (type == &PyTuple_Type) return PyTreeKind::kTuple;
  if (type == &PyList_Type) return PyTreeKind::kList;
  if (type == &PyDict_Type) return PyTreeKind::kDict;
  if (obj == Py_None) return none_is_leaf ? PyTreeKind::kLeaf : PyTreeKind::kNone;
  const PyTreeTypeRegistration* reg = PyTreeTypeRegistry::Instance().Lookup(type, ns);
  if (reg != nullptr) {
    *custom = reg;
    return reg->kind;
  }
  if (PyTuple_Check(obj)) return ClassifyTupleSubclass(type);
  return PyTreeKind::kLeaf;
}

bool CallIsLeaf(nb::handle is_leaf, nb::handle obj) {
  PyObject* result = PyObject_CallOneArg(is_leaf.ptr(), obj.ptr());
  if (result == nullptr) throw nb::python_error();
  int truth = PyObject_IsTrue(result);
  Py_DECREF(result);
  if (truth < 0) throw nb::python_error();
  return truth != 0;
}

CustomFlattened CallCustomFlatten(const PyTreeTypeRegistration& reg, nb::handle obj) {
  nb::object result = reg.flatten_func(obj);
  const std::string who = "PyTree custom flatten function for type " + SafeRepr(reg.type);
  if (!PyTuple_Check(result.ptr())) {
    RaisePython(PyExc_TypeError, who + " should return a 2- or 3-tuple (children, metadata[, "
                                       "entries]), got " + SafeRepr(result) + ".");
  }
  if (PyTuple_GET_SIZE(result.ptr()) != 2 && PyTuple_GET_SIZE(result.ptr()) != 3) {
    // A tuple of the wrong length: RuntimeError, the type optree raises for it.
    RaisePython(PyExc_RuntimeError, who + " should return a 2- or 3-tuple (children, metadata[, "
                                          "entries]), got " + std::to_string(PyTuple_GET_SIZE(result.ptr())) +
                                        " items: " + SafeRepr(result) + ".");
  }
  CustomFlattened out;
  PyObject* children = PySequence_Tuple(PyTuple_GET_ITEM(result.ptr(), 0));
  if (children == nullptr) {
    PyErr_Clear();
    RaisePython(PyExc_TypeError, who + " returned children that are not iterable: " +
                                     SafeRepr(PyTuple_GET_ITEM(result.ptr(), 0)) + ".");
  }
  out.children = nb::steal<nb::tuple>(children);
  out.metadata = nb::borrow(PyTuple_GET_ITEM(result.ptr(), 1));
  out.entries = nb::none();
  if (PyTuple_GET_SIZE(result.ptr()) == 3 && PyTuple_GET_ITEM(result.ptr(), 2) != Py_None) {
    PyObject* entries = PySequence_Tuple(PyTuple_GET_ITEM(result.ptr(), 2));
    if (entries == nullptr) {
      PyErr_Clear();
      RaisePython(PyExc_TypeError, who + " returned entries that are not iterable: " +
                                       SafeRepr(PyTuple_GET_ITEM(result.ptr(), 2)) + ".");
    }
    out.entries = nb::steal(entries);
    if (PyTuple_GET_SIZE(entries) != PyTuple_GET_SIZE(children)) {
      // RuntimeError, the type optree raises for a flatten function that breaks its contract.
      RaisePython(PyExc_RuntimeError,
                  who + " returned inconsistent number of children (" +
                      std::to_string(PyTuple_GET_SIZE(children)) + ") and number of entries (" +
                      std::to_string(PyTuple_GET_SIZE(entries)) + ").");
    }
  }
  return out;
}

}  // namespace detail

namespace {

using detail::GetKind;

[[noreturn]] void RaiseMutated(const char* what, nb::handle obj) {
  RaisePython(PyExc_RuntimeError, std::string(what) + " changed size during flattening (was it "
                                  "mutated by a custom flatten function or is_leaf?): " +
                                      SafeRepr(obj) + ".");
}

template <bool kWithPath>
class Flattener {
 public:
  Flattener(nb::handle is_leaf, bool none_is_leaf, const std::string& ns, bool one_level = false)
      : is_leaf_(is_leaf.is_valid() && !is_leaf.is_none() ? is_leaf.ptr() : nullptr),
        none_is_leaf_(none_is_leaf),
        one_level_(one_level),
        ns_(ns),
        dict_insertion_ordered_(PyTreeTypeRegistry::Instance().IsDictInsertionOrdered(ns)),
        namespace_orders_dicts_(
            !ns.empty() && PyTreeTypeRegistry::Instance().IsDictInsertionOrdered(ns, false)) {}

  void Run(nb::handle tree) {
    // Size the traversal like the previous tree: repeated flattens of one structure then
    // allocate once instead of growing step by step.
    static thread_local size_t last_size = 0;
    traversal.reserve(last_size);
    Recurse(tree.ptr(), 0);
    last_size = traversal.size();
    if (traversal.capacity() > 2 * traversal.size() + 16) traversal.shrink_to_fit();
  }

  nb::list leaves;
  nb::list paths;
  NodeTraversal traversal;

 private:
  void Child(PyObject* child, Py_ssize_t depth, PyObject* entry_or_null, Py_ssize_t index) {
    if constexpr (kWithPath) {
      path_.push_back(entry_or_null ? nb::borrow(entry_or_null)
                                    : nb::steal(PyLong_FromSsize_t(index)));
    }
    Recurse(child, depth + 1);
    if constexpr (kWithPath) path_.pop_back();
  }

  void AddLeaf(PyObject* obj) {
    if (PyList_Append(leaves.ptr(), obj) < 0) throw nb::python_error();
    if constexpr (kWithPath) {
      nb::object path = detail::TupleOf(path_);
      if (PyList_Append(paths.ptr(), path.ptr()) < 0) throw nb::python_error();
    }
  }

  // Children of a dict-like object in the order of `keys` (a list).
  void DictChildren(PyObject* dict, PyObject* keys, Py_ssize_t depth) {
    const Py_ssize_t n = PyList_GET_SIZE(keys);
    for (Py_ssize_t i = 0; i < n; ++i) {
      PyObject* key = PyList_GET_ITEM(keys, i);
      PyObject* value = PyDict_GetItemWithError(dict, key);
      if (value == nullptr) {
        if (PyErr_Occurred()) throw nb::python_error();
        RaiseMutated("dictionary", dict);
      }
      nb::object hold = nb::borrow(value);
      Child(value, depth, key, i);
    }
    if (PyDict_GET_SIZE(dict) != n) RaiseMutated("dictionary", dict);
  }

  // A dict or defaultdict: children in sorted-key order (or insertion order), read in one
  // PyDict_Next pass with no hash lookups. Sorting permutes indices, so the insertion order
  // is known for free.
  void SortedDictChildren(PyObject* dict, Node& node, Py_ssize_t depth) {
    const Py_ssize_t n = PyDict_GET_SIZE(dict);
    absl::InlinedVector<nb::object, 16> keys;
    absl::InlinedVector<nb::object, 16> values;
    keys.reserve(n);
    values.reserve(n);
    Py_ssize_t pos = 0;
    PyObject* key;
    PyObject* value;
    while (PyDict_Next(dict, &pos, &key, &value)) {
      keys.push_back(nb::borrow(key));
      values.push_back(nb::borrow(value));
    }
    absl::InlinedVector<Py_ssize_t, 16> order(keys.size());
    std::iota(order.begin(), order.end(), 0);
    if (!dict_insertion_ordered_ && !detail::SortKeyOrder(keys.data(), order.data(), n)) {
      if (!PyErr_ExceptionMatches(PyExc_TypeError)) throw nb::python_error();
      PyErr_Clear();
      FallbackOrder(dict, keys, order);
    }
    PyObject* key_list = PyList_New(n);
    if (key_list == nullptr) throw nb::python_error();
    node.node_data = nb::steal(key_list);
    bool identity = true;
    for (Py_ssize_t i = 0; i < n; ++i) {
      PyList_SET_ITEM(key_list, i, keys[order[i]].inc_ref().ptr());
      identity = identity && order[i] == i;
    }
    if (!identity) {
      node.insertion_order.resize(static_cast<size_t>(n));
      for (Py_ssize_t i = 0; i < n; ++i) node.insertion_order[order[i]] = i;
    }
    node.arity = n;
    for (Py_ssize_t i = 0; i < n; ++i) {
      Child(values[order[i]].ptr(), depth, PyList_GET_ITEM(key_list, i), i);
    }
    if (PyDict_GET_SIZE(dict) != n) RaiseMutated("dictionary", dict);
  }

  // Keys that do not compare with each other: the Python total order decides.
  void FallbackOrder(PyObject* dict, const absl::InlinedVector<nb::object, 16>& keys,
                     absl::InlinedVector<Py_ssize_t, 16>& order) {
    nb::list sorted = detail::SortedKeys(dict);
    nb::dict position;
    for (size_t i = 0; i < keys.size(); ++i) position[keys[i]] = nb::int_(i);
    for (size_t i = 0; i < keys.size(); ++i) {
      order[i] = nb::cast<Py_ssize_t>(position[sorted[i]]);
    }
  }

  void TupleChildren(PyObject* tuple, Py_ssize_t n, Py_ssize_t depth) {
    for (Py_ssize_t i = 0; i < n; ++i) Child(PyTuple_GET_ITEM(tuple, i), depth, nullptr, i);
  }

  void Recurse(PyObject* obj, Py_ssize_t depth) {
    if (depth > kMaxRecursionDepth) {
      RaisePython(PyExc_RecursionError,
                  "Maximum recursion depth exceeded during flattening the tree (is it cyclic?).");
    }
    const Py_ssize_t leaves_before = PyList_GET_SIZE(leaves.ptr());
    const Py_ssize_t nodes_before = static_cast<Py_ssize_t>(traversal.size());
    Node node;
    const PyTreeTypeRegistration* reg = nullptr;
    if ((one_level_ && depth > 0) || (is_leaf_ != nullptr && detail::CallIsLeaf(is_leaf_, obj))) {
      node.kind = PyTreeKind::kLeaf;
    } else if (Py_TYPE(obj) == last_leaf_type_ && registry_.version() == last_leaf_version_) {
      node.kind = PyTreeKind::kLeaf;  // Same type as the last leaf: skip the registry lookup.
    } else {
      node.kind = GetKind(obj, &reg, none_is_leaf_, ns_);
      if (node.kind == PyTreeKind::kLeaf) {
        last_leaf_type_ = Py_TYPE(obj);
        last_leaf_version_ = registry_.version();
      }
    }
    switch (node.kind) {
      case PyTreeKind::kLeaf:
        AddLeaf(obj);
        break;
      case PyTreeKind::kNone:
        break;
      case PyTreeKind::kTuple:
        node.arity = PyTuple_GET_SIZE(obj);
        TupleChildren(obj, node.arity, depth);
        break;
      case PyTreeKind::kList: {
        node.arity = PyList_GET_SIZE(obj);
        for (Py_ssize_t i = 0; i < node.arity; ++i) {
          if (i >= PyList_GET_SIZE(obj)) {  // Shrunk by is_leaf or a flatten function.
            RaisePython(PyExc_IndexError, "list index out of range: the list shrank while it "
                                          "was being flattened: " + SafeRepr(obj) + ".");
          }
          nb::object child = nb::borrow(PyList_GET_ITEM(obj, i));
          Child(child.ptr(), depth, nullptr, i);
        }
        if (PyList_GET_SIZE(obj) != node.arity) RaiseMutated("list", obj);
        break;
      }
      case PyTreeKind::kDict:
        SortedDictChildren(obj, node, depth);
        used_namespace_ = used_namespace_ || namespace_orders_dicts_;
        break;
      case PyTreeKind::kDefaultDict: {
        SortedDictChildren(obj, node, depth);
        used_namespace_ = used_namespace_ || namespace_orders_dicts_;
        nb::object factory = nb::borrow(obj).attr("default_factory");
        node.node_data = nb::make_tuple(factory, node.node_data);
        break;
      }
      case PyTreeKind::kOrderedDict: {
        nb::list keys = nb::steal<nb::list>(PyMapping_Keys(obj));
        if (!keys.is_valid()) throw nb::python_error();
        node.arity = PyList_GET_SIZE(keys.ptr());
        DictChildren(obj, keys.ptr(), depth);
        node.node_data = std::move(keys);
        break;
      }
      case PyTreeKind::kNamedTuple:
        node.arity = PyTuple_GET_SIZE(obj);
        TupleChildren(obj, node.arity, depth);
        node.node_data = nb::borrow(reinterpret_cast<PyObject*>(Py_TYPE(obj)));
        break;
      case PyTreeKind::kStructSequence: {
        nb::object type = nb::borrow(reinterpret_cast<PyObject*>(Py_TYPE(obj)));
        node.arity = nb::cast<Py_ssize_t>(type.attr("n_sequence_fields"));
        if (node.arity > PyTuple_GET_SIZE(obj)) node.arity = PyTuple_GET_SIZE(obj);
        TupleChildren(obj, node.arity, depth);
        node.node_data = std::move(type);
        break;
      }
      case PyTreeKind::kDeque: {
        nb::object items = nb::steal(PySequence_Tuple(obj));
        if (!items.is_valid()) throw nb::python_error();
        node.arity = PyTuple_GET_SIZE(items.ptr());
        TupleChildren(items.ptr(), node.arity, depth);
        node.node_data = nb::borrow(obj).attr("maxlen");
        break;
      }
      case PyTreeKind::kCustom: {
        // Hold the registration: the flatten function may unregister its own type.
        node.custom = reg->shared_from_this();
        used_namespace_ = true;
        detail::CustomFlattened flat = detail::CallCustomFlatten(*node.custom, obj);
        node.arity = PyTuple_GET_SIZE(flat.children.ptr());
        const bool has_entries = !flat.entries.is_none();
        for (Py_ssize_t i = 0; i < node.arity; ++i) {
          Child(PyTuple_GET_ITEM(flat.children.ptr(), i), depth,
                has_entries ? PyTuple_GET_ITEM(flat.entries.ptr(), i) : nullptr, i);
        }
        node.node_data = std::move(flat.metadata);
        node.node_entries = std::move(flat.entries);
        break;
      }
      case PyTreeKind::kFrozenDict:
        RaisePython(PyExc_TypeError, "frozendict nodes are not supported.");
    }
    node.num_leaves = PyList_GET_SIZE(leaves.ptr()) - leaves_before;
    node.num_nodes = static_cast<Py_ssize_t>(traversal.size()) - nodes_before + 1;
    traversal.push_back(std::move(node));
  }

  PyObject* is_leaf_;
  bool none_is_leaf_;
  bool one_level_;  // Everything below the root is a leaf.
  const PyTreeTypeRegistry& registry_ = PyTreeTypeRegistry::Instance();
  PyTypeObject* last_leaf_type_ = nullptr;  // Leaf kind depends only on the type (and registry).
  std::uint64_t last_leaf_version_ = 0;

 public:
  // Whether a custom node was met: the spec records the namespace only then, as optree does
  // (the namespace decides how its custom nodes flatten; other nodes flatten the same anywhere).
  bool used_namespace_ = false;

 private:
  const std::string& ns_;
  bool dict_insertion_ordered_;
  // The namespace itself (not the global setting) keeps dicts in insertion order: a spec with a
  // dict then depends on the namespace and records it, as optree does.
  bool namespace_orders_dicts_;
  std::vector<nb::object> path_;
};

}  // namespace

std::pair<nb::list, PyTreeSpec> PyTreeSpec::Flatten(nb::handle tree, nb::handle is_leaf,
                                                    bool none_is_leaf, const std::string& ns) {
  Flattener<false> f(is_leaf, none_is_leaf, ns);
  f.Run(tree);
  return {std::move(f.leaves),
          PyTreeSpec(std::move(f.traversal), none_is_leaf, f.used_namespace_ ? ns : "")};
}

std::tuple<nb::list, nb::list, PyTreeSpec> PyTreeSpec::FlattenWithPath(nb::handle tree,
                                                                       nb::handle is_leaf,
                                                                       bool none_is_leaf,
                                                                       const std::string& ns) {
  Flattener<true> f(is_leaf, none_is_leaf, ns);
  f.Run(tree);
  return {std::move(f.paths), std::move(f.leaves),
          PyTreeSpec(std::move(f.traversal), none_is_leaf, f.used_namespace_ ? ns : "")};
}

bool PyTreeSpec::IsLeafObject(nb::handle obj, nb::handle is_leaf, bool none_is_leaf,
                              const std::string& ns) {
  if (is_leaf.is_valid() && !is_leaf.is_none() && detail::CallIsLeaf(is_leaf, obj)) return true;
  const PyTreeTypeRegistration* reg = nullptr;
  return GetKind(obj, &reg, none_is_leaf, ns) == PyTreeKind::kLeaf;
}

std::pair<nb::list, PyTreeSpec> PyTreeSpec::FlattenOneLevelSpec(nb::handle tree,
                                                                nb::handle is_leaf,
                                                                bool none_is_leaf,
                                                                const std::string& ns) {
  Flattener<false> f(is_leaf, none_is_leaf, ns, /*one_level=*/true);
  f.Run(tree);
  return {std::move(f.leaves),
          PyTreeSpec(std::move(f.traversal), none_is_leaf, f.used_namespace_ ? ns : "")};
}

nb::tuple PyTreeSpec::FlattenOneLevel(nb::handle tree, nb::handle is_leaf, bool none_is_leaf,
                                      const std::string& ns) {
  auto [leaves, spec] = FlattenOneLevelSpec(tree, is_leaf, none_is_leaf, ns);
  const Node& node = spec.root();
  if (node.kind == PyTreeKind::kLeaf) {
    RaisePython(PyExc_ValueError, "Cannot flatten leaf-type: " +
                                      SafeRepr(nb::borrow(reinterpret_cast<PyObject*>(
                                          Py_TYPE(tree.ptr())))) +
                                      " (node: " + SafeRepr(tree) + ").");
  }
  nb::object metadata = node.node_data.is_valid() ? node.node_data : nb::none();
  return nb::make_tuple(leaves, metadata, detail::NodeEntries(node), node.kind, spec.type());
}

}  // namespace optree_core
