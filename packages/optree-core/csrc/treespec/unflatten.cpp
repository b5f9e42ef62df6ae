// Unflattening: rebuild the Python objects bottom-up from the post-order traversal.
#include <absl/container/inlined_vector.h>

#include <algorithm>
#include <memory>
#include <string>
#include <vector>

#include "optree_core/exceptions.h"
#include "optree_core/treespec.h"

namespace optree_core {

namespace {

// Fills a new mapping `result` (owned) in insertion order: `order[j]` is the child index of
// the j-th inserted key, or the identity when `order` is empty.
nb::object BuildDictLike(PyObject* result, PyObject* keys, const std::vector<Py_ssize_t>& order,
                         nb::handle* children) {
  nb::object owner = nb::steal(result);
  // Plain dicts and defaultdicts take the fast path; OrderedDict must go through its own
  // __setitem__ to keep its linked order.
  static PyTypeObject* const default_dict = CollectionTypes::Get().default_dict;
  const bool plain = PyDict_CheckExact(result) || Py_TYPE(result) == default_dict;
  const Py_ssize_t n = PyList_GET_SIZE(keys);
  for (Py_ssize_t j = 0; j < n; ++j) {
    const Py_ssize_t i = order.empty() ? j : order[j];
    PyObject* key = PyList_GET_ITEM(keys, i);
    int rc = plain ? PyDict_SetItem(result, key, children[i].ptr())
                   : PyObject_SetItem(result, key, children[i].ptr());
    if (rc < 0) throw nb::python_error();
  }
  return owner;
}

nb::tuple TupleOf(nb::handle* children, Py_ssize_t count) {
  PyObject* tuple = PyTuple_New(count);
  if (tuple == nullptr) throw nb::python_error();
  for (Py_ssize_t i = 0; i < count; ++i) PyTuple_SET_ITEM(tuple, i, children[i].inc_ref().ptr());
  return nb::steal<nb::tuple>(tuple);
}

// Names the first leaf that got no value, so a short list is easy to place.
[[noreturn]] void RaiseTooFew(const PyTreeSpec& spec, Py_ssize_t got) {
  nb::list paths = spec.Paths();
  RaisePython(PyExc_ValueError, "Too few leaves for PyTreeSpec; expected: " +
                                    std::to_string(spec.num_leaves()) + ", got: " +
                                    std::to_string(got) + "; the leaf at path " +
                                    SafeRepr(paths[got]) + " has no value.");
}

}  // namespace

nb::object PyTreeSpec::MakeNode(const Node& node, nb::handle* children, Py_ssize_t count) const {
  if (count != node.arity) {
    RaisePython(PyExc_ValueError, "Expected " + std::to_string(node.arity) + " children for a " +
                                      KindName(node.kind) + " node, got " +
                                      std::to_string(count) + ".");
  }
  switch (node.kind) {
    case PyTreeKind::kLeaf:
      RaisePython(PyExc_RuntimeError, "MakeNode called on a leaf.");
    case PyTreeKind::kNone:
      return nb::none();
    case PyTreeKind::kTuple:
      return TupleOf(children, count);
    case PyTreeKind::kList: {
      PyObject* list = PyList_New(count);
      if (list == nullptr) throw nb::python_error();
      for (Py_ssize_t i = 0; i < count; ++i) PyList_SET_ITEM(list, i, children[i].inc_ref().ptr());
      return nb::steal(list);
    }
    case PyTreeKind::kDict: {
      PyObject* dict = PyDict_New();
      if (dict == nullptr) throw nb::python_error();
      return BuildDictLike(dict, node.node_data.ptr(), node.insertion_order, children);
    }
    case PyTreeKind::kOrderedDict: {
      nb::object od = detail::KindType(PyTreeKind::kOrderedDict)();
      return BuildDictLike(od.release().ptr(), node.node_data.ptr(), {}, children);
    }
    case PyTreeKind::kDefaultDict: {
      nb::handle factory = PyTuple_GET_ITEM(node.node_data.ptr(), 0);
      nb::handle keys = PyTuple_GET_ITEM(node.node_data.ptr(), 1);
      nb::object dd = detail::KindType(PyTreeKind::kDefaultDict)(factory);
      return BuildDictLike(dd.release().ptr(), keys.ptr(), node.insertion_order, children);
    }
    case PyTreeKind::kNamedTuple: {
      nb::tuple args = TupleOf(children, count);
      PyObject* obj = PyObject_Call(node.node_data.ptr(), args.ptr(), nullptr);
      if (obj == nullptr) throw nb::python_error();
      return nb::steal(obj);
    }
    case PyTreeKind::kStructSequence:
      return node.node_data(TupleOf(children, count));
    case PyTreeKind::kDeque: {
      nb::list items = nb::steal<nb::list>(PyList_New(0));
      for (Py_ssize_t i = 0; i < count; ++i) items.append(children[i]);
      return detail::KindType(PyTreeKind::kDeque)(items, nb::arg("maxlen") = node.node_data);
    }
    case PyTreeKind::kCustom:
      return node.custom->unflatten_func(node.node_data, TupleOf(children, count));
    case PyTreeKind::kFrozenDict:
      break;
  }
  RaisePython(PyExc_TypeError, "Unsupported node kind.");
}

// One step of the plan: a run of consecutive leaves, a tuple or list built in place, or any other
// node, built by MakeNode.
struct UnflattenStep {
  PyTreeKind kind;
  // kLeaf: the leaves in the run; kTuple/kList: the arity; otherwise the node's traversal index.
  Py_ssize_t count;
};

// The traversal as Unflatten reads it. A Node is 88 bytes and a large tree's traversal outgrows
// the cache; reading kind and arity from it cost half of unflatten's own time on a 100,000-leaf
// tree (benchmarks/RESULTS.md). The plan is 16 bytes a step, a run of leaves being one step.
struct UnflattenPlan {
  std::vector<UnflattenStep> steps;
  size_t max_stack = 0;  // The agenda's peak size: reserved once, never grown while building.
};

const UnflattenPlan& PyTreeSpec::GetUnflattenPlan() const {
  if (unflatten_plan_) return *unflatten_plan_;
  auto plan = std::make_shared<UnflattenPlan>();
  size_t stack = 0;
  for (size_t i = 0; i < traversal_.size(); ++i) {
    const Node& node = traversal_[i];
    if (node.kind == PyTreeKind::kLeaf) {
      if (!plan->steps.empty() && plan->steps.back().kind == PyTreeKind::kLeaf) {
        ++plan->steps.back().count;
      } else {
        plan->steps.push_back({PyTreeKind::kLeaf, 1});
      }
      ++stack;
    } else {
      const bool in_place = node.kind == PyTreeKind::kTuple || node.kind == PyTreeKind::kList;
      plan->steps.push_back({node.kind, in_place ? node.arity : static_cast<Py_ssize_t>(i)});
      stack = stack - static_cast<size_t>(node.arity) + 1;
    }
    plan->max_stack = std::max(plan->max_stack, stack);
  }
  unflatten_plan_ = std::move(plan);
  return *unflatten_plan_;
}

namespace {

// The unflatten stack: owned references, released on every exit path. Its peak size is known
// from the plan, so it is allocated once and pushes never check for room.
class Agenda {
 public:
  explicit Agenda(size_t capacity) : items_(capacity) {}
  ~Agenda() {
    for (size_t i = 0; i < size_; ++i) Py_DECREF(items_[i]);
  }
  void Push(PyObject* owned) { items_[size_++] = owned; }
  // Pushes new references to items[0..n).
  void PushBorrowed(PyObject* const* items, Py_ssize_t n) {
    for (Py_ssize_t i = 0; i < n; ++i) {
      Py_INCREF(items[i]);
      items_[size_++] = items[i];
    }
  }
  size_t size() const { return size_; }
  PyObject** at(size_t i) { return items_.data() + i; }
  // Pops the references from `first` up, after their objects were consumed: stolen by the new
  // container (steal_done) or only borrowed (then released here).
  void Release(size_t first, bool steal_done) {
    if (!steal_done) {
      for (size_t i = first; i < size_; ++i) Py_DECREF(items_[i]);
    }
    size_ = first;
  }

 private:
  absl::InlinedVector<PyObject*, 64> items_;
  size_t size_ = 0;
};

constexpr size_t kPrefetchSteps = 8;

// A hint only: compilers without the GNU builtin build without it.
inline void PrefetchForRead(const char* address) {
#if defined(__GNUC__) || defined(__clang__)
  __builtin_prefetch(address);
#else
  (void)address;
#endif
}

bool BuiltByMakeNode(PyTreeKind kind) {
  return kind != PyTreeKind::kLeaf && kind != PyTreeKind::kTuple && kind != PyTreeKind::kList;
}

// `got` completes the message: ": 7" or " more" (an iterator is never drained to count it).
[[noreturn]] void RaiseTooMany(Py_ssize_t expected, const std::string& got) {
  RaisePython(PyExc_ValueError, "Too many leaves for PyTreeSpec; expected: " +
                                    std::to_string(expected) + ", got" + got + ".");
}

}  // namespace

nb::object PyTreeSpec::Unflatten(nb::handle leaves) const {
  if (traversal_.empty()) RaisePython(PyExc_ValueError, "Cannot unflatten an empty PyTreeSpec.");
  const Py_ssize_t expected = num_leaves();
  // Lists and tuples are indexed directly; anything else goes through the iterator protocol.
  PyObject* seq = leaves.ptr();
  const bool is_list = PyList_CheckExact(seq);
  const bool indexed = is_list || PyTuple_CheckExact(seq);
  nb::object iterator;
  if (indexed) {
    const Py_ssize_t got = PySequence_Fast_GET_SIZE(seq);
    if (got < expected) RaiseTooFew(*this, got);
    if (got > expected) RaiseTooMany(expected, ": " + std::to_string(got));
  } else {
    iterator = nb::steal(PyObject_GetIter(seq));
    if (!iterator.is_valid()) {
      // An __iter__ that raised says why itself; only a type with no iteration at all gets ours.
      if (Py_TYPE(seq)->tp_iter != nullptr) throw nb::python_error();
      PyErr_Clear();
      RaisePython(PyExc_TypeError, "Expected an iterable of leaves, got " + SafeRepr(leaves) + ".");
    }
  }
  const UnflattenPlan& plan = GetUnflattenPlan();
  Agenda agenda(plan.max_stack);
  Py_ssize_t leaf_count = 0;
  const size_t num_steps = plan.steps.size();
  for (size_t s = 0; s < num_steps; ++s) {
    const UnflattenStep& step = plan.steps[s];
    // The nodes MakeNode reads are scattered through the traversal, so the hardware no longer
    // streams them in as it did when every node was read in order: fetch them a few steps ahead.
    if (s + kPrefetchSteps < num_steps) {
      const UnflattenStep& ahead = plan.steps[s + kPrefetchSteps];
      if (BuiltByMakeNode(ahead.kind)) {
        const auto* node =
            reinterpret_cast<const char*>(&traversal_[static_cast<size_t>(ahead.count)]);
        PrefetchForRead(node);
        PrefetchForRead(node + sizeof(Node) - 1);
      }
    }
    switch (step.kind) {
      case PyTreeKind::kLeaf: {
        if (indexed) {
          // Building a node may run Python code (a custom unflatten function, a key's __eq__)
          // that resizes the list; its items are read afresh each run, and only while its size
          // is the one checked above.
          if (is_list && PyList_GET_SIZE(seq) != expected) {
            RaisePython(PyExc_RuntimeError,
                        "The list of leaves changed size during unflatten (from " +
                            std::to_string(expected) + " to " +
                            std::to_string(PyList_GET_SIZE(seq)) + ").");
          }
          agenda.PushBorrowed(PySequence_Fast_ITEMS(seq) + leaf_count, step.count);
          leaf_count += step.count;
          break;
        }
        for (Py_ssize_t i = 0; i < step.count; ++i, ++leaf_count) {
          PyObject* leaf = PyIter_Next(iterator.ptr());
          if (leaf == nullptr) {
            if (PyErr_Occurred()) throw nb::python_error();
            RaiseTooFew(*this, leaf_count);
          }
          agenda.Push(leaf);
        }
        break;
      }
      case PyTreeKind::kTuple:
      case PyTreeKind::kList: {
        // The new container steals the children's references straight off the agenda.
        const bool tuple = step.kind == PyTreeKind::kTuple;
        PyObject* out = tuple ? PyTuple_New(step.count) : PyList_New(step.count);
        if (out == nullptr) throw nb::python_error();
        const size_t first = agenda.size() - static_cast<size_t>(step.count);
        PyObject** children = agenda.at(first);
        for (Py_ssize_t i = 0; i < step.count; ++i) {
          if (tuple) {
            PyTuple_SET_ITEM(out, i, children[i]);
          } else {
            PyList_SET_ITEM(out, i, children[i]);
          }
        }
        agenda.Release(first, /*steal_done=*/true);
        agenda.Push(out);
        break;
      }
      default: {
        const Node& node = traversal_[static_cast<size_t>(step.count)];
        const size_t first = agenda.size() - static_cast<size_t>(node.arity);
        nb::object built =
            MakeNode(node, reinterpret_cast<nb::handle*>(agenda.at(first)), node.arity);
        agenda.Release(first, /*steal_done=*/false);
        agenda.Push(built.release().ptr());
        break;
      }
    }
  }
  if (!indexed) {
    // Never drain the iterator: it may be endless. One more item is enough to know.
    PyObject* extra = PyIter_Next(iterator.ptr());
    if (extra != nullptr) {
      Py_DECREF(extra);
      RaiseTooMany(expected, " more");
    }
    if (PyErr_Occurred()) throw nb::python_error();
  }
  PyObject* root = *agenda.at(agenda.size() - 1);
  Py_INCREF(root);
  return nb::steal(root);
}

}  // namespace optree_core
