// NAdam (Dozat, 2016) element-wise math, with torch.optim's momentum schedule.
//   g' = ±g (+ wd p, L2 form);  p <- p (1 - lr wd) (decoupled form)
//   m <- lerp(m, g', 1 - b1);  v <- b2 v + (1 - b2) g'^2;  d = sqrt(v / bc2) + eps
//   p <- p + cg g' / d + cm m / d,  cg = -lr (1 - mu_t) / (1 - prod_t),  cm = -lr mu_{t+1} / (1 - prod_{t+1})
// where mu_t = b1 (1 - 0.5 * 0.96^(t psi)) and prod_t = mu_1 ... mu_t depend only on the step
// (computed on the host, per tensor).
#pragma once

#include "fused_optim/math/common.h"

namespace fused_optim::math {

template <typename T>
struct NadamHyper {
  T beta1, beta2, eps, weight_decay;
  T decay;                             // 1 - lr * weight_decay, the decoupled shrink factor
  T one_minus_beta1, one_minus_beta2;  // complements taken in double, as torch.optim takes them
  bool maximize, has_l2, has_decay, lerp_small;
  // The same hyper-parameters in another math type (kernels receive them in double).
  template <typename U>
  FUSED_OPTIM_HOST_DEVICE NadamHyper<U> To() const {
    return {U(beta1),           U(beta2), U(eps), U(weight_decay), U(decay),  U(one_minus_beta1),
            U(one_minus_beta2), maximize, has_l2, has_decay,       lerp_small};
  }
};

// Per-tensor scalars: they depend on the tensor's own step count and momentum product.
template <typename T>
struct NadamStepScalars {
  T bc2;        // 1 - beta2^step
  T grad_coef;  // -lr (1 - mu_t) / (1 - prod_t)
  T avg_coef;   // -lr mu_{t+1} / (1 - prod_t mu_{t+1})
};

// One in-place step, in torch.optim's (single-tensor) operation order.
template <typename T>
FUSED_OPTIM_HOST_DEVICE inline void NadamStep(T& p, T grad, T& m, T& v, const NadamHyper<T>& h,
                                              const NadamStepScalars<T>& s) {
  const T g = EffectiveGrad(grad, p, h.maximize, h.has_l2, h.weight_decay);
  p = h.has_decay ? p * h.decay : p;
  m = Lerp(m, g, h.one_minus_beta1, h.lerp_small);
  v = v * h.beta2 + h.one_minus_beta2 * g * g;
  const T denom = Sqrt(v / s.bc2) + h.eps;
  p = p + s.grad_coef * (g / denom);
  p = p + s.avg_coef * (m / denom);
}

template <typename T>
struct NadamGrads {
  T p, grad, m, v;
};

// Gradients of the out-of-place step with respect to (p, grad, m, v), given the gradients
// flowing into (p', m', v'). Recomputes the forward intermediates.
template <typename T>
FUSED_OPTIM_HOST_DEVICE inline NadamGrads<T> NadamStepBackward(T gp_new, T gm_new, T gv_new, T p, T grad, T m, T v,
                                                               const NadamHyper<T>& h, const NadamStepScalars<T>& s) {
  const T g = EffectiveGrad(grad, p, h.maximize, h.has_l2, h.weight_decay);
  const T w1 = h.one_minus_beta1;
  const T m_new = Lerp(m, g, w1, h.lerp_small);
  const T v_new = v * h.beta2 + h.one_minus_beta2 * g * g;
  const T root = Sqrt(v_new / s.bc2);
  const T denom = root + h.eps;
  const T dm_new = gm_new + s.avg_coef * gp_new / denom;
  const T ddenom = -gp_new * (s.grad_coef * g + s.avg_coef * m_new) / (denom * denom);
  const T dv_new = gv_new + SqrtBackward(ddenom, root) / s.bc2;
  const T dg = s.grad_coef * gp_new / denom + w1 * dm_new + T(2) * h.one_minus_beta2 * g * dv_new;
  NadamGrads<T> out{};
  out.m = h.beta1 * dm_new;
  out.v = h.beta2 * dv_new;
  out.p = (h.has_decay ? h.decay * gp_new : gp_new) + (h.has_l2 ? h.weight_decay * dg : T(0));
  out.grad = h.maximize ? -dg : dg;
  return out;
}

}  // namespace fused_optim::math

// The kernel binding (see common.h): the kernel table's columns and how each element function
// maps them to the math above, shared by the CPU loops and the CUDA kernels.
namespace fused_optim {
namespace nadam_cols {
enum : int { kParam, kGrad, kExpAvg, kExpAvgSq };
enum : int {
  kGParamNew = 0,
  kGExpAvgNew,
  kGExpAvgSqNew,
  kInParam,
  kInGrad,
  kInExpAvg,
  kInExpAvgSq,
  kOutParam,
  kOutGrad,
  kOutExpAvg,
  kOutExpAvgSq
};
enum : int { kBc2 = 0, kGradCoef, kAvgCoef, kNumScalars };  // per-tensor scalars
}  // namespace nadam_cols

namespace bind {

struct Nadam {
  template <typename T>
  using Hyper = math::NadamHyper<T>;
  template <typename T>
  using Scalars = math::NadamStepScalars<T>;
  template <typename T>
  FUSED_OPTIM_HOST_DEVICE static Scalars<T> MakeScalars(const double* row) {
    using namespace nadam_cols;
    return {T(row[kBc2]), T(row[kGradCoef]), T(row[kAvgCoef])};
  }
  template <typename T>
  static auto Flags(Hyper<T>& h, Scalars<T>& /*s*/) {
    return std::tie(h.maximize, h.has_l2, h.has_decay, h.lerp_small);
  }
};

struct NadamStep : Nadam {
  static constexpr int kLists = 4;
  template <typename T, typename IO>
  FUSED_OPTIM_ELEMENT static void Apply(const IO& io, const Hyper<T>& h, const Scalars<T>& s) {
    using namespace nadam_cols;
    T p = io.Load(kParam), m = io.Load(kExpAvg), v = io.Load(kExpAvgSq);
    math::NadamStep(p, io.Load(kGrad), m, v, h, s);
    io.Store(kParam, p);
    io.Store(kExpAvg, m);
    io.Store(kExpAvgSq, v);
  }
};

struct NadamBackward : Nadam {
  static constexpr int kLists = 11;
  template <typename T, typename IO>
  FUSED_OPTIM_ELEMENT static void Apply(const IO& io, const Hyper<T>& h, const Scalars<T>& s) {
    using namespace nadam_cols;
    const math::NadamGrads<T> r =
        math::NadamStepBackward<T>(io.Load(kGParamNew), io.Load(kGExpAvgNew), io.Load(kGExpAvgSqNew), io.Load(kInParam),
                                   io.Load(kInGrad), io.Load(kInExpAvg), io.Load(kInExpAvgSq), h, s);
    io.Store(kOutParam, r.p);
    io.Store(kOutGrad, r.grad);
    io.Store(kOutExpAvg, r.m);
    io.Store(kOutExpAvgSq, r.v);
  }
};

}  // namespace bind
}  // namespace fused_optim
