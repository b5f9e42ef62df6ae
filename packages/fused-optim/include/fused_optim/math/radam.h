// RAdam (Liu et al., 2020) element-wise math.
//   g' = ±g + wd p (or p <- p (1 - lr wd), decoupled);  m <- lerp(m, g', 1 - b1);  v <- b2 v + (1 - b2) g'^2
//   rho_t > 5:  p <- p - (m / bc1) lr sqrt(bc2) / (sqrt(v) + eps) r_t     otherwise  p <- p - (m / bc1) lr
// where the rectification r_t and the rho_t > 5 test depend only on the step (computed on the host).
#pragma once

#include "fused_optim/math/common.h"

namespace fused_optim::math {

template <typename T>
using RadamHyper = AdamFamilyHyper<T>;

template <typename T>
struct RadamStepScalars {
  T bc1, bc2_sqrt, rect;
  bool adaptive;  // rho_t > 5
};

template <typename T>
FUSED_OPTIM_HOST_DEVICE inline void RadamStep(T& p, T grad, T& m, T& v, const RadamHyper<T>& h,
                                              const RadamStepScalars<T>& s) {
  const AdamMoments<T> n = UpdateMoments(grad, p, m, v, h);
  p = h.has_decay ? p * h.decay : p;
  m = n.m, v = n.v;
  const T m_hat = m / s.bc1;
  const T adaptive_lr = s.bc2_sqrt / (Sqrt(v) + h.eps);
  p = s.adaptive ? p + T(-1) * (m_hat * h.lr * adaptive_lr * s.rect) : p + T(-1) * (m_hat * h.lr);
}

template <typename T>
using RadamGrads = AdamMomentGrads<T>;

template <typename T>
FUSED_OPTIM_HOST_DEVICE inline RadamGrads<T> RadamStepBackward(T gp_new, T gm_new, T gv_new, T p, T grad, T m, T v,
                                                               const RadamHyper<T>& h, const RadamStepScalars<T>& s) {
  const AdamMoments<T> n = UpdateMoments(grad, p, m, v, h);
  const T k = h.lr * s.bc2_sqrt * s.rect / s.bc1;  // adaptive: p' = p0 - k m' / denom
  const T root = Sqrt(n.v);
  const T denom = root + h.eps;
  const T du = -k * gp_new;
  const T dm_new = gm_new + (s.adaptive ? du / denom : -(h.lr / s.bc1) * gp_new);
  const T dv_new = gv_new + (s.adaptive ? SqrtBackward(-du * (n.m / denom) / denom, root) : T(0));
  return UpdateMomentsBackward(gp_new, T(0), dm_new, dv_new, n.g, h);
}

}  // namespace fused_optim::math

// The kernel binding (see common.h): the per-tensor scalars' columns and how each element function
// maps them to the math above, shared by the CPU loops and the CUDA kernels.
namespace fused_optim::radam_cols {
enum : int { kBc1 = 0, kBc2Sqrt, kRect, kAdaptive, kNumScalars };  // per-tensor scalars
}  // namespace fused_optim::radam_cols

namespace fused_optim::bind {

struct Radam {
  static constexpr int kNumScalars = radam_cols::kNumScalars;
  template <typename T>
  using Hyper = math::RadamHyper<T>;
  template <typename T>
  using Scalars = math::RadamStepScalars<T>;
  template <typename T>
  FUSED_OPTIM_HOST_DEVICE static Scalars<T> MakeScalars(const double* row) {
    using namespace radam_cols;
    return {T(row[kBc1]), T(row[kBc2Sqrt]), T(row[kRect]), row[kAdaptive] != 0.0};
  }
  // The row of step count `step` (the count after this update): the bias corrections, the SMA
  // length rho_t and the variance rectification.
  FUSED_OPTIM_HOST_DEVICE static void StepRow(const Hyper<double>& h, double step, double* row) {
    using namespace radam_cols;
    const double rho_inf = 2.0 / (1.0 - h.beta2) - 1.0;
    const double bc2 = 1.0 - pow(h.beta2, step);
    const double rho_t = rho_inf - 2.0 * step * pow(h.beta2, step) / bc2;
    row[kBc1] = 1.0 - pow(h.beta1, step);
    row[kBc2Sqrt] = sqrt(bc2);
    row[kAdaptive] = rho_t > 5.0 ? 1.0 : 0.0;
    row[kRect] =
        rho_t > 5.0 ? sqrt((rho_t - 4.0) * (rho_t - 2.0) * rho_inf / ((rho_inf - 4.0) * (rho_inf - 2.0) * rho_t)) : 0.0;
  }
  template <typename T>
  static auto Flags(Hyper<T>& h, Scalars<T>& s) {
    return std::tie(h.maximize, h.has_l2, h.has_decay, h.lerp_small, s.adaptive);
  }
  // The math, for AdamFamilyStep and AdamFamilyBackward.
  template <typename... A>
  FUSED_OPTIM_HOST_DEVICE static void Step(A&&... a) {
    math::RadamStep(a...);
  }
  template <typename... A>
  FUSED_OPTIM_HOST_DEVICE static auto StepBackward(A... a) {
    return math::RadamStepBackward(a...);
  }
};

struct RadamStep : AdamFamilyStep<Radam> {};
struct RadamBackward : AdamFamilyBackward<Radam> {};

}  // namespace fused_optim::bind
