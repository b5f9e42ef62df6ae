// tree_map over a single tree, without the Python-level map iterator between the calls.
#include "optree_core/exceptions.h"
#include "optree_core/structure_cache.h"
#include "optree_core/treespec.h"

namespace optree_core {

nb::object TreeMap(nb::handle func, nb::handle tree, nb::handle is_leaf, bool none_is_leaf,
                   const std::string& ns) {
  nb::tuple flat = StructureCache::Instance().Flatten(tree, is_leaf, none_is_leaf, ns);
  PyObject* leaves = PyTuple_GET_ITEM(flat.ptr(), 0);
  const PyTreeSpec& spec = nb::cast<const PyTreeSpec&>(nb::handle(PyTuple_GET_ITEM(flat.ptr(), 1)));
  const Py_ssize_t n = PyList_GET_SIZE(leaves);
  nb::object results = nb::steal(PyList_New(n));
  if (!results.is_valid()) throw nb::python_error();
  for (Py_ssize_t i = 0; i < n; ++i) {
    PyObject* out = PyObject_CallOneArg(func.ptr(), PyList_GET_ITEM(leaves, i));
    if (out == nullptr) throw nb::python_error();
    PyList_SET_ITEM(results.ptr(), i, out);
  }
  return spec.Unflatten(results);
}

}  // namespace optree_core
