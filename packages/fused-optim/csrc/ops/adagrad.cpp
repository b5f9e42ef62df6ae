// Adagrad ops: argument checks, outputs and the per-tensor decayed learning rate; the element
// math runs in csrc/cpu/adagrad.cpp or csrc/cuda/adagrad.cu.
#include <torch/library.h>

#include <tuple>

#include "ops/launch.h"

namespace fused_optim {
namespace {

math::AdagradHyper<double> MakeHyper(const char* op, double lr, double lr_decay, double weight_decay, double eps,
                                     bool maximize) {
  CheckNonNegative(op, "learning rate", lr);
  CheckNonNegative(op, "lr_decay", lr_decay);
  CheckNonNegative(op, "weight_decay", weight_decay);
  CheckNonNegative(op, "epsilon", eps);
  math::AdagradHyper<double> h{};
  h.eps = eps, h.weight_decay = weight_decay, h.maximize = maximize, h.has_l2 = weight_decay != 0.0;
  return h;
}

void SetClr(KernelTable& table, const std::vector<double>& steps, double lr, double lr_decay) {
  table.num_scalars = 1;
  table.scalars.resize(steps.size());
  for (size_t t = 0; t < steps.size(); ++t) table.scalars[t] = lr / (1.0 + (steps[t] - 1.0) * lr_decay);
}

void CheckStep(const char* op, int64_t step) {
  TORCH_CHECK_VALUE(step >= 1, op, ": step must be >= 1 (the count after this update), got ", step);
}

void AdagradStepInPlace(at::TensorList params, at::TensorList grads, at::TensorList state_sums,
                        at::TensorList state_steps, double lr, double lr_decay, double weight_decay, double eps,
                        bool maximize) {
  constexpr const char* op = "fused_optim::adagrad_step_";
  const auto hyper = MakeHyper(op, lr, lr_decay, weight_decay, eps, maximize);
  MultiTensorCall call(op, params);
  call.AddMutable("params", params);
  call.AddInput("grads", grads);
  call.AddMutable("state_sums", state_sums);
  CheckStepTensors(op, state_steps, call.size());
  KernelTable table = call.Table();
  if (ValidateOnly()) return;                                // every check has run; nothing is written yet
  SetClr(table, IncrementSteps(state_steps), lr, lr_decay);  // first modification
  FUSED_OPTIM_LAUNCH(call, table, AdagradStep, hyper);
}

std::tuple<TensorVector, TensorVector> AdagradUpdate(at::TensorList params, at::TensorList grads,
                                                     at::TensorList state_sums, int64_t step, double lr,
                                                     double lr_decay, double weight_decay, double eps, bool maximize) {
  constexpr const char* op = "fused_optim::adagrad_update";
  const auto hyper = MakeHyper(op, lr, lr_decay, weight_decay, eps, maximize);
  CheckStep(op, step);
  MultiTensorCall call(op, params);
  TensorVector new_params = call.AddOutputFrom("params", params);
  call.AddInput("grads", grads);
  TensorVector new_sums = call.AddOutputFrom("state_sums", state_sums);
  KernelTable table = call.Table();
  SetClr(table, std::vector<double>(call.size(), static_cast<double>(step)), lr, lr_decay);
  FUSED_OPTIM_LAUNCH(call, table, AdagradStep, hyper);
  return {std::move(new_params), std::move(new_sums)};
}

std::tuple<TensorVector, TensorVector, TensorVector> AdagradUpdateBackward(
    const OptionalTensorList& grad_new_params, const OptionalTensorList& grad_new_state_sums, at::TensorList params,
    at::TensorList grads, at::TensorList state_sums, int64_t step, double lr, double lr_decay, double weight_decay,
    double eps, bool maximize) {
  constexpr const char* op = "fused_optim::adagrad_update_backward";
  const auto hyper = MakeHyper(op, lr, lr_decay, weight_decay, eps, maximize);
  CheckStep(op, step);
  MultiTensorCall call(op, params);
  call.AddOptionalInput("grad_new_params", grad_new_params);
  call.AddOptionalInput("grad_new_state_sums", grad_new_state_sums);
  call.AddInput("params", params);
  call.AddInput("grads", grads);
  call.AddInput("state_sums", state_sums);
  TensorVector grad_params = call.AddOutput();
  TensorVector grad_grads = call.AddOutput();
  TensorVector grad_sums = call.AddOutput();
  KernelTable table = call.Table();
  SetClr(table, std::vector<double>(call.size(), static_cast<double>(step)), lr, lr_decay);
  FUSED_OPTIM_LAUNCH(call, table, AdagradBackward, hyper);
  return {std::move(grad_params), std::move(grad_grads), std::move(grad_sums)};
}

}  // namespace

#define FUSED_OPTIM_REGISTER_ADAGRAD(m)         \
  m.impl("adagrad_step_", &AdagradStepInPlace); \
  m.impl("adagrad_update", &AdagradUpdate);     \
  m.impl("adagrad_update_backward", &AdagradUpdateBackward);

TORCH_LIBRARY_IMPL(fused_optim, CPU, m){FUSED_OPTIM_REGISTER_ADAGRAD(m)}
// Sparse inputs reach the same code, which rejects them with a clear error.
TORCH_LIBRARY_IMPL(fused_optim, SparseCPU, m){FUSED_OPTIM_REGISTER_ADAGRAD(m)}
#ifdef FUSED_OPTIM_WITH_CUDA
TORCH_LIBRARY_IMPL(fused_optim, CUDA, m) {
  FUSED_OPTIM_REGISTER_ADAGRAD(m)
}
#endif

}  // namespace fused_optim
