// RMSprop (Hinton, 2012; centered form from Graves, 2013) element-wise math.
//   g' = ±g + wd p;  v <- a v + (1 - a) g'^2;  ga <- lerp(ga, g', 1 - a) (centered)
//   avg = sqrt(v - ga^2 (centered) or v) + eps
//   b <- mu b + g' / avg;  p <- p - lr b   (momentum)   or   p <- p - lr g' / avg
#pragma once

#include "fused_optim/math/common.h"

namespace fused_optim::math {

template <typename T>
struct RmspropHyper {
  T lr, alpha, eps, weight_decay, momentum;
  T one_minus_alpha;  // complements taken in double, as torch.optim takes them
  bool centered, maximize, has_l2, has_momentum;
  // The same hyper-parameters in another math type (kernels receive them in double).
  template <typename U>
  FUSED_OPTIM_HOST_DEVICE RmspropHyper<U> To() const {
    return {U(lr), U(alpha), U(eps), U(weight_decay), U(momentum), U(one_minus_alpha), centered, maximize, has_l2, has_momentum};
  }
};

template <typename T>
FUSED_OPTIM_HOST_DEVICE inline void RmspropStep(T& p, T grad, T& v, T& grad_avg, T& buf, const RmspropHyper<T>& h) {
  const T g = EffectiveGrad(grad, p, h.maximize, h.has_l2, h.weight_decay);
  v = v * h.alpha + h.one_minus_alpha * g * g;
  T var = v;
  if (h.centered) {
    grad_avg = Lerp(grad_avg, g, h.one_minus_alpha);
    var = v + T(-1) * grad_avg * grad_avg;
  }
  const T avg = Sqrt(var) + h.eps;
  if (h.has_momentum) {
    buf = buf * h.momentum + g / avg;
    p = p + (-h.lr) * buf;
  } else {
    p = p + (-h.lr) * (g / avg);
  }
}

template <typename T>
struct RmspropGrads {
  T p, grad, v, grad_avg, buf;
};

template <typename T>
FUSED_OPTIM_HOST_DEVICE inline RmspropGrads<T> RmspropStepBackward(T gp_new, T gv_new, T gga_new, T gbuf_new, T p,
                                                                   T grad, T v, T grad_avg,
                                                                   const RmspropHyper<T>& h) {
  const T g = EffectiveGrad(grad, p, h.maximize, h.has_l2, h.weight_decay);
  const T w = h.one_minus_alpha;
  const T v_new = v * h.alpha + w * g * g;
  const T ga_new = h.centered ? Lerp(grad_avg, g, w) : T(0);
  const T root = Sqrt(h.centered ? v_new - ga_new * ga_new : v_new);
  const T avg = root + h.eps;

  RmspropGrads<T> out{};
  T q;  // gradient reaching g' / avg
  if (h.has_momentum) {
    const T dbuf_new = gbuf_new - h.lr * gp_new;
    out.buf = h.momentum * dbuf_new;
    q = dbuf_new;
  } else {
    q = -h.lr * gp_new;
  }
  T dg = q / avg;
  const T dvar = SqrtBackward(-q * (g / avg) / avg, root);
  const T dv_new = gv_new + dvar;
  if (h.centered) {
    const T dga_new = gga_new - T(2) * ga_new * dvar;
    out.grad_avg = h.alpha * dga_new;
    dg += w * dga_new;
  }
  dg += T(2) * w * g * dv_new;
  out.v = h.alpha * dv_new;
  out.p = gp_new + (h.has_l2 ? h.weight_decay * dg : T(0));
  out.grad = h.maximize ? -dg : dg;
  return out;
}

}  // namespace fused_optim::math
