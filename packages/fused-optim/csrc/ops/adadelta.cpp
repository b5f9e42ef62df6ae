// Adadelta ops: argument checks and outputs; the element math and the kernel columns are in math/adadelta.h.
#include "multi_tensor.h"

namespace fused_optim {
namespace {

math::AdadeltaHyper<double> MakeAdadeltaHyper(const char* op, double lr, double rho, double eps, double weight_decay,
                                              bool maximize) {
  CheckNonNegative(op, "learning rate", lr);
  FUSED_OPTIM_CHECK_VALUE(rho >= 0.0 && rho <= 1.0, op, ": invalid rho value: ", rho, " (must be in [0, 1])");
  CheckNonNegative(op, {{"epsilon", eps}, {"weight_decay", weight_decay}});
  math::AdadeltaHyper<double> h{};
  h.lr = lr, h.rho = rho, h.eps = eps, h.weight_decay = weight_decay;
  h.one_minus_rho = 1.0 - rho;
  h.maximize = maximize, h.has_l2 = weight_decay != 0.0;
  return h;
}

void AdadeltaStepInPlace(TensorListArg params, TensorListArg grads, TensorListArg square_avgs, TensorListArg acc_deltas,
                         TensorListArg state_steps, double lr, double rho, double eps, double weight_decay,
                         bool maximize, const std::optional<Tensor>& grad_scale, const std::optional<Tensor>& found_inf,
                         bool capturable) {
  constexpr const char* op = "fused_optim::adadelta_step_";
  StepInPlace(op, FUSED_OPTIM_KERNEL(AdadeltaStep), MakeAdadeltaHyper(op, lr, rho, eps, weight_decay, maximize), params,
              grads, {{"square_avgs", square_avgs}, {"acc_deltas", acc_deltas}}, state_steps, {grad_scale, found_inf},
              capturable);
}

Lists<3> AdadeltaUpdate(TensorListArg params, TensorListArg grads, TensorListArg square_avgs, TensorListArg acc_deltas,
                        double lr, double rho, double eps, double weight_decay, bool maximize) {
  constexpr const char* op = "fused_optim::adadelta_update";
  return Update(op, FUSED_OPTIM_KERNEL(AdadeltaStep), MakeAdadeltaHyper(op, lr, rho, eps, weight_decay, maximize),
                params, grads, {{"square_avgs", square_avgs}, {"acc_deltas", acc_deltas}});
}

Lists<4> AdadeltaUpdateBackward(const OptionalTensorList& grad_new_params,
                                const OptionalTensorList& grad_new_square_avgs,
                                const OptionalTensorList& grad_new_acc_deltas, TensorListArg params,
                                TensorListArg grads, TensorListArg square_avgs, TensorListArg acc_deltas, double lr,
                                double rho, double eps, double weight_decay, bool maximize) {
  constexpr const char* op = "fused_optim::adadelta_update_backward";
  return UpdateBackward<4>(
      op, FUSED_OPTIM_KERNEL(AdadeltaBackward), MakeAdadeltaHyper(op, lr, rho, eps, weight_decay, maximize), params,
      {{"grad_new_params", grad_new_params},
       {"grad_new_square_avgs", grad_new_square_avgs},
       {"grad_new_acc_deltas", grad_new_acc_deltas}},
      {{"params", params}, {"grads", grads}, {"square_avgs", square_avgs}, {"acc_deltas", acc_deltas}});
}

}  // namespace

// clang-format off
FUSED_OPTIM_OPS(adadelta, op) {
  op.Add<&AdadeltaStepInPlace>("adadelta_step_(Tensor(a!)[] params, Tensor(g!)[] grads, Tensor(b!)[] square_avgs, Tensor(c!)[] acc_deltas, "
     "Tensor(d!)[] state_steps, *, float lr, float rho, float eps, float weight_decay, bool maximize, "
     FUSED_OPTIM_STEP_ARGS ") -> ()");
  op.Add<&AdadeltaUpdate>("adadelta_update(Tensor[] params, Tensor[] grads, Tensor[] square_avgs, Tensor[] acc_deltas, *, float lr, "
     "float rho, float eps, float weight_decay, bool maximize) -> (Tensor[], Tensor[], Tensor[])");
  op.Add<&AdadeltaUpdateBackward>("adadelta_update_backward(Tensor?[] grad_new_params, Tensor?[] grad_new_square_avgs, "
     "Tensor?[] grad_new_acc_deltas, Tensor[] params, Tensor[] grads, Tensor[] square_avgs, "
     "Tensor[] acc_deltas, *, float lr, float rho, float eps, float weight_decay, bool maximize) "
     "-> (Tensor[], Tensor[], Tensor[], Tensor[])");
}
// clang-format on

}  // namespace fused_optim
