// Adadelta (Zeiler, 2012) element-wise math.
//   g' = ±g + wd p;  v <- rho v + (1 - rho) g'^2;  delta = sqrt(u + eps) / sqrt(v + eps) g'
//   u <- rho u + (1 - rho) delta^2;  p <- p - lr delta
#pragma once

#include "fused_optim/math/common.h"

namespace fused_optim::math {

template <typename T>
struct AdadeltaHyper {
  T lr, rho, eps, weight_decay;
  T one_minus_rho;  // complements taken in double, as torch.optim takes them
  bool maximize, has_l2;
  // The same hyper-parameters in another math type (kernels receive them in double).
  template <typename U>
  FUSED_OPTIM_HOST_DEVICE AdadeltaHyper<U> To() const {
    return {U(lr), U(rho), U(eps), U(weight_decay), U(one_minus_rho), maximize, has_l2};
  }
};

template <typename T>
FUSED_OPTIM_HOST_DEVICE inline void AdadeltaStep(T& p, T grad, T& v, T& u, const AdadeltaHyper<T>& h) {
  const T g = EffectiveGrad(grad, p, h.maximize, h.has_l2, h.weight_decay);
  v = v * h.rho + h.one_minus_rho * g * g;
  const T s = Sqrt(v + h.eps);
  const T delta = Sqrt(u + h.eps) / s * g;
  u = u * h.rho + h.one_minus_rho * delta * delta;
  p = p + (-h.lr) * delta;
}

template <typename T>
struct AdadeltaGrads {
  T p, grad, v, u;
};

template <typename T>
FUSED_OPTIM_HOST_DEVICE inline AdadeltaGrads<T> AdadeltaStepBackward(T gp_new, T gv_new, T gu_new, T p, T grad, T v,
                                                                     T u, const AdadeltaHyper<T>& h) {
  const T g = EffectiveGrad(grad, p, h.maximize, h.has_l2, h.weight_decay);
  const T w = h.one_minus_rho;
  const T v_new = v * h.rho + w * g * g;
  const T s = Sqrt(v_new + h.eps);
  const T a = Sqrt(u + h.eps);
  const T delta = a / s * g;
  const T ddelta = -h.lr * gp_new + T(2) * w * delta * gu_new;
  const T ds = -ddelta * delta / s;
  const T dv_new = gv_new + SqrtBackward(ds, s);
  AdadeltaGrads<T> out{};
  out.u = h.rho * gu_new + SqrtBackward(ddelta * (g / s), a);
  out.v = h.rho * dv_new;
  const T dg = ddelta * (a / s) + T(2) * w * g * dv_new;
  out.p = gp_new + (h.has_l2 ? h.weight_decay * dg : T(0));
  out.grad = h.maximize ? -dg : dg;
  return out;
}

}  // namespace fused_optim::math
