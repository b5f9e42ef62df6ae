// Adafactor ops: argument checks and the step's passes. Between its element-wise passes
// (math/adafactor.h) Adafactor reduces per tensor: the RMS of each parameter and of each update,
// and for matrices the row and column means of g^2, from which the factored second-moment
// estimate is built. Those reductions run as ATen ops (one multi-tensor norm per list; the
// factored statistics as torch.optim.Adafactor computes them), on the call's device:
//   1. checks, then the step counters;
//   2. the parameters' norms (before the weight decay);
//   3. the direction pass: vectors update their second moment and write the update; matrices
//      update their row/column averages and turn the estimate into the update in place;
//   4. the updates' norms, then the apply pass (weight decay and the scaled update).
#include <ATen/ATen.h>

#include <cmath>

#include "multi_tensor.h"

namespace fused_optim {
namespace {

struct AdafactorArgs {
  double lr, beta2_decay, eps1, eps2, d;
};

void CheckArgs(const char* op, const AdafactorArgs& a, double weight_decay) {
  CheckNonNegative(op, "learning rate", a.lr);
  TORCH_CHECK_VALUE(a.beta2_decay <= 0.0, op, ": beta2_decay must be <= 0, got ", a.beta2_decay);
  CheckNonNegative(op, "eps1", a.eps1);
  CheckNonNegative(op, "eps2", a.eps2);
  TORCH_CHECK_VALUE(a.d >= 1.0, op, ": the clipping threshold d must be >= 1, got ", a.d);
  CheckNonNegative(op, "weight_decay", weight_decay);
}

// A matrix's (or batch of matrices') row or column statistics, shaped like the state torch keeps.
void CheckFactoredState(const char* op, const char* name, at::TensorList list, at::TensorList params, int64_t dim) {
  TORCH_CHECK_VALUE(list.size() == params.size(), op, ": ", name, " has ", list.size(), " tensors but params has ",
                    params.size());
  std::vector<const void*> seen;
  for (size_t t = 0; t < params.size(); ++t) {
    const at::Tensor& p = params[t];
    const at::Tensor& s = list[t];
    TORCH_CHECK_VALUE(p.dim() >= 2, op, ": params[", t, "] has ", p.dim(),
                      " dimensions; factored=True needs two or more (vectors keep a full variance)");
    std::vector<int64_t> shape = p.sizes().vec();
    shape[p.dim() + dim] = 1;
    TORCH_CHECK_VALUE(s.defined() && s.layout() == at::kStrided && s.sizes().vec() == shape, op, ": ", name, "[", t,
                      "] has shape ", s.defined() ? s.sizes() : at::IntArrayRef{}, ", expected ",
                      at::IntArrayRef(shape));
    TORCH_CHECK_TYPE(s.scalar_type() == p.scalar_type(), op, ": ", name, "[", t, "] has dtype ", s.scalar_type(),
                     " but params[", t, "] has ", p.scalar_type());
    TORCH_CHECK_VALUE(s.device() == p.device(), op, ": ", name, "[", t, "] is on ", s.device(), " but params[", t,
                      "] is on ", p.device());
    TORCH_CHECK(!(s.requires_grad() && at::GradMode::is_enabled()), op, ": ", name, "[", t,
                "] requires grad and grad mode is enabled; an in-place step is not differentiable");
    TORCH_CHECK(!s.is_inference() || c10::InferenceMode::is_enabled(), op, ": ", name, "[", t,
                "] is an inference tensor and cannot be updated in place outside inference mode");
    TORCH_CHECK_VALUE(!s.is_same(p) && !s.is_alias_of(p), op, ": ", name, "[", t, "] shares memory with params[", t,
                      "]");
    seen.push_back(s.const_data_ptr());
  }
  std::sort(seen.begin(), seen.end());
  TORCH_CHECK_VALUE(std::adjacent_find(seen.begin(), seen.end()) == seen.end(), op,
                    ": the same tensor appears twice in ", name, " (is a parameter listed twice?)");
}

// A direction pass's scalars: the second-moment weight t^c, with the form torch's lerp takes for it.
void WeightRow(double weight, double* row) {
  using namespace adafactor_cols;
  row[kWeight] = weight, row[kCoef] = 0.0, row[kSmall] = std::abs(weight) < 0.5 ? 1.0 : 0.0;
}

// Per-tensor L2 norms, read on the host.
std::vector<double> Norms(at::TensorList tensors) {
  if (tensors.empty()) return {};
  const at::Tensor stacked = at::stack(at::_foreach_norm(tensors, 2)).to(at::kDouble).cpu();
  const double* v = stacked.const_data_ptr<double>();
  return std::vector<double>(v, v + tensors.size());
}

void AdafactorStepInPlace(at::TensorList params, at::TensorList grads, at::TensorList row_vars, at::TensorList col_vars,
                          at::TensorList variances, at::TensorList state_steps, double lr, double beta2_decay,
                          double eps1, double eps2, double d, double weight_decay, bool maximize, bool factored) {
  constexpr const char* op = "fused_optim::adafactor_step_";
  const AdafactorArgs args{lr, beta2_decay, eps1, eps2, d};
  CheckArgs(op, args, weight_decay);
  const math::AdafactorHyper<double> hyper{eps1 * eps1, 1.0 - lr * weight_decay, maximize, weight_decay != 0.0};
  // 1. Every check, before the first write.
  MultiTensorCall checks(op, params, kInPlace);
  checks.AddStep(params, grads, {{"variances", variances, !factored, "when factored=True"}});
  if (factored) {
    CheckFactoredState(op, "row_vars", row_vars, params, -1);
    CheckFactoredState(op, "col_vars", col_vars, params, -2);
  } else {
    TORCH_CHECK_VALUE(row_vars.empty() && col_vars.empty(), op,
                      ": row_vars and col_vars must be empty when factored=False");
  }
  CheckStepTensors(op, state_steps, checks.size());
  if (checks.ChecksOnly() || checks.size() == 0) return;  // nothing is written yet
  const std::vector<double> steps = IncrementSteps(state_steps);
  const int64_t n = checks.size();
  std::vector<double> weights(n);
  for (int64_t t = 0; t < n; ++t) weights[t] = std::pow(steps[t], beta2_decay);
  // 2. The parameters' norms, before the weight decay changes them.
  const std::vector<double> param_norms = Norms(params);
  // 3. The direction pass.
  TensorVector updates;
  if (factored) {
    for (int64_t t = 0; t < n; ++t) {
      const at::Tensor& g = grads[t];
      const at::Tensor row_mean = at::linalg_vector_norm(g, 2, {-1}, true).square_().div_(g.size(-1));
      const_cast<at::Tensor&>(row_vars[t]).lerp_(row_mean, weights[t]);
      const at::Tensor col_mean = at::linalg_vector_norm(g, 2, {-2}, true).square_().div_(g.size(-2));
      const_cast<at::Tensor&>(col_vars[t]).lerp_(col_mean, weights[t]);
      at::Tensor estimate = at::matmul(row_vars[t], col_vars[t]);
      estimate.div_(row_vars[t].mean(-2, true).clamp_min_(eps1));
      updates.push_back(std::move(estimate));
    }
    MultiTensorCall direction(op, grads, kInPlace);
    direction.AddInput("grads", grads);
    direction.AddMutable("updates", updates);
    direction.SetStepScalars(adafactor_cols::kNumScalars, weights, &WeightRow);
    direction.Launch(FUSED_OPTIM_KERNEL(AdafactorFactoredDirection), hyper);
  } else {
    MultiTensorCall direction(op, grads, kInPlace);
    direction.AddInput("grads", grads);
    direction.AddMutable("variances", variances);
    updates = direction.AddOutput();
    direction.SetStepScalars(adafactor_cols::kNumScalars, weights, &WeightRow);
    direction.Launch(FUSED_OPTIM_KERNEL(AdafactorVectorDirection), hyper);
  }
  // 4. The updates' norms, then the apply pass.
  const std::vector<double> update_norms = Norms(updates);
  std::vector<double> coefs(n);
  for (int64_t t = 0; t < n; ++t) {
    const double root_numel = std::sqrt(static_cast<double>(params[t].numel()));
    const double rho = std::min(lr, 1.0 / std::sqrt(steps[t]));
    const double alpha = std::max(eps2, param_norms[t] / root_numel) * rho;
    const double denom = std::max(1.0, update_norms[t] / (root_numel * d));
    coefs[t] = -alpha / denom;
  }
  MultiTensorCall apply(op, params, kInPlace);
  apply.AddMutable("params", params);
  apply.AddInput("updates", updates);
  apply.SetStepScalars(adafactor_cols::kNumScalars, coefs, [](double coef, double* row) {
    using namespace adafactor_cols;
    row[kWeight] = 0.0, row[kCoef] = coef, row[kSmall] = 1.0;
  });
  apply.Launch(FUSED_OPTIM_KERNEL(AdafactorApply), hyper);
}

}  // namespace

// clang-format off
FUSED_OPTIM_OPS(adafactor, op) {
  op("adafactor_step_(Tensor(a!)[] params, Tensor[] grads, Tensor(b!)[] row_vars, Tensor(c!)[] col_vars, "
     "Tensor(d!)[] variances, Tensor(e!)[] state_steps, *, float lr, float beta2_decay, float eps1, float eps2, "
     "float d, float weight_decay, bool maximize, bool factored) -> ()",
     &AdafactorStepInPlace);
}
// clang-format on

}  // namespace fused_optim
