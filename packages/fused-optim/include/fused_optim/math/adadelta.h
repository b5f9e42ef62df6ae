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
  EffectiveGradBackward(out, gp_new, dg, h);
  return out;
}

}  // namespace fused_optim::math

// The kernel binding (see common.h): the kernel table's columns and how each element function
// maps them to the math above, shared by the CPU loops and the CUDA kernels.
namespace fused_optim::adadelta_cols {
enum : int { kParam, kGrad, kSquareAvg, kAccDelta };
}  // namespace fused_optim::adadelta_cols

namespace fused_optim::bind {

struct AdadeltaStep : NoScalars {
  template <typename T>
  using Hyper = math::AdadeltaHyper<T>;
  template <typename T>
  static auto Flags(Hyper<T>& h, Scalars<T>& /*s*/) {
    return std::tie(h.maximize, h.has_l2);
  }

  static constexpr int kLists = 4;
  template <typename T, typename IO>
  FUSED_OPTIM_ELEMENT static void Apply(const IO& io, const Hyper<T>& h, const Scalars<T>& /*s*/) {
    using namespace adadelta_cols;
    T p = io.Load(kParam), v = io.Load(kSquareAvg), u = io.Load(kAccDelta);
    math::AdadeltaStep(p, io.Load(kGrad), v, u, h);
    io.Store(kParam, p);
    io.Store(kSquareAvg, v);
    io.Store(kAccDelta, u);
  }
};

struct AdadeltaBackward : AdadeltaStep {       // the same hyper-parameters, scalars and flags
  using C = BackwardOf<AdadeltaStep::kLists>;  // the standard layout
  static constexpr int kLists = C::kLists;
  template <typename T, typename IO>
  FUSED_OPTIM_ELEMENT static void Apply(const IO& io, const Hyper<T>& h, const Scalars<T>& /*s*/) {
    using namespace adadelta_cols;
    const math::AdadeltaGrads<T> r = math::AdadeltaStepBackward<T>(
        io.Load(C::GradNew(kParam)), io.Load(C::GradNew(kSquareAvg)), io.Load(C::GradNew(kAccDelta)),
        io.Load(C::In(kParam)), io.Load(C::In(kGrad)), io.Load(C::In(kSquareAvg)), io.Load(C::In(kAccDelta)), h);
    io.Store(C::Out(kParam), r.p);
    io.Store(C::Out(kGrad), r.grad);
    io.Store(C::Out(kSquareAvg), r.v);
    io.Store(C::Out(kAccDelta), r.u);
  }
};

}  // namespace fused_optim::bind
