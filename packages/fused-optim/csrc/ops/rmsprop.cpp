// RMSprop ops: argument checks and outputs; the element math runs in csrc/cpu/rmsprop.cpp or
// csrc/cuda/rmsprop.cu.
#include <torch/library.h>

#include <cmath>
#include <tuple>

#include "ops/launch.h"

namespace fused_optim {
namespace {

math::RmspropHyper<double> MakeHyper(const char* op, double lr, double alpha, double eps, double weight_decay,
                                     double momentum, bool centered, bool maximize) {
  CheckNonNegative(op, "learning rate", lr);
  CheckNonNegative(op, "epsilon", eps);
  CheckNonNegative(op, "momentum", momentum);
  CheckNonNegative(op, "weight_decay", weight_decay);
  CheckNonNegative(op, "alpha", alpha);
  math::RmspropHyper<double> h{};
  h.lr = lr, h.alpha = alpha, h.eps = eps, h.weight_decay = weight_decay, h.momentum = momentum;
  h.one_minus_alpha = 1.0 - alpha;
  h.lerp_small = std::abs(h.one_minus_alpha) < 0.5;
  h.centered = centered, h.maximize = maximize;
  h.has_l2 = weight_decay != 0.0;
  h.has_momentum = momentum > 0.0;
  return h;
}

void CheckEmpty(const char* op, at::TensorList list, const char* what) {
  TORCH_CHECK_VALUE(list.empty(), op, ": ", what);
}

void RmspropStepInPlace(at::TensorList params, at::TensorList grads, at::TensorList square_avgs,
                        at::TensorList grad_avgs, at::TensorList momentum_buffers, at::TensorList state_steps,
                        double lr, double alpha, double eps, double weight_decay, double momentum, bool centered,
                        bool maximize) {
  constexpr const char* op = "fused_optim::rmsprop_step_";
  const auto hyper = MakeHyper(op, lr, alpha, eps, weight_decay, momentum, centered, maximize);
  MultiTensorCall call(op, params);
  call.AddMutable("params", params);
  call.AddInput("grads", grads);
  call.AddMutable("square_avgs", square_avgs);
  if (centered) {
    call.AddMutable("grad_avgs", grad_avgs);
  } else {
    CheckEmpty(op, grad_avgs, "grad_avgs must be empty when centered=False");
    call.AddAbsent();
  }
  if (hyper.has_momentum) {
    call.AddMutable("momentum_buffers", momentum_buffers);
  } else {
    CheckEmpty(op, momentum_buffers, "momentum_buffers must be empty when momentum == 0");
    call.AddAbsent();
  }
  CheckStepTensors(op, state_steps, call.size());
  KernelTable table = call.Table();
  if (ValidateOnly()) return;   // every check has run; nothing is written yet
  IncrementSteps(state_steps);  // first modification
  FUSED_OPTIM_LAUNCH(call, table, RmspropStep, hyper);
}

std::tuple<TensorVector, TensorVector, TensorVector, TensorVector> RmspropUpdate(
    at::TensorList params, at::TensorList grads, at::TensorList square_avgs, at::TensorList grad_avgs,
    at::TensorList momentum_buffers, double lr, double alpha, double eps, double weight_decay, double momentum,
    bool centered, bool maximize) {
  constexpr const char* op = "fused_optim::rmsprop_update";
  const auto hyper = MakeHyper(op, lr, alpha, eps, weight_decay, momentum, centered, maximize);
  MultiTensorCall call(op, params);
  TensorVector new_params = call.AddOutputFrom("params", params);
  call.AddInput("grads", grads);
  TensorVector new_square_avgs = call.AddOutputFrom("square_avgs", square_avgs);
  TensorVector new_grad_avgs, new_buffers;
  if (centered) {
    new_grad_avgs = call.AddOutputFrom("grad_avgs", grad_avgs);
  } else {
    CheckEmpty(op, grad_avgs, "grad_avgs must be empty when centered=False");
    call.AddAbsent();
  }
  if (hyper.has_momentum) {
    new_buffers = call.AddOutputFrom("momentum_buffers", momentum_buffers);
  } else {
    CheckEmpty(op, momentum_buffers, "momentum_buffers must be empty when momentum == 0");
    call.AddAbsent();
  }
  KernelTable table = call.Table();
  FUSED_OPTIM_LAUNCH(call, table, RmspropStep, hyper);
  return {std::move(new_params), std::move(new_square_avgs), std::move(new_grad_avgs), std::move(new_buffers)};
}

std::tuple<TensorVector, TensorVector, TensorVector, TensorVector, TensorVector> RmspropUpdateBackward(
    const OptionalTensorList& grad_new_params, const OptionalTensorList& grad_new_square_avgs,
    const OptionalTensorList& grad_new_grad_avgs, const OptionalTensorList& grad_new_momentum_buffers,
    at::TensorList params, at::TensorList grads, at::TensorList square_avgs, at::TensorList grad_avgs, double lr,
    double alpha, double eps, double weight_decay, double momentum, bool centered, bool maximize) {
  constexpr const char* op = "fused_optim::rmsprop_update_backward";
  const auto hyper = MakeHyper(op, lr, alpha, eps, weight_decay, momentum, centered, maximize);
  MultiTensorCall call(op, params);
  call.AddOptionalInput("grad_new_params", grad_new_params);
  call.AddOptionalInput("grad_new_square_avgs", grad_new_square_avgs);
  call.AddOptionalInput("grad_new_grad_avgs", centered ? grad_new_grad_avgs : OptionalTensorList());
  call.AddOptionalInput("grad_new_momentum_buffers",
                        hyper.has_momentum ? grad_new_momentum_buffers : OptionalTensorList());
  call.AddInput("params", params);
  call.AddInput("grads", grads);
  call.AddInput("square_avgs", square_avgs);
  if (centered) {
    call.AddInput("grad_avgs", grad_avgs);
  } else {
    CheckEmpty(op, grad_avgs, "grad_avgs must be empty when centered=False");
    call.AddAbsent();
  }
  TensorVector grad_params = call.AddOutput();
  TensorVector grad_grads = call.AddOutput();
  TensorVector grad_square_avgs = call.AddOutput();
  TensorVector grad_grad_avgs, grad_buffers;
  if (centered) {
    grad_grad_avgs = call.AddOutput();
  } else {
    call.AddAbsent();
  }
  if (hyper.has_momentum) {
    grad_buffers = call.AddOutput();
  } else {
    call.AddAbsent();
  }
  KernelTable table = call.Table();
  FUSED_OPTIM_LAUNCH(call, table, RmspropBackward, hyper);
  return {std::move(grad_params), std::move(grad_grads), std::move(grad_square_avgs), std::move(grad_grad_avgs),
          std::move(grad_buffers)};
}

}  // namespace

#define FUSED_OPTIM_REGISTER_RMSPROP(m)         \
  m.impl("rmsprop_step_", &RmspropStepInPlace); \
  m.impl("rmsprop_update", &RmspropUpdate);     \
  m.impl("rmsprop_update_backward", &RmspropUpdateBackward);

TORCH_LIBRARY_IMPL(fused_optim, CPU, m){FUSED_OPTIM_REGISTER_RMSPROP(m)}
// Sparse inputs reach the same code, which rejects them with a clear error.
TORCH_LIBRARY_IMPL(fused_optim, SparseCPU, m){FUSED_OPTIM_REGISTER_RMSPROP(m)}
#ifdef FUSED_OPTIM_WITH_CUDA
TORCH_LIBRARY_IMPL(fused_optim, CUDA, m) {
  FUSED_OPTIM_REGISTER_RMSPROP(m)
}
#endif

}  // namespace fused_optim
