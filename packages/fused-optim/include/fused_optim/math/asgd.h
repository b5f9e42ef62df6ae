// ASGD (Polyak & Juditsky, 1992; Bottou, 2012) element-wise math, as torch.optim.ASGD.
//   g' = ±g + wd p;  p <- p (1 - lambd eta) - eta g';  ax <- p if mu == 1 else ax + mu (p - ax)
// eta and mu are per-parameter state scalars read before the step; after it, the step count t
// advances and they become lr / (1 + lambd lr t)^alpha and 1 / max(1, t - t0) (AsgdAdvance), all
// read and written where they live (the kernels' state scalars, csrc/kernels.h).
#pragma once

#include "fused_optim/math/common.h"

namespace fused_optim::math {

template <typename T>
struct AsgdHyper {
  T weight_decay;
  bool maximize, has_l2;
  // The same hyper-parameters in another math type (kernels receive them in double).
  template <typename U>
  FUSED_OPTIM_HOST_DEVICE AsgdHyper<U> To() const {
    return {U(weight_decay), maximize, has_l2};
  }
};

// Per-tensor scalars, from the parameter's own eta and mu state.
template <typename T>
struct AsgdStepScalars {
  T eta, decay, mu;   // decay = 1 - lambd * eta
  bool copy_average;  // mu == 1: the average is the parameter itself (torch copies it)
};

// One tensor's scalars from its eta and mu.
template <typename T>
FUSED_OPTIM_HOST_DEVICE inline AsgdStepScalars<T> AsgdScalars(double eta, double mu, double lambd) {
  return {T(eta), T(1.0 - lambd * eta), T(mu), mu == 1.0};
}

// torch.optim.ASGD's schedule after the step that made the count t.
FUSED_OPTIM_HOST_DEVICE inline double AsgdEta(double lr, double lambd, double alpha, double t) {
  return lr / pow(1.0 + lambd * lr * t, alpha);
}
// The same as torch.optim.ASGD's foreach step (its default for CUDA parameters) computes it:
// tensor arithmetic on the step counter t, each operation rounded to the counter's dtype by
// `round` (and the Python numbers it takes with it), so 1 + lambd lr t is rounded before the power.
// Its single-tensor step (the CPU default) computes AsgdEta in double instead; the two differ by
// up to a rounding of eta in the counter's dtype (float32 unless the default dtype is float64).
template <typename Round>
FUSED_OPTIM_HOST_DEVICE inline double AsgdEtaForeach(double lr, double lambd, double alpha, double t,
                                                     const Round& round) {
  const double base = round(round(t * round(lambd * lr)) + 1.0);
  return round(round(1.0 / round(pow(base, alpha))) * round(lr));  // lr / x is x.reciprocal() * lr
}
FUSED_OPTIM_HOST_DEVICE inline double AsgdMu(double t0, double t) {
  const double d = t - t0;
  return 1.0 / (d > 1.0 ? d : 1.0);  // 1 / max(1, t - t0)
}

template <typename T>
FUSED_OPTIM_HOST_DEVICE inline void AsgdStep(T& p, T grad, T& ax, const AsgdHyper<T>& h, const AsgdStepScalars<T>& s) {
  const T g = EffectiveGrad(grad, p, h.maximize, h.has_l2, h.weight_decay);
  p = p * s.decay;
  p = p + (-s.eta) * g;
  ax = s.copy_average ? p : ax + (p - ax) * s.mu;
}

template <typename T>
struct AsgdGrads {
  T p, grad, ax;
};

// Gradients of the out-of-place step with respect to (p, grad, ax), given the gradients flowing
// into (p', ax').
template <typename T>
FUSED_OPTIM_HOST_DEVICE inline AsgdGrads<T> AsgdStepBackward(T gp_new, T gax_new, const AsgdHyper<T>& h,
                                                             const AsgdStepScalars<T>& s) {
  const T dp_new = gp_new + (s.copy_average ? gax_new : s.mu * gax_new);
  const T dg = -s.eta * dp_new;
  AsgdGrads<T> out{};
  out.ax = s.copy_average ? T(0) : (T(1) - s.mu) * gax_new;
  EffectiveGradBackward(out, s.decay * dp_new, dg, h);
  return out;
}

}  // namespace fused_optim::math

// The kernel binding (see common.h): the kernel table's columns and how each element function
// maps them to the math above, shared by the CPU loops and the CUDA kernels.
namespace fused_optim {
namespace asgd_cols {
enum : int { kParam, kGrad, kAx };
enum : int { kGParamNew = 0, kGAxNew, kOutParam, kOutGrad, kOutAx };
// per-tensor scalars: the schedule's settings; kForeach != 0: eta as torch's foreach step computes it
enum : int { kLr = 0, kLambd, kAlpha, kT0, kForeach, kNumScalars };
enum : int { kEta = 0, kMu, kStep, kNumState };  // state scalars (a functional op gives eta and mu)
}  // namespace asgd_cols

namespace bind {

struct Asgd {
  static constexpr int kNumScalars = asgd_cols::kNumScalars;
  template <typename T>
  using Hyper = math::AsgdHyper<T>;
  template <typename T>
  using Scalars = math::AsgdStepScalars<T>;
  static constexpr int kStateScalars = asgd_cols::kNumState;
  template <typename T, typename StateIO>
  FUSED_OPTIM_HOST_DEVICE static Scalars<T> MakeScalars(const double* row, const StateIO& state) {
    using namespace asgd_cols;
    return math::AsgdScalars<T>(state.Load(kEta), state.Load(kMu), row[kLambd]);
  }
  // After an in-place step: the count advances, then eta and mu follow it, each first made a
  // tensor of the default dtype as torch.optim makes them.
  template <typename StateIO>
  FUSED_OPTIM_HOST_DEVICE static void Advance(const double* row, const StateIO& state) {
    using namespace asgd_cols;
    const double t = state.Round(kStep, state.Load(kStep) + 1.0);
    state.Store(kStep, t);
    const auto in_step_dtype = [&](double v) { return state.Round(kStep, v); };
    const double eta = row[kForeach] != 0.0 ? math::AsgdEtaForeach(row[kLr], row[kLambd], row[kAlpha], t, in_step_dtype)
                                            : math::AsgdEta(row[kLr], row[kLambd], row[kAlpha], t);
    state.Store(kEta, state.RoundToDefault(eta));
    state.Store(kMu, state.RoundToDefault(math::AsgdMu(row[kT0], t)));
  }
  template <typename T>
  static auto Flags(Hyper<T>& h, Scalars<T>& s) {
    return std::tie(h.maximize, h.has_l2, s.copy_average);
  }
};

struct AsgdStep : Asgd {
  static constexpr int kLists = 3;
  template <typename T, typename IO>
  FUSED_OPTIM_ELEMENT static void Apply(const IO& io, const Hyper<T>& h, const Scalars<T>& s) {
    using namespace asgd_cols;
    T p = io.Load(kParam), ax = io.Load(kAx);
    math::AsgdStep(p, io.Load(kGrad), ax, h, s);
    io.Store(kParam, p);
    io.Store(kAx, ax);
  }
};

struct AsgdBackward : Asgd {
  static constexpr int kLists = 5;
  template <typename T, typename IO>
  FUSED_OPTIM_ELEMENT static void Apply(const IO& io, const Hyper<T>& h, const Scalars<T>& s) {
    using namespace asgd_cols;
    const math::AsgdGrads<T> r = math::AsgdStepBackward<T>(io.Load(kGParamNew), io.Load(kGAxNew), h, s);
    io.Store(kOutParam, r.p);
    io.Store(kOutGrad, r.grad);
    io.Store(kOutAx, r.ax);
  }
};

}  // namespace bind
}  // namespace fused_optim
