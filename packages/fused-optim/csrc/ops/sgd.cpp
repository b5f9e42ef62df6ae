// SGD ops: argument checks and outputs; the element math runs in csrc/cpu/sgd.cpp or csrc/cuda/sgd.cu.
#include <torch/library.h>

#include <tuple>

#include "ops/launch.h"

namespace fused_optim {
namespace {

math::SgdHyper<double> MakeHyper(const char* op, double lr, double momentum, double dampening, double weight_decay,
                                 bool nesterov, bool maximize, bool first_step) {
  CheckNonNegative(op, "learning rate", lr);
  CheckNonNegative(op, "momentum", momentum);
  CheckNonNegative(op, "weight_decay", weight_decay);
  TORCH_CHECK_VALUE(!nesterov || (momentum > 0.0 && dampening == 0.0), op,
                    ": Nesterov momentum requires a momentum and zero dampening");
  math::SgdHyper<double> h{};
  h.lr = lr, h.momentum = momentum, h.dampening = dampening, h.weight_decay = weight_decay;
  h.one_minus_dampening = 1.0 - dampening;
  h.nesterov = nesterov, h.maximize = maximize;
  h.has_l2 = weight_decay != 0.0;
  h.has_momentum = momentum != 0.0;
  h.first_step = first_step;
  return h;
}

void CheckNoBuffers(const char* op, at::TensorList momentum_buffers, const char* when) {
  TORCH_CHECK_VALUE(momentum_buffers.empty(), op, ": momentum_buffers must be empty ", when);
}

void SgdStepInPlace(at::TensorList params, at::TensorList grads, at::TensorList momentum_buffers, double lr,
                    double momentum, double dampening, double weight_decay, bool nesterov, bool maximize,
                    bool first_step) {
  constexpr const char* op = "fused_optim::sgd_step_";
  const auto hyper = MakeHyper(op, lr, momentum, dampening, weight_decay, nesterov, maximize, first_step);
  MultiTensorCall call(op, params);
  call.AddMutable("params", params);
  call.AddInput("grads", grads);
  if (hyper.has_momentum) {
    call.AddMutable("momentum_buffers", momentum_buffers);  // overwritten when first_step
  } else {
    CheckNoBuffers(op, momentum_buffers, "when momentum == 0");
    call.AddAbsent();
  }
  KernelTable table = call.Table();
  if (ValidateOnly()) return;  // every check has run; nothing is written yet
  FUSED_OPTIM_LAUNCH(call, table, SgdStep, hyper);
}

std::tuple<TensorVector, TensorVector> SgdUpdate(at::TensorList params, at::TensorList grads,
                                                 at::TensorList momentum_buffers, double lr, double momentum,
                                                 double dampening, double weight_decay, bool nesterov, bool maximize,
                                                 bool first_step) {
  constexpr const char* op = "fused_optim::sgd_update";
  const auto hyper = MakeHyper(op, lr, momentum, dampening, weight_decay, nesterov, maximize, first_step);
  MultiTensorCall call(op, params);
  TensorVector new_params = call.AddOutputFrom("params", params);
  call.AddInput("grads", grads);
  TensorVector new_buffers;
  if (!hyper.has_momentum) {
    CheckNoBuffers(op, momentum_buffers, "when momentum == 0");
    call.AddAbsent();
  } else if (first_step) {
    CheckNoBuffers(op, momentum_buffers, "on the first step (the buffers start as the gradient)");
    new_buffers = call.AddOutput();
  } else {
    new_buffers = call.AddOutputFrom("momentum_buffers", momentum_buffers);
  }
  KernelTable table = call.Table();
  FUSED_OPTIM_LAUNCH(call, table, SgdStep, hyper);
  return {std::move(new_params), std::move(new_buffers)};
}

std::tuple<TensorVector, TensorVector, TensorVector> SgdUpdateBackward(
    const OptionalTensorList& grad_new_params, const OptionalTensorList& grad_new_momentum_buffers,
    at::TensorList params, double lr, double momentum, double dampening, double weight_decay, bool nesterov,
    bool maximize, bool first_step) {
  constexpr const char* op = "fused_optim::sgd_update_backward";
  const auto hyper = MakeHyper(op, lr, momentum, dampening, weight_decay, nesterov, maximize, first_step);
  MultiTensorCall call(op, params);
  call.AddOptionalInput("grad_new_params", grad_new_params);
  call.AddOptionalInput("grad_new_momentum_buffers",
                        hyper.has_momentum ? grad_new_momentum_buffers : OptionalTensorList());
  TensorVector grad_params = call.AddOutput();
  TensorVector grad_grads = call.AddOutput();
  TensorVector grad_buffers;
  if (hyper.has_momentum && !first_step) {
    grad_buffers = call.AddOutput();
  } else {
    call.AddAbsent();
  }
  KernelTable table = call.Table();
  FUSED_OPTIM_LAUNCH(call, table, SgdBackward, hyper);
  return {std::move(grad_params), std::move(grad_grads), std::move(grad_buffers)};
}

}  // namespace

#define FUSED_OPTIM_REGISTER_SGD(m)     \
  m.impl("sgd_step_", &SgdStepInPlace); \
  m.impl("sgd_update", &SgdUpdate);     \
  m.impl("sgd_update_backward", &SgdUpdateBackward);

TORCH_LIBRARY_IMPL(fused_optim, CPU, m){FUSED_OPTIM_REGISTER_SGD(m)}
// Sparse inputs reach the same code, which rejects them with a clear error.
TORCH_LIBRARY_IMPL(fused_optim, SparseCPU, m){FUSED_OPTIM_REGISTER_SGD(m)}
#ifdef FUSED_OPTIM_WITH_CUDA
TORCH_LIBRARY_IMPL(fused_optim, CUDA, m) {
  FUSED_OPTIM_REGISTER_SGD(m)
}
#endif

}  // namespace fused_optim
