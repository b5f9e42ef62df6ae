// RAdam ops: argument checks, outputs and the per-tensor rectification terms; the element math
// runs in csrc/cpu/radam.cpp or csrc/cuda/radam.cu.
#include <cmath>
#include "multi_tensor.h"

namespace fused_optim {
namespace {

math::RadamHyper<double> MakeRadamHyper(const char* op, double lr, double beta1, double beta2, double eps,
                                        double weight_decay, bool decoupled_weight_decay, bool maximize) {
  CheckNonNegative(op, {{"learning rate", lr}, {"epsilon", eps}});
  CheckUnitInterval(op, {{"beta1", beta1}, {"beta2", beta2}});
  CheckNonNegative(op, "weight_decay", weight_decay);
  return math::RadamHyper<double>::Make(lr, beta1, beta2, eps, weight_decay, decoupled_weight_decay, maximize);
}

// The step-only terms (math/radam.h's StepRow).
auto RadamStepScalars(const math::RadamHyper<double>& hyper) {
  return ScalarRows{radam_cols::kNumScalars,
                    [=](double step, double* row) { bind::RadamStep::StepRow(hyper, step, row); }};
}

void RadamStepInPlace(TensorListArg params, TensorListArg grads, TensorListArg exp_avgs, TensorListArg exp_avg_sqs,
                      TensorListArg state_steps, double lr, double beta1, double beta2, double eps, double weight_decay,
                      bool decoupled_weight_decay, bool maximize, const std::optional<Tensor>& grad_scale,
                      const std::optional<Tensor>& found_inf, bool capturable) {
  constexpr const char* op = "fused_optim::radam_step_";
  const auto hyper = MakeRadamHyper(op, lr, beta1, beta2, eps, weight_decay, decoupled_weight_decay, maximize);
  StepInPlace(op, FUSED_OPTIM_KERNEL(RadamStep), hyper, params, grads,
              {{"exp_avgs", exp_avgs}, {"exp_avg_sqs", exp_avg_sqs}}, state_steps, {grad_scale, found_inf}, capturable,
              RadamStepScalars(hyper));
}

Lists<3> RadamUpdate(TensorListArg params, TensorListArg grads, TensorListArg exp_avgs, TensorListArg exp_avg_sqs,
                     int64_t step, double lr, double beta1, double beta2, double eps, double weight_decay,
                     bool decoupled_weight_decay, bool maximize) {
  constexpr const char* op = "fused_optim::radam_update";
  const auto hyper = MakeRadamHyper(op, lr, beta1, beta2, eps, weight_decay, decoupled_weight_decay, maximize);
  return Update(op, FUSED_OPTIM_KERNEL(RadamStep), hyper, params, grads,
                {{"exp_avgs", exp_avgs}, {"exp_avg_sqs", exp_avg_sqs}}, step, RadamStepScalars(hyper));
}

Lists<4> RadamUpdateBackward(const OptionalTensorList& grad_new_params, const OptionalTensorList& grad_new_exp_avgs,
                             const OptionalTensorList& grad_new_exp_avg_sqs, TensorListArg params, TensorListArg grads,
                             TensorListArg exp_avgs, TensorListArg exp_avg_sqs, int64_t step, double lr, double beta1,
                             double beta2, double eps, double weight_decay, bool decoupled_weight_decay,
                             bool maximize) {
  constexpr const char* op = "fused_optim::radam_update_backward";
  const auto hyper = MakeRadamHyper(op, lr, beta1, beta2, eps, weight_decay, decoupled_weight_decay, maximize);
  return UpdateBackward<4>(op, FUSED_OPTIM_KERNEL(RadamBackward), hyper, params,
                           {{"grad_new_params", grad_new_params},
                            {"grad_new_exp_avgs", grad_new_exp_avgs},
                            {"grad_new_exp_avg_sqs", grad_new_exp_avg_sqs}},
                           {{"params", params}, {"grads", grads}, {"exp_avgs", exp_avgs}, {"exp_avg_sqs", exp_avg_sqs}},
                           step, RadamStepScalars(hyper));
}

}  // namespace

// clang-format off
FUSED_OPTIM_OPS(radam, op) {
  op.Add<&RadamStepInPlace>("radam_step_(Tensor(a!)[] params, Tensor(g!)[] grads, Tensor(b!)[] exp_avgs, Tensor(c!)[] exp_avg_sqs, "
     "Tensor(d!)[] state_steps, *, float lr, float beta1, float beta2, float eps, float weight_decay, "
     "bool decoupled_weight_decay, bool maximize, " FUSED_OPTIM_STEP_ARGS ") -> ()");
  op.Add<&RadamUpdate>("radam_update(Tensor[] params, Tensor[] grads, Tensor[] exp_avgs, Tensor[] exp_avg_sqs, *, SymInt step, "
     "float lr, float beta1, float beta2, float eps, float weight_decay, bool decoupled_weight_decay, "
     "bool maximize) -> (Tensor[], Tensor[], Tensor[])");
  op.Add<&RadamUpdateBackward>("radam_update_backward(Tensor?[] grad_new_params, Tensor?[] grad_new_exp_avgs, "
     "Tensor?[] grad_new_exp_avg_sqs, Tensor[] params, Tensor[] grads, Tensor[] exp_avgs, Tensor[] exp_avg_sqs, "
     "*, SymInt step, float lr, float beta1, float beta2, float eps, float weight_decay, bool decoupled_weight_decay, "
     "bool maximize) -> (Tensor[], Tensor[], Tensor[], Tensor[])");
}
// clang-format on

}  // namespace fused_optim
