// Adagrad (Duchi et al., 2011) element-wise math.
//   g' = ±g + wd p;  s <- s + g'^2;  p <- p - clr g' / (sqrt(s) + eps),
//   clr = lr / (1 + (step - 1) lr_decay)
#pragma once

#include "fused_optim/math/common.h"

namespace fused_optim::math {

template <typename T>
struct AdagradHyper {
  T eps, weight_decay;
  bool maximize, has_l2;
  // The same hyper-parameters in another math type (kernels receive them in double).
  template <typename U>
  FUSED_OPTIM_HOST_DEVICE AdagradHyper<U> To() const {
    return {U(eps), U(weight_decay), maximize, has_l2};
  }
};

template <typename T>
FUSED_OPTIM_HOST_DEVICE inline void AdagradStep(T& p, T grad, T& sum, T clr, const AdagradHyper<T>& h) {
  const T g = EffectiveGrad(grad, p, h.maximize, h.has_l2, h.weight_decay);
  sum = sum + T(1) * g * g;
  const T denom = Sqrt(sum) + h.eps;
  p = p + (-clr) * (g / denom);
}

template <typename T>
struct AdagradGrads {
  T p, grad, sum;
};

template <typename T>
FUSED_OPTIM_HOST_DEVICE inline AdagradGrads<T> AdagradStepBackward(T gp_new, T gsum_new, T p, T grad, T sum, T clr,
                                                                   const AdagradHyper<T>& h) {
  const T g = EffectiveGrad(grad, p, h.maximize, h.has_l2, h.weight_decay);
  const T sum_new = sum + g * g;
  const T root = Sqrt(sum_new);
  const T denom = root + h.eps;
  const T q = -clr * gp_new;
  const T dsum_new = gsum_new + SqrtBackward(-q * (g / denom) / denom, root);
  const T dg = q / denom + T(2) * g * dsum_new;
  AdagradGrads<T> out{};
  out.sum = dsum_new;
  out.p = gp_new + (h.has_l2 ? h.weight_decay * dg : T(0));
  out.grad = h.maximize ? -dg : dg;
  return out;
}

}  // namespace fused_optim::math
