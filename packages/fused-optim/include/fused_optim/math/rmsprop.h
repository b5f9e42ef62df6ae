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
  bool centered, maximize, has_l2, has_momentum, lerp_small;
  // The same hyper-parameters in another math type (kernels receive them in double).
  template <typename U>
  FUSED_OPTIM_HOST_DEVICE RmspropHyper<U> To() const {
    return {U(lr),    U(alpha), U(eps), U(weight_decay), U(momentum), U(one_minus_alpha),
            centered, maximize, has_l2, has_momentum,    lerp_small};
  }
};

template <typename T>
FUSED_OPTIM_HOST_DEVICE inline void RmspropStep(T& p, T grad, T& v, T& grad_avg, T& buf, const RmspropHyper<T>& h) {
  const T g = EffectiveGrad(grad, p, h.maximize, h.has_l2, h.weight_decay);
  v = v * h.alpha + h.one_minus_alpha * g * g;
  const T ga_new = Lerp(grad_avg, g, h.one_minus_alpha, h.lerp_small);
  grad_avg = h.centered ? ga_new : grad_avg;
  const T var = h.centered ? v + T(-1) * ga_new * ga_new : v;
  const T avg = Sqrt(var) + h.eps;
  const T buf_new = buf * h.momentum + g / avg;
  buf = h.has_momentum ? buf_new : buf;
  p = h.has_momentum ? p + (-h.lr) * buf_new : p + (-h.lr) * (g / avg);
}

template <typename T>
struct RmspropGrads {
  T p, grad, v, grad_avg, buf;
};

template <typename T>
FUSED_OPTIM_HOST_DEVICE inline RmspropGrads<T> RmspropStepBackward(T gp_new, T gv_new, T gga_new, T gbuf_new, T p,
                                                                   T grad, T v, T grad_avg, const RmspropHyper<T>& h) {
  const T g = EffectiveGrad(grad, p, h.maximize, h.has_l2, h.weight_decay);
  const T w = h.one_minus_alpha;
  const T v_new = v * h.alpha + w * g * g;
  const T ga_new = h.centered ? Lerp(grad_avg, g, w, h.lerp_small) : T(0);
  const T root = Sqrt(h.centered ? v_new - ga_new * ga_new : v_new);
  const T avg = root + h.eps;

  RmspropGrads<T> out{};
  const T dbuf_new = gbuf_new - h.lr * gp_new;
  out.buf = h.has_momentum ? h.momentum * dbuf_new : T(0);
  const T q = h.has_momentum ? dbuf_new : -h.lr * gp_new;  // gradient reaching g' / avg
  const T dvar = SqrtBackward(-q * (g / avg) / avg, root);
  const T dv_new = gv_new + dvar;
  const T dga_new = gga_new - T(2) * ga_new * dvar;
  out.grad_avg = h.centered ? h.alpha * dga_new : T(0);
  const T dg = q / avg + (h.centered ? w * dga_new : T(0)) + T(2) * w * g * dv_new;
  out.v = h.alpha * dv_new;
  EffectiveGradBackward(out, gp_new, dg, h);
  return out;
}

}  // namespace fused_optim::math

// The kernel binding (see common.h): the kernel table's columns and how each element function
// maps them to the math above, shared by the CPU loops and the CUDA kernels.
namespace fused_optim::rmsprop_cols {
enum : int { kParam, kGrad, kSquareAvg, kGradAvg, kBuf };
enum : int {
  kGParamNew = 0,
  kGSquareAvgNew,
  kGGradAvgNew,
  kGBufNew,
  kInParam,
  kInGrad,
  kInSquareAvg,
  kInGradAvg,
  kOutParam,
  kOutGrad,
  kOutSquareAvg,
  kOutGradAvg,
  kOutBuf
};
}  // namespace fused_optim::rmsprop_cols

namespace fused_optim::bind {

struct RmspropStep : NoScalars {
  template <typename T>
  using Hyper = math::RmspropHyper<T>;
  template <typename T>
  static auto Flags(Hyper<T>& h, Scalars<T>& /*s*/) {
    return std::tie(h.centered, h.has_momentum, h.maximize, h.has_l2, h.lerp_small);
  }

  static constexpr int kLists = 5;
  template <typename T, typename IO>
  FUSED_OPTIM_ELEMENT static void Apply(const IO& io, const Hyper<T>& h, const Scalars<T>& /*s*/) {
    using namespace rmsprop_cols;
    // The optional streams only when their option is on.
    T p = io.Load(kParam), v = io.Load(kSquareAvg);
    T grad_avg = h.centered ? io.Load(kGradAvg) : T(0), buf = h.has_momentum ? io.Load(kBuf) : T(0);
    math::RmspropStep(p, io.Load(kGrad), v, grad_avg, buf, h);
    io.Store(kParam, p);
    io.Store(kSquareAvg, v);
    if (h.centered) io.Store(kGradAvg, grad_avg);
    if (h.has_momentum) io.Store(kBuf, buf);
  }
};

struct RmspropBackward : RmspropStep {  // the same hyper-parameters, scalars and flags
  static constexpr int kLists = 13;
  template <typename T, typename IO>
  FUSED_OPTIM_ELEMENT static void Apply(const IO& io, const Hyper<T>& h, const Scalars<T>& /*s*/) {
    using namespace rmsprop_cols;
    const math::RmspropGrads<T> r = math::RmspropStepBackward<T>(
        io.Load(kGParamNew), io.Load(kGSquareAvgNew), io.Load(kGGradAvgNew), io.Load(kGBufNew), io.Load(kInParam),
        io.Load(kInGrad), io.Load(kInSquareAvg), io.Load(kInGradAvg), h);
    io.Store(kOutParam, r.p);
    io.Store(kOutGrad, r.grad);
    io.Store(kOutSquareAvg, r.v);
    io.Store(kOutGradAvg, r.grad_avg);
    io.Store(kOutBuf, r.buf);
  }
};

}  // namespace fused_optim::bind
