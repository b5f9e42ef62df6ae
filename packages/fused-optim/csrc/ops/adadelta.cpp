// Adadelta ops: argument checks and outputs; the element math and the kernel columns are in math/adadelta.h.
#include "multi_tensor.h"

namespace fused_optim {
namespace {

math::AdadeltaHyper<double> MakeHyper(const char* op, double lr, double rho, double eps, double weight_decay,
                                      bool maximize) {
  CheckNonNegative(op, "learning rate", lr);
  TORCH_CHECK_VALUE(rho >= 0.0 && rho <= 1.0, op, ": invalid rho value: ", rho, " (must be in [0, 1])");
  CheckNonNegative(op, {{"epsilon", eps}, {"weight_decay", weight_decay}});
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
  MultiTensorCall call(op, params, kInPlace);
  call.AddStep(params, grads, {{"square_avgs", square_avgs}, {"acc_deltas", acc_deltas}});
  CheckStepTensors(op, state_steps, call.size());
  if (call.ChecksOnly()) return;  // nothing is written yet
  IncrementSteps(state_steps);    // first modification
  call.Launch(FUSED_OPTIM_KERNEL(AdadeltaStep), hyper);
}

Lists<3> AdadeltaUpdate(at::TensorList params, at::TensorList grads, at::TensorList square_avgs,
                        at::TensorList acc_deltas, double lr, double rho, double eps, double weight_decay,
                        bool maximize) {
  constexpr const char* op = "fused_optim::adadelta_update";
  const auto hyper = MakeHyper(op, lr, rho, eps, weight_decay, maximize);
  MultiTensorCall call(op, params);
  Lists<3> out = call.AddStep(params, grads, {{"square_avgs", square_avgs}, {"acc_deltas", acc_deltas}});
  call.Launch(FUSED_OPTIM_KERNEL(AdadeltaStep), hyper);
  return out;
}

Lists<4> AdadeltaUpdateBackward(const OptionalTensorList& grad_new_params,
                                const OptionalTensorList& grad_new_square_avgs,
                                const OptionalTensorList& grad_new_acc_deltas, at::TensorList params,
                                at::TensorList grads, at::TensorList square_avgs, at::TensorList acc_deltas, double lr,
                                double rho, double eps, double weight_decay, bool maximize) {
  constexpr const char* op = "fused_optim::adadelta_update_backward";
  const auto hyper = MakeHyper(op, lr, rho, eps, weight_decay, maximize);
  MultiTensorCall call(op, params);
  call.AddOptionalInputs({{"grad_new_params", grad_new_params},
                          {"grad_new_square_avgs", grad_new_square_avgs},
                          {"grad_new_acc_deltas", grad_new_acc_deltas}});
  call.AddInputs({{"params", params}, {"grads", grads}, {"square_avgs", square_avgs}, {"acc_deltas", acc_deltas}});
  Lists<4> out = call.AddOutputs<4>();
  call.Launch(FUSED_OPTIM_KERNEL(AdadeltaBackward), hyper);
  return out;
}

}  // namespace

// clang-format off
FUSED_OPTIM_OPS(adadelta, op) {
  op("adadelta_step_(Tensor(a!)[] params, Tensor[] grads, Tensor(b!)[] square_avgs, Tensor(c!)[] acc_deltas, "
     "Tensor(d!)[] state_steps, *, float lr, float rho, float eps, float weight_decay, bool maximize) -> ()",
     &AdadeltaStepInPlace);
  op("adadelta_update(Tensor[] params, Tensor[] grads, Tensor[] square_avgs, Tensor[] acc_deltas, *, float lr, "
     "float rho, float eps, float weight_decay, bool maximize) -> (Tensor[], Tensor[], Tensor[])",
     &AdadeltaUpdate);
  op("adadelta_update_backward(Tensor?[] grad_new_params, Tensor?[] grad_new_square_avgs, "
     "Tensor?[] grad_new_acc_deltas, Tensor[] params, Tensor[] grads, Tensor[] square_avgs, "
     "Tensor[] acc_deltas, *, float lr, float rho, float eps, float weight_decay, bool maximize) "
     "-> (Tensor[], Tensor[], Tensor[], Tensor[])",
     &AdadeltaUpdateBackward);
}
// clang-format on

}  // namespace fused_optim
