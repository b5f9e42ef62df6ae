// The optional Python module fused_optim._eager: the ops' unboxed eager calls (eager_call.h) on the
// ATen build of the op glue (torch_api.h). It links torch's version-specific C++ and Python API,
// so fused_optim imports it only into the torch release it was compiled against (and only after
// fused_optim._C has registered the ops, whose schemas it reads).
#include <Python.h>

#include <exception>

#include "eager_call.h"

namespace {

PyModuleDef kModule = {PyModuleDef_HEAD_INIT,
                       "_eager",
                       "fused_optim's unboxed eager op calls for the torch release it was built against.",
                       -1,
                       nullptr,
                       nullptr,
                       nullptr,
                       nullptr,
                       nullptr};

}  // namespace

PyMODINIT_FUNC PyInit__eager() {
  PyObject* module = PyModule_Create(&kModule);
  if (module == nullptr) return nullptr;
  try {
    if (fused_optim::eager::AddFunctions(module)) return module;
  } catch (const std::exception& e) {  // an op's schema not registered (fused_optim._C not loaded)
    PyErr_SetString(PyExc_ImportError, e.what());
  }
  Py_DECREF(module);
  return nullptr;
}
