// NAdam ops: argument checks, outputs, the per-tensor momentum-schedule terms and each
// parameter's mu_product handed to the kernel as a state scalar (StateScalarList, multi_tensor.h);
// the element math is math/nadam.h.
#include <cmath>
#include <utility>
#include <vector>

#include "multi_tensor.h"

namespace fused_optim {
namespace {

math::NadamHyper<double> MakeNadamHyper(const char* op, double lr, double beta1, double beta2, double eps,
                                        double weight_decay, double momentum_decay, bool decoupled_weight_decay,
                                        bool maximize) {
  CheckNonNegative(op, {{"learning rate", lr}, {"epsilon", eps}});
  CheckUnitInterval(op, {{"beta1", beta1}, {"beta2", beta2}});
  CheckNonNegative(op, {{"weight_decay", weight_decay}, {"momentum_decay", momentum_decay}});
  return {math::AdamFamilyHyper<double>::Make(lr, beta1, beta2, eps, weight_decay, decoupled_weight_decay, maximize),
          momentum_decay};
}

// The per-tensor row of step count `step` (the count after this update, math/nadam.h's StepRow):
// the coefficients' terms and the factor taking the state's product to prod_t (see nadam_cols); a
// functional op gives prod_t itself, so its factor is 1.
auto StepRows(const math::NadamHyper<double>& hyper, bool given_product, std::vector<double> given_state = {}) {
  return ScalarRows{nadam_cols::kNumScalars,
                    [=](double step, double* row) {
                      bind::NadamStep::StepRow(hyper, step, row);
                      if (given_product) row[nadam_cols::kProductFactor] = 1.0;
                    },
                    std::move(given_state)};
}

void NadamStepInPlace(TensorListArg params, TensorListArg grads, TensorListArg exp_avgs, TensorListArg exp_avg_sqs,
                      TensorListArg mu_products, TensorListArg state_steps, double lr, double beta1, double beta2,
                      double eps, double weight_decay, double momentum_decay, bool decoupled_weight_decay,
                      bool maximize, const std::optional<Tensor>& grad_scale, const std::optional<Tensor>& found_inf,
                      bool capturable) {
  constexpr const char* op = "fused_optim::nadam_step_";
  const auto hyper =
      MakeNadamHyper(op, lr, beta1, beta2, eps, weight_decay, momentum_decay, decoupled_weight_decay, maximize);
  // Each parameter's mu_product is read, and advanced to prod_t, where it lives (on the CPU, or
  // on the parameter's device after load_state_dict or with capturable state).
  const StateScalarList scalars[] = {{"mu_products", mu_products}};
  StepInPlace(op, FUSED_OPTIM_KERNEL(NadamStep), hyper, params, grads,
              {{"exp_avgs", exp_avgs}, {"exp_avg_sqs", exp_avg_sqs}}, state_steps, {grad_scale, found_inf}, capturable,
              StepRows(hyper, false), StateScalarsOf<bind::NadamStep>(scalars));
}

// The functional ops take the momentum product through this step (prod_t = mu_1 ... mu_t).
void CheckProduct(const char* op, double mu_product) {
  FUSED_OPTIM_CHECK_VALUE(
      mu_product >= 0.0 && mu_product < 1.0, op,
      ": mu_product (the product of the momentum coefficients through this step) must be in [0, 1), "
      "got ",
      mu_product);
}

// The functional ops' per-tensor scalars, at the momentum product `mu_product` through the step.
auto NadamStepScalars(const math::NadamHyper<double>& hyper, double mu_product) {
  return StepRows(hyper, true, {mu_product});
}

Lists<3> NadamUpdate(TensorListArg params, TensorListArg grads, TensorListArg exp_avgs, TensorListArg exp_avg_sqs,
                     int64_t step, double mu_product, double lr, double beta1, double beta2, double eps,
                     double weight_decay, double momentum_decay, bool decoupled_weight_decay, bool maximize) {
  constexpr const char* op = "fused_optim::nadam_update";
  const auto hyper =
      MakeNadamHyper(op, lr, beta1, beta2, eps, weight_decay, momentum_decay, decoupled_weight_decay, maximize);
  CheckProduct(op, mu_product);
  return Update(op, FUSED_OPTIM_KERNEL(NadamStep), hyper, params, grads,
                {{"exp_avgs", exp_avgs}, {"exp_avg_sqs", exp_avg_sqs}}, step, NadamStepScalars(hyper, mu_product));
}

Lists<4> NadamUpdateBackward(const OptionalTensorList& grad_new_params, const OptionalTensorList& grad_new_exp_avgs,
                             const OptionalTensorList& grad_new_exp_avg_sqs, TensorListArg params, TensorListArg grads,
                             TensorListArg exp_avgs, TensorListArg exp_avg_sqs, int64_t step, double mu_product,
                             double lr, double beta1, double beta2, double eps, double weight_decay,
                             double momentum_decay, bool decoupled_weight_decay, bool maximize) {
  constexpr const char* op = "fused_optim::nadam_update_backward";
  const auto hyper =
      MakeNadamHyper(op, lr, beta1, beta2, eps, weight_decay, momentum_decay, decoupled_weight_decay, maximize);
  CheckProduct(op, mu_product);
  return UpdateBackward<4>(op, FUSED_OPTIM_KERNEL(NadamBackward), hyper, params,
                           {{"grad_new_params", grad_new_params},
                            {"grad_new_exp_avgs", grad_new_exp_avgs},
                            {"grad_new_exp_avg_sqs", grad_new_exp_avg_sqs}},
                           {{"params", params}, {"grads", grads}, {"exp_avgs", exp_avgs}, {"exp_avg_sqs", exp_avg_sqs}},
                           step, NadamStepScalars(hyper, mu_product));
}

}  // namespace

// clang-format off
FUSED_OPTIM_OPS(nadam, op) {
  op.Add<&NadamStepInPlace>("nadam_step_(Tensor(a!)[] params, Tensor(g!)[] grads, Tensor(b!)[] exp_avgs, Tensor(c!)[] exp_avg_sqs, "
     "Tensor(d!)[] mu_products, Tensor(e!)[] state_steps, *, float lr, float beta1, float beta2, float eps, "
     "float weight_decay, float momentum_decay, bool decoupled_weight_decay, bool maximize, "
     FUSED_OPTIM_STEP_ARGS ") -> ()");
  op.Add<&NadamUpdate>("nadam_update(Tensor[] params, Tensor[] grads, Tensor[] exp_avgs, Tensor[] exp_avg_sqs, *, SymInt step, "
     "float mu_product, float lr, float beta1, float beta2, float eps, float weight_decay, float momentum_decay, "
     "bool decoupled_weight_decay, bool maximize) -> (Tensor[], Tensor[], Tensor[])");
  op.Add<&NadamUpdateBackward>("nadam_update_backward(Tensor?[] grad_new_params, Tensor?[] grad_new_exp_avgs, Tensor?[] grad_new_exp_avg_sqs, "
     "Tensor[] params, Tensor[] grads, Tensor[] exp_avgs, Tensor[] exp_avg_sqs, *, SymInt step, float mu_product, "
     "float lr, float beta1, float beta2, float eps, float weight_decay, float momentum_decay, "
     "bool decoupled_weight_decay, bool maximize) -> (Tensor[], Tensor[], Tensor[], Tensor[])");
}
// clang-format on

}  // namespace fused_optim
