// RAdam ops: argument checks, outputs and the per-tensor rectification terms; the element math
// runs in csrc/cpu/radam.cpp or csrc/cuda/radam.cu.
#include <torch/library.h>

#include <cmath>
#include <tuple>

#include "ops/launch.h"

namespace fused_optim {
namespace {

math::RadamHyper<double> MakeHyper(const char* op, double lr, double beta1, double beta2, double eps,
                                   double weight_decay, bool decoupled_weight_decay, bool maximize) {
  CheckNonNegative(op, "learning rate", lr);
  CheckNonNegative(op, "epsilon", eps);
  CheckUnitInterval(op, "beta1", beta1);
  CheckUnitInterval(op, "beta2", beta2);
  CheckNonNegative(op, "weight_decay", weight_decay);
  math::RadamHyper<double> h{};
  h.lr = lr, h.beta1 = beta1, h.beta2 = beta2, h.eps = eps, h.weight_decay = weight_decay;
  h.decay = 1.0 - lr * weight_decay;
  h.one_minus_beta1 = 1.0 - beta1, h.one_minus_beta2 = 1.0 - beta2;
  h.lerp_small = std::abs(h.one_minus_beta1) < 0.5;
  h.maximize = maximize;
  h.has_l2 = weight_decay != 0.0 && !decoupled_weight_decay;
  h.has_decay = weight_decay != 0.0 && decoupled_weight_decay;
  return h;
}

// The step-only terms: bias corrections, the SMA length rho_t and the variance rectification.
void SetStepScalars(KernelTable& table, const std::vector<double>& steps, double beta1, double beta2) {
  using namespace radam_cols;
  table.num_scalars = 4;
  table.scalars.resize(4 * steps.size());
  const double rho_inf = 2.0 / (1.0 - beta2) - 1.0;
  for (size_t t = 0; t < steps.size(); ++t) {
    const double step = steps[t];
    const double bc2 = 1.0 - std::pow(beta2, step);
    const double rho_t = rho_inf - 2.0 * step * std::pow(beta2, step) / bc2;
    double* row = &table.scalars[4 * t];
    row[kBc1] = 1.0 - std::pow(beta1, step);
    row[kBc2Sqrt] = std::sqrt(bc2);
    row[kAdaptive] = rho_t > 5.0 ? 1.0 : 0.0;
    row[kRect] = rho_t > 5.0
                     ? std::sqrt((rho_t - 4.0) * (rho_t - 2.0) * rho_inf / ((rho_inf - 4.0) * (rho_inf - 2.0) * rho_t))
                     : 0.0;
  }
}

void CheckStep(const char* op, int64_t step) {
  TORCH_CHECK_VALUE(step >= 1, op, ": step must be >= 1 (the count after this update), got ", step);
}

void RadamStepInPlace(at::TensorList params, at::TensorList grads, at::TensorList exp_avgs, at::TensorList exp_avg_sqs,
                      at::TensorList state_steps, double lr, double beta1, double beta2, double eps,
                      double weight_decay, bool decoupled_weight_decay, bool maximize) {
  constexpr const char* op = "fused_optim::radam_step_";
  const auto hyper = MakeHyper(op, lr, beta1, beta2, eps, weight_decay, decoupled_weight_decay, maximize);
  MultiTensorCall call(op, params);
  call.AddMutable("params", params);
  call.AddInput("grads", grads);
  call.AddMutable("exp_avgs", exp_avgs);
  call.AddMutable("exp_avg_sqs", exp_avg_sqs);
  CheckStepTensors(op, state_steps, call.size());
  KernelTable table = call.Table();
  if (ValidateOnly()) return;                                        // every check has run; nothing is written yet
  SetStepScalars(table, IncrementSteps(state_steps), beta1, beta2);  // first modification
  FUSED_OPTIM_LAUNCH(call, table, RadamStep, hyper);
}

std::tuple<TensorVector, TensorVector, TensorVector> RadamUpdate(at::TensorList params, at::TensorList grads,
                                                                 at::TensorList exp_avgs, at::TensorList exp_avg_sqs,
                                                                 int64_t step, double lr, double beta1, double beta2,
                                                                 double eps, double weight_decay,
                                                                 bool decoupled_weight_decay, bool maximize) {
  constexpr const char* op = "fused_optim::radam_update";
  const auto hyper = MakeHyper(op, lr, beta1, beta2, eps, weight_decay, decoupled_weight_decay, maximize);
  CheckStep(op, step);
  MultiTensorCall call(op, params);
  TensorVector new_params = call.AddOutputFrom("params", params);
  call.AddInput("grads", grads);
  TensorVector new_exp_avgs = call.AddOutputFrom("exp_avgs", exp_avgs);
  TensorVector new_exp_avg_sqs = call.AddOutputFrom("exp_avg_sqs", exp_avg_sqs);
  KernelTable table = call.Table();
  SetStepScalars(table, std::vector<double>(call.size(), static_cast<double>(step)), beta1, beta2);
  FUSED_OPTIM_LAUNCH(call, table, RadamStep, hyper);
  return {std::move(new_params), std::move(new_exp_avgs), std::move(new_exp_avg_sqs)};
}

std::tuple<TensorVector, TensorVector, TensorVector, TensorVector> RadamUpdateBackward(
    const OptionalTensorList& grad_new_params, const OptionalTensorList& grad_new_exp_avgs,
    const OptionalTensorList& grad_new_exp_avg_sqs, at::TensorList params, at::TensorList grads,
    at::TensorList exp_avgs, at::TensorList exp_avg_sqs, int64_t step, double lr, double beta1, double beta2,
    double eps, double weight_decay, bool decoupled_weight_decay, bool maximize) {
  constexpr const char* op = "fused_optim::radam_update_backward";
  const auto hyper = MakeHyper(op, lr, beta1, beta2, eps, weight_decay, decoupled_weight_decay, maximize);
  CheckStep(op, step);
  MultiTensorCall call(op, params);
  call.AddOptionalInput("grad_new_params", grad_new_params);
  call.AddOptionalInput("grad_new_exp_avgs", grad_new_exp_avgs);
  call.AddOptionalInput("grad_new_exp_avg_sqs", grad_new_exp_avg_sqs);
  call.AddInput("params", params);
  call.AddInput("grads", grads);
  call.AddInput("exp_avgs", exp_avgs);
  call.AddInput("exp_avg_sqs", exp_avg_sqs);
  TensorVector grad_params = call.AddOutput();
  TensorVector grad_grads = call.AddOutput();
  TensorVector grad_exp_avgs = call.AddOutput();
  TensorVector grad_exp_avg_sqs = call.AddOutput();
  KernelTable table = call.Table();
  SetStepScalars(table, std::vector<double>(call.size(), static_cast<double>(step)), beta1, beta2);
  FUSED_OPTIM_LAUNCH(call, table, RadamBackward, hyper);
  return {std::move(grad_params), std::move(grad_grads), std::move(grad_exp_avgs), std::move(grad_exp_avg_sqs)};
}

}  // namespace

#define FUSED_OPTIM_REGISTER_RADAM(m)       \
  m.impl("radam_step_", &RadamStepInPlace); \
  m.impl("radam_update", &RadamUpdate);     \
  m.impl("radam_update_backward", &RadamUpdateBackward);

TORCH_LIBRARY_IMPL(fused_optim, CPU, m){FUSED_OPTIM_REGISTER_RADAM(m)}
// Sparse inputs reach the same code, which rejects them with a clear error.
TORCH_LIBRARY_IMPL(fused_optim, SparseCPU, m){FUSED_OPTIM_REGISTER_RADAM(m)}
#ifdef FUSED_OPTIM_WITH_CUDA
TORCH_LIBRARY_IMPL(fused_optim, CUDA, m) {
  FUSED_OPTIM_REGISTER_RADAM(m)
}
#endif

}  // namespace fused_optim
