// flatten_up_to: cut a (larger) tree at the leaves of this spec, checking structure on the way.
#include <string>
#include <utility>
#include <vector>

#include "optree_core/exceptions.h"
#include "optree_core/treespec.h"

namespace optree_core {

namespace {

class UpToFlattener {
 public:
  UpToFlattener(const PyTreeSpec& spec) : spec_(spec) {}

  nb::list Run(nb::handle tree) {
    Recurse(spec_.num_nodes() - 1, tree.ptr());
    return std::move(out_);
  }

 private:
  // Raises ValueError naming the path (from the root to the failing node) and what differs.
  [[noreturn]] void Fail(const std::string& what) {
    nb::list path;
    for (const auto& [parent, position] : stack_) {
      nb::tuple entries = detail::NodeEntries(spec_.traversal()[parent]);
      path.append(entries[position]);
    }
    std::string where =
        stack_.empty() ? "at the root of the tree" : "at path " + SafeRepr(nb::tuple(path));
    RaisePython(PyExc_ValueError, what + "; " + where + ".");
  }

  void CheckArity(const Node& node, Py_ssize_t got, const char* name, PyObject* obj) {
    if (got != node.arity) {
      Fail(std::string(name) + " arity mismatch; expected: " + std::to_string(node.arity) +
           ", got: " + std::to_string(got) + "; " + name + ": " + SafeRepr(obj));
    }
  }

  void ExpectType(PyObject* obj, nb::handle type, bool exact) {
    PyTypeObject* t = reinterpret_cast<PyTypeObject*>(type.ptr());
    bool ok = exact ? Py_TYPE(obj) == t : PyObject_TypeCheck(obj, t);
    if (!ok) {
      Fail("Expected an instance of " + SafeRepr(type) + ", got an instance of " +
           SafeRepr(nb::borrow(reinterpret_cast<PyObject*>(Py_TYPE(obj)))) + ": " +
           SafeRepr(obj));
    }
  }

  void Children(Py_ssize_t index, PyObject* const* items, Py_ssize_t n) {
    auto children = spec_.ChildIndices(index);
    for (Py_ssize_t i = 0; i < n; ++i) {
      stack_.emplace_back(index, i);
      nb::object hold = nb::borrow(items[i]);
      Recurse(children[i], items[i]);
      stack_.pop_back();
    }
  }

  void DictChildren(Py_ssize_t index, PyObject* obj, PyObject* keys) {
    const Node& node = spec_.traversal()[index];
    const Py_ssize_t n = PyList_GET_SIZE(keys);
    bool same = PyDict_GET_SIZE(obj) == n;
    // Strong references: a custom flatten function below may mutate this dict.
    std::vector<nb::object> values(static_cast<size_t>(n));
    for (Py_ssize_t i = 0; same && i < n; ++i) {
      PyObject* value = PyDict_GetItemWithError(obj, PyList_GET_ITEM(keys, i));
      if (value == nullptr) {
        if (PyErr_Occurred()) throw nb::python_error();
        same = false;
      } else {
        values[i] = nb::borrow(value);
      }
    }
    if (!same) {
      nb::list expected = nb::borrow<nb::list>(keys);
      nb::object got = nb::steal(PyMapping_Keys(obj));
      nb::list missing, extra;
      for (nb::handle k : expected) {
        if (!PySequence_Contains(got.ptr(), k.ptr())) missing.append(k);
      }
      for (nb::handle k : got) {
        if (!PySequence_Contains(expected.ptr(), k.ptr())) extra.append(k);
      }
      Fail("dictionary key mismatch; expected key(s): " + SafeRepr(expected) + ", got key(s): " +
           SafeRepr(got) + ", missing key(s): " + SafeRepr(missing) +
           ", extra key(s): " + SafeRepr(extra) + "; dict: " + SafeRepr(obj));
    }
    (void)node;
    Children(index, reinterpret_cast<PyObject* const*>(values.data()), n);
  }

  void Recurse(Py_ssize_t index, PyObject* obj) {
    CheckWalkDepth(stack_.size());
    const Node& node = spec_.traversal()[index];
    switch (node.kind) {
      case PyTreeKind::kLeaf:
        if (PyList_Append(out_.ptr(), obj) < 0) throw nb::python_error();
        return;
      case PyTreeKind::kNone:
        if (obj != Py_None) Fail("Expected None, got " + SafeRepr(obj));
        return;
      case PyTreeKind::kTuple:
        ExpectType(obj, detail::KindType(node.kind), true);
        CheckArity(node, PyTuple_GET_SIZE(obj), "tuple", obj);
        Children(index, &PyTuple_GET_ITEM(obj, 0), node.arity);
        return;
      case PyTreeKind::kList: {
        ExpectType(obj, detail::KindType(node.kind), true);
        CheckArity(node, PyList_GET_SIZE(obj), "list", obj);
        nb::tuple items = nb::steal<nb::tuple>(PySequence_Tuple(obj));
        Children(index, &PyTuple_GET_ITEM(items.ptr(), 0), node.arity);
        return;
      }
      case PyTreeKind::kDict:
      case PyTreeKind::kOrderedDict:
      case PyTreeKind::kDefaultDict: {
        // Any of the three dict kinds may stand where the spec has one: keys are what matter.
        if (!PyDict_Check(obj)) {
          Fail("Expected an instance of dict, collections.OrderedDict, or collections.defaultdict, "
               "got " + SafeRepr(obj));
        }
        PyObject* keys = node.kind == PyTreeKind::kDefaultDict
                             ? PyTuple_GET_ITEM(node.node_data.ptr(), 1)
                             : node.node_data.ptr();
        DictChildren(index, obj, keys);
        return;
      }
      case PyTreeKind::kNamedTuple:
      case PyTreeKind::kStructSequence:
        ExpectType(obj, node.node_data, true);
        // Same exact type means the same number of (sequence) fields.
        Children(index, &PyTuple_GET_ITEM(obj, 0), node.arity);
        return;
      case PyTreeKind::kDeque: {
        ExpectType(obj, detail::KindType(node.kind), true);
        nb::tuple items = nb::steal<nb::tuple>(PySequence_Tuple(obj));
        if (!items.is_valid()) throw nb::python_error();
        CheckArity(node, PyTuple_GET_SIZE(items.ptr()), "deque", obj);
        Children(index, &PyTuple_GET_ITEM(items.ptr(), 0), node.arity);
        return;
      }
      case PyTreeKind::kCustom: {
        ExpectType(obj, node.custom->type, true);
        detail::CustomFlattened flat = detail::CallCustomFlatten(*node.custom, obj);
        int eq = PyObject_RichCompareBool(flat.metadata.ptr(), node.node_data.ptr(), Py_EQ);
        if (eq < 0) throw nb::python_error();
        if (!eq) {
          Fail("Mismatch custom node data; expected: " + SafeRepr(node.node_data) +
               ", got: " + SafeRepr(flat.metadata));
        }
        CheckArity(node, PyTuple_GET_SIZE(flat.children.ptr()), "custom node", obj);
        Children(index, &PyTuple_GET_ITEM(flat.children.ptr(), 0), node.arity);
        return;
      }
      case PyTreeKind::kFrozenDict:
        break;
    }
    RaisePython(PyExc_TypeError, "Unsupported node kind.");
  }

  const PyTreeSpec& spec_;
  nb::list out_;
  std::vector<std::pair<Py_ssize_t, Py_ssize_t>> stack_;  // (parent index, child position)
};

}  // namespace

nb::list PyTreeSpec::FlattenUpTo(nb::handle tree) const {
  UpToFlattener f(*this);
  return f.Run(tree);
}

}  // namespace optree_core
