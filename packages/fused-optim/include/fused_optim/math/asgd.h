// ASGD (Polyak & Juditsky, 1992; Bottou, 2012) element-wise math, as torch.optim.ASGD.
//   g' = ±g + wd p;  p <- p (1 - lambd eta) - eta g';  ax <- p if mu == 1 else ax + mu (p - ax)
// eta and mu are per-parameter state scalars read before the step; their next values
// (lr / (1 + lambd lr t)^alpha and 1 / max(1, t - t0)) are set on the host.
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
enum : int { kEta = 0, kDecay, kMu, kNumScalars };  // per-tensor scalars (from each parameter's eta and mu)
}  // namespace asgd_cols

namespace bind {

struct Asgd {
  static constexpr int kNumScalars = asgd_cols::kNumScalars;
  template <typename T>
  using Hyper = math::AsgdHyper<T>;
  template <typename T>
  using Scalars = math::AsgdStepScalars<T>;
  template <typename T>
  FUSED_OPTIM_HOST_DEVICE static Scalars<T> MakeScalars(const double* row) {
    using namespace asgd_cols;
    return {T(row[kEta]), T(row[kDecay]), T(row[kMu]), row[kMu] == 1.0};
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
