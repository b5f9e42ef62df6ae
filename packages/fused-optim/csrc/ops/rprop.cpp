// Rprop ops: argument checks and outputs; the element math (sign agreement, step-size update and
// the signed step) is math/rprop.h. Rprop has no per-tensor scalars: its learning rate only seeds
// the step sizes, which the caller creates.
#include "multi_tensor.h"

namespace fused_optim {
namespace {

math::RpropHyper<double> MakeRpropHyper(const char* op, double etaminus, double etaplus, double step_size_min,
                                        double step_size_max, bool maximize) {
  FUSED_OPTIM_CHECK_VALUE(0.0 < etaminus && etaminus < 1.0 && 1.0 < etaplus, op,
                          ": the etas must satisfy 0 < etaminus < 1 < etaplus, got etaminus=", etaminus,
                          ", etaplus=", etaplus);
  FUSED_OPTIM_CHECK_VALUE(!std::isnan(step_size_min) && !std::isnan(step_size_max), op,
                          ": step_size_min and step_size_max must not be NaN");
  return {etaminus, etaplus, step_size_min, step_size_max, maximize};
}

void RpropStepInPlace(TensorListArg params, TensorListArg grads, TensorListArg prevs, TensorListArg step_sizes,
                      TensorListArg state_steps, double lr, double etaminus, double etaplus, double step_size_min,
                      double step_size_max, bool maximize, const std::optional<Tensor>& grad_scale,
                      const std::optional<Tensor>& found_inf, bool capturable) {
  constexpr const char* op = "fused_optim::rprop_step_";
  CheckNonNegative(op, "learning rate", lr);  // it seeds new parameters' step sizes (done by the caller)
  StepInPlace(op, FUSED_OPTIM_KERNEL(RpropStep),
              MakeRpropHyper(op, etaminus, etaplus, step_size_min, step_size_max, maximize), params, grads,
              {{"prevs", prevs}, {"step_sizes", step_sizes}}, state_steps, {grad_scale, found_inf}, capturable);
}

Lists<3> RpropUpdate(TensorListArg params, TensorListArg grads, TensorListArg prevs, TensorListArg step_sizes,
                     double etaminus, double etaplus, double step_size_min, double step_size_max, bool maximize) {
  constexpr const char* op = "fused_optim::rprop_update";
  return Update(op, FUSED_OPTIM_KERNEL(RpropStep),
                MakeRpropHyper(op, etaminus, etaplus, step_size_min, step_size_max, maximize), params, grads,
                {{"prevs", prevs}, {"step_sizes", step_sizes}});
}

Lists<4> RpropUpdateBackward(const OptionalTensorList& grad_new_params, const OptionalTensorList& grad_new_prevs,
                             const OptionalTensorList& grad_new_step_sizes, TensorListArg grads, TensorListArg prevs,
                             TensorListArg step_sizes, double etaminus, double etaplus, double step_size_min,
                             double step_size_max, bool maximize) {
  constexpr const char* op = "fused_optim::rprop_update_backward";
  return UpdateBackward<4>(op, FUSED_OPTIM_KERNEL(RpropBackward),
                           MakeRpropHyper(op, etaminus, etaplus, step_size_min, step_size_max, maximize), grads,
                           {{"grad_new_params", grad_new_params},
                            {"grad_new_prevs", grad_new_prevs},
                            {"grad_new_step_sizes", grad_new_step_sizes}},
                           {{"grads", grads}, {"prevs", prevs}, {"step_sizes", step_sizes}});
}

}  // namespace

// clang-format off
FUSED_OPTIM_OPS(rprop, op) {
  op.Add<&RpropStepInPlace>("rprop_step_(Tensor(a!)[] params, Tensor(g!)[] grads, Tensor(b!)[] prevs, Tensor(c!)[] step_sizes, "
     "Tensor(d!)[] state_steps, *, float lr, float etaminus, float etaplus, float step_size_min, "
     "float step_size_max, bool maximize, " FUSED_OPTIM_STEP_ARGS ") -> ()");
  op.Add<&RpropUpdate>("rprop_update(Tensor[] params, Tensor[] grads, Tensor[] prevs, Tensor[] step_sizes, *, float etaminus, "
     "float etaplus, float step_size_min, float step_size_max, bool maximize) -> (Tensor[], Tensor[], Tensor[])");
  op.Add<&RpropUpdateBackward>("rprop_update_backward(Tensor?[] grad_new_params, Tensor?[] grad_new_prevs, Tensor?[] grad_new_step_sizes, "
     "Tensor[] grads, Tensor[] prevs, Tensor[] step_sizes, *, float etaminus, float etaplus, float step_size_min, "
     "float step_size_max, bool maximize) -> (Tensor[], Tensor[], Tensor[], Tensor[])");
}
// clang-format on

}  // namespace fused_optim
