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

// Every pass's two results: (variance, update) for the vector direction, and for the backward
// passes (param, update) for the apply pass, (grad, state) for the direction passes.
template <typename T>
struct AdafactorPair {
  T a, b;
};

// The scaled update from a second-moment estimate (torch: clamp_min, rsqrt, times the gradient).
template <typename T>
FUSED_OPTIM_HOST_DEVICE inline T AdafactorScaled(T g, T estimate, const AdafactorHyper<T>& h) {
  return (T(1) / Sqrt(MaxNan(estimate, h.eps1_sq))) * g;
}

// Vectors (and scalars): the new full second moment and the update.
template <typename T>
FUSED_OPTIM_HOST_DEVICE inline AdafactorPair<T> AdafactorVectorDirection(T grad, T variance, const AdafactorHyper<T>& h,
                                                                         const AdafactorStepScalars<T>& s) {
  const T g = MaximizeFlip(grad, h.maximize);
  const T v_new = Lerp(variance, g * g, s.weight, s.lerp_small);
  return {v_new, AdafactorScaled(g, v_new, h)};
}

// Matrices: the update from the factored estimate the op built.
template <typename T>
FUSED_OPTIM_HOST_DEVICE inline T AdafactorFactoredDirection(T grad, T estimate, const AdafactorHyper<T>& h) {
  return AdafactorScaled(MaximizeFlip(grad, h.maximize), estimate, h);
}

// The new parameter.
template <typename T>
FUSED_OPTIM_HOST_DEVICE inline T AdafactorApply(T p, T u, const AdafactorHyper<T>& h,
                                                const AdafactorStepScalars<T>& s) {
  p = h.has_decay ? p * h.decay : p;
  return p + s.coef * u;
}

// The apply pass's gradients: dp = gp' (1 - lr wd) + param_coef p, du = coef gp' + update_coef u.
template <typename T>
FUSED_OPTIM_HOST_DEVICE inline AdafactorPair<T> AdafactorApplyBackward(T gp_new, T u, T p, const AdafactorHyper<T>& h,
                                                                       const AdafactorStepScalars<T>& s) {
  return {(h.has_decay ? gp_new * h.decay : gp_new) + s.param_coef * p, s.coef * gp_new + s.update_coef * u};
}

// The scaled update's gradients given du: through g' (du / sqrt(e)) and through the clamped
// estimate e (-du g' / (2 e^1.5), zero where the floor eps1^2 holds it; torch's clamp passes ties).
template <typename T>
FUSED_OPTIM_HOST_DEVICE inline AdafactorPair<T> AdafactorScaledBackward(T du, T g, T estimate,
                                                                        const AdafactorHyper<T>& h) {
  const T q = T(1) / Sqrt(MaxNan(estimate, h.eps1_sq));
  return {du * q, estimate >= h.eps1_sq ? T(-0.5) * du * g * (q * q * q) : T(0)};
}

// Vectors: the gradients of the raw gradient and of the old second moment, given du and the new
// second moment's incoming gradient gv'.
template <typename T>
FUSED_OPTIM_HOST_DEVICE inline AdafactorPair<T> AdafactorVectorDirectionBackward(T du, T gv_new, T grad, T variance,
                                                                                 const AdafactorHyper<T>& h,
                                                                                 const AdafactorStepScalars<T>& s) {
  const T g = MaximizeFlip(grad, h.maximize);
  const T v_new = Lerp(variance, g * g, s.weight, s.lerp_small);
  const AdafactorPair<T> r = AdafactorScaledBackward(du, g, v_new, h);
  const T dv_new = gv_new + r.b;
  return {MaximizeFlip(r.a + T(2) * s.weight * g * dv_new, h.maximize), (T(1) - s.weight) * dv_new};
}

// Matrices: the gradient of the raw gradient through g' / sqrt(e) alone (the op adds the part
// through the row/column means) and the gradient of the estimate e.
template <typename T>
FUSED_OPTIM_HOST_DEVICE inline AdafactorPair<T> AdafactorFactoredDirectionBackward(T du, T grad, T estimate,
                                                                                   const AdafactorHyper<T>& h) {
  const AdafactorPair<T> r = AdafactorScaledBackward(du, MaximizeFlip(grad, h.maximize), estimate, h);
  return {MaximizeFlip(r.a, h.maximize), r.b};
}

}  // namespace fused_optim::math

// The kernel bindings (see common.h): the kernel table's columns and how each element function
// maps them to the math above, shared by the CPU loops and the CUDA kernels.
namespace fused_optim {
namespace adafactor_cols {
enum : int { kGrad, kVariance, kUpdate };  // AdafactorVectorDirection
enum : int { kEstimate = 1 };              // AdafactorFactoredDirection: the estimate becomes the update
enum : int { kParam = 0, kApplyUpdate };   // AdafactorApply (its backward: the standard layout)
// The direction passes' backward: incoming gradients, forward inputs, then outgoing gradients.
enum : int { kGVarianceNew = 0, kDUpdate, kBGrad, kBVariance, kOutGrad, kOutVariance };  // ...VectorDirectionBackward
enum : int { kFUpdate = 0, kFGrad, kFEstimate, kFOutGrad, kFOutEstimate };               // ...FactoredDirectionBackward
enum : int { kWeight = 0, kCoef, kUpdateCoef, kParamCoef, kSmall, kNumScalars };         // per-tensor scalars
}  // namespace adafactor_cols

namespace bind {

struct Adafactor {
  static constexpr int kNumScalars = adafactor_cols::kNumScalars;
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
  // A pass's two results, to their columns.
  template <typename T, typename IO>
  FUSED_OPTIM_ELEMENT static void Store(const IO& io, int a, int b, const math::AdafactorPair<T>& r) {
    io.Store(a, r.a);
    io.Store(b, r.b);
  }
};

struct AdafactorVectorDirection : Adafactor {
  static constexpr int kLists = 3;
  template <typename T, typename IO>
  FUSED_OPTIM_ELEMENT static void Apply(const IO& io, const Hyper<T>& h, const Scalars<T>& s) {
    using namespace adafactor_cols;
    Store(io, kVariance, kUpdate, math::AdafactorVectorDirection(io.Load(kGrad), io.Load(kVariance), h, s));
  }
};

struct AdafactorFactoredDirection : Adafactor {
  static constexpr int kLists = 2;
  template <typename T, typename IO>
  FUSED_OPTIM_ELEMENT static void Apply(const IO& io, const Hyper<T>& h, const Scalars<T>& /*s*/) {
    using namespace adafactor_cols;
    io.Store(kEstimate, math::AdafactorFactoredDirection(io.Load(kGrad), io.Load(kEstimate), h));
  }
};

struct AdafactorApply : Adafactor {
  static constexpr int kLists = 2;
  template <typename T, typename IO>
  FUSED_OPTIM_ELEMENT static void Apply(const IO& io, const Hyper<T>& h, const Scalars<T>& s) {
    using namespace adafactor_cols;
    io.Store(kParam, math::AdafactorApply(io.Load(kParam), io.Load(kApplyUpdate), h, s));
  }
};

// The update is the apply pass's read-only input (the grad's place in a step table).
struct AdafactorApplyBackward : Adafactor {
  using C = BackwardOf<AdafactorApply::kLists>;  // the standard layout
  static constexpr int kLists = C::kLists;
  template <typename T, typename IO>
  FUSED_OPTIM_ELEMENT static void Apply(const IO& io, const Hyper<T>& h, const Scalars<T>& s) {
    using namespace adafactor_cols;
    Store(io, C::Out(kParam), C::Out(kApplyUpdate),
          math::AdafactorApplyBackward(io.Load(C::GradNew(kParam)), io.Load(C::In(kApplyUpdate)),
                                       io.Load(C::In(kParam)), h, s));
  }
};

struct AdafactorVectorDirectionBackward : Adafactor {
  static constexpr int kLists = 6;
  template <typename T, typename IO>
  FUSED_OPTIM_ELEMENT static void Apply(const IO& io, const Hyper<T>& h, const Scalars<T>& s) {
    using namespace adafactor_cols;
    Store(io, kOutGrad, kOutVariance,
          math::AdafactorVectorDirectionBackward(io.Load(kDUpdate), io.Load(kGVarianceNew), io.Load(kBGrad),
                                                 io.Load(kBVariance), h, s));
  }
};

struct AdafactorFactoredDirectionBackward : Adafactor {
  static constexpr int kLists = 5;
  template <typename T, typename IO>
  FUSED_OPTIM_ELEMENT static void Apply(const IO& io, const Hyper<T>& h, const Scalars<T>& /*s*/) {
    using namespace adafactor_cols;
    Store(io, kFOutGrad, kFOutEstimate,
          math::AdafactorFactoredDirectionBackward(io.Load(kFUpdate), io.Load(kFGrad), io.Load(kFEstimate), h));
  }
};

}  // namespace bind
}  // namespace fused_optim
