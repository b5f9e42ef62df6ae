// ASGD ops: argument checks, outputs and the per-tensor step size and averaging weight (each
// parameter's eta and mu, then their next values from its step count); the element math is
// math/asgd.h.
#include <ATen/ops/_foreach_copy.h>
#include <ATen/ops/cat.h>

#include <cmath>

#include "multi_tensor.h"
#include "ops/state_scalars.h"

namespace fused_optim {
namespace {

math::AsgdHyper<double> MakeHyper(const char* op, double lambd, double weight_decay, bool maximize) {
  TORCH_CHECK_VALUE(std::isfinite(lambd), op, ": lambd must be finite, got ", lambd);
  CheckNonNegative(op, "weight_decay", weight_decay);
  return {weight_decay, maximize, weight_decay != 0.0};
}

void ScalarRow(double eta, double mu, double lambd, double* row) {
  using namespace asgd_cols;
  row[kEta] = eta;
  row[kDecay] = 1.0 - lambd * eta;
  row[kMu] = mu;
}

// The next etas as torch.optim.ASGD's foreach step (its default for CUDA parameters) computes
// them: lr / (1 + lambd lr t)^alpha as tensor arithmetic on the step counters, in their dtype
// (float32 unless the default dtype is float64) and in its order of operations, which rounds
// 1 + lambd lr t to that dtype before the power. Its single-tensor step (the default on the CPU)
// computes them in double instead; the two differ by up to a float32 rounding of eta.
void WriteForeachEtas(at::TensorList etas, at::TensorList steps, double lr, double lambd, double alpha) {
  const auto next = [&](const at::Tensor& t) { return t.mul(lambd * lr).add(1).pow(alpha).reciprocal().mul(lr); };
  // One batched computation where the counters share a CUDA device and dtype: a CUDA kernel computes
  // each element alike whatever the tensor's size (a CPU kernel may take a vectorized path instead).
  bool batch = !steps.empty() && steps[0].is_cuda();
  std::vector<at::Tensor> counts;
  for (const at::Tensor& s : steps) {
    batch = batch && s.device() == steps[0].device() && s.scalar_type() == steps[0].scalar_type();
    counts.push_back(s.reshape({1}));
  }
  if (batch) {
    const std::vector<at::Tensor> values = next(at::cat(counts)).unbind();
    std::vector<at::Tensor> targets;
    for (const at::Tensor& e : etas) targets.push_back(e.reshape({}));
    at::_foreach_copy_(targets, values);
  } else {
    for (size_t i = 0; i < steps.size(); ++i) etas[i].copy_(next(steps[i]).reshape_as(etas[i]));
  }
}

void AsgdStepInPlace(at::TensorList params, at::TensorList grads, at::TensorList axs, at::TensorList etas,
                     at::TensorList mus, at::TensorList state_steps, double lr, double lambd, double alpha, double t0,
                     double weight_decay, bool maximize) {
  constexpr const char* op = "fused_optim::asgd_step_";
  CheckNonNegative(op, "learning rate", lr);
  TORCH_CHECK_VALUE(std::isfinite(alpha) && std::isfinite(t0), op, ": alpha and t0 must be finite, got alpha=", alpha,
                    ", t0=", t0);
  const auto hyper = MakeHyper(op, lambd, weight_decay, maximize);
  MultiTensorCall call(op, params, kInPlace);
  call.AddStep(params, grads, {{"axs", axs}});
  CheckStateScalars(op, "etas", etas, call.size());
  CheckStateScalars(op, "mus", mus, call.size());
  CheckStepTensors(op, state_steps, call.size());
  if (call.ChecksOnly()) return;                                  // nothing is written yet
  const std::vector<double> steps = IncrementSteps(state_steps);  // first modification
  size_t t = 0;
  call.SetStepScalars(asgd_cols::kNumScalars, steps, [&](double /*step*/, double* row) {
    ScalarRow(ReadStateScalar(etas[t]), ReadStateScalar(mus[t]), lambd, row);
    ++t;
  });
  call.Launch(FUSED_OPTIM_KERNEL(AsgdStep), hyper);
  // torch.optim's schedule, for the next step: eta = lr / (1 + lambd lr t)^alpha, mu = 1 / max(1, t - t0),
  // each made a tensor of the default dtype before it is copied into the state; on CUDA, eta as
  // torch's foreach step computes it.
  if (call.on_cuda()) WriteForeachEtas(etas, state_steps, lr, lambd, alpha);
  for (size_t i = 0; i < steps.size(); ++i) {
    if (!call.on_cuda()) {
      WriteStateScalar(etas[i], RoundToDefaultDtype(lr / std::pow(1.0 + lambd * lr * steps[i], alpha)));
    }
    WriteStateScalar(mus[i], RoundToDefaultDtype(1.0 / std::max(1.0, steps[i] - t0)));
  }
}

// The functional ops' per-tensor scalars: eta and mu are given, so they read no step count (the
// ops pass step 1).
auto GivenScalars(double eta, double mu, double lambd) {
  return ScalarRows{asgd_cols::kNumScalars, [=](double /*step*/, double* row) { ScalarRow(eta, mu, lambd, row); }};
}

void CheckEtaMu(const char* op, double eta, double mu) {
  TORCH_CHECK_VALUE(std::isfinite(eta) && std::isfinite(mu), op, ": eta and mu must be finite, got eta=", eta,
                    ", mu=", mu);
}

Lists<2> AsgdUpdate(at::TensorList params, at::TensorList grads, at::TensorList axs, double eta, double mu,
                    double lambd, double weight_decay, bool maximize) {
  constexpr const char* op = "fused_optim::asgd_update";
  const auto hyper = MakeHyper(op, lambd, weight_decay, maximize);
  CheckEtaMu(op, eta, mu);
  return Update(op, FUSED_OPTIM_KERNEL(AsgdStep), hyper, params, grads, {{"axs", axs}}, 1,
                GivenScalars(eta, mu, lambd));
}

Lists<3> AsgdUpdateBackward(const OptionalTensorList& grad_new_params, const OptionalTensorList& grad_new_axs,
                            at::TensorList params, double eta, double mu, double lambd, double weight_decay,
                            bool maximize) {
  constexpr const char* op = "fused_optim::asgd_update_backward";
  const auto hyper = MakeHyper(op, lambd, weight_decay, maximize);
  return UpdateBackward<3>(op, FUSED_OPTIM_KERNEL(AsgdBackward), hyper, params,
                           {{"grad_new_params", grad_new_params}, {"grad_new_axs", grad_new_axs}}, {}, 1,
                           GivenScalars(eta, mu, lambd));
}

}  // namespace

// clang-format off
FUSED_OPTIM_OPS(asgd, op) {
  op("asgd_step_(Tensor(a!)[] params, Tensor[] grads, Tensor(b!)[] axs, Tensor(c!)[] etas, Tensor(d!)[] mus, "
     "Tensor(e!)[] state_steps, *, float lr, float lambd, float alpha, float t0, float weight_decay, "
     "bool maximize) -> ()",
     &AsgdStepInPlace);
  op("asgd_update(Tensor[] params, Tensor[] grads, Tensor[] axs, *, float eta, float mu, float lambd, "
     "float weight_decay, bool maximize) -> (Tensor[], Tensor[])",
     &AsgdUpdate);
  op("asgd_update_backward(Tensor?[] grad_new_params, Tensor?[] grad_new_axs, Tensor[] params, *, float eta, "
     "float mu, float lambd, float weight_decay, bool maximize) -> (Tensor[], Tensor[], Tensor[])",
     &AsgdUpdateBackward);
}
// clang-format on

}  // namespace fused_optim
