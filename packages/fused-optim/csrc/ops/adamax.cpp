// Adamax ops: argument checks, outputs and the per-tensor bias-corrected learning rate; the
// element math runs in csrc/cpu/adamax.cpp or csrc/cuda/adamax.cu.
#include <cmath>
#include "multi_tensor.h"

namespace fused_optim {
namespace {

math::AdamaxHyper<double> MakeAdamaxHyper(const char* op, double lr, double beta1, double beta2, double eps,
                                          double weight_decay, bool maximize) {
  CheckNonNegative(op, {{"learning rate", lr}, {"epsilon", eps}});
  CheckUnitInterval(op, {{"beta1", beta1}, {"beta2", beta2}});
  CheckNonNegative(op, "weight_decay", weight_decay);
  math::AdamaxHyper<double> h{};
  h.lr = lr, h.beta1 = beta1, h.beta2 = beta2, h.eps = eps, h.weight_decay = weight_decay;
  h.one_minus_beta1 = 1.0 - beta1;
  h.lerp_small = std::abs(h.one_minus_beta1) < 0.5;
  h.maximize = maximize, h.has_l2 = weight_decay != 0.0;
  return h;
}

// The per-tensor step size lr / (1 - beta1^step) (math/adamax.h's StepRow).
auto AdamaxStepScalars(const math::AdamaxHyper<double>& hyper) {
  return ScalarRows{bind::StepSizeScalar::kNumScalars,
                    [=](double step, double* row) { bind::AdamaxStep::StepRow(hyper, step, row); }};
}

void AdamaxStepInPlace(TensorListArg params, TensorListArg grads, TensorListArg exp_avgs, TensorListArg exp_infs,
                       TensorListArg state_steps, double lr, double beta1, double beta2, double eps,
                       double weight_decay, bool maximize, const std::optional<Tensor>& grad_scale,
                       const std::optional<Tensor>& found_inf, bool capturable) {
  constexpr const char* op = "fused_optim::adamax_step_";
  const auto hyper = MakeAdamaxHyper(op, lr, beta1, beta2, eps, weight_decay, maximize);
  StepInPlace(op, FUSED_OPTIM_KERNEL(AdamaxStep), hyper, params, grads,
              {{"exp_avgs", exp_avgs}, {"exp_infs", exp_infs}}, state_steps, {grad_scale, found_inf}, capturable,
              AdamaxStepScalars(hyper));
}

Lists<3> AdamaxUpdate(TensorListArg params, TensorListArg grads, TensorListArg exp_avgs, TensorListArg exp_infs,
                      int64_t step, double lr, double beta1, double beta2, double eps, double weight_decay,
                      bool maximize) {
  constexpr const char* op = "fused_optim::adamax_update";
  const auto hyper = MakeAdamaxHyper(op, lr, beta1, beta2, eps, weight_decay, maximize);
  return Update(op, FUSED_OPTIM_KERNEL(AdamaxStep), hyper, params, grads,
                {{"exp_avgs", exp_avgs}, {"exp_infs", exp_infs}}, step, AdamaxStepScalars(hyper));
}

Lists<4> AdamaxUpdateBackward(const OptionalTensorList& grad_new_params, const OptionalTensorList& grad_new_exp_avgs,
                              const OptionalTensorList& grad_new_exp_infs, TensorListArg params, TensorListArg grads,
                              TensorListArg exp_avgs, TensorListArg exp_infs, int64_t step, double lr, double beta1,
                              double beta2, double eps, double weight_decay, bool maximize) {
  constexpr const char* op = "fused_optim::adamax_update_backward";
  const auto hyper = MakeAdamaxHyper(op, lr, beta1, beta2, eps, weight_decay, maximize);
  return UpdateBackward<4>(op, FUSED_OPTIM_KERNEL(AdamaxBackward), hyper, params,
                           {{"grad_new_params", grad_new_params},
                            {"grad_new_exp_avgs", grad_new_exp_avgs},
                            {"grad_new_exp_infs", grad_new_exp_infs}},
                           {{"params", params}, {"grads", grads}, {"exp_avgs", exp_avgs}, {"exp_infs", exp_infs}}, step,
                           AdamaxStepScalars(hyper));
}

}  // namespace

// clang-format off
FUSED_OPTIM_OPS(adamax, op) {
  op.Add<&AdamaxStepInPlace>("adamax_step_(Tensor(a!)[] params, Tensor(g!)[] grads, Tensor(b!)[] exp_avgs, Tensor(c!)[] exp_infs, "
     "Tensor(d!)[] state_steps, *, float lr, float beta1, float beta2, float eps, float weight_decay, "
     "bool maximize, " FUSED_OPTIM_STEP_ARGS ") -> ()");
  op.Add<&AdamaxUpdate>("adamax_update(Tensor[] params, Tensor[] grads, Tensor[] exp_avgs, Tensor[] exp_infs, *, SymInt step, "
     "float lr, float beta1, float beta2, float eps, float weight_decay, bool maximize) "
     "-> (Tensor[], Tensor[], Tensor[])");
  op.Add<&AdamaxUpdateBackward>("adamax_update_backward(Tensor?[] grad_new_params, Tensor?[] grad_new_exp_avgs, Tensor?[] grad_new_exp_infs, "
     "Tensor[] params, Tensor[] grads, Tensor[] exp_avgs, Tensor[] exp_infs, *, SymInt step, float lr, float beta1, "
     "float beta2, float eps, float weight_decay, bool maximize) -> (Tensor[], Tensor[], Tensor[], Tensor[])");
}
// clang-format on

}  // namespace fused_optim
