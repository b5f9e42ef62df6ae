// Adadelta ops: argument checks and outputs; the element math runs in csrc/cpu/adadelta.cpp or
// csrc/cuda/adadelta.cu.
#include <torch/library.h>

#include <tuple>

#include "ops/launch.h"

namespace fused_optim {
namespace {

math::AdadeltaHyper<double> MakeHyper(const char* op, double lr, double rho, double eps, double weight_decay,
                                      bool maximize) {
  CheckNonNegative(op, "learning rate", lr);
  TORCH_CHECK_VALUE(rho >= 0.0 && rho <= 1.0, op, ": invalid rho value: ", rho, " (must be in [0, 1])");
  CheckNonNegative(op, "epsilon", eps);
  CheckNonNegative(op, "weight_decay", weight_decay);
  math::AdadeltaHyper<double> h{};
  h.lr = lr, h.rho = rho, h.eps = eps, h.weight_decay = weight_decay;
  h.one_minus_rho = 1.0 - rho;
  h.maximize = maximize, h.has_l2 = weight_decay != 0.0;
  return h;
}

void AdadeltaStepInPlace(at::TensorList params, at::TensorList grads, at::TensorList square_avgs,
                         at::TensorList acc_deltas, at::TensorList state_steps, double lr, double rho, double eps,
                         double weight_decay, bool maximize) {
  constexpr const char* op = "fused_optim::adadelta_step_";
  const auto hyper = MakeHyper(op, lr, rho, eps, weight_decay, maximize);
  MultiTensorCall call(op, params);
  call.AddMutable("params", params);
  call.AddInput("grads", grads);
  call.AddMutable("square_avgs", square_avgs);
  call.AddMutable("acc_deltas", acc_deltas);
  CheckStepTensors(op, state_steps, call.size());
  KernelTable table = call.Table();
  if (ValidateOnly()) return;   // every check has run; nothing is written yet
  IncrementSteps(state_steps);  // first modification
  FUSED_OPTIM_LAUNCH(call, table, AdadeltaStep, hyper);
}

std::tuple<TensorVector, TensorVector, TensorVector> AdadeltaUpdate(at::TensorList params, at::TensorList grads,
                                                                    at::TensorList square_avgs,
                                                                    at::TensorList acc_deltas, double lr, double rho,
                                                                    double eps, double weight_decay, bool maximize) {
  constexpr const char* op = "fused_optim::adadelta_update";
  const auto hyper = MakeHyper(op, lr, rho, eps, weight_decay, maximize);
  MultiTensorCall call(op, params);
  TensorVector new_params = call.AddOutputFrom("params", params);
  call.AddInput("grads", grads);
  TensorVector new_square_avgs = call.AddOutputFrom("square_avgs", square_avgs);
  TensorVector new_acc_deltas = call.AddOutputFrom("acc_deltas", acc_deltas);
  KernelTable table = call.Table();
  FUSED_OPTIM_LAUNCH(call, table, AdadeltaStep, hyper);
  return {std::move(new_params), std::move(new_square_avgs), std::move(new_acc_deltas)};
}

std::tuple<TensorVector, TensorVector, TensorVector, TensorVector> AdadeltaUpdateBackward(
    const OptionalTensorList& grad_new_params, const OptionalTensorList& grad_new_square_avgs,
    const OptionalTensorList& grad_new_acc_deltas, at::TensorList params, at::TensorList grads,
    at::TensorList square_avgs, at::TensorList acc_deltas, double lr, double rho, double eps, double weight_decay,
    bool maximize) {
  constexpr const char* op = "fused_optim::adadelta_update_backward";
  const auto hyper = MakeHyper(op, lr, rho, eps, weight_decay, maximize);
  MultiTensorCall call(op, params);
  call.AddOptionalInput("grad_new_params", grad_new_params);
  call.AddOptionalInput("grad_new_square_avgs", grad_new_square_avgs);
  call.AddOptionalInput("grad_new_acc_deltas", grad_new_acc_deltas);
  call.AddInput("params", params);
  call.AddInput("grads", grads);
  call.AddInput("square_avgs", square_avgs);
  call.AddInput("acc_deltas", acc_deltas);
  TensorVector grad_params = call.AddOutput();
  TensorVector grad_grads = call.AddOutput();
  TensorVector grad_square_avgs = call.AddOutput();
  TensorVector grad_acc_deltas = call.AddOutput();
  KernelTable table = call.Table();
  FUSED_OPTIM_LAUNCH(call, table, AdadeltaBackward, hyper);
  return {std::move(grad_params), std::move(grad_grads), std::move(grad_square_avgs), std::move(grad_acc_deltas)};
}

}  // namespace

#define FUSED_OPTIM_REGISTER_ADADELTA(m)          \
  m.impl("adadelta_step_", &AdadeltaStepInPlace); \
  m.impl("adadelta_update", &AdadeltaUpdate);     \
  m.impl("adadelta_update_backward", &AdadeltaUpdateBackward);

TORCH_LIBRARY_IMPL(fused_optim, CPU, m){FUSED_OPTIM_REGISTER_ADADELTA(m)}
// Sparse inputs reach the same code, which rejects them with a clear error.
TORCH_LIBRARY_IMPL(fused_optim, SparseCPU, m){FUSED_OPTIM_REGISTER_ADADELTA(m)}
#ifdef FUSED_OPTIM_WITH_CUDA
TORCH_LIBRARY_IMPL(fused_optim, CUDA, m) {
  FUSED_OPTIM_REGISTER_ADADELTA(m)
}
#endif

}  // namespace fused_optim
