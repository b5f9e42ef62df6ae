// Adamax ops: argument checks, outputs and the per-tensor bias-corrected learning rate; the
// element math runs in csrc/cpu/adamax.cpp or csrc/cuda/adamax.cu.
#include <torch/library.h>

#include <cmath>
#include <tuple>

#include "ops/launch.h"

namespace fused_optim {
namespace {

math::AdamaxHyper<double> MakeHyper(const char* op, double lr, double beta1, double beta2, double eps,
                                    double weight_decay, bool maximize) {
  CheckNonNegative(op, "learning rate", lr);
  CheckNonNegative(op, "epsilon", eps);
  CheckUnitInterval(op, "beta1", beta1);
  CheckUnitInterval(op, "beta2", beta2);
  CheckNonNegative(op, "weight_decay", weight_decay);
  math::AdamaxHyper<double> h{};
  h.beta1 = beta1, h.beta2 = beta2, h.eps = eps, h.weight_decay = weight_decay;
  h.one_minus_beta1 = 1.0 - beta1;
  h.lerp_small = std::abs(h.one_minus_beta1) < 0.5;
  h.maximize = maximize, h.has_l2 = weight_decay != 0.0;
  return h;
}

void SetClr(KernelTable& table, const std::vector<double>& steps, double lr, double beta1) {
  table.num_scalars = 1;
  table.scalars.resize(steps.size());
  for (size_t t = 0; t < steps.size(); ++t) table.scalars[t] = lr / (1.0 - std::pow(beta1, steps[t]));
}

void CheckStep(const char* op, int64_t step) {
  TORCH_CHECK_VALUE(step >= 1, op, ": step must be >= 1 (the count after this update), got ", step);
}

void AdamaxStepInPlace(at::TensorList params, at::TensorList grads, at::TensorList exp_avgs, at::TensorList exp_infs,
                       at::TensorList state_steps, double lr, double beta1, double beta2, double eps,
                       double weight_decay, bool maximize) {
  constexpr const char* op = "fused_optim::adamax_step_";
  const auto hyper = MakeHyper(op, lr, beta1, beta2, eps, weight_decay, maximize);
  MultiTensorCall call(op, params);
  call.AddMutable("params", params);
  call.AddInput("grads", grads);
  call.AddMutable("exp_avgs", exp_avgs);
  call.AddMutable("exp_infs", exp_infs);
  CheckStepTensors(op, state_steps, call.size());
  KernelTable table = call.Table();
  if (ValidateOnly()) return;                             // every check has run; nothing is written yet
  SetClr(table, IncrementSteps(state_steps), lr, beta1);  // first modification
  FUSED_OPTIM_LAUNCH(call, table, AdamaxStep, hyper);
}

std::tuple<TensorVector, TensorVector, TensorVector> AdamaxUpdate(at::TensorList params, at::TensorList grads,
                                                                  at::TensorList exp_avgs, at::TensorList exp_infs,
                                                                  int64_t step, double lr, double beta1, double beta2,
                                                                  double eps, double weight_decay, bool maximize) {
  constexpr const char* op = "fused_optim::adamax_update";
  const auto hyper = MakeHyper(op, lr, beta1, beta2, eps, weight_decay, maximize);
  CheckStep(op, step);
  MultiTensorCall call(op, params);
  TensorVector new_params = call.AddOutputFrom("params", params);
  call.AddInput("grads", grads);
  TensorVector new_exp_avgs = call.AddOutputFrom("exp_avgs", exp_avgs);
  TensorVector new_exp_infs = call.AddOutputFrom("exp_infs", exp_infs);
  KernelTable table = call.Table();
  SetClr(table, std::vector<double>(call.size(), static_cast<double>(step)), lr, beta1);
  FUSED_OPTIM_LAUNCH(call, table, AdamaxStep, hyper);
  return {std::move(new_params), std::move(new_exp_avgs), std::move(new_exp_infs)};
}

std::tuple<TensorVector, TensorVector, TensorVector, TensorVector> AdamaxUpdateBackward(
    const OptionalTensorList& grad_new_params, const OptionalTensorList& grad_new_exp_avgs,
    const OptionalTensorList& grad_new_exp_infs, at::TensorList params, at::TensorList grads, at::TensorList exp_avgs,
    at::TensorList exp_infs, int64_t step, double lr, double beta1, double beta2, double eps, double weight_decay,
    bool maximize) {
  constexpr const char* op = "fused_optim::adamax_update_backward";
  const auto hyper = MakeHyper(op, lr, beta1, beta2, eps, weight_decay, maximize);
  CheckStep(op, step);
  MultiTensorCall call(op, params);
  call.AddOptionalInput("grad_new_params", grad_new_params);
  call.AddOptionalInput("grad_new_exp_avgs", grad_new_exp_avgs);
  call.AddOptionalInput("grad_new_exp_infs", grad_new_exp_infs);
  call.AddInput("params", params);
  call.AddInput("grads", grads);
  call.AddInput("exp_avgs", exp_avgs);
  call.AddInput("exp_infs", exp_infs);
  TensorVector grad_params = call.AddOutput();
  TensorVector grad_grads = call.AddOutput();
  TensorVector grad_exp_avgs = call.AddOutput();
  TensorVector grad_exp_infs = call.AddOutput();
  KernelTable table = call.Table();
  SetClr(table, std::vector<double>(call.size(), static_cast<double>(step)), lr, beta1);
  FUSED_OPTIM_LAUNCH(call, table, AdamaxBackward, hyper);
  return {std::move(grad_params), std::move(grad_grads), std::move(grad_exp_avgs), std::move(grad_exp_infs)};
}

}  // namespace

#define FUSED_OPTIM_REGISTER_ADAMAX(m)        \
  m.impl("adamax_step_", &AdamaxStepInPlace); \
  m.impl("adamax_update", &AdamaxUpdate);     \
  m.impl("adamax_update_backward", &AdamaxUpdateBackward);

TORCH_LIBRARY_IMPL(fused_optim, CPU, m){FUSED_OPTIM_REGISTER_ADAMAX(m)}
// Sparse inputs reach the same code, which rejects them with a clear error.
TORCH_LIBRARY_IMPL(fused_optim, SparseCPU, m){FUSED_OPTIM_REGISTER_ADAMAX(m)}
#ifdef FUSED_OPTIM_WITH_CUDA
TORCH_LIBRARY_IMPL(fused_optim, CUDA, m) {
  FUSED_OPTIM_REGISTER_ADAMAX(m)
}
#endif

}  // namespace fused_optim
