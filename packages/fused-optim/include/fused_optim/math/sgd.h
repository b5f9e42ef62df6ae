// SGD with momentum, dampening and Nesterov momentum (Sutskever et al., 2013) element-wise math.
//   g' = ±g + wd p;  b <- g' (first step) or mu b + (1 - dampening) g';
//   d = g' + mu b (nesterov) or b (momentum) or g' (none);  p <- p - lr d
#pragma once

#include "fused_optim/math/common.h"

namespace fused_optim::math {

template <typename T>
struct SgdHyper {
  T lr, momentum, dampening, weight_decay;
  T one_minus_dampening;  // complements taken in double, as torch.optim takes them
  bool nesterov, maximize, has_l2, has_momentum;
  bool first_step;  // the momentum buffer does not exist yet and starts as g'
  // The same hyper-parameters in another math type (kernels receive them in double).
  template <typename U>
  FUSED_OPTIM_HOST_DEVICE SgdHyper<U> To() const {
    return {U(lr),    U(momentum), U(dampening), U(weight_decay), U(one_minus_dampening),
            nesterov, maximize,    has_l2,       has_momentum,    first_step};
  }
};

template <typename T>
FUSED_OPTIM_HOST_DEVICE inline void SgdStep(T& p, T grad, T& buf, const SgdHyper<T>& h) {
  const T g = EffectiveGrad(grad, p, h.maximize, h.has_l2, h.weight_decay);
  const T buf_new = h.first_step ? g : buf * h.momentum + h.one_minus_dampening * g;
  buf = h.has_momentum ? buf_new : buf;
  const T d = h.has_momentum ? (h.nesterov ? g + h.momentum * buf_new : buf_new) : g;
  p = p + (-h.lr) * d;
}

template <typename T>
struct SgdGrads {
  T p, grad, buf;
};

template <typename T>
FUSED_OPTIM_HOST_DEVICE inline SgdGrads<T> SgdStepBackward(T gp_new, T gbuf_new, const SgdHyper<T>& h) {
  // Linear in every input, so no forward value is needed.
  const T dd = -h.lr * gp_new;
  const T dbuf_new = gbuf_new + (h.nesterov ? h.momentum * dd : dd);
  const T dg_momentum = (h.nesterov ? dd : T(0)) + (h.first_step ? dbuf_new : h.one_minus_dampening * dbuf_new);
  const T dg = h.has_momentum ? dg_momentum : dd;
  SgdGrads<T> out{};
  out.buf = (h.has_momentum && !h.first_step) ? h.momentum * dbuf_new : T(0);
  EffectiveGradBackward(out, gp_new, dg, h);
  return out;
}

}  // namespace fused_optim::math

// The kernel binding (see common.h): the kernel table's columns and how each element function
// maps them to the math above, shared by the CPU loops and the CUDA kernels.
namespace fused_optim::sgd_cols {
enum : int { kParam, kGrad, kBuf };
enum : int { kGParamNew, kGBufNew, kOutParam, kOutGrad, kOutBuf };  // backward
}  // namespace fused_optim::sgd_cols

namespace fused_optim::bind {

struct SgdStep : NoScalars {
  template <typename T>
  using Hyper = math::SgdHyper<T>;
  template <typename T>
  static auto Flags(Hyper<T>& h, Scalars<T>& /*s*/) {
    return std::tie(h.has_momentum, h.first_step, h.nesterov, h.maximize, h.has_l2);
  }

  static constexpr int kLists = 3;
  template <typename T, typename IO>
  FUSED_OPTIM_ELEMENT static void Apply(const IO& io, const Hyper<T>& h, const Scalars<T>& /*s*/) {
    using namespace sgd_cols;
    T p = io.Load(kParam), buf = h.first_step ? T(0) : io.Load(kBuf);
    math::SgdStep(p, io.Load(kGrad), buf, h);
    io.Store(kParam, p);
    if (h.has_momentum) io.Store(kBuf, buf);
  }
};

struct SgdBackward : SgdStep {  // the same hyper-parameters, scalars and flags
  static constexpr int kLists = 5;
  template <typename T, typename IO>
  FUSED_OPTIM_ELEMENT static void Apply(const IO& io, const Hyper<T>& h, const Scalars<T>& /*s*/) {
    using namespace sgd_cols;
    const math::SgdGrads<T> r = math::SgdStepBackward<T>(io.Load(kGParamNew), io.Load(kGBufNew), h);
    io.Store(kOutParam, r.p);
    io.Store(kOutGrad, r.grad);
    io.Store(kOutBuf, r.buf);
  }
};

}  // namespace fused_optim::bind
