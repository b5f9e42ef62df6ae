// RAdam (Liu et al., 2020) element-wise math.
//   g' = ±g + wd p (or p <- p (1 - lr wd), decoupled);  m <- lerp(m, g', 1 - b1);  v <- b2 v + (1 - b2) g'^2
//   rho_t > 5:  p <- p - (m / bc1) lr sqrt(bc2) / (sqrt(v) + eps) r_t     otherwise  p <- p - (m / bc1) lr
// where the rectification r_t and the rho_t > 5 test depend only on the step (computed on the host).
#pragma once

#include "fused_optim/math/common.h"

namespace fused_optim::math {

template <typename T>
struct RadamHyper {
  T lr, beta1, beta2, eps, weight_decay;
  T decay;                             // 1 - lr * weight_decay (decoupled form)
  T one_minus_beta1, one_minus_beta2;  // complements taken in double, as torch.optim takes them
  bool maximize, has_l2, has_decay, lerp_small;
  // The same hyper-parameters in another math type (kernels receive them in double).
  template <typename U>
  FUSED_OPTIM_HOST_DEVICE RadamHyper<U> To() const {
    return {U(lr),    U(beta1), U(beta2),  U(eps),    U(weight_decay), U(decay), U(one_minus_beta1), U(one_minus_beta2),
            maximize, has_l2,   has_decay, lerp_small};
  }
};

template <typename T>
struct RadamStepScalars {
  T bc1, bc2_sqrt, rect;
  bool adaptive;  // rho_t > 5
};

template <typename T>
FUSED_OPTIM_HOST_DEVICE inline void RadamStep(T& p, T grad, T& m, T& v, const RadamHyper<T>& h,
                                              const RadamStepScalars<T>& s) {
  const T g = EffectiveGrad(grad, p, h.maximize, h.has_l2, h.weight_decay);
  p = h.has_decay ? p * h.decay : p;
  m = Lerp(m, g, h.one_minus_beta1, h.lerp_small);
  v = v * h.beta2 + h.one_minus_beta2 * g * g;
  const T m_hat = m / s.bc1;
  const T adaptive_lr = s.bc2_sqrt / (Sqrt(v) + h.eps);
  p = s.adaptive ? p + T(-1) * (m_hat * h.lr * adaptive_lr * s.rect) : p + T(-1) * (m_hat * h.lr);
}

template <typename T>
struct RadamGrads {
  T p, grad, m, v;
};

template <typename T>
FUSED_OPTIM_HOST_DEVICE inline RadamGrads<T> RadamStepBackward(T gp_new, T gm_new, T gv_new, T p, T grad, T m, T v,
                                                               const RadamHyper<T>& h, const RadamStepScalars<T>& s) {
  const T g = EffectiveGrad(grad, p, h.maximize, h.has_l2, h.weight_decay);
  const T w1 = h.one_minus_beta1;
  const T m_new = Lerp(m, g, w1, h.lerp_small);
  const T v_new = v * h.beta2 + h.one_minus_beta2 * g * g;
  const T k = h.lr * s.bc2_sqrt * s.rect / s.bc1;  // adaptive: p' = p0 - k m' / denom
  const T root = Sqrt(v_new);
  const T denom = root + h.eps;
  const T du = -k * gp_new;
  const T dm_new = gm_new + (s.adaptive ? du / denom : -(h.lr / s.bc1) * gp_new);
  const T dv_new = gv_new + (s.adaptive ? SqrtBackward(-du * (m_new / denom) / denom, root) : T(0));
  const T dg = w1 * dm_new + T(2) * h.one_minus_beta2 * g * dv_new;
  RadamGrads<T> out{};
  out.m = h.beta1 * dm_new;
  out.v = h.beta2 * dv_new;
  out.p = (h.has_decay ? h.decay * gp_new : gp_new) + (h.has_l2 ? h.weight_decay * dg : T(0));
  out.grad = h.maximize ? -dg : dg;
  return out;
}

}  // namespace fused_optim::math

// The kernel binding (see common.h): the kernel table's columns and how each element function
// maps them to the math above, shared by the CPU loops and the CUDA kernels.
namespace fused_optim::radam_cols {
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
enum : int { kBc1 = 0, kBc2Sqrt, kRect, kAdaptive };  // per-tensor scalars
}  // namespace fused_optim::radam_cols

namespace fused_optim::bind {

struct RadamStep {
  template <typename T>
  using Hyper = math::RadamHyper<T>;
  template <typename T>
  using Scalars = math::RadamStepScalars<T>;
  template <typename T>
  FUSED_OPTIM_HOST_DEVICE static Scalars<T> MakeScalars(const double* row) {
    using namespace radam_cols;
    return {T(row[kBc1]), T(row[kBc2Sqrt]), T(row[kRect]), row[kAdaptive] != 0.0};
  }
  template <typename T>
  static auto Flags(Hyper<T>& h, Scalars<T>& s) {
    return std::tie(h.maximize, h.has_l2, h.has_decay, h.lerp_small, s.adaptive);
  }

  static constexpr int kLists = 4;
  template <typename T, typename IO>
  FUSED_OPTIM_ELEMENT static void Apply(const IO& io, const Hyper<T>& h, const Scalars<T>& s) {
    using namespace radam_cols;
    T p = io.Load(kParam), m = io.Load(kExpAvg), v = io.Load(kExpAvgSq);
    math::RadamStep(p, io.Load(kGrad), m, v, h, s);
    io.Store(kParam, p);
    io.Store(kExpAvg, m);
    io.Store(kExpAvgSq, v);
  }
};

struct RadamBackward : RadamStep {  // the same hyper-parameters, scalars and flags
  static constexpr int kLists = 11;
  template <typename T, typename IO>
  FUSED_OPTIM_ELEMENT static void Apply(const IO& io, const Hyper<T>& h, const Scalars<T>& s) {
    using namespace radam_cols;
    const math::RadamGrads<T> r =
        math::RadamStepBackward<T>(io.Load(kGParamNew), io.Load(kGExpAvgNew), io.Load(kGExpAvgSqNew), io.Load(kInParam),
                                   io.Load(kInGrad), io.Load(kInExpAvg), io.Load(kInExpAvgSq), h, s);
    io.Store(kOutParam, r.p);
    io.Store(kOutGrad, r.grad);
    io.Store(kOutExpAvg, r.m);
    io.Store(kOutExpAvgSq, r.v);
  }
};

}  // namespace fused_optim::bind
