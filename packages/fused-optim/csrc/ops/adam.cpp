// Adam/AdamW and the Adam direction: schemas, argument checks, outputs and per-tensor bias
// corrections. The element math and the kernel columns are in math/adam.h.
#include <cmath>

#include "multi_tensor.h"

namespace fused_optim {
namespace {

math::AdamHyper<double> MakeAdamHyper(const char* op, double lr, double beta1, double beta2, double weight_decay,
                                      double eps, bool amsgrad, bool maximize, bool decoupled) {
  CheckNonNegative(op, {{"learning rate", lr}, {"epsilon", eps}});
  CheckUnitInterval(op, {{"beta1", beta1}, {"beta2", beta2}});
  CheckNonNegative(op, "weight_decay", weight_decay);
  return {math::AdamFamilyHyper<double>::Make(lr, beta1, beta2, eps, weight_decay, decoupled, maximize), amsgrad};
}

constexpr const char* kNoAmsgrad = "when amsgrad=False";

// The per-tensor bias corrections, from each tensor's step count (math/adam.h's StepRow).
auto AdamStepScalars(const math::AdamHyper<double>& hyper) {
  return ScalarRows{adam_cols::kNumScalars,
                    [=](double step, double* row) { bind::AdamStep::StepRow(hyper, step, row); }};
}

void AdamStepInPlace(TensorListArg params, TensorListArg grads, TensorListArg exp_avgs, TensorListArg exp_avg_sqs,
                     TensorListArg max_exp_avg_sqs, TensorListArg state_steps, double lr, double beta1, double beta2,
                     double weight_decay, double eps, bool amsgrad, bool maximize, bool decoupled_weight_decay,
                     const std::optional<Tensor>& grad_scale, const std::optional<Tensor>& found_inf, bool capturable) {
  constexpr const char* op = "fused_optim::adam_step_";
  const auto hyper = MakeAdamHyper(op, lr, beta1, beta2, weight_decay, eps, amsgrad, maximize, decoupled_weight_decay);
  StepInPlace(
      op, FUSED_OPTIM_KERNEL(AdamStep), hyper, params, grads,
      {{"exp_avgs", exp_avgs}, {"exp_avg_sqs", exp_avg_sqs}, {"max_exp_avg_sqs", max_exp_avg_sqs, amsgrad, kNoAmsgrad}},
      state_steps, {grad_scale, found_inf}, capturable, AdamStepScalars(hyper));
}

Lists<4> AdamUpdate(TensorListArg params, TensorListArg grads, TensorListArg exp_avgs, TensorListArg exp_avg_sqs,
                    TensorListArg max_exp_avg_sqs, int64_t step, double lr, double beta1, double beta2,
                    double weight_decay, double eps, bool amsgrad, bool maximize, bool decoupled_weight_decay) {
  constexpr const char* op = "fused_optim::adam_update";
  const auto hyper = MakeAdamHyper(op, lr, beta1, beta2, weight_decay, eps, amsgrad, maximize, decoupled_weight_decay);
  return Update(
      op, FUSED_OPTIM_KERNEL(AdamStep), hyper, params, grads,
      {{"exp_avgs", exp_avgs}, {"exp_avg_sqs", exp_avg_sqs}, {"max_exp_avg_sqs", max_exp_avg_sqs, amsgrad, kNoAmsgrad}},
      step, AdamStepScalars(hyper));
}

Lists<5> AdamUpdateBackward(const OptionalTensorList& grad_new_params, const OptionalTensorList& grad_new_exp_avgs,
                            const OptionalTensorList& grad_new_exp_avg_sqs,
                            const OptionalTensorList& grad_new_max_exp_avg_sqs, TensorListArg params,
                            TensorListArg grads, TensorListArg exp_avgs, TensorListArg exp_avg_sqs,
                            TensorListArg max_exp_avg_sqs, int64_t step, double lr, double beta1, double beta2,
                            double weight_decay, double eps, bool amsgrad, bool maximize, bool decoupled_weight_decay) {
  constexpr const char* op = "fused_optim::adam_update_backward";
  const auto hyper = MakeAdamHyper(op, lr, beta1, beta2, weight_decay, eps, amsgrad, maximize, decoupled_weight_decay);
  return UpdateBackward<5>(op, FUSED_OPTIM_KERNEL(AdamBackward), hyper, params,
                           {{"grad_new_params", grad_new_params},
                            {"grad_new_exp_avgs", grad_new_exp_avgs},
                            {"grad_new_exp_avg_sqs", grad_new_exp_avg_sqs},
                            {"grad_new_max_exp_avg_sqs", grad_new_max_exp_avg_sqs, amsgrad}},
                           {{"params", params},
                            {"grads", grads},
                            {"exp_avgs", exp_avgs},
                            {"exp_avg_sqs", exp_avg_sqs},
                            {"max_exp_avg_sqs", max_exp_avg_sqs, amsgrad, kNoAmsgrad}},
                           step, AdamStepScalars(hyper), {true, true, true, true, amsgrad});
}

math::AdamDirectionHyper<double> MakeDirectionHyper(const char* op, int64_t step, double beta1, double beta2,
                                                    double eps, double eps_root) {
  CheckStep(op, step);
  CheckUnitInterval(op, {{"beta1", beta1}, {"beta2", beta2}});
  CheckNonNegative(op, {{"epsilon", eps}, {"eps_root", eps_root}});
  const double s = static_cast<double>(step);
  return {beta1, beta2, eps, eps_root, 1.0 - std::pow(beta1, s), 1.0 - std::pow(beta2, s), 1.0 - beta1, 1.0 - beta2};
}

Lists<3> AdamDirection(TensorListArg grads, TensorListArg exp_avgs, TensorListArg exp_avg_sqs, int64_t step,
                       double beta1, double beta2, double eps, double eps_root) {
  constexpr const char* op = "fused_optim::adam_direction";
  const auto hyper = MakeDirectionHyper(op, step, beta1, beta2, eps, eps_root);
  MultiTensorCall call(op, grads);
  call.AddInput("grads", grads);
  TensorVector new_exp_avgs = call.AddOutputFrom("exp_avgs", exp_avgs);
  TensorVector new_exp_avg_sqs = call.AddOutputFrom("exp_avg_sqs", exp_avg_sqs);
  TensorVector directions = call.AddOutput();
  call.Launch(FUSED_OPTIM_KERNEL(AdamDirection), hyper);
  return {std::move(directions), std::move(new_exp_avgs), std::move(new_exp_avg_sqs)};
}

Lists<3> AdamDirectionBackward(const OptionalTensorList& grad_directions, const OptionalTensorList& grad_new_exp_avgs,
                               const OptionalTensorList& grad_new_exp_avg_sqs, TensorListArg grads,
                               TensorListArg exp_avgs, TensorListArg exp_avg_sqs, int64_t step, double beta1,
                               double beta2, double eps, double eps_root) {
  constexpr const char* op = "fused_optim::adam_direction_backward";
  const auto hyper = MakeDirectionHyper(op, step, beta1, beta2, eps, eps_root);
  MultiTensorCall call(op, grads);
  call.AddInputs({{"grads", grads}, {"exp_avgs", exp_avgs}, {"exp_avg_sqs", exp_avg_sqs}});
  call.AddOptionalInputs({{"grad_directions", grad_directions},
                          {"grad_new_exp_avgs", grad_new_exp_avgs},
                          {"grad_new_exp_avg_sqs", grad_new_exp_avg_sqs}});
  Lists<3> out = call.AddOutputs<3>();
  call.Launch(FUSED_OPTIM_KERNEL(AdamDirectionBackward), hyper);
  return out;
}

}  // namespace

// clang-format off
FUSED_OPTIM_OPS(adam, op) {
  op.Add<&AdamStepInPlace>("adam_step_(Tensor(a!)[] params, Tensor(g!)[] grads, Tensor(b!)[] exp_avgs, Tensor(c!)[] exp_avg_sqs, "
     "Tensor(d!)[] max_exp_avg_sqs, Tensor(e!)[] state_steps, *, float lr, float beta1, float beta2, "
     "float weight_decay, float eps, bool amsgrad, bool maximize, bool decoupled_weight_decay, "
     FUSED_OPTIM_STEP_ARGS ") -> ()");
  op.Add<&AdamUpdate>("adam_update(Tensor[] params, Tensor[] grads, Tensor[] exp_avgs, Tensor[] exp_avg_sqs, "
     "Tensor[] max_exp_avg_sqs, *, SymInt step, float lr, float beta1, float beta2, float weight_decay, float eps, "
     "bool amsgrad, bool maximize, bool decoupled_weight_decay) -> (Tensor[], Tensor[], Tensor[], Tensor[])");
  op.Add<&AdamUpdateBackward>("adam_update_backward(Tensor?[] grad_new_params, Tensor?[] grad_new_exp_avgs, "
     "Tensor?[] grad_new_exp_avg_sqs, Tensor?[] grad_new_max_exp_avg_sqs, Tensor[] params, Tensor[] grads, "
     "Tensor[] exp_avgs, Tensor[] exp_avg_sqs, Tensor[] max_exp_avg_sqs, *, SymInt step, float lr, float beta1, "
     "float beta2, float weight_decay, float eps, bool amsgrad, bool maximize, bool decoupled_weight_decay) "
     "-> (Tensor[], Tensor[], Tensor[], Tensor[], Tensor[])");
  op.Add<&AdamDirection>("adam_direction(Tensor[] grads, Tensor[] exp_avgs, Tensor[] exp_avg_sqs, *, SymInt step, float beta1, "
     "float beta2, float eps, float eps_root) -> (Tensor[], Tensor[], Tensor[])");
  op.Add<&AdamDirectionBackward>("adam_direction_backward(Tensor?[] grad_directions, Tensor?[] grad_new_exp_avgs, "
     "Tensor?[] grad_new_exp_avg_sqs, Tensor[] grads, Tensor[] exp_avgs, Tensor[] exp_avg_sqs, *, SymInt step, "
     "float beta1, float beta2, float eps, float eps_root) -> (Tensor[], Tensor[], Tensor[])");
}
// clang-format on

}  // namespace fused_optim
