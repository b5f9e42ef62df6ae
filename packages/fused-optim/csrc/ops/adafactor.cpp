// Adafactor ops: argument checks and the step's passes. Between its element-wise passes
// (math/adafactor.h) Adafactor reduces per tensor: the RMS of each parameter and of each update,
// and for matrices the row and column means of g^2, from which the factored second-moment
// estimate is built. Those reductions run as ATen ops (one multi-tensor norm per list; the
// factored statistics as torch.optim.Adafactor computes them), on the call's device:
//   1. checks (then, in place, the step counters);
//   2. the parameters' norms (before the weight decay);
//   3. the direction pass: vectors update their second moment and write the update; matrices
//      update their row/column averages and turn the estimate into the update;
//   4. the updates' norms, then the apply pass (weight decay and the scaled update).
// The in-place step and the functional update share these passes (in place they write the
// caller's tensors, functional they return new ones). The functional backward recomputes 2-4 and
// runs them in reverse: the apply pass's backward kernel, then the direction's (through the
// floor of the estimate), then for matrices the row/column sums of the estimate's gradient.
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
// `in_place`: the state is updated in place (torch's in-place rules apply to it).
void CheckFactoredState(const char* op, const char* name, at::TensorList list, at::TensorList params, int64_t dim,
                        bool in_place) {
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
    if (!in_place) continue;
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

// The direction and apply passes' scalars: the second-moment weight t^c (with the form torch's
// lerp takes for it), the step coefficient and, for the backward, the coefficients of u and p.
void ScalarRow(double weight, double coef, double update_coef, double param_coef, double* row) {
  using namespace adafactor_cols;
  row[kWeight] = weight, row[kCoef] = coef, row[kUpdateCoef] = update_coef, row[kParamCoef] = param_coef;
  row[kSmall] = std::abs(weight) < 0.5 ? 1.0 : 0.0;
}

void WeightRow(double weight, double* row) { ScalarRow(weight, 0.0, 0.0, 0.0, row); }

// Per-tensor L2 norms, read on the host.
std::vector<double> Norms(at::TensorList tensors) {
  if (tensors.empty()) return {};
  const at::Tensor stacked = at::stack(at::_foreach_norm(tensors, 2)).to(at::kDouble).cpu();
  const double* v = stacked.const_data_ptr<double>();
  return std::vector<double>(v, v + tensors.size());
}

// One tensor's step size from the norms: coef = -alpha / denom with alpha = max(eps2, RMS(p)) rho
// and denom = max(1, RMS(u) / d).
struct StepSize {
  double root_numel, param_rms, rho, alpha, update_ratio, denom;
  StepSize(const AdafactorArgs& a, int64_t numel, double step, double param_norm, double update_norm) {
    root_numel = std::sqrt(static_cast<double>(numel));
    param_rms = param_norm / root_numel;
    rho = std::min(a.lr, 1.0 / std::sqrt(step));
    alpha = std::max(a.eps2, param_rms) * rho;
    update_ratio = update_norm / (root_numel * a.d);
    denom = std::max(1.0, update_ratio);
  }
  double coef() const { return -alpha / denom; }
};

math::AdafactorHyper<double> MakeHyper(const AdafactorArgs& a, double weight_decay, bool maximize) {
  return {a.eps1 * a.eps1, 1.0 - a.lr * weight_decay, maximize, weight_decay != 0.0};
}

// Checks the factored state's lists (shaped unlike the params, so no kernel table checks them)
// before anything is written or allocated. In place, they are updated (torch's in-place rules
// apply); functional, they are only read.
void CheckLists(const char* op, at::TensorList params, at::TensorList row_vars, at::TensorList col_vars, bool factored,
                bool in_place) {
  if (factored) {
    CheckFactoredState(op, "row_vars", row_vars, params, -1, in_place);
    CheckFactoredState(op, "col_vars", col_vars, params, -2, in_place);
  } else {
    TORCH_CHECK_VALUE(row_vars.empty() && col_vars.empty(), op,
                      ": row_vars and col_vars must be empty when factored=False");
  }
}

// The direction pass (3.): the new second moments and the updates u, for every tensor.
struct Direction {
  TensorVector row_vars, col_vars, variances;  // the new second moments (functional calls)
  TensorVector estimates;                      // matrices, with keep_estimates: the estimate before the floor
  TensorVector updates;
};

Direction RunDirection(const char* op, at::TensorList grads, at::TensorList row_vars, at::TensorList col_vars,
                       at::TensorList variances, const std::vector<double>& weights, double eps1,
                       const math::AdafactorHyper<double>& hyper, bool factored, bool in_place, bool keep_estimates) {
  Direction out;
  MultiTensorCall direction(op, grads, in_place);
  direction.AddInput("grads", grads);
  if (factored) {
    for (size_t t = 0; t < grads.size(); ++t) {
      const at::Tensor& g = grads[t];
      const at::Tensor row_mean = at::linalg_vector_norm(g, 2, {-1}, true).square_().div_(g.size(-1));
      const at::Tensor col_mean = at::linalg_vector_norm(g, 2, {-2}, true).square_().div_(g.size(-2));
      at::Tensor row, col;
      if (in_place) {
        row = const_cast<at::Tensor&>(row_vars[t]).lerp_(row_mean, weights[t]);
        col = const_cast<at::Tensor&>(col_vars[t]).lerp_(col_mean, weights[t]);
      } else {
        row = at::lerp(row_vars[t], row_mean, weights[t]);
        col = at::lerp(col_vars[t], col_mean, weights[t]);
        out.row_vars.push_back(row);
        out.col_vars.push_back(col);
      }
      at::Tensor estimate = at::matmul(row, col);
      estimate.div_(row.mean(-2, true).clamp_min_(eps1));
      out.estimates.push_back(std::move(estimate));
    }
    if (keep_estimates) {
      out.updates = direction.AddOutputFrom("estimates", out.estimates);
    } else {  // the estimate becomes the update
      direction.AddMutable("updates", out.estimates);
      out.updates = std::move(out.estimates);
      out.estimates.clear();
    }
    direction.SetStepScalars(adafactor_cols::kNumScalars, weights, &WeightRow);
    direction.Launch(FUSED_OPTIM_KERNEL(AdafactorFactoredDirection), hyper);
  } else {
    out.variances = direction.AddState("variances", variances);
    out.updates = direction.AddOutput();
    direction.SetStepScalars(adafactor_cols::kNumScalars, weights, &WeightRow);
    direction.Launch(FUSED_OPTIM_KERNEL(AdafactorVectorDirection), hyper);
  }
  return out;
}

// Passes 2-4 of one step; returns the new params, row_vars, col_vars and variances (in place: empty).
Lists<4> RunStep(const char* op, at::TensorList params, at::TensorList grads, at::TensorList row_vars,
                 at::TensorList col_vars, at::TensorList variances, const std::vector<double>& steps,
                 const AdafactorArgs& args, const math::AdafactorHyper<double>& hyper, bool factored, bool in_place) {
  const int64_t n = static_cast<int64_t>(params.size());
  std::vector<double> weights(n);
  for (int64_t t = 0; t < n; ++t) weights[t] = std::pow(steps[t], args.beta2_decay);
  // 2. The parameters' norms, before the weight decay changes them.
  const std::vector<double> param_norms = Norms(params);
  // 3. The direction pass.
  Direction dir = RunDirection(op, grads, row_vars, col_vars, variances, weights, args.eps1, hyper, factored, in_place,
                               /*keep_estimates=*/false);
  // 4. The updates' norms, then the apply pass.
  const std::vector<double> update_norms = Norms(dir.updates);
  std::vector<double> coefs(n);
  for (int64_t t = 0; t < n; ++t)
    coefs[t] = StepSize(args, params[t].numel(), steps[t], param_norms[t], update_norms[t]).coef();
  MultiTensorCall apply(op, params, in_place);
  TensorVector new_params = apply.AddState("params", params);
  apply.AddInput("updates", dir.updates);
  apply.SetStepScalars(adafactor_cols::kNumScalars, coefs,
                       [](double coef, double* row) { ScalarRow(0.0, coef, 0.0, 0.0, row); });
  apply.Launch(FUSED_OPTIM_KERNEL(AdafactorApply), hyper);
  return {std::move(new_params), std::move(dir.row_vars), std::move(dir.col_vars), std::move(dir.variances)};
}

void AdafactorStepInPlace(at::TensorList params, at::TensorList grads, at::TensorList row_vars, at::TensorList col_vars,
                          at::TensorList variances, at::TensorList state_steps, double lr, double beta2_decay,
                          double eps1, double eps2, double d, double weight_decay, bool maximize, bool factored,
                          const std::optional<at::Tensor>& grad_scale, const std::optional<at::Tensor>& found_inf) {
  constexpr const char* op = "fused_optim::adafactor_step_";
  const AdafactorArgs args{lr, beta2_decay, eps1, eps2, d};
  CheckArgs(op, args, weight_decay);
  // 1. Every check, before the first write.
  MultiTensorCall checks(op, params, kInPlace);
  checks.SetAmp({grad_scale, found_inf});
  checks.AddStep(params, grads, {{"variances", variances, !factored, "when factored=True"}});
  CheckLists(op, params, row_vars, col_vars, factored, kInPlace);
  CheckStepTensors(op, state_steps, checks.size());
  // Its norms are read on the host anyway: found_inf is too, and the gradients are unscaled by
  // one pass of their own, since ATen ops as well as the kernels read them.
  if (checks.ChecksOnly() || checks.size() == 0 || checks.SkipStep(/*host_needs_answer=*/true)) return;
  if (grad_scale.has_value() && grad_scale->defined()) {  // first modification, as the kernels unscale
    at::_foreach_mul_(grads, grad_scale->reciprocal());
  }
  const std::vector<double> steps = IncrementSteps(state_steps);
  RunStep(op, params, grads, row_vars, col_vars, variances, steps, args, MakeHyper(args, weight_decay, maximize),
          factored, kInPlace);
}

// The functional ops' checks: the hyper-parameters, the step and the lists (only read).
AdafactorArgs CheckFunctional(const char* op, at::TensorList params, at::TensorList grads, at::TensorList row_vars,
                              at::TensorList col_vars, at::TensorList variances, int64_t step, double lr,
                              double beta2_decay, double eps1, double eps2, double d, double weight_decay,
                              bool factored) {
  const AdafactorArgs args{lr, beta2_decay, eps1, eps2, d};
  CheckArgs(op, args, weight_decay);
  CheckStep(op, step);
  MultiTensorCall checks(op, params);
  checks.AddInput("grads", grads);
  checks.AddInputIf(!factored, "variances", variances, "when factored=True");
  CheckLists(op, params, row_vars, col_vars, factored, /*in_place=*/false);
  return args;
}

Lists<4> AdafactorUpdate(at::TensorList params, at::TensorList grads, at::TensorList row_vars, at::TensorList col_vars,
                         at::TensorList variances, int64_t step, double lr, double beta2_decay, double eps1,
                         double eps2, double d, double weight_decay, bool maximize, bool factored) {
  constexpr const char* op = "fused_optim::adafactor_update";
  const AdafactorArgs args = CheckFunctional(op, params, grads, row_vars, col_vars, variances, step, lr, beta2_decay,
                                             eps1, eps2, d, weight_decay, factored);
  if (params.empty()) return {};
  const std::vector<double> steps(params.size(), static_cast<double>(step));
  return RunStep(op, params, grads, row_vars, col_vars, variances, steps, args, MakeHyper(args, weight_decay, maximize),
                 factored, /*in_place=*/false);
}

// An optional incoming gradient as a tensor, or an undefined one for None (or an empty list).
at::Tensor Incoming(const OptionalTensorList& list, size_t t) {
  if (t >= list.size()) return {};
  const std::optional<at::Tensor> x = list.get(t);
  return x.has_value() ? *x : at::Tensor();
}

// The incoming gradients of the new row/column averages, which ATen ops (not a kernel table) read:
// shaped, typed and placed like the averages themselves.
void CheckIncoming(const char* op, const char* name, const OptionalTensorList& list, at::TensorList like) {
  for (size_t t = 0; t < list.size(); ++t) {
    const at::Tensor x = Incoming(list, t);
    if (!x.defined()) continue;
    TORCH_CHECK_VALUE(x.layout() == at::kStrided && x.sizes() == like[t].sizes(), op, ": ", name, "[", t,
                      "] has shape ", x.sizes(), ", expected ", like[t].sizes());
    TORCH_CHECK_TYPE(x.scalar_type() == like[t].scalar_type(), op, ": ", name, "[", t, "] has dtype ", x.scalar_type(),
                     ", expected ", like[t].scalar_type());
    TORCH_CHECK_VALUE(x.device() == like[t].device(), op, ": ", name, "[", t, "] is on ", x.device(), ", expected ",
                      like[t].device());
  }
}

Lists<5> AdafactorUpdateBackward(const OptionalTensorList& grad_new_params, const OptionalTensorList& grad_new_row_vars,
                                 const OptionalTensorList& grad_new_col_vars,
                                 const OptionalTensorList& grad_new_variances, at::TensorList params,
                                 at::TensorList grads, at::TensorList row_vars, at::TensorList col_vars,
                                 at::TensorList variances, int64_t step, double lr, double beta2_decay, double eps1,
                                 double eps2, double d, double weight_decay, bool maximize, bool factored) {
  constexpr const char* op = "fused_optim::adafactor_update_backward";
  const AdafactorArgs args = CheckFunctional(op, params, grads, row_vars, col_vars, variances, step, lr, beta2_decay,
                                             eps1, eps2, d, weight_decay, factored);
  const int64_t n = static_cast<int64_t>(params.size());
  for (const auto* list : {&grad_new_params, &grad_new_row_vars, &grad_new_col_vars, &grad_new_variances}) {
    TORCH_CHECK_VALUE(list->empty() || static_cast<int64_t>(list->size()) == n, op, ": an incoming gradient list has ",
                      list->size(), " entries but params has ", n, " (pass an empty list for all zeros)");
  }
  if (factored) {
    CheckIncoming(op, "grad_new_row_vars", grad_new_row_vars, row_vars);
    CheckIncoming(op, "grad_new_col_vars", grad_new_col_vars, col_vars);
  }
  if (n == 0) return {};
  const auto hyper = MakeHyper(args, weight_decay, maximize);
  const double weight = std::pow(static_cast<double>(step), beta2_decay);
  const std::vector<double> weights(n, weight);
  // The forward passes again, keeping the matrices' estimates.
  const std::vector<double> param_norms = Norms(params);
  Direction dir = RunDirection(op, grads, row_vars, col_vars, variances, weights, eps1, hyper, factored,
                               /*in_place=*/false, /*keep_estimates=*/true);
  const std::vector<double> update_norms = Norms(dir.updates);
  // coef = -alpha / denom is a function of p (through RMS(p), unless eps2 holds alpha) and of u
  // (through RMS(u), unless 1 holds denom; torch's clamp passes ties): given dcoef = sum(gp' u),
  // its gradient is update_coef u + param_coef p.
  TensorVector dots;
  for (int64_t t = 0; t < n; ++t) {
    const at::Tensor gp = Incoming(grad_new_params, t);
    dots.push_back(gp.defined() ? at::sum(gp * dir.updates[t]) : at::zeros({}, params[t].options()));
  }
  const at::Tensor dots_host = at::stack(dots).to(at::kDouble).cpu();
  const double* dcoef = dots_host.const_data_ptr<double>();
  std::vector<double> index(n);
  for (int64_t t = 0; t < n; ++t) index[t] = static_cast<double>(t);
  const auto apply_row = [&](double at, double* row) {
    const int64_t t = static_cast<int64_t>(at);
    const StepSize s(args, params[t].numel(), static_cast<double>(step), param_norms[t], update_norms[t]);
    const double ddenom = dcoef[t] * s.alpha / (s.denom * s.denom);
    const double dalpha = -dcoef[t] / s.denom;
    const double update_coef =
        s.update_ratio >= 1.0 && update_norms[t] > 0.0 ? ddenom / (update_norms[t] * s.root_numel * args.d) : 0.0;
    const double param_coef =
        s.param_rms >= args.eps2 && param_norms[t] > 0.0 ? dalpha * s.rho / (param_norms[t] * s.root_numel) : 0.0;
    ScalarRow(weight, s.coef(), update_coef, param_coef, row);
  };
  // The apply pass's backward: dp and du.
  MultiTensorCall apply(op, params);
  apply.AddOptionalInputs({{"grad_new_params", grad_new_params}});
  apply.AddInputs({{"params", params}, {"updates", dir.updates}});
  auto [grad_params, grad_updates] = apply.AddOutputs<2>();
  apply.SetStepScalars(adafactor_cols::kNumScalars, index, apply_row);
  apply.Launch(FUSED_OPTIM_KERNEL(AdafactorApplyBackward), hyper);
  // The direction's backward, at every tensor's second-moment weight.
  const auto weight_rows =
      ScalarRows{adafactor_cols::kNumScalars, [weight](double /*step*/, double* row) { WeightRow(weight, row); }};
  if (!factored) {
    auto [grad_grads, grad_variances] = UpdateBackward<2>(
        op, FUSED_OPTIM_KERNEL(AdafactorVectorDirectionBackward), hyper, params,
        {{"grad_new_variances", grad_new_variances}},
        {{"update gradients", grad_updates}, {"grads", grads}, {"variances", variances}}, step, weight_rows);
    return {std::move(grad_params), std::move(grad_grads), {}, {}, std::move(grad_variances)};
  }
  auto [grad_grads, grad_estimates] = UpdateBackward<2>(
      op, FUSED_OPTIM_KERNEL(AdafactorFactoredDirectionBackward), hyper, params, {},
      {{"update gradients", grad_updates}, {"grads", grads}, {"estimates", dir.estimates}}, step, weight_rows);
  // Through the estimate e = r c / max(mean(r), eps1) to the new row and column averages, then
  // through their lerps to the old ones and to the row/column means of g^2.
  TensorVector grad_rows, grad_cols;
  for (int64_t t = 0; t < n; ++t) {
    const at::Tensor& row = dir.row_vars[t];
    const at::Tensor& col = dir.col_vars[t];
    const at::Tensor& de = grad_estimates[t];
    const at::Tensor row_mean = row.mean(-2, true);
    const at::Tensor scale = row_mean.clamp_min(eps1);
    at::Tensor drow = at::matmul(de, col.transpose(-1, -2)).div_(scale);
    at::Tensor dcol = at::matmul(row.transpose(-1, -2), de).div_(scale);
    const at::Tensor dscale = (de * dir.estimates[t]).sum({-2, -1}, true).div_(scale).neg_();
    drow.add_(at::where(row_mean >= eps1, dscale, at::zeros_like(dscale)).div_(row.size(-2)));
    const at::Tensor grow = Incoming(grad_new_row_vars, t), gcol = Incoming(grad_new_col_vars, t);
    if (grow.defined()) drow.add_(grow);
    if (gcol.defined()) dcol.add_(gcol);
    const at::Tensor& g = grads[t];
    grad_grads[t].add_(g * (drow * (2.0 * weight / g.size(-1)) + dcol * (2.0 * weight / g.size(-2))));
    grad_rows.push_back(drow.mul_(1.0 - weight));
    grad_cols.push_back(dcol.mul_(1.0 - weight));
  }
  return {std::move(grad_params), std::move(grad_grads), std::move(grad_rows), std::move(grad_cols), {}};
}

}  // namespace

// clang-format off
FUSED_OPTIM_OPS(adafactor, op) {
  op("adafactor_step_(Tensor(a!)[] params, Tensor(g!)[] grads, Tensor(b!)[] row_vars, Tensor(c!)[] col_vars, "
     "Tensor(d!)[] variances, Tensor(e!)[] state_steps, *, float lr, float beta2_decay, float eps1, float eps2, "
     "float d, float weight_decay, bool maximize, bool factored, " FUSED_OPTIM_AMP_ARGS ") -> ()",
     &AdafactorStepInPlace);
  op("adafactor_update(Tensor[] params, Tensor[] grads, Tensor[] row_vars, Tensor[] col_vars, Tensor[] variances, *, "
     "SymInt step, float lr, float beta2_decay, float eps1, float eps2, float d, float weight_decay, bool maximize, "
     "bool factored) -> (Tensor[], Tensor[], Tensor[], Tensor[])",
     &AdafactorUpdate);
  op("adafactor_update_backward(Tensor?[] grad_new_params, Tensor?[] grad_new_row_vars, Tensor?[] grad_new_col_vars, "
     "Tensor?[] grad_new_variances, Tensor[] params, Tensor[] grads, Tensor[] row_vars, Tensor[] col_vars, "
     "Tensor[] variances, *, SymInt step, float lr, float beta2_decay, float eps1, float eps2, float d, "
     "float weight_decay, bool maximize, bool factored) -> (Tensor[], Tensor[], Tensor[], Tensor[], Tensor[])",
     &AdafactorUpdateBackward);
}
// clang-format on

}  // namespace fused_optim
