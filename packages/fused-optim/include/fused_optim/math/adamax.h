// Adamax (Kingma & Ba, 2015, section 7.1) element-wise math.
//   g' = ±g + wd p;  m <- lerp(m, g', 1 - b1);  u <- max(b2 u, |g'| + eps)
//   p <- p - (lr / (1 - b1^step)) m / u
#pragma once

#include "fused_optim/math/common.h"

namespace fused_optim::math {

template <typename T>
struct AdamaxHyper {
  T lr, beta1, beta2, eps, weight_decay;  // lr: read by the step row alone (bind::AdamaxStep::StepRow)
  T one_minus_beta1;                      // complements taken in double, as torch.optim takes them
  bool maximize, has_l2, lerp_small;
  // The same hyper-parameters in another math type (kernels receive them in double).
  template <typename U>
  FUSED_OPTIM_HOST_DEVICE AdamaxHyper<U> To() const {
    return {U(lr), U(beta1), U(beta2), U(eps), U(weight_decay), U(one_minus_beta1), maximize, has_l2, lerp_small};
  }
};

template <typename T>
FUSED_OPTIM_HOST_DEVICE inline void AdamaxStep(T& p, T grad, T& m, T& u, T clr, const AdamaxHyper<T>& h) {
  const T g = EffectiveGrad(grad, p, h.maximize, h.has_l2, h.weight_decay);
  m = Lerp(m, g, h.one_minus_beta1, h.lerp_small);
  u = MaxNan(u * h.beta2, Abs(g) + h.eps);
  p = p + (-clr) * (m / u);
}

template <typename T>
struct AdamaxGrads {
  T p, grad, m, u;
};

template <typename T>
FUSED_OPTIM_HOST_DEVICE inline AdamaxGrads<T> AdamaxStepBackward(T gp_new, T gm_new, T gu_new, T p, T grad, T m, T u,
                                                                 T clr, const AdamaxHyper<T>& h) {
  const T g = EffectiveGrad(grad, p, h.maximize, h.has_l2, h.weight_decay);
  const T w1 = h.one_minus_beta1;
  const T m_new = Lerp(m, g, w1, h.lerp_small);
  const T decayed = u * h.beta2;
  const T fresh = Abs(g) + h.eps;
  const T u_new = MaxNan(decayed, fresh);
  const T dq = -clr * gp_new;  // gradient reaching m' / u'
  const T dm_new = gm_new + dq / u_new;
  const T du_new = gu_new - dq * (m_new / u_new) / u_new;
  const T to_decayed = MaxBackwardShareOfFirst(du_new, decayed, fresh);
  const T dg = w1 * dm_new + Sign(g) * (du_new - to_decayed);
  AdamaxGrads<T> out{};
  out.m = h.beta1 * dm_new;
  out.u = h.beta2 * to_decayed;
  EffectiveGradBackward(out, gp_new, dg, h);
  return out;
}

}  // namespace fused_optim::math

// The kernel binding (see common.h): the kernel table's columns and how each element function
// maps them to the math above, shared by the CPU loops and the CUDA kernels.
namespace fused_optim::adamax_cols {
enum : int { kParam, kGrad, kExpAvg, kExpInf };
}  // namespace fused_optim::adamax_cols

namespace fused_optim::bind {

struct AdamaxStep : StepSizeScalar {  // clr: lr / (1 - beta1^step)
  template <typename T>
  using Hyper = math::AdamaxHyper<T>;
  // The row of step count `step` (the count after this update).
  FUSED_OPTIM_HOST_DEVICE static void StepRow(const Hyper<double>& h, double step, double* row) {
    row[0] = h.lr / (1.0 - pow(h.beta1, step));
  }
  template <typename T>
  static auto Flags(Hyper<T>& h, Scalars<T>& /*s*/) {
    return std::tie(h.maximize, h.has_l2, h.lerp_small);
  }

  static constexpr int kLists = 4;
  template <typename T, typename IO>
  FUSED_OPTIM_ELEMENT static void Apply(const IO& io, const Hyper<T>& h, const Scalars<T>& s) {
    using namespace adamax_cols;
    T p = io.Load(kParam), m = io.Load(kExpAvg), u = io.Load(kExpInf);
    math::AdamaxStep(p, io.Load(kGrad), m, u, s.clr, h);
    io.Store(kParam, p);
    io.Store(kExpAvg, m);
    io.Store(kExpInf, u);
  }
};

struct AdamaxBackward : AdamaxStep {         // the same hyper-parameters, scalars and flags
  using C = BackwardOf<AdamaxStep::kLists>;  // the standard layout
  static constexpr int kLists = C::kLists;
  template <typename T, typename IO>
  FUSED_OPTIM_ELEMENT static void Apply(const IO& io, const Hyper<T>& h, const Scalars<T>& s) {
    using namespace adamax_cols;
    const math::AdamaxGrads<T> r = math::AdamaxStepBackward<T>(
        io.Load(C::GradNew(kParam)), io.Load(C::GradNew(kExpAvg)), io.Load(C::GradNew(kExpInf)), io.Load(C::In(kParam)),
        io.Load(C::In(kGrad)), io.Load(C::In(kExpAvg)), io.Load(C::In(kExpInf)), s.clr, h);
    io.Store(C::Out(kParam), r.p);
    io.Store(C::Out(kGrad), r.grad);
    io.Store(C::Out(kExpAvg), r.m);
    io.Store(C::Out(kExpInf), r.u);
  }
};

}  // namespace fused_optim::bind
