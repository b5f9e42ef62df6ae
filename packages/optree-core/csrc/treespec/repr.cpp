// repr(): the tree drawn with `*` for leaves, e.g. PyTreeSpec({'a': (*, [*, None])}).
#include <nanobind/stl/string.h>

#include <string>

#include "optree_core/exceptions.h"
#include "optree_core/treespec.h"

namespace optree_core {

namespace {

std::string Join(const std::vector<std::string>& parts) {
  std::string out;
  for (size_t i = 0; i < parts.size(); ++i) {
    if (i) out += ", ";
    out += parts[i];
  }
  return out;
}

// The bare __name__, as optree prints it: a class made inside a function reads `MyDict`, not
// `test.<locals>.MyDict`.
std::string TypeName(nb::handle type, bool with_module) {
  std::string name = nb::cast<std::string>(nb::str(type.attr("__name__")));
  if (!with_module) return name;
  std::string module = nb::cast<std::string>(nb::str(type.attr("__module__")));
  return module == "builtins" ? name : module + "." + name;
}

std::string MappingBody(nb::handle keys, const std::vector<std::string>& children) {
  std::vector<std::string> items;
  Py_ssize_t i = 0;
  for (nb::handle key : keys) items.push_back(SafeRepr(key) + ": " + children[i++]);
  return "{" + Join(items) + "}";
}

std::string NodeRepr(const PyTreeSpec& spec, Py_ssize_t index, size_t depth = 0) {
  CheckWalkDepth(depth);
  const Node& node = spec.traversal()[index];
  if (node.kind == PyTreeKind::kLeaf) return "*";
  if (node.kind == PyTreeKind::kNone) return "None";
  std::vector<std::string> children;
  for (Py_ssize_t child : spec.ChildIndices(index)) {
    children.push_back(NodeRepr(spec, child, depth + 1));
  }
  switch (node.kind) {
    case PyTreeKind::kTuple:
      return "(" + Join(children) + (node.arity == 1 ? ",)" : ")");
    case PyTreeKind::kList:
      return "[" + Join(children) + "]";
    case PyTreeKind::kDict:
      return MappingBody(node.node_data, children);
    case PyTreeKind::kOrderedDict:
      return node.arity == 0 ? "OrderedDict()"
                             : "OrderedDict(" + MappingBody(node.node_data, children) + ")";
    case PyTreeKind::kDefaultDict: {
      nb::handle factory = PyTuple_GET_ITEM(node.node_data.ptr(), 0);
      nb::handle keys = PyTuple_GET_ITEM(node.node_data.ptr(), 1);
      return "defaultdict(" + SafeRepr(factory) + ", " + MappingBody(keys, children) + ")";
    }
    case PyTreeKind::kDeque: {
      std::string items = node.arity == 0 ? "" : "[" + Join(children) + "]";
      if (node.node_data.is_none()) return "deque(" + items + ")";
      return "deque(" + items + (items.empty() ? "" : ", ") + "maxlen=" +
             SafeRepr(node.node_data) + ")";
    }
    case PyTreeKind::kNamedTuple:
    case PyTreeKind::kStructSequence: {
      const bool structseq = node.kind == PyTreeKind::kStructSequence;
      nb::object fields = node.node_data.attr(structseq ? "__match_args__" : "_fields");
      if (!structseq && nb::len(fields) != static_cast<size_t>(node.arity)) {
        // The class's _fields was reassigned after the spec was made.
        RaisePython(PyExc_ValueError,
                    "The fields of namedtuple " + TypeName(node.node_data, false) + " (" +
                        SafeRepr(fields) + ") no longer match the arity of its PyTreeSpec "
                        "node (" + std::to_string(node.arity) + ").");
      }
      std::vector<std::string> items;
      // A PyStructSequence's unnamed slots (os.stat_result's 7-9) are not in __match_args__,
      // which lists the named ones first; they print as <unnamed@index>.
      const Py_ssize_t named = static_cast<Py_ssize_t>(nb::len(fields));
      for (Py_ssize_t i = 0; i < node.arity; ++i) {
        std::string name = i < named ? nb::cast<std::string>(nb::str(fields[i]))
                                     : "<unnamed@" + std::to_string(i) + ">";
        items.push_back(name + "=" + children[i]);
      }
      return TypeName(node.node_data, structseq) + "(" + Join(items) + ")";
    }
    case PyTreeKind::kCustom:
      return "CustomTreeNode(" + TypeName(node.custom->type, false) + "[" +
             SafeRepr(node.node_data) + "], [" + Join(children) + "])";
    default:
      return "?";
  }
}

}  // namespace

std::string PyTreeSpec::Repr() const {
  std::string out = "PyTreeSpec(" + (traversal_.empty() ? std::string("") : NodeRepr(*this, num_nodes() - 1));
  if (none_is_leaf_) out += ", NoneIsLeaf";
  if (!namespace_.empty()) out += ", namespace=" + SafeRepr(nb::str(namespace_.c_str()));
  return out + ")";
}

}  // namespace optree_core
