// Adagrad (Duchi et al., 2011) element-wise math.
//   g' = ±g + wd p;  s <- s + g'^2;  p <- p - clr g' / (sqrt(s) + eps),
//   clr = lr / (1 + (step - 1) lr_decay)
#pragma once

#include "fused_optim/math/common.h"

namespace fused_optim::math {

template <typename T>
struct AdagradHyper {
  T eps, weight_decay;
  T lr, lr_decay;  // read by the step row alone (bind::AdagradStep::StepRow)
  bool maximize, has_l2;
  // The same hyper-parameters in another math type (kernels receive them in double).
  template <typename U>
  FUSED_OPTIM_HOST_DEVICE AdagradHyper<U> To() const {
    return {U(eps), U(weight_decay), U(lr), U(lr_decay), maximize, has_l2};
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
  EffectiveGradBackward(out, gp_new, dg, h);
  return out;
}

}  // namespace fused_optim::math

// The kernel binding (see common.h): the kernel table's columns and how each element function
// maps them to the math above, shared by the CPU loops and the CUDA kernels.
namespace fused_optim::adagrad_cols {
enum : int { kParam, kGrad, kSum };
}  // namespace fused_optim::adagrad_cols

namespace fused_optim::bind {

struct AdagradStep : StepSizeScalar {  // clr: the decayed learning rate
  template <typename T>
  using Hyper = math::AdagradHyper<T>;
  // The row of step count `step` (the count after this update): lr / (1 + (step - 1) lr_decay).
  FUSED_OPTIM_HOST_DEVICE static void StepRow(const Hyper<double>& h, double step, double* row) {
    row[0] = h.lr / (1.0 + (step - 1.0) * h.lr_decay);
  }
  template <typename T>
  static auto Flags(Hyper<T>& h, Scalars<T>& /*s*/) {
    return std::tie(h.maximize, h.has_l2);
  }

  static constexpr int kLists = 3;
  template <typename T, typename IO>
  FUSED_OPTIM_ELEMENT static void Apply(const IO& io, const Hyper<T>& h, const Scalars<T>& s) {
    using namespace adagrad_cols;
    T p = io.Load(kParam), sum = io.Load(kSum);
    math::AdagradStep(p, io.Load(kGrad), sum, s.clr, h);
    io.Store(kParam, p);
    io.Store(kSum, sum);
  }
};

struct AdagradBackward : AdagradStep {        // the same hyper-parameters, scalars and flags
  using C = BackwardOf<AdagradStep::kLists>;  // the standard layout
  static constexpr int kLists = C::kLists;
  template <typename T, typename IO>
  FUSED_OPTIM_ELEMENT static void Apply(const IO& io, const Hyper<T>& h, const Scalars<T>& s) {
    using namespace adagrad_cols;
    const math::AdagradGrads<T> r =
        math::AdagradStepBackward<T>(io.Load(C::GradNew(kParam)), io.Load(C::GradNew(kSum)), io.Load(C::In(kParam)),
                                     io.Load(C::In(kGrad)), io.Load(C::In(kSum)), s.clr, h);
    io.Store(C::Out(kParam), r.p);
    io.Store(C::Out(kGrad), r.grad);
    io.Store(C::Out(kSum), r.sum);
  }
};

}  // namespace fused_optim::bind
