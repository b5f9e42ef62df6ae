// Lion ops: schemas, argument checks and outputs; the element math and the kernel columns are in
// math/lion.h.
#include "multi_tensor.h"

namespace fused_optim {
namespace {

math::LionHyper<double> MakeLionHyper(const char* op, double lr, double beta1, double beta2, double weight_decay,
                                      bool maximize) {
  CheckNonNegative(op, "learning rate", lr);
  CheckUnitInterval(op, {{"beta1", beta1}, {"beta2", beta2}});
  CheckNonNegative(op, "weight_decay", weight_decay);
  math::LionHyper<double> h{};
  h.lr = lr, h.beta1 = beta1, h.beta2 = beta2;
  h.decay = 1.0 - lr * weight_decay;
  h.one_minus_beta1 = 1.0 - beta1, h.one_minus_beta2 = 1.0 - beta2;
  h.maximize = maximize, h.has_decay = weight_decay != 0.0;
  return h;
}

void LionStepInPlace(TensorListArg params, TensorListArg grads, TensorListArg exp_avgs, TensorListArg state_steps,
                     double lr, double beta1, double beta2, double weight_decay, bool maximize,
                     const std::optional<Tensor>& grad_scale, const std::optional<Tensor>& found_inf, bool capturable) {
  constexpr const char* op = "fused_optim::lion_step_";
  // Lion reads no step count; its torch-style state keeps one all the same.
  StepInPlace(op, FUSED_OPTIM_KERNEL(LionStep), MakeLionHyper(op, lr, beta1, beta2, weight_decay, maximize), params,
              grads, {{"exp_avgs", exp_avgs}}, state_steps, {grad_scale, found_inf}, capturable);
}

Lists<2> LionUpdate(TensorListArg params, TensorListArg grads, TensorListArg exp_avgs, double lr, double beta1,
                    double beta2, double weight_decay, bool maximize) {
  constexpr const char* op = "fused_optim::lion_update";
  return Update(op, FUSED_OPTIM_KERNEL(LionStep), MakeLionHyper(op, lr, beta1, beta2, weight_decay, maximize), params,
                grads, {{"exp_avgs", exp_avgs}});
}

Lists<3> LionUpdateBackward(const OptionalTensorList& grad_new_params, const OptionalTensorList& grad_new_exp_avgs,
                            TensorListArg params, double lr, double beta1, double beta2, double weight_decay,
                            bool maximize) {
  constexpr const char* op = "fused_optim::lion_update_backward";
  // params only give the shapes: the gradients do not depend on values
  return UpdateBackward<3>(op, FUSED_OPTIM_KERNEL(LionBackward),
                           MakeLionHyper(op, lr, beta1, beta2, weight_decay, maximize), params,
                           {{"grad_new_params", grad_new_params}, {"grad_new_exp_avgs", grad_new_exp_avgs}}, {});
}

}  // namespace

// clang-format off
FUSED_OPTIM_OPS(lion, op) {
  op.Add<&LionStepInPlace>("lion_step_(Tensor(a!)[] params, Tensor(g!)[] grads, Tensor(b!)[] exp_avgs, Tensor(c!)[] state_steps, *, "
     "float lr, float beta1, float beta2, float weight_decay, bool maximize, " FUSED_OPTIM_STEP_ARGS ") -> ()");
  op.Add<&LionUpdate>("lion_update(Tensor[] params, Tensor[] grads, Tensor[] exp_avgs, *, float lr, float beta1, float beta2, "
     "float weight_decay, bool maximize) -> (Tensor[], Tensor[])");
  op.Add<&LionUpdateBackward>("lion_update_backward(Tensor?[] grad_new_params, Tensor?[] grad_new_exp_avgs, Tensor[] params, *, "
     "float lr, float beta1, float beta2, float weight_decay, bool maximize) -> (Tensor[], Tensor[], Tensor[])");
}
// clang-format on

}  // namespace fused_optim
