// Every op schema of the fused_optim library, and the Python module `fused_optim._C` that loads
// them. The module has no functions of its own (ops are reached through torch.ops.fused_optim);
// it only carries BUILD_INFO.
#include <Python.h>
#include <torch/library.h>

#include "multi_tensor.h"

// Naming: <algo>_step_ updates params and state in place (the drop-in optimizers);
// <algo>_update is the functional form returning new tensors; <algo>_update_backward is its
// hand-written gradient. Hyper-parameters are keyword-only.
TORCH_LIBRARY(fused_optim, m) {
  // Switches this thread's validate-only mode (see multi_tensor.h); returns the previous setting.
  m.def("_validate_only(bool enable) -> bool", &fused_optim::SetValidateOnly);
  // SGD
  m.def(
      "sgd_step_(Tensor(a!)[] params, Tensor[] grads, Tensor(b!)[] momentum_buffers, *, float lr, float momentum, "
      "float dampening, float weight_decay, bool nesterov, bool maximize, bool first_step) -> ()");
  m.def(
      "sgd_update(Tensor[] params, Tensor[] grads, Tensor[] momentum_buffers, *, float lr, float momentum, "
      "float dampening, float weight_decay, bool nesterov, bool maximize, bool first_step) -> (Tensor[], Tensor[])");
  m.def(
      "sgd_update_backward(Tensor?[] grad_new_params, Tensor?[] grad_new_momentum_buffers, Tensor[] params, *, "
      "float lr, float momentum, float dampening, float weight_decay, bool nesterov, bool maximize, "
      "bool first_step) -> (Tensor[], Tensor[], Tensor[])");
  // Adam / AdamW
  m.def(
      "adam_step_(Tensor(a!)[] params, Tensor[] grads, Tensor(b!)[] exp_avgs, Tensor(c!)[] exp_avg_sqs, "
      "Tensor(d!)[] max_exp_avg_sqs, Tensor(e!)[] state_steps, *, float lr, float beta1, float beta2, "
      "float weight_decay, float eps, bool amsgrad, bool maximize, bool decoupled_weight_decay) -> ()");
  m.def(
      "adam_update(Tensor[] params, Tensor[] grads, Tensor[] exp_avgs, Tensor[] exp_avg_sqs, "
      "Tensor[] max_exp_avg_sqs, *, int step, float lr, float beta1, float beta2, float weight_decay, float eps, "
      "bool amsgrad, bool maximize, bool decoupled_weight_decay) -> (Tensor[], Tensor[], Tensor[], Tensor[])");
  m.def(
      "adam_update_backward(Tensor?[] grad_new_params, Tensor?[] grad_new_exp_avgs, "
      "Tensor?[] grad_new_exp_avg_sqs, Tensor?[] grad_new_max_exp_avg_sqs, Tensor[] params, Tensor[] grads, "
      "Tensor[] exp_avgs, Tensor[] exp_avg_sqs, Tensor[] max_exp_avg_sqs, *, int step, float lr, float beta1, "
      "float beta2, float weight_decay, float eps, bool amsgrad, bool maximize, bool decoupled_weight_decay) "
      "-> (Tensor[], Tensor[], Tensor[], Tensor[], Tensor[])");
  m.def(
      "adam_direction(Tensor[] grads, Tensor[] exp_avgs, Tensor[] exp_avg_sqs, *, int step, float beta1, "
      "float beta2, float eps, float eps_root) -> (Tensor[], Tensor[], Tensor[])");
  m.def(
      "adam_direction_backward(Tensor?[] grad_directions, Tensor?[] grad_new_exp_avgs, "
      "Tensor?[] grad_new_exp_avg_sqs, Tensor[] grads, Tensor[] exp_avgs, Tensor[] exp_avg_sqs, *, int step, "
      "float beta1, float beta2, float eps, float eps_root) -> (Tensor[], Tensor[], Tensor[])");
  // RMSprop
  m.def(
      "rmsprop_step_(Tensor(a!)[] params, Tensor[] grads, Tensor(b!)[] square_avgs, Tensor(c!)[] grad_avgs, "
      "Tensor(d!)[] momentum_buffers, Tensor(e!)[] state_steps, *, float lr, float alpha, float eps, "
      "float weight_decay, float momentum, bool centered, bool maximize) -> ()");
  m.def(
      "rmsprop_update(Tensor[] params, Tensor[] grads, Tensor[] square_avgs, Tensor[] grad_avgs, "
      "Tensor[] momentum_buffers, *, float lr, float alpha, float eps, float weight_decay, float momentum, "
      "bool centered, bool maximize) -> (Tensor[], Tensor[], Tensor[], Tensor[])");
  m.def(
      "rmsprop_update_backward(Tensor?[] grad_new_params, Tensor?[] grad_new_square_avgs, "
      "Tensor?[] grad_new_grad_avgs, Tensor?[] grad_new_momentum_buffers, Tensor[] params, Tensor[] grads, "
      "Tensor[] square_avgs, Tensor[] grad_avgs, *, float lr, float alpha, float eps, float weight_decay, "
      "float momentum, bool centered, bool maximize) -> (Tensor[], Tensor[], Tensor[], Tensor[], Tensor[])");
  // Adagrad
  m.def(
      "adagrad_step_(Tensor(a!)[] params, Tensor[] grads, Tensor(b!)[] state_sums, Tensor(c!)[] state_steps, *, "
      "float lr, float lr_decay, float weight_decay, float eps, bool maximize) -> ()");
  m.def(
      "adagrad_update(Tensor[] params, Tensor[] grads, Tensor[] state_sums, *, int step, float lr, "
      "float lr_decay, float weight_decay, float eps, bool maximize) -> (Tensor[], Tensor[])");
  m.def(
      "adagrad_update_backward(Tensor?[] grad_new_params, Tensor?[] grad_new_state_sums, Tensor[] params, "
      "Tensor[] grads, Tensor[] state_sums, *, int step, float lr, float lr_decay, float weight_decay, float eps, "
      "bool maximize) -> (Tensor[], Tensor[], Tensor[])");
  // Adadelta
  m.def(
      "adadelta_step_(Tensor(a!)[] params, Tensor[] grads, Tensor(b!)[] square_avgs, Tensor(c!)[] acc_deltas, "
      "Tensor(d!)[] state_steps, *, float lr, float rho, float eps, float weight_decay, bool maximize) -> ()");
  m.def(
      "adadelta_update(Tensor[] params, Tensor[] grads, Tensor[] square_avgs, Tensor[] acc_deltas, *, float lr, "
      "float rho, float eps, float weight_decay, bool maximize) -> (Tensor[], Tensor[], Tensor[])");
  m.def(
      "adadelta_update_backward(Tensor?[] grad_new_params, Tensor?[] grad_new_square_avgs, "
      "Tensor?[] grad_new_acc_deltas, Tensor[] params, Tensor[] grads, Tensor[] square_avgs, "
      "Tensor[] acc_deltas, *, float lr, float rho, float eps, float weight_decay, bool maximize) "
      "-> (Tensor[], Tensor[], Tensor[], Tensor[])");
  // Adamax
  m.def(
      "adamax_step_(Tensor(a!)[] params, Tensor[] grads, Tensor(b!)[] exp_avgs, Tensor(c!)[] exp_infs, "
      "Tensor(d!)[] state_steps, *, float lr, float beta1, float beta2, float eps, float weight_decay, "
      "bool maximize) -> ()");
  m.def(
      "adamax_update(Tensor[] params, Tensor[] grads, Tensor[] exp_avgs, Tensor[] exp_infs, *, int step, "
      "float lr, float beta1, float beta2, float eps, float weight_decay, bool maximize) "
      "-> (Tensor[], Tensor[], Tensor[])");
  m.def(
      "adamax_update_backward(Tensor?[] grad_new_params, Tensor?[] grad_new_exp_avgs, Tensor?[] grad_new_exp_infs, "
      "Tensor[] params, Tensor[] grads, Tensor[] exp_avgs, Tensor[] exp_infs, *, int step, float lr, float beta1, "
      "float beta2, float eps, float weight_decay, bool maximize) -> (Tensor[], Tensor[], Tensor[], Tensor[])");
  // RAdam
  m.def(
      "radam_step_(Tensor(a!)[] params, Tensor[] grads, Tensor(b!)[] exp_avgs, Tensor(c!)[] exp_avg_sqs, "
      "Tensor(d!)[] state_steps, *, float lr, float beta1, float beta2, float eps, float weight_decay, "
      "bool decoupled_weight_decay, bool maximize) -> ()");
  m.def(
      "radam_update(Tensor[] params, Tensor[] grads, Tensor[] exp_avgs, Tensor[] exp_avg_sqs, *, int step, "
      "float lr, float beta1, float beta2, float eps, float weight_decay, bool decoupled_weight_decay, "
      "bool maximize) -> (Tensor[], Tensor[], Tensor[])");
  m.def(
      "radam_update_backward(Tensor?[] grad_new_params, Tensor?[] grad_new_exp_avgs, "
      "Tensor?[] grad_new_exp_avg_sqs, Tensor[] params, Tensor[] grads, Tensor[] exp_avgs, Tensor[] exp_avg_sqs, "
      "*, int step, float lr, float beta1, float beta2, float eps, float weight_decay, bool decoupled_weight_decay, "
      "bool maximize) -> (Tensor[], Tensor[], Tensor[], Tensor[])");
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
  return module;
}
