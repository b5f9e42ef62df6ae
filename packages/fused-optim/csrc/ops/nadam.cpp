// NAdam ops: argument checks, outputs and the per-tensor momentum-schedule terms (including the
// in-place update of each parameter's mu_product); the element math is math/nadam.h.
#include <cmath>

#include "multi_tensor.h"
#include "ops/state_scalars.h"

namespace fused_optim {
namespace {

struct NadamArgs {
  double lr, beta1, beta2, momentum_decay;
};

math::NadamHyper<double> MakeHyper(const char* op, double lr, double beta1, double beta2, double eps,
                                   double weight_decay, double momentum_decay, bool decoupled_weight_decay,
                                   bool maximize) {
  CheckNonNegative(op, {{"learning rate", lr}, {"epsilon", eps}});
  CheckUnitInterval(op, {{"beta1", beta1}, {"beta2", beta2}});
  CheckNonNegative(op, {{"weight_decay", weight_decay}, {"momentum_decay", momentum_decay}});
  return math::NadamHyper<double>::Make(lr, beta1, beta2, eps, weight_decay, decoupled_weight_decay, maximize);
}

// The momentum coefficient mu_t of torch.optim.NAdam's schedule (Python's copy, for the functional
// ops' returned product and diffopt's transforms: fused_optim.functional.nadam_momentum).
double Momentum(const NadamArgs& a, double step) {
  return a.beta1 * (1.0 - 0.5 * std::pow(0.96, step * a.momentum_decay));
}

// One tensor's scalars from its step and its momentum product through this step (prod_t).
void ScalarRow(const NadamArgs& a, double step, double mu_product, double* row) {
  using namespace nadam_cols;
  const double mu = Momentum(a, step), mu_next = Momentum(a, step + 1.0);
  row[kBc2] = 1.0 - std::pow(a.beta2, step);
  row[kGradCoef] = -a.lr * (1.0 - mu) / (1.0 - mu_product);
  row[kAvgCoef] = -a.lr * mu_next / (1.0 - mu_product * mu_next);
}

void NadamStepInPlace(at::TensorList params, at::TensorList grads, at::TensorList exp_avgs, at::TensorList exp_avg_sqs,
                      at::TensorList mu_products, at::TensorList state_steps, double lr, double beta1, double beta2,
                      double eps, double weight_decay, double momentum_decay, bool decoupled_weight_decay,
                      bool maximize, const std::optional<at::Tensor>& grad_scale,
                      const std::optional<at::Tensor>& found_inf) {
  constexpr const char* op = "fused_optim::nadam_step_";
  const auto hyper =
      MakeHyper(op, lr, beta1, beta2, eps, weight_decay, momentum_decay, decoupled_weight_decay, maximize);
  MultiTensorCall call(op, params, kInPlace);
  call.SetAmp({grad_scale, found_inf});
  call.AddStep(params, grads, {{"exp_avgs", exp_avgs}, {"exp_avg_sqs", exp_avg_sqs}});
  CheckStateScalars(op, "mu_products", mu_products, call.size());
  CheckStepTensors(op, state_steps, call.size());
  if (call.ChecksOnly() || call.SkipStep(/*host_needs_answer=*/true)) return;  // nothing is written yet
  const NadamArgs args{lr, beta1, beta2, momentum_decay};
  const std::vector<double> steps = IncrementSteps(state_steps);  // first modification
  std::vector<double> products(steps.size());
  for (size_t t = 0; t < steps.size(); ++t) products[t] = ScaleStateScalar(mu_products[t], Momentum(args, steps[t]));
  size_t t = 0;
  call.SetStepScalars(nadam_cols::kNumScalars, steps,
                      [&](double step, double* row) { ScalarRow(args, step, products[t++], row); });
  call.Launch(FUSED_OPTIM_KERNEL(NadamStep), hyper);
}

// The functional ops take the momentum product through this step (prod_t = mu_1 ... mu_t).
void CheckProduct(const char* op, double mu_product) {
  TORCH_CHECK_VALUE(mu_product >= 0.0 && mu_product < 1.0, op,
                    ": mu_product (the product of the momentum coefficients through this step) must be in [0, 1), "
                    "got ",
                    mu_product);
}

// The functional ops' per-tensor scalars, at the momentum product `mu_product` through the step.
auto StepScalars(double lr, double beta1, double beta2, double momentum_decay, double mu_product) {
  const NadamArgs args{lr, beta1, beta2, momentum_decay};
  return ScalarRows{nadam_cols::kNumScalars, [=](double step, double* row) { ScalarRow(args, step, mu_product, row); }};
}

Lists<3> NadamUpdate(at::TensorList params, at::TensorList grads, at::TensorList exp_avgs, at::TensorList exp_avg_sqs,
                     int64_t step, double mu_product, double lr, double beta1, double beta2, double eps,
                     double weight_decay, double momentum_decay, bool decoupled_weight_decay, bool maximize) {
  constexpr const char* op = "fused_optim::nadam_update";
  const auto hyper =
      MakeHyper(op, lr, beta1, beta2, eps, weight_decay, momentum_decay, decoupled_weight_decay, maximize);
  CheckProduct(op, mu_product);
  return Update(op, FUSED_OPTIM_KERNEL(NadamStep), hyper, params, grads,
                {{"exp_avgs", exp_avgs}, {"exp_avg_sqs", exp_avg_sqs}}, step,
                StepScalars(lr, beta1, beta2, momentum_decay, mu_product));
}

Lists<4> NadamUpdateBackward(const OptionalTensorList& grad_new_params, const OptionalTensorList& grad_new_exp_avgs,
                             const OptionalTensorList& grad_new_exp_avg_sqs, at::TensorList params,
                             at::TensorList grads, at::TensorList exp_avgs, at::TensorList exp_avg_sqs, int64_t step,
                             double mu_product, double lr, double beta1, double beta2, double eps, double weight_decay,
                             double momentum_decay, bool decoupled_weight_decay, bool maximize) {
  constexpr const char* op = "fused_optim::nadam_update_backward";
  const auto hyper =
      MakeHyper(op, lr, beta1, beta2, eps, weight_decay, momentum_decay, decoupled_weight_decay, maximize);
  CheckProduct(op, mu_product);
  return UpdateBackward<4>(op, FUSED_OPTIM_KERNEL(NadamBackward), hyper, params,
                           {{"grad_new_params", grad_new_params},
                            {"grad_new_exp_avgs", grad_new_exp_avgs},
                            {"grad_new_exp_avg_sqs", grad_new_exp_avg_sqs}},
                           {{"params", params}, {"grads", grads}, {"exp_avgs", exp_avgs}, {"exp_avg_sqs", exp_avg_sqs}},
                           step, StepScalars(lr, beta1, beta2, momentum_decay, mu_product));
}

}  // namespace

// clang-format off
FUSED_OPTIM_OPS(nadam, op) {
  op("nadam_step_(Tensor(a!)[] params, Tensor(g!)[] grads, Tensor(b!)[] exp_avgs, Tensor(c!)[] exp_avg_sqs, "
     "Tensor(d!)[] mu_products, Tensor(e!)[] state_steps, *, float lr, float beta1, float beta2, float eps, "
     "float weight_decay, float momentum_decay, bool decoupled_weight_decay, bool maximize, "
     FUSED_OPTIM_AMP_ARGS ") -> ()",
     &NadamStepInPlace);
  op("nadam_update(Tensor[] params, Tensor[] grads, Tensor[] exp_avgs, Tensor[] exp_avg_sqs, *, SymInt step, "
     "float mu_product, float lr, float beta1, float beta2, float eps, float weight_decay, float momentum_decay, "
     "bool decoupled_weight_decay, bool maximize) -> (Tensor[], Tensor[], Tensor[])",
     &NadamUpdate);
  op("nadam_update_backward(Tensor?[] grad_new_params, Tensor?[] grad_new_exp_avgs, Tensor?[] grad_new_exp_avg_sqs, "
     "Tensor[] params, Tensor[] grads, Tensor[] exp_avgs, Tensor[] exp_avg_sqs, *, SymInt step, float mu_product, "
     "float lr, float beta1, float beta2, float eps, float weight_decay, float momentum_decay, "
     "bool decoupled_weight_decay, bool maximize) -> (Tensor[], Tensor[], Tensor[], Tensor[])",
     &NadamUpdateBackward);
}
// clang-format on

}  // namespace fused_optim
