// The fused_optim op library and the Python module `fused_optim._C` that loads it, built on
// torch's stable ABI (torch_api.h) and CPython's limited API, so that one build loads into every
// torch from 2.10 on and every CPython from 3.10 on. Each algorithm's ops (schemas and kernels)
// are registered by its own csrc/ops/<algo>.cpp; the module carries BUILD_INFO and the test
// switches of the CUDA launch plan; everything else reaches the ops through torch.ops.fused_optim.
#include <Python.h>

#include <cstdint>
#include <exception>
#include <vector>

#include "cuda/launch_plan.h"
#include "cuda/matrix_passes.h"
#include "kernels.h"
#include "modes.h"
#include "multi_tensor.h"

// Naming: <algo>_step_ updates params and state in place (the drop-in optimizers);
// <algo>_update is the functional form returning new tensors; <algo>_update_backward is its
// hand-written gradient. Hyper-parameters are keyword-only.
STABLE_TORCH_LIBRARY(fused_optim, m) {
  // Switches this thread's validate-only mode (see modes.h); returns the previous setting.
  m.def("_validate_only(bool enable) -> bool");
  // Tests only: sets this thread's host-state columns (see modes.h); returns the previous ones.
  m.def("_state_scalars_on_host(int columns) -> int");
  // Tests only: ASGD's CPU calls compute eta as CUDA calls do (see modes.h).
  m.def("_asgd_foreach_eta(bool enable) -> bool");
}

// No tensor arguments: one kernel for every dispatch key.
STABLE_TORCH_LIBRARY_IMPL(fused_optim, CompositeExplicitAutograd, m) {
  m.impl("_validate_only", TORCH_BOX(&fused_optim::SetValidateOnly));
  m.impl("_state_scalars_on_host", TORCH_BOX(&fused_optim::SetStateScalarsOnHost));
  m.impl("_asgd_foreach_eta", TORCH_BOX(&fused_optim::SetAsgdForeachEtaOnCpu));
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
  const bool ok = AddItem(info, "compiler", PyUnicode_FromString(kCompiler)) &&
                  AddItem(info, "cxx_standard", PyLong_FromLong(__cplusplus)) &&
                  AddItem(info, "cxx11_abi", PyBool_FromLong(_GLIBCXX_USE_CXX11_ABI)) &&
                  AddItem(info, "cuda", PyBool_FromLong(cuda)) &&
                  AddItem(info, "torch_version", PyUnicode_FromString(FUSED_OPTIM_TORCH_VERSION)) &&
                  AddItem(info, "torch_abi", PyUnicode_FromString("stable, torch >= 2.10"));
  if (!ok) {
    Py_DECREF(info);
    return nullptr;
  }
  return info;
}

// _emulate_cuda(enable=None): switches the CUDA emulation test mode (multi_tensor.h) and returns
// the previous setting; without an argument it only reads it.
PyObject* EmulateCuda(PyObject* /*self*/, PyObject* args) {
  PyObject* enable = Py_None;
  if (!PyArg_ParseTuple(args, "|O:_emulate_cuda", &enable)) return nullptr;
  if (enable == Py_None) return PyBool_FromLong(fused_optim::CudaEmulation());
  const int on = PyObject_IsTrue(enable);
  if (on < 0) return nullptr;
  return PyBool_FromLong(fused_optim::SetCudaEmulation(on != 0));
}

PyObject* EmulatedLaunches(PyObject* /*self*/, PyObject* /*unused*/) {
  return PyLong_FromLongLong(fused_optim::cuda_emulation::Launches());
}

PyObject* EmulatedVectorGroups(PyObject* /*self*/, PyObject* /*unused*/) {
  return PyLong_FromLongLong(fused_optim::cuda_emulation::VectorGroups());
}

// _same_state(state, kept): whether `state` (a dict of per-parameter dicts, torch.optim's) holds
// exactly the `kept` values (a list), in order, by identity: fused_optim.optim's step reuse asks on
// every step, and a C loop over a thousand values takes a fifth of the Python one's time.
PyObject* SameState(PyObject* /*self*/, PyObject* args) {
  PyObject* state = nullptr;
  PyObject* kept = nullptr;
  if (!PyArg_ParseTuple(args, "O!O!:_same_state", &PyDict_Type, &state, &PyList_Type, &kept)) return nullptr;
  const Py_ssize_t count = PyList_Size(kept);
  Py_ssize_t i = 0, outer = 0, inner = 0;
  PyObject *key = nullptr, *entry = nullptr, *value = nullptr;
  while (PyDict_Next(state, &outer, &key, &entry)) {
    if (!PyDict_Check(entry)) Py_RETURN_FALSE;
    inner = 0;
    while (PyDict_Next(entry, &inner, &key, &value)) {
      if (i == count || PyList_GetItem(kept, i) != value) Py_RETURN_FALSE;
      ++i;
    }
  }
  return PyBool_FromLong(i == count);
}

// _grads_if_same(params, kept): the `.grad` of each of `params` (a parameter group's list) where it
// holds exactly the `kept` tensors (a list), in order, by identity; else None. The step reuse's
// per-step pass over a group, one C loop instead of an identity pass and a gradient pass in Python
// (the gradients are new objects after zero_grad(set_to_none=True), so each step reads them).
PyObject* GradsIfSame(PyObject* /*self*/, PyObject* args) {
  PyObject* params = nullptr;
  PyObject* kept = nullptr;
  if (!PyArg_ParseTuple(args, "OO!:_grads_if_same", &params, &PyList_Type, &kept)) return nullptr;
  const Py_ssize_t count = PyList_Size(kept);
  if (!PyList_Check(params) || PyList_Size(params) != count) Py_RETURN_NONE;
  for (Py_ssize_t i = 0; i < count; ++i) {
    if (PyList_GetItem(params, i) != PyList_GetItem(kept, i)) Py_RETURN_NONE;
  }
  static PyObject* const grad = PyUnicode_InternFromString("grad");
  if (grad == nullptr) return nullptr;
  PyObject* out = PyList_New(count);
  for (Py_ssize_t i = 0; out != nullptr && i < count; ++i) {
    PyObject* g = PyObject_GetAttr(PyList_GetItem(kept, i), grad);
    if (g == nullptr || PyList_SetItem(out, i, g) != 0) Py_CLEAR(out);
  }
  return out;
}

PyObject* KeptTableSteps(PyObject* /*self*/, PyObject* /*unused*/) {
  return PyLong_FromLongLong(fused_optim::KeptTableSteps());
}

PyObject* KeptTableKeeps(PyObject* /*self*/, PyObject* /*unused*/) {
  return PyLong_FromLongLong(fused_optim::KeptTableKeeps());
}

PyObject* EmulatedGridLimit(PyObject* /*self*/, PyObject* arg) {
  const long long limit = PyLong_AsLongLong(arg);
  if (limit == -1 && PyErr_Occurred()) return nullptr;
  try {
    return PyLong_FromLongLong(fused_optim::cuda_emulation::SetGridLimit(limit));
  } catch (const std::exception& e) {
    PyErr_SetString(PyExc_ValueError, e.what());
    return nullptr;
  }
}

// _emulated_binding_check(name): runs a test-only binding through the emulated vector path, whose
// invariant checks raise RuntimeError where it breaks them; returns the sum of its result.
PyObject* EmulatedBindingCheck(PyObject* /*self*/, PyObject* arg) {
  const char* name = PyUnicode_AsUTF8AndSize(arg, nullptr);
  if (name == nullptr) return nullptr;
  try {
    return PyFloat_FromDouble(fused_optim::cuda_emulation::BindingCheckProbe(name));
  } catch (const std::invalid_argument& e) {
    PyErr_SetString(PyExc_ValueError, e.what());
  } catch (const std::exception& e) {
    PyErr_SetString(PyExc_RuntimeError, e.what());
  }
  return nullptr;
}

// _cuda_launch_plan(numel, slots): the CUDA launches (csrc/cuda/launch_plan.h) of one call over
// tensors with these element counts, at most `slots` slots a launch (a binding's slots_per_launch),
// each a list of its slots' (tensor, first chunk, chunks). Nothing is allocated, so tests can plan
// any size.
PyObject* CudaLaunchPlan(PyObject* /*self*/, PyObject* args) {
  PyObject* arg = nullptr;
  int max_slots = 0;
  if (!PyArg_ParseTuple(args, "Oi", &arg, &max_slots)) return nullptr;
  const Py_ssize_t n = PySequence_Size(arg);
  if (n < 0) return nullptr;
  std::vector<int64_t> numel(n);
  for (Py_ssize_t t = 0; t < n; ++t) {
    PyObject* item = PySequence_GetItem(arg, t);
    if (item == nullptr) return nullptr;
    numel[t] = PyLong_AsLongLong(item);
    Py_DECREF(item);
    if (numel[t] == -1 && PyErr_Occurred()) return nullptr;
  }
  std::vector<fused_optim::cuda::PlannedLaunch> launches;
  try {
    fused_optim::cuda::PlanLaunches(numel.data(), static_cast<int64_t>(numel.size()), max_slots,
                                    [&](const fused_optim::cuda::PlannedLaunch& l) { launches.push_back(l); });
  } catch (const std::exception& e) {
    PyErr_SetString(PyExc_ValueError, e.what());
    return nullptr;
  }
  PyObject* out = PyList_New(0);
  for (const auto& launch : launches) {
    PyObject* slots = PyList_New(0);
    for (int s = 0; s < launch.num_slots && out != nullptr && slots != nullptr; ++s) {
      const auto& slot = launch.slots[s];
      PyObject* item = Py_BuildValue("(LLL)", static_cast<long long>(slot.tensor),
                                     static_cast<long long>(slot.first_chunk), static_cast<long long>(slot.chunks));
      if (item == nullptr || PyList_Append(slots, item) != 0) Py_CLEAR(out);
      Py_XDECREF(item);
    }
    if (out == nullptr || slots == nullptr || PyList_Append(out, slots) != 0) {
      Py_XDECREF(slots);
      Py_XDECREF(out);
      return nullptr;
    }
    Py_DECREF(slots);
  }
  return out;
}

// _cuda_matrix_blocks(batch, rows, cols): the blocks each of Adafactor's matrix passes
// (csrc/cuda/matrix_passes.h: row norms, column partials, column norms, products) gives a tensor of
// `batch` matrices of rows x cols, for tests of how many threads a shape keeps busy.
PyObject* CudaMatrixBlocks(PyObject* /*self*/, PyObject* args) {
  long long batch = 0, rows = 0, cols = 0;
  if (!PyArg_ParseTuple(args, "LLL", &batch, &rows, &cols)) return nullptr;
  namespace c = fused_optim::cuda;
  using P = c::MatrixPass;
  return Py_BuildValue("(LLLL)", static_cast<long long>(c::ItemsOf(P::kRowNorms, batch, rows, cols)),
                       static_cast<long long>(c::ItemsOf(P::kColumnPartials, batch, rows, cols)),
                       static_cast<long long>(c::ItemsOf(P::kColumnNorms, batch, rows, cols)),
                       static_cast<long long>(c::ItemsOf(P::kProducts, batch, rows, cols)));
}

// CUDA_LAUNCH: the launch plan's limits, for tests; slots_per_launch and launch_meta_bytes map each
// kernel's name (kernels.h) to its own.
PyObject* MakeCudaLaunchLimits() {
  namespace c = fused_optim::cuda;
  PyObject* limits = PyDict_New();
  PyObject* slots = PyDict_New();
  PyObject* bytes = PyDict_New();
  bool ok = limits != nullptr && slots != nullptr && bytes != nullptr;
#define FUSED_OPTIM_ADD_KERNEL_LIMITS(name)                                                         \
  ok = ok && AddItem(slots, #name, PyLong_FromLong(c::kSlotsPerLaunch<fused_optim::bind::name>)) && \
       AddItem(bytes, #name, PyLong_FromSize_t(sizeof(c::LaunchMeta<fused_optim::bind::name>)));
  FUSED_OPTIM_FOR_EACH_KERNEL(FUSED_OPTIM_ADD_KERNEL_LIMITS)
#undef FUSED_OPTIM_ADD_KERNEL_LIMITS
  ok = ok && AddItem(limits, "block_size", PyLong_FromLong(c::kBlockSize)) &&
       AddItem(limits, "chunk_size", PyLong_FromLongLong(c::kChunkSize)) &&
       AddItem(limits, "vector_bytes", PyLong_FromLong(c::kVectorBytes)) &&
       AddItem(limits, "max_slots_per_launch", PyLong_FromLong(c::kMaxSlotsPerLaunch)) &&
       AddItem(limits, "max_grid_blocks", PyLong_FromLongLong(c::kMaxGridBlocks)) &&
       AddItem(limits, "max_lists", PyLong_FromLong(c::kMaxLists)) &&
       AddItem(limits, "max_kernel_param_bytes", PyLong_FromSize_t(c::kMaxKernelParamBytes)) &&
       AddItem(limits, "matrix_slots_per_launch", PyLong_FromLong(c::MatrixMeta::kSlots)) &&
       AddItem(limits, "column_block_rows", PyLong_FromLongLong(c::kColumnBlockRows));
  if (ok) {
    ok = PyDict_SetItemString(limits, "slots_per_launch", slots) == 0 &&
         PyDict_SetItemString(limits, "launch_meta_bytes", bytes) == 0;
  }
  Py_XDECREF(slots);
  Py_XDECREF(bytes);
  if (!ok) {
    Py_XDECREF(limits);
    return nullptr;
  }
  return limits;
}

PyMethodDef kCudaPlanMethods[] = {
    {"_emulate_cuda", EmulateCuda, METH_VARARGS, "Switch the CUDA emulation test mode; returns the previous setting."},
    {"_emulated_launches", EmulatedLaunches, METH_NOARGS, "Emulated CUDA launches so far."},
    {"_emulated_vector_groups", EmulatedVectorGroups, METH_NOARGS,
     "Emulated groups of the CUDA kernels' vector path so far (tests)."},
    {"_emulated_grid_limit", EmulatedGridLimit, METH_O,
     "Set the emulated launches' block limit (tests); returns the previous one."},
    {"_emulated_binding_check", EmulatedBindingCheck, METH_O,
     "Run a test-only binding through the emulated vector path's invariant checks (tests)."},
    {"_cuda_launch_plan", CudaLaunchPlan, METH_VARARGS,
     "The CUDA launches of tensors with these element counts, at most this many slots a launch."},
    {"_cuda_matrix_blocks", CudaMatrixBlocks, METH_VARARGS,
     "The blocks of Adafactor's CUDA matrix passes for a batch of matrices of one shape (tests)."},
    {"_kept_table_steps", KeptTableSteps, METH_NOARGS, "Steps that ran a kept table so far (kept_step.h)."},
    {"_kept_table_keeps", KeptTableKeeps, METH_NOARGS, "Kept tables kept (built afresh) so far (kept_step.h)."},
    {"_same_state", SameState, METH_VARARGS, "Whether an optimizer state holds exactly these values, in order."},
    {"_grads_if_same", GradsIfSame, METH_VARARGS,
     "The .grad of each parameter of a list holding exactly these tensors, in order (else None)."},
    {nullptr, nullptr, 0, nullptr}};

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
  PyObject* limits = MakeCudaLaunchLimits();
  if (limits == nullptr || PyModule_AddObject(module, "CUDA_LAUNCH", limits) != 0) {
    Py_XDECREF(limits);
    Py_DECREF(module);
    return nullptr;
  }
  PyObject* ops = PyTuple_New(static_cast<Py_ssize_t>(fused_optim::OpRegistrar::Names().size()));
  for (size_t i = 0; ops != nullptr && i < fused_optim::OpRegistrar::Names().size(); ++i) {
    PyObject* name = PyUnicode_FromString(fused_optim::OpRegistrar::Names()[i].c_str());
    if (name == nullptr || PyTuple_SetItem(ops, static_cast<Py_ssize_t>(i), name) != 0) Py_CLEAR(ops);
  }
  if (ops == nullptr || PyModule_AddObject(module, "OPS", ops) != 0) {
    Py_XDECREF(ops);
    Py_DECREF(module);
    return nullptr;
  }
  if (PyModule_AddFunctions(module, kCudaPlanMethods) != 0) {
    Py_DECREF(module);
    return nullptr;
  }
  return module;
}
