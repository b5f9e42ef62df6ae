// Lion (Chen et al., 2023, "Symbolic Discovery of Optimization Algorithms") element-wise math.
//   g' = ±g;  c = b1 m + (1 - b1) g';  p <- p (1 - lr wd) - lr sign(c);  m <- b2 m + (1 - b2) g'
// The step is the sign of an interpolation, so every coordinate moves by exactly lr (or not at
// all where c == 0); the decay is decoupled, as in the paper's Algorithm.
#pragma once

#include "fused_optim/math/common.h"

namespace fused_optim::math {

template <typename T>
struct LionHyper {
  T lr, beta1, beta2;
  T decay;                             // 1 - lr * weight_decay, the decoupled shrink factor
  T one_minus_beta1, one_minus_beta2;  // complements taken in double
  bool maximize, has_decay;
  // The same hyper-parameters in another math type (kernels receive them in double).
  template <typename U>
  FUSED_OPTIM_HOST_DEVICE LionHyper<U> To() const {
    return {U(lr), U(beta1), U(beta2), U(decay), U(one_minus_beta1), U(one_minus_beta2), maximize, has_decay};
  }
};

// sign(x) with sign(0) == 0 that keeps a NaN (torch.sign's behaviour), so a NaN gradient reaches
// the parameter as it would through torch.
template <typename T>
FUSED_OPTIM_HOST_DEVICE inline T SignKeepNan(T x) {
  return x != x ? x : Sign(x);
}

template <typename T>
FUSED_OPTIM_HOST_DEVICE inline void LionStep(T& p, T grad, T& m, const LionHyper<T>& h) {
  const T g = MaximizeFlip(grad, h.maximize);
  const T c = m * h.beta1 + h.one_minus_beta1 * g;
  p = h.has_decay ? p * h.decay : p;
  p = p + (-h.lr) * SignKeepNan(c);
  m = m * h.beta2 + h.one_minus_beta2 * g;
}

template <typename T>
struct LionGrads {
  T p, grad, m;
};

// sign() has a zero derivative wherever it is differentiable (everywhere but c == 0, where autograd
// also takes 0), so no gradient reaches p' through the step direction: p' depends on p only through
// the decay, and the gradient and m reach the outputs only through m'.
template <typename T>
FUSED_OPTIM_HOST_DEVICE inline LionGrads<T> LionStepBackward(T gp_new, T gm_new, const LionHyper<T>& h) {
  const T dg = h.one_minus_beta2 * gm_new;
  LionGrads<T> out{};
  out.p = h.has_decay ? h.decay * gp_new : gp_new;
  out.m = h.beta2 * gm_new;
  out.grad = MaximizeFlip(dg, h.maximize);
  return out;
}

}  // namespace fused_optim::math

// The kernel binding (see common.h): the kernel table's columns and how each element function
// maps them to the math above, shared by the CPU loops and the CUDA kernels.
namespace fused_optim::lion_cols {
enum : int { kParam, kGrad, kExpAvg };
// The backward reads no forward input: its gradients do not depend on the values.
enum : int { kGParamNew = 0, kGExpAvgNew, kOutParam, kOutGrad, kOutExpAvg };
}  // namespace fused_optim::lion_cols

namespace fused_optim::bind {

struct LionStep : NoScalars {
  template <typename T>
  using Hyper = math::LionHyper<T>;
  template <typename T>
  static auto Flags(Hyper<T>& h, Scalars<T>& /*s*/) {
    return std::tie(h.maximize, h.has_decay);
  }

  static constexpr int kLists = 3;
  template <typename T, typename IO>
  FUSED_OPTIM_ELEMENT static void Apply(const IO& io, const Hyper<T>& h, const Scalars<T>& /*s*/) {
    using namespace lion_cols;
    T p = io.Load(kParam), m = io.Load(kExpAvg);
    math::LionStep(p, io.Load(kGrad), m, h);
    io.Store(kParam, p);
    io.Store(kExpAvg, m);
  }
};

struct LionBackward : LionStep {  // the same hyper-parameters, scalars and flags
  static constexpr int kLists = 5;
  template <typename T, typename IO>
  FUSED_OPTIM_ELEMENT static void Apply(const IO& io, const Hyper<T>& h, const Scalars<T>& /*s*/) {
    using namespace lion_cols;
    const math::LionGrads<T> r = math::LionStepBackward<T>(io.Load(kGParamNew), io.Load(kGExpAvgNew), h);
    io.Store(kOutParam, r.p);
    io.Store(kOutGrad, r.grad);
    io.Store(kOutExpAvg, r.m);
  }
};

}  // namespace fused_optim::bind
