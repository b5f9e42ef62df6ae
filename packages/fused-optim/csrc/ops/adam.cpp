// Adam/AdamW ops: argument checks, outputs and per-tensor bias corrections; the element math
// runs in csrc/cpu/adam.cpp or csrc/cuda/adam.cu.
#include <torch/library.h>

#include <cmath>
#include <tuple>

#include "ops/launch.h"

namespace fused_optim {
namespace {

math::AdamHyper<double> MakeHyper(const char* op, double lr, double beta1, double beta2, double weight_decay,
                                  double eps, bool amsgrad, bool maximize, bool decoupled) {
  CheckNonNegative(op, "learning rate", lr);
  CheckNonNegative(op, "epsilon", eps);
  CheckUnitInterval(op, "beta1", beta1);
  CheckUnitInterval(op, "beta2", beta2);
  CheckNonNegative(op, "weight_decay", weight_decay);
  math::AdamHyper<double> h{};
  h.lr = lr, h.beta1 = beta1, h.beta2 = beta2, h.eps = eps, h.weight_decay = weight_decay;
  h.decay = 1.0 - lr * weight_decay;
  h.one_minus_beta1 = 1.0 - beta1, h.one_minus_beta2 = 1.0 - beta2;
  h.lerp_small = std::abs(h.one_minus_beta1) < 0.5;
  h.amsgrad = amsgrad, h.maximize = maximize;
  h.has_l2 = weight_decay != 0.0 && !decoupled;
  h.has_decay = weight_decay != 0.0 && decoupled;
  return h;
}

void SetStepScalars(KernelTable& table, const std::vector<double>& steps, double lr, double beta1, double beta2) {
  table.num_scalars = 2;
  table.scalars.resize(2 * steps.size());
  for (size_t t = 0; t < steps.size(); ++t) {
    table.scalars[2 * t + adam_cols::kStepSize] = lr / (1.0 - std::pow(beta1, steps[t]));
    table.scalars[2 * t + adam_cols::kBc2Sqrt] = std::sqrt(1.0 - std::pow(beta2, steps[t]));
  }
}

void CheckStep(const char* op, int64_t step) {
  TORCH_CHECK_VALUE(step >= 1, op, ": step must be >= 1 (the count after this update), got ", step);
}

void AddMaxList(const char* op, MultiTensorCall& call, bool amsgrad, at::TensorList max_exp_avg_sqs, bool in_place) {
  if (amsgrad) {
    if (in_place) {
      call.AddMutable("max_exp_avg_sqs", max_exp_avg_sqs);
    } else {
      call.AddInput("max_exp_avg_sqs", max_exp_avg_sqs);
    }
  } else {
    TORCH_CHECK_VALUE(max_exp_avg_sqs.empty(), op, ": max_exp_avg_sqs must be empty when amsgrad=False");
    call.AddAbsent();
  }
}

void AdamStepInPlace(at::TensorList params, at::TensorList grads, at::TensorList exp_avgs, at::TensorList exp_avg_sqs,
                     at::TensorList max_exp_avg_sqs, at::TensorList state_steps, double lr, double beta1, double beta2,
                     double weight_decay, double eps, bool amsgrad, bool maximize, bool decoupled_weight_decay) {
  constexpr const char* op = "fused_optim::adam_step_";
  const auto hyper = MakeHyper(op, lr, beta1, beta2, weight_decay, eps, amsgrad, maximize, decoupled_weight_decay);
  MultiTensorCall call(op, params);
  call.AddMutable("params", params);
  call.AddInput("grads", grads);
  call.AddMutable("exp_avgs", exp_avgs);
  call.AddMutable("exp_avg_sqs", exp_avg_sqs);
  AddMaxList(op, call, amsgrad, max_exp_avg_sqs, /*in_place=*/true);
  CheckStepTensors(op, state_steps, call.size());
  KernelTable table = call.Table();
  if (ValidateOnly()) return;                                            // every check has run; nothing is written yet
  SetStepScalars(table, IncrementSteps(state_steps), lr, beta1, beta2);  // first modification
  FUSED_OPTIM_LAUNCH(call, table, AdamStep, hyper);
}

std::tuple<TensorVector, TensorVector, TensorVector, TensorVector> AdamUpdate(
    at::TensorList params, at::TensorList grads, at::TensorList exp_avgs, at::TensorList exp_avg_sqs,
    at::TensorList max_exp_avg_sqs, int64_t step, double lr, double beta1, double beta2, double weight_decay,
    double eps, bool amsgrad, bool maximize, bool decoupled_weight_decay) {
  constexpr const char* op = "fused_optim::adam_update";
  const auto hyper = MakeHyper(op, lr, beta1, beta2, weight_decay, eps, amsgrad, maximize, decoupled_weight_decay);
  CheckStep(op, step);
  MultiTensorCall call(op, params);
  TensorVector new_params = call.AddOutputFrom("params", params);
  call.AddInput("grads", grads);
  TensorVector new_exp_avgs = call.AddOutputFrom("exp_avgs", exp_avgs);
  TensorVector new_exp_avg_sqs = call.AddOutputFrom("exp_avg_sqs", exp_avg_sqs);
  TensorVector new_max;
  if (amsgrad) {
    new_max = call.AddOutputFrom("max_exp_avg_sqs", max_exp_avg_sqs);
  } else {
    AddMaxList(op, call, amsgrad, max_exp_avg_sqs, false);
  }
  KernelTable table = call.Table();
  SetStepScalars(table, std::vector<double>(call.size(), static_cast<double>(step)), lr, beta1, beta2);
  FUSED_OPTIM_LAUNCH(call, table, AdamStep, hyper);
  return {std::move(new_params), std::move(new_exp_avgs), std::move(new_exp_avg_sqs), std::move(new_max)};
}

std::tuple<TensorVector, TensorVector, TensorVector, TensorVector, TensorVector> AdamUpdateBackward(
    const OptionalTensorList& grad_new_params, const OptionalTensorList& grad_new_exp_avgs,
    const OptionalTensorList& grad_new_exp_avg_sqs, const OptionalTensorList& grad_new_max_exp_avg_sqs,
    at::TensorList params, at::TensorList grads, at::TensorList exp_avgs, at::TensorList exp_avg_sqs,
    at::TensorList max_exp_avg_sqs, int64_t step, double lr, double beta1, double beta2, double weight_decay,
    double eps, bool amsgrad, bool maximize, bool decoupled_weight_decay) {
  constexpr const char* op = "fused_optim::adam_update_backward";
  const auto hyper = MakeHyper(op, lr, beta1, beta2, weight_decay, eps, amsgrad, maximize, decoupled_weight_decay);
  CheckStep(op, step);
  MultiTensorCall call(op, params);
  call.AddOptionalInput("grad_new_params", grad_new_params);
  call.AddOptionalInput("grad_new_exp_avgs", grad_new_exp_avgs);
  call.AddOptionalInput("grad_new_exp_avg_sqs", grad_new_exp_avg_sqs);
  call.AddOptionalInput("grad_new_max_exp_avg_sqs", amsgrad ? grad_new_max_exp_avg_sqs : OptionalTensorList());
  call.AddInput("params", params);
  call.AddInput("grads", grads);
  call.AddInput("exp_avgs", exp_avgs);
  call.AddInput("exp_avg_sqs", exp_avg_sqs);
  AddMaxList(op, call, amsgrad, max_exp_avg_sqs, false);
  TensorVector grad_params = call.AddOutput();
  TensorVector grad_grads = call.AddOutput();
  TensorVector grad_exp_avgs = call.AddOutput();
  TensorVector grad_exp_avg_sqs = call.AddOutput();
  TensorVector grad_max;
  if (amsgrad) {
    grad_max = call.AddOutput();
  } else {
    call.AddAbsent();
  }
  KernelTable table = call.Table();
  SetStepScalars(table, std::vector<double>(call.size(), static_cast<double>(step)), lr, beta1, beta2);
  FUSED_OPTIM_LAUNCH(call, table, AdamBackward, hyper);
  return {std::move(grad_params), std::move(grad_grads), std::move(grad_exp_avgs), std::move(grad_exp_avg_sqs),
          std::move(grad_max)};
}

math::AdamDirectionHyper<double> MakeDirectionHyper(const char* op, int64_t step, double beta1, double beta2,
                                                    double eps, double eps_root) {
  CheckStep(op, step);
  CheckUnitInterval(op, "beta1", beta1);
  CheckUnitInterval(op, "beta2", beta2);
  CheckNonNegative(op, "epsilon", eps);
  CheckNonNegative(op, "eps_root", eps_root);
  const double s = static_cast<double>(step);
  return {beta1, beta2, eps, eps_root, 1.0 - std::pow(beta1, s), 1.0 - std::pow(beta2, s), 1.0 - beta1, 1.0 - beta2};
}

std::tuple<TensorVector, TensorVector, TensorVector> AdamDirection(at::TensorList grads, at::TensorList exp_avgs,
                                                                   at::TensorList exp_avg_sqs, int64_t step,
                                                                   double beta1, double beta2, double eps,
                                                                   double eps_root) {
  constexpr const char* op = "fused_optim::adam_direction";
  const auto hyper = MakeDirectionHyper(op, step, beta1, beta2, eps, eps_root);
  MultiTensorCall call(op, grads);
  call.AddInput("grads", grads);
  TensorVector new_exp_avgs = call.AddOutputFrom("exp_avgs", exp_avgs);
  TensorVector new_exp_avg_sqs = call.AddOutputFrom("exp_avg_sqs", exp_avg_sqs);
  TensorVector directions = call.AddOutput();
  KernelTable table = call.Table();
  FUSED_OPTIM_LAUNCH(call, table, AdamDirection, hyper);
  return {std::move(directions), std::move(new_exp_avgs), std::move(new_exp_avg_sqs)};
}

std::tuple<TensorVector, TensorVector, TensorVector> AdamDirectionBackward(
    const OptionalTensorList& grad_directions, const OptionalTensorList& grad_new_exp_avgs,
    const OptionalTensorList& grad_new_exp_avg_sqs, at::TensorList grads, at::TensorList exp_avgs,
    at::TensorList exp_avg_sqs, int64_t step, double beta1, double beta2, double eps, double eps_root) {
  constexpr const char* op = "fused_optim::adam_direction_backward";
  const auto hyper = MakeDirectionHyper(op, step, beta1, beta2, eps, eps_root);
  MultiTensorCall call(op, grads);
  call.AddInput("grads", grads);
  call.AddInput("exp_avgs", exp_avgs);
  call.AddInput("exp_avg_sqs", exp_avg_sqs);
  call.AddOptionalInput("grad_directions", grad_directions);
  call.AddOptionalInput("grad_new_exp_avgs", grad_new_exp_avgs);
  call.AddOptionalInput("grad_new_exp_avg_sqs", grad_new_exp_avg_sqs);
  TensorVector grad_grads = call.AddOutput();
  TensorVector grad_exp_avgs = call.AddOutput();
  TensorVector grad_exp_avg_sqs = call.AddOutput();
  KernelTable table = call.Table();
  FUSED_OPTIM_LAUNCH(call, table, AdamDirectionBackward, hyper);
  return {std::move(grad_grads), std::move(grad_exp_avgs), std::move(grad_exp_avg_sqs)};
}

}  // namespace

#define FUSED_OPTIM_REGISTER_ADAM(m)                   \
  m.impl("adam_step_", &AdamStepInPlace);              \
  m.impl("adam_update", &AdamUpdate);                  \
  m.impl("adam_update_backward", &AdamUpdateBackward); \
  m.impl("adam_direction", &AdamDirection);            \
  m.impl("adam_direction_backward", &AdamDirectionBackward);

TORCH_LIBRARY_IMPL(fused_optim, CPU, m){FUSED_OPTIM_REGISTER_ADAM(m)}
// Sparse inputs reach the same code, which rejects them with a clear error.
TORCH_LIBRARY_IMPL(fused_optim, SparseCPU, m){FUSED_OPTIM_REGISTER_ADAM(m)}
#ifdef FUSED_OPTIM_WITH_CUDA
TORCH_LIBRARY_IMPL(fused_optim, CUDA, m) {
  FUSED_OPTIM_REGISTER_ADAM(m)
}
#endif

}  // namespace fused_optim
