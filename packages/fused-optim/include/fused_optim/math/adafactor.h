// Adafactor (Shazeer & Stern, 2018) element-wise math, as torch.optim.Adafactor. The step has
// per-tensor reductions (the RMS of the parameter and of the update, and for matrices the row and
// column means of g^2) between its element-wise passes; the op (csrc/ops/adafactor.cpp) runs the
// reductions and these passes in turn:
//   direction  g' = ±g;  v <- lerp(v, g'^2, t^c) (vectors; matrices get their factored estimate
//              from the op);  u = g' / sqrt(max(v, eps1^2))
//   apply      p <- p (1 - lr wd) + coef u,  coef = -max(eps2, RMS(p)) min(lr, 1/sqrt(t)) / max(1, RMS(u) / d)
// The functional op's backward runs the same passes in reverse; through the per-tensor reductions
// its element-wise pieces take per-tensor coefficients the op computes from the norms (the
// gradient of coef with respect to u and p is a multiple of u and of p), and the factored
// estimate's row/column sums are again ATen reductions in the op.
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

// Per-tensor scalars: the second-moment weight t^c (with its lerp form) and the step coefficient;
// for the backward, the coefficients of u and of p in the gradients of coef * u.
template <typename T>
struct AdafactorStepScalars {
  T weight, coef, update_coef, param_coef;
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

template <typename T>
struct AdafactorGrads {
  T a, b;  // (param, update) for the apply pass; (grad, state) for the direction passes
};

// The apply pass's gradients: dp = gp' (1 - lr wd) + param_coef p, du = coef gp' + update_coef u.
template <typename T>
FUSED_OPTIM_HOST_DEVICE inline AdafactorGrads<T> AdafactorApplyBackward(T gp_new, T u, T p, const AdafactorHyper<T>& h,
                                                                        const AdafactorStepScalars<T>& s) {
  return {(h.has_decay ? gp_new * h.decay : gp_new) + s.param_coef * p, s.coef * gp_new + s.update_coef * u};
}

// The scaled update's gradients given du: through g' (du / sqrt(e)) and through the clamped
// estimate e (-du g' / (2 e^1.5), zero where the floor eps1^2 holds it; torch's clamp passes ties).
template <typename T>
FUSED_OPTIM_HOST_DEVICE inline AdafactorGrads<T> AdafactorScaledBackward(T du, T g, T estimate,
                                                                         const AdafactorHyper<T>& h) {
  const T q = T(1) / Sqrt(MaxNan(estimate, h.eps1_sq));
  return {du * q, estimate >= h.eps1_sq ? T(-0.5) * du * g * (q * q * q) : T(0)};
}

// Vectors: the gradients of the raw gradient and of the old second moment, given du and the new
// second moment's incoming gradient gv'.
template <typename T>
FUSED_OPTIM_HOST_DEVICE inline AdafactorGrads<T> AdafactorVectorDirectionBackward(T du, T gv_new, T grad, T variance,
                                                                                  const AdafactorHyper<T>& h,
                                                                                  const AdafactorStepScalars<T>& s) {
  const T g = h.maximize ? -grad : grad;
  const T v_new = Lerp(variance, g * g, s.weight, s.lerp_small);
  const AdafactorGrads<T> r = AdafactorScaledBackward(du, g, v_new, h);
  const T dv_new = gv_new + r.b;
  const T dg = r.a + T(2) * s.weight * g * dv_new;
  return {h.maximize ? -dg : dg, (T(1) - s.weight) * dv_new};
}

// Matrices: the gradient of the raw gradient through g' / sqrt(e) alone (the op adds the part
// through the row/column means) and the gradient of the estimate e.
template <typename T>
FUSED_OPTIM_HOST_DEVICE inline AdafactorGrads<T> AdafactorFactoredDirectionBackward(T du, T grad, T estimate,
                                                                                    const AdafactorHyper<T>& h) {
  const T g = h.maximize ? -grad : grad;
  const AdafactorGrads<T> r = AdafactorScaledBackward(du, g, estimate, h);
  return {h.maximize ? -r.a : r.a, r.b};
}

}  // namespace fused_optim::math

// The kernel bindings (see common.h): the kernel table's columns and how each element function
// maps them to the math above, shared by the CPU loops and the CUDA kernels.
namespace fused_optim {
namespace adafactor_cols {
enum : int { kGrad, kVariance, kUpdate };  // AdafactorVectorDirection
enum : int { kEstimate = 1 };              // AdafactorFactoredDirection: the estimate becomes the update
enum : int { kParam = 0, kApplyUpdate };   // AdafactorApply
// The backward passes: incoming gradients, forward inputs, then outgoing gradients.
enum : int { kGParamNew = 0, kBUpdate, kBParam, kOutParam, kOutUpdate };                 // AdafactorApplyBackward
enum : int { kGVarianceNew = 0, kDUpdate, kBGrad, kBVariance, kOutGrad, kOutVariance };  // ...VectorDirectionBackward
enum : int { kFUpdate = 0, kFGrad, kFEstimate, kFOutGrad, kFOutEstimate };               // ...FactoredDirectionBackward
enum : int { kWeight = 0, kCoef, kUpdateCoef, kParamCoef, kSmall, kNumScalars };         // per-tensor scalars
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
    return {T(row[kWeight]), T(row[kCoef]), T(row[kUpdateCoef]), T(row[kParamCoef]), row[kSmall] != 0.0};
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

struct AdafactorApplyBackward : Adafactor {
  static constexpr int kLists = 5;
  template <typename T, typename IO>
  FUSED_OPTIM_ELEMENT static void Apply(const IO& io, const Hyper<T>& h, const Scalars<T>& s) {
    using namespace adafactor_cols;
    const auto r = math::AdafactorApplyBackward(io.Load(kGParamNew), io.Load(kBUpdate), io.Load(kBParam), h, s);
    io.Store(kOutParam, r.a);
    io.Store(kOutUpdate, r.b);
  }
};

struct AdafactorVectorDirectionBackward : Adafactor {
  static constexpr int kLists = 6;
  template <typename T, typename IO>
  FUSED_OPTIM_ELEMENT static void Apply(const IO& io, const Hyper<T>& h, const Scalars<T>& s) {
    using namespace adafactor_cols;
    const auto r = math::AdafactorVectorDirectionBackward(io.Load(kDUpdate), io.Load(kGVarianceNew), io.Load(kBGrad),
                                                          io.Load(kBVariance), h, s);
    io.Store(kOutGrad, r.a);
    io.Store(kOutVariance, r.b);
  }
};

struct AdafactorFactoredDirectionBackward : Adafactor {
  static constexpr int kLists = 5;
  template <typename T, typename IO>
  FUSED_OPTIM_ELEMENT static void Apply(const IO& io, const Hyper<T>& h, const Scalars<T>& /*s*/) {
    using namespace adafactor_cols;
    const auto r = math::AdafactorFactoredDirectionBackward(io.Load(kFUpdate), io.Load(kFGrad), io.Load(kFEstimate), h);
    io.Store(kFOutGrad, r.a);
    io.Store(kFOutEstimate, r.b);
  }
};

}  // namespace bind
}  // namespace fused_optim
