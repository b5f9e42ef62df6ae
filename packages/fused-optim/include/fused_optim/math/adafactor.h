// Adafactor (Shazeer & Stern, 2018) element-wise math, as torch.optim.Adafactor. The step has
// per-tensor reductions (the RMS of the parameter and of the update, and for matrices the row and
// column means of g^2) between its element-wise passes; the op (csrc/ops/adafactor.cpp) runs the
// reductions and these passes in turn:
//   direction  g' = ±g;  v <- lerp(v, g'^2, t^c) (vectors; matrices get their factored estimate
//              from the op);  u = g' / sqrt(max(v, eps1^2))
//   apply      p <- p (1 - lr wd) + coef u,  coef = -max(eps2, RMS(p)) min(lr, 1/sqrt(t)) / max(1, RMS(u) / d)
#pragma once

#include "fused_optim/math/common.h"

namespace fused_optim::math {

template <typename T>
struct AdafactorHyper {
  T eps1_sq;  // the floor of the second-moment estimate
  T decay;    // 1 - lr * weight_decay
  bool maximize, has_decay;
  // The same hyper-parameters in another math type (kernels receive them in double).
  template <typename U>
  FUSED_OPTIM_HOST_DEVICE AdafactorHyper<U> To() const {
    return {U(eps1_sq), U(decay), maximize, has_decay};
  }
};

// Per-tensor scalars: the second-moment weight t^c (with its lerp form) and the step coefficient.
template <typename T>
struct AdafactorStepScalars {
  T weight, coef;
  bool lerp_small;
};

// The scaled update from a second-moment estimate (torch: clamp_min, rsqrt, times the gradient).
template <typename T>
FUSED_OPTIM_HOST_DEVICE inline T AdafactorScaled(T g, T estimate, const AdafactorHyper<T>& h) {
  return (T(1) / Sqrt(MaxNan(estimate, h.eps1_sq))) * g;
}

// Vectors (and scalars): the full second moment, updated in place, and the update.
template <typename T>
FUSED_OPTIM_HOST_DEVICE inline T AdafactorVectorDirection(T grad, T& variance, const AdafactorHyper<T>& h,
                                                          const AdafactorStepScalars<T>& s) {
  const T g = h.maximize ? -grad : grad;
  variance = Lerp(variance, g * g, s.weight, s.lerp_small);
  return AdafactorScaled(g, variance, h);
}

template <typename T>
FUSED_OPTIM_HOST_DEVICE inline void AdafactorApply(T& p, T u, const AdafactorHyper<T>& h,
                                                   const AdafactorStepScalars<T>& s) {
  p = h.has_decay ? p * h.decay : p;
  p = p + s.coef * u;
}

}  // namespace fused_optim::math

// The kernel bindings (see common.h): the kernel table's columns and how each element function
// maps them to the math above, shared by the CPU loops and the CUDA kernels.
namespace fused_optim {
namespace adafactor_cols {
enum : int { kGrad, kVariance, kUpdate };                // AdafactorVectorDirection
enum : int { kEstimate = 1 };                            // AdafactorFactoredDirection: the estimate becomes the update
enum : int { kParam = 0, kApplyUpdate };                 // AdafactorApply
enum : int { kWeight = 0, kCoef, kSmall, kNumScalars };  // per-tensor scalars
}  // namespace adafactor_cols

namespace bind {

struct Adafactor {
  template <typename T>
  using Hyper = math::AdafactorHyper<T>;
  template <typename T>
  using Scalars = math::AdafactorStepScalars<T>;
  template <typename T>
  FUSED_OPTIM_HOST_DEVICE static Scalars<T> MakeScalars(const double* row) {
    using namespace adafactor_cols;
    return {T(row[kWeight]), T(row[kCoef]), row[kSmall] != 0.0};
  }
  template <typename T>
  static auto Flags(Hyper<T>& h, Scalars<T>& s) {
    return std::tie(h.maximize, h.has_decay, s.lerp_small);
  }
};

struct AdafactorVectorDirection : Adafactor {
  static constexpr int kLists = 3;
  template <typename T, typename IO>
  FUSED_OPTIM_ELEMENT static void Apply(const IO& io, const Hyper<T>& h, const Scalars<T>& s) {
    using namespace adafactor_cols;
    T v = io.Load(kVariance);
    const T u = math::AdafactorVectorDirection(io.Load(kGrad), v, h, s);
    io.Store(kVariance, v);
    io.Store(kUpdate, u);
  }
};

struct AdafactorFactoredDirection : Adafactor {
  static constexpr int kLists = 2;
  template <typename T, typename IO>
  FUSED_OPTIM_ELEMENT static void Apply(const IO& io, const Hyper<T>& h, const Scalars<T>& /*s*/) {
    using namespace adafactor_cols;
    const T grad = io.Load(kGrad);
    io.Store(kEstimate, math::AdafactorScaled(h.maximize ? -grad : grad, io.Load(kEstimate), h));
  }
};

struct AdafactorApply : Adafactor {
  static constexpr int kLists = 2;
  template <typename T, typename IO>
  FUSED_OPTIM_ELEMENT static void Apply(const IO& io, const Hyper<T>& h, const Scalars<T>& s) {
    using namespace adafactor_cols;
    T p = io.Load(kParam);
    math::AdafactorApply(p, io.Load(kApplyUpdate), h, s);
    io.Store(kParam, p);
  }
};

}  // namespace bind
}  // namespace fused_optim
