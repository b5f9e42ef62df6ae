// ASGD ops: argument checks, outputs, and each parameter's eta, mu and step count handed to the
// kernel as state scalars (math/asgd.h holds the element math and their schedule).
#include <cmath>
#include <utility>
#include <vector>

#include "multi_tensor.h"

namespace fused_optim {
namespace {

math::AsgdHyper<double> MakeAsgdHyper(const char* op, double lambd, double weight_decay, bool maximize) {
  FUSED_OPTIM_CHECK_VALUE(std::isfinite(lambd), op, ": lambd must be finite, got ", lambd);
  CheckNonNegative(op, "weight_decay", weight_decay);
  return {weight_decay, maximize, weight_decay != 0.0};
}

// The per-tensor row: the schedule's settings (the functional ops read only lambd). `foreach`: the
// next eta as torch.optim.ASGD's foreach step computes it, its default for CUDA parameters.
auto ScheduleRows(double lr, double lambd, double alpha, double t0, std::vector<double> given_state = {},
                  bool foreach = false) {
  return ScalarRows{asgd_cols::kNumScalars,
                    [=](double /*step*/, double* row) {
                      using namespace asgd_cols;
                      row[kLr] = lr;
                      row[kLambd] = lambd;
                      row[kAlpha] = alpha;
                      row[kT0] = t0;
                      row[kForeach] = foreach ? 1.0 : 0.0;
                    },
                    std::move(given_state)};
}

void AsgdStepInPlace(TensorListArg params, TensorListArg grads, TensorListArg axs, TensorListArg etas,
                     TensorListArg mus, TensorListArg state_steps, double lr, double lambd, double alpha, double t0,
                     double weight_decay, bool maximize, const std::optional<Tensor>& grad_scale,
                     const std::optional<Tensor>& found_inf, bool capturable) {
  constexpr const char* op = "fused_optim::asgd_step_";
  CheckNonNegative(op, "learning rate", lr);
  FUSED_OPTIM_CHECK_VALUE(std::isfinite(alpha) && std::isfinite(t0), op,
                          ": alpha and t0 must be finite, got alpha=", alpha, ", t0=", t0);
  const auto hyper = MakeAsgdHyper(op, lambd, weight_decay, maximize);
  // Each parameter's eta and mu are read, and with its step count advanced, where they live (on
  // the parameter's device, as torch.optim keeps them): no value crosses to the host. With
  // capturable=True all three must be there, so that found_inf is read by the kernel alone.
  const StateScalarList scalars[] = {{"etas", etas}, {"mus", mus}, {"state_steps", state_steps, true}};  // asgd_cols'
  const bool on_cuda = !params.empty() && params[0].defined() && params[0].device().is_cuda();
  StepInPlace(op, FUSED_OPTIM_KERNEL(AsgdStep), hyper, params, grads, {{"axs", axs}}, {grad_scale, found_inf},
              capturable, ScheduleRows(lr, lambd, alpha, t0, {}, on_cuda || AsgdForeachEtaOnCpu()),
              StateScalarsOf<bind::AsgdStep>(scalars));
}

// The functional ops' per-tensor scalars: eta and mu are given, so they read no step count (the
// ops pass step 1).
auto GivenScalars(double eta, double mu, double lambd) { return ScheduleRows(0.0, lambd, 0.0, 0.0, {eta, mu, 0.0}); }

void CheckEtaMu(const char* op, double eta, double mu) {
  FUSED_OPTIM_CHECK_VALUE(std::isfinite(eta) && std::isfinite(mu), op, ": eta and mu must be finite, got eta=", eta,
                          ", mu=", mu);
}

Lists<2> AsgdUpdate(TensorListArg params, TensorListArg grads, TensorListArg axs, double eta, double mu, double lambd,
                    double weight_decay, bool maximize) {
  constexpr const char* op = "fused_optim::asgd_update";
  const auto hyper = MakeAsgdHyper(op, lambd, weight_decay, maximize);
  CheckEtaMu(op, eta, mu);
  return Update(op, FUSED_OPTIM_KERNEL(AsgdStep), hyper, params, grads, {{"axs", axs}}, 1,
                GivenScalars(eta, mu, lambd));
}

Lists<3> AsgdUpdateBackward(const OptionalTensorList& grad_new_params, const OptionalTensorList& grad_new_axs,
                            TensorListArg params, double eta, double mu, double lambd, double weight_decay,
                            bool maximize) {
  constexpr const char* op = "fused_optim::asgd_update_backward";
  const auto hyper = MakeAsgdHyper(op, lambd, weight_decay, maximize);
  return UpdateBackward<3>(op, FUSED_OPTIM_KERNEL(AsgdBackward), hyper, params,
                           {{"grad_new_params", grad_new_params}, {"grad_new_axs", grad_new_axs}}, {}, 1,
                           GivenScalars(eta, mu, lambd));
}

}  // namespace

// clang-format off
FUSED_OPTIM_OPS(asgd, op) {
  op.Add<&AsgdStepInPlace>("asgd_step_(Tensor(a!)[] params, Tensor(g!)[] grads, Tensor(b!)[] axs, Tensor(c!)[] etas, Tensor(d!)[] mus, "
     "Tensor(e!)[] state_steps, *, float lr, float lambd, float alpha, float t0, float weight_decay, "
     "bool maximize, " FUSED_OPTIM_STEP_ARGS ") -> ()");
  op.Add<&AsgdUpdate>("asgd_update(Tensor[] params, Tensor[] grads, Tensor[] axs, *, float eta, float mu, float lambd, "
     "float weight_decay, bool maximize) -> (Tensor[], Tensor[])");
  op.Add<&AsgdUpdateBackward>("asgd_update_backward(Tensor?[] grad_new_params, Tensor?[] grad_new_axs, Tensor[] params, *, float eta, "
     "float mu, float lambd, float weight_decay, bool maximize) -> (Tensor[], Tensor[], Tensor[])");
}
// clang-format on

}  // namespace fused_optim
