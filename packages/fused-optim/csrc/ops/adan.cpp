// Adan ops: schemas, argument checks, outputs and the per-tensor bias corrections; the element math
// and the kernel columns are in math/adan.h.
#include <cmath>

#include "multi_tensor.h"

namespace fused_optim {
namespace {

math::AdanHyper<double> MakeAdanHyper(const char* op, double lr, double beta1, double beta2, double beta3, double eps,
                                      double weight_decay, bool no_prox, bool maximize) {
  CheckNonNegative(op, {{"learning rate", lr}, {"epsilon", eps}});
  CheckUnitInterval(op, {{"beta1", beta1}, {"beta2", beta2}, {"beta3", beta3}});
  CheckNonNegative(op, "weight_decay", weight_decay);
  math::AdanHyper<double> h{};
  h.lr = lr, h.beta1 = beta1, h.beta2 = beta2, h.beta3 = beta3, h.eps = eps;
  h.one_minus_beta1 = 1.0 - beta1, h.one_minus_beta2 = 1.0 - beta2, h.one_minus_beta3 = 1.0 - beta3;
  h.has_decay = weight_decay != 0.0 && no_prox;
  h.has_prox = weight_decay != 0.0 && !no_prox;
  h.decay = h.has_decay ? 1.0 - lr * weight_decay : 1.0;
  h.prox = h.has_prox ? 1.0 + lr * weight_decay : 1.0;
  h.maximize = maximize;
  return h;
}

// The per-tensor bias corrections, and whether a previous gradient exists, from each tensor's step
// (math/adan.h's StepRow).
auto AdanStepScalars(const math::AdanHyper<double>& hyper) {
  return ScalarRows{adan_cols::kNumScalars,
                    [=](double step, double* row) { bind::AdanStep::StepRow(hyper, step, row); }};
}

void AdanStepInPlace(TensorListArg params, TensorListArg grads, TensorListArg exp_avgs, TensorListArg exp_avg_diffs,
                     TensorListArg exp_avg_sqs, TensorListArg prev_grads, TensorListArg state_steps, double lr,
                     double beta1, double beta2, double beta3, double eps, double weight_decay, bool no_prox,
                     bool maximize, const std::optional<Tensor>& grad_scale, const std::optional<Tensor>& found_inf,
                     bool capturable) {
  constexpr const char* op = "fused_optim::adan_step_";
  const auto hyper = MakeAdanHyper(op, lr, beta1, beta2, beta3, eps, weight_decay, no_prox, maximize);
  StepInPlace(op, FUSED_OPTIM_KERNEL(AdanStep), hyper, params, grads,
              {{"exp_avgs", exp_avgs},
               {"exp_avg_diffs", exp_avg_diffs},
               {"exp_avg_sqs", exp_avg_sqs},
               {"prev_grads", prev_grads}},
              state_steps, {grad_scale, found_inf}, capturable, AdanStepScalars(hyper));
}

Lists<5> AdanUpdate(TensorListArg params, TensorListArg grads, TensorListArg exp_avgs, TensorListArg exp_avg_diffs,
                    TensorListArg exp_avg_sqs, TensorListArg prev_grads, int64_t step, double lr, double beta1,
                    double beta2, double beta3, double eps, double weight_decay, bool no_prox, bool maximize) {
  constexpr const char* op = "fused_optim::adan_update";
  const auto hyper = MakeAdanHyper(op, lr, beta1, beta2, beta3, eps, weight_decay, no_prox, maximize);
  return Update(op, FUSED_OPTIM_KERNEL(AdanStep), hyper, params, grads,
                {{"exp_avgs", exp_avgs},
                 {"exp_avg_diffs", exp_avg_diffs},
                 {"exp_avg_sqs", exp_avg_sqs},
                 {"prev_grads", prev_grads}},
                step, AdanStepScalars(hyper));
}

Lists<6> AdanUpdateBackward(const OptionalTensorList& grad_new_params, const OptionalTensorList& grad_new_exp_avgs,
                            const OptionalTensorList& grad_new_exp_avg_diffs,
                            const OptionalTensorList& grad_new_exp_avg_sqs,
                            const OptionalTensorList& grad_new_prev_grads, TensorListArg params, TensorListArg grads,
                            TensorListArg exp_avgs, TensorListArg exp_avg_diffs, TensorListArg exp_avg_sqs,
                            TensorListArg prev_grads, int64_t step, double lr, double beta1, double beta2, double beta3,
                            double eps, double weight_decay, bool no_prox, bool maximize) {
  constexpr const char* op = "fused_optim::adan_update_backward";
  const auto hyper = MakeAdanHyper(op, lr, beta1, beta2, beta3, eps, weight_decay, no_prox, maximize);
  return UpdateBackward<6>(op, FUSED_OPTIM_KERNEL(AdanBackward), hyper, params,
                           {{"grad_new_params", grad_new_params},
                            {"grad_new_exp_avgs", grad_new_exp_avgs},
                            {"grad_new_exp_avg_diffs", grad_new_exp_avg_diffs},
                            {"grad_new_exp_avg_sqs", grad_new_exp_avg_sqs},
                            {"grad_new_prev_grads", grad_new_prev_grads}},
                           {{"params", params},
                            {"grads", grads},
                            {"exp_avgs", exp_avgs},
                            {"exp_avg_diffs", exp_avg_diffs},
                            {"exp_avg_sqs", exp_avg_sqs},
                            {"prev_grads", prev_grads}},
                           step, AdanStepScalars(hyper));
}

}  // namespace

// clang-format off
FUSED_OPTIM_OPS(adan, op) {
  op.Add<&AdanStepInPlace>("adan_step_(Tensor(a!)[] params, Tensor(g!)[] grads, Tensor(b!)[] exp_avgs, Tensor(c!)[] exp_avg_diffs, "
     "Tensor(d!)[] exp_avg_sqs, Tensor(e!)[] prev_grads, Tensor(f!)[] state_steps, *, float lr, float beta1, "
     "float beta2, float beta3, float eps, float weight_decay, bool no_prox, bool maximize, "
     FUSED_OPTIM_STEP_ARGS ") -> ()");
  op.Add<&AdanUpdate>("adan_update(Tensor[] params, Tensor[] grads, Tensor[] exp_avgs, Tensor[] exp_avg_diffs, "
     "Tensor[] exp_avg_sqs, Tensor[] prev_grads, *, SymInt step, float lr, float beta1, float beta2, float beta3, "
     "float eps, float weight_decay, bool no_prox, bool maximize) "
     "-> (Tensor[], Tensor[], Tensor[], Tensor[], Tensor[])");
  op.Add<&AdanUpdateBackward>("adan_update_backward(Tensor?[] grad_new_params, Tensor?[] grad_new_exp_avgs, "
     "Tensor?[] grad_new_exp_avg_diffs, Tensor?[] grad_new_exp_avg_sqs, Tensor?[] grad_new_prev_grads, "
     "Tensor[] params, Tensor[] grads, Tensor[] exp_avgs, Tensor[] exp_avg_diffs, Tensor[] exp_avg_sqs, "
     "Tensor[] prev_grads, *, SymInt step, float lr, float beta1, float beta2, float beta3, float eps, "
     "float weight_decay, bool no_prox, bool maximize) "
     "-> (Tensor[], Tensor[], Tensor[], Tensor[], Tensor[], Tensor[])");
}
// clang-format on

}  // namespace fused_optim
