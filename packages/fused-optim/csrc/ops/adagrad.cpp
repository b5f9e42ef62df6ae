// Adagrad ops: argument checks, outputs and the per-tensor decayed learning rate; the element math and the kernel
// columns are in math/adagrad.h.
#include "multi_tensor.h"

namespace fused_optim {
namespace {

math::AdagradHyper<double> MakeAdagradHyper(const char* op, double lr, double lr_decay, double weight_decay, double eps,
                                            bool maximize) {
  CheckNonNegative(op,
                   {{"learning rate", lr}, {"lr_decay", lr_decay}, {"weight_decay", weight_decay}, {"epsilon", eps}});
  math::AdagradHyper<double> h{};
  h.eps = eps, h.weight_decay = weight_decay, h.lr = lr, h.lr_decay = lr_decay, h.maximize = maximize,
  h.has_l2 = weight_decay != 0.0;
  return h;
}

// The per-tensor decayed learning rate (math/adagrad.h's StepRow).
auto AdagradStepScalars(const math::AdagradHyper<double>& hyper) {
  return ScalarRows{bind::StepSizeScalar::kNumScalars,
                    [=](double step, double* row) { bind::AdagradStep::StepRow(hyper, step, row); }};
}

void AdagradStepInPlace(TensorListArg params, TensorListArg grads, TensorListArg state_sums, TensorListArg state_steps,
                        double lr, double lr_decay, double weight_decay, double eps, bool maximize,
                        const std::optional<Tensor>& grad_scale, const std::optional<Tensor>& found_inf,
                        bool capturable) {
  constexpr const char* op = "fused_optim::adagrad_step_";
  const auto hyper = MakeAdagradHyper(op, lr, lr_decay, weight_decay, eps, maximize);
  StepInPlace(op, FUSED_OPTIM_KERNEL(AdagradStep), hyper, params, grads, {{"state_sums", state_sums}}, state_steps,
              {grad_scale, found_inf}, capturable, AdagradStepScalars(hyper));
}

Lists<2> AdagradUpdate(TensorListArg params, TensorListArg grads, TensorListArg state_sums, int64_t step, double lr,
                       double lr_decay, double weight_decay, double eps, bool maximize) {
  constexpr const char* op = "fused_optim::adagrad_update";
  const auto hyper = MakeAdagradHyper(op, lr, lr_decay, weight_decay, eps, maximize);
  return Update(op, FUSED_OPTIM_KERNEL(AdagradStep), hyper, params, grads, {{"state_sums", state_sums}}, step,
                AdagradStepScalars(hyper));
}

Lists<3> AdagradUpdateBackward(const OptionalTensorList& grad_new_params, const OptionalTensorList& grad_new_state_sums,
                               TensorListArg params, TensorListArg grads, TensorListArg state_sums, int64_t step,
                               double lr, double lr_decay, double weight_decay, double eps, bool maximize) {
  constexpr const char* op = "fused_optim::adagrad_update_backward";
  const auto hyper = MakeAdagradHyper(op, lr, lr_decay, weight_decay, eps, maximize);
  return UpdateBackward<3>(op, FUSED_OPTIM_KERNEL(AdagradBackward), hyper, params,
                           {{"grad_new_params", grad_new_params}, {"grad_new_state_sums", grad_new_state_sums}},
                           {{"params", params}, {"grads", grads}, {"state_sums", state_sums}}, step,
                           AdagradStepScalars(hyper));
}

}  // namespace

// clang-format off
FUSED_OPTIM_OPS(adagrad, op) {
  op.Add<&AdagradStepInPlace>("adagrad_step_(Tensor(a!)[] params, Tensor(g!)[] grads, Tensor(b!)[] state_sums, Tensor(c!)[] state_steps, *, "
     "float lr, float lr_decay, float weight_decay, float eps, bool maximize, " FUSED_OPTIM_STEP_ARGS ") -> ()");
  op.Add<&AdagradUpdate>("adagrad_update(Tensor[] params, Tensor[] grads, Tensor[] state_sums, *, SymInt step, float lr, "
     "float lr_decay, float weight_decay, float eps, bool maximize) -> (Tensor[], Tensor[])");
  op.Add<&AdagradUpdateBackward>("adagrad_update_backward(Tensor?[] grad_new_params, Tensor?[] grad_new_state_sums, Tensor[] params, "
     "Tensor[] grads, Tensor[] state_sums, *, SymInt step, float lr, float lr_decay, float weight_decay, float eps, "
     "bool maximize) -> (Tensor[], Tensor[], Tensor[])");
}
// clang-format on

}  // namespace fused_optim
