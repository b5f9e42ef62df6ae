// The fused_optim op library and the Python module `fused_optim._C` that loads it. Each
// algorithm's ops (schemas and kernels) are registered by its own csrc/ops/<algo>.cpp; the
// module carries BUILD_INFO and `_eager`, the ops' unboxed eager calls (eager_call.h); everything
// else reaches the ops through torch.ops.fused_optim.
#include <Python.h>
#include <torch/library.h>

#include "multi_tensor.h"

// Naming: <algo>_step_ updates params and state in place (the drop-in optimizers);
// <algo>_update is the functional form returning new tensors; <algo>_update_backward is its
// hand-written gradient. Hyper-parameters are keyword-only.
TORCH_LIBRARY(fused_optim, m) {
  // Switches this thread's validate-only mode (see multi_tensor.h); returns the previous setting.
  m.def("_validate_only(bool enable) -> bool", &fused_optim::SetValidateOnly);
  // Tests only: sets this thread's host-state columns (see multi_tensor.h); returns the previous ones.
  m.def("_state_scalars_on_host(int columns) -> int", &fused_optim::SetStateScalarsOnHost);
}

namespace {

#define FUSED_OPTIM_STR2(x) #x
#define FUSED_OPTIM_STR(x) FUSED_OPTIM_STR2(x)

#if defined(__clang__)
constexpr const char* kCompiler = "clang " __clang_version__;
#elif defined(__GNUC__)
constexpr const char* kCompiler = "gcc " __VERSION__;
#else
constexpr const char* kCompiler = "unknown";
#endif

bool AddItem(PyObject* dict, const char* key, PyObject* value) {
  if (value == nullptr) return false;
  const int rc = PyDict_SetItemString(dict, key, value);
  Py_DECREF(value);
  return rc == 0;
}

PyObject* MakeBuildInfo() {
  PyObject* info = PyDict_New();
  if (info == nullptr) return nullptr;
#ifdef FUSED_OPTIM_WITH_CUDA
  const bool cuda = true;
#else
  const bool cuda = false;
#endif
#ifdef _OPENMP
  const bool openmp = true;
#else
  const bool openmp = false;
#endif
  const bool ok = AddItem(info, "compiler", PyUnicode_FromString(kCompiler)) &&
                  AddItem(info, "cxx_standard", PyLong_FromLong(__cplusplus)) &&
                  AddItem(info, "cxx11_abi", PyBool_FromLong(_GLIBCXX_USE_CXX11_ABI)) &&
                  AddItem(info, "cuda", PyBool_FromLong(cuda)) && AddItem(info, "openmp", PyBool_FromLong(openmp)) &&
                  AddItem(info, "torch_version", PyUnicode_FromString(FUSED_OPTIM_TORCH_VERSION));
  if (!ok) {
    Py_DECREF(info);
    return nullptr;
  }
  return info;
}

PyModuleDef kModule = {PyModuleDef_HEAD_INIT,
                       "_C",
                       "fused_optim's compiled ops, registered with torch under torch.ops.fused_optim.",
                       -1,
                       nullptr,
                       nullptr,
                       nullptr,
                       nullptr,
                       nullptr};

}  // namespace

// Importing the module is what loads the library and runs the registrations above.
PyMODINIT_FUNC PyInit__C() {
  PyObject* module = PyModule_Create(&kModule);
  if (module == nullptr) return nullptr;
  PyObject* info = MakeBuildInfo();
  if (info == nullptr || PyModule_AddObject(module, "BUILD_INFO", info) != 0) {
    Py_XDECREF(info);
    Py_DECREF(module);
    return nullptr;
  }
  if (!fused_optim::eager::AddFunctions(module)) {
    Py_DECREF(module);
    return nullptr;
  }
  return module;
}
