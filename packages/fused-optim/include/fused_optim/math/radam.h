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

// The kernel binding (see common.h): the kernel table's columns and how each element function
// maps them to the math above, shared by the CPU loops and the CUDA kernels.
namespace fused_optim::radam_cols {
enum : int { kParam, kGrad, kExpAvg, kExpAvgSq };
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

struct RadamBackward : RadamStep {          // the same hyper-parameters, scalars and flags
  using C = BackwardOf<RadamStep::kLists>;  // the standard layout
  static constexpr int kLists = C::kLists;
  template <typename T, typename IO>
  FUSED_OPTIM_ELEMENT static void Apply(const IO& io, const Hyper<T>& h, const Scalars<T>& s) {
    using namespace radam_cols;
    const math::RadamGrads<T> r = math::RadamStepBackward<T>(
        io.Load(C::GradNew(kParam)), io.Load(C::GradNew(kExpAvg)), io.Load(C::GradNew(kExpAvgSq)),
        io.Load(C::In(kParam)), io.Load(C::In(kGrad)), io.Load(C::In(kExpAvg)), io.Load(C::In(kExpAvgSq)), h, s);
    io.Store(C::Out(kParam), r.p);
    io.Store(C::Out(kGrad), r.grad);
    io.Store(C::Out(kExpAvg), r.m);
    io.Store(C::Out(kExpAvgSq), r.v);
  }
};

}  // namespace fused_optim::bind
