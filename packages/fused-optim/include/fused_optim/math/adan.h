// Adan (Xie et al., 2022/2024, "Adan: Adaptive Nesterov Momentum Algorithm") element-wise math, with
// the betas as decay rates (the paper's 1 - beta_k) and bias corrections bcK = 1 - bK^step:
//   g' = ±g;  d = g' - g_prev (0 on the first step);  m <- b1 m + (1 - b1) g'
//   v <- b2 v + (1 - b2) d;  n <- b3 n + (1 - b3) (g' + b2 d)^2
//   u = (m / bc1 + b2 v / bc2) / (sqrt(n) / sqrt(bc3) + eps)
//   p <- (p - lr u) / (1 + lr wd)   (the proximal decay of Algorithm 1), or with no_prox
//   p <- p (1 - lr wd) - lr u;      and g_prev <- g'
#pragma once

#include "fused_optim/math/common.h"

namespace fused_optim::math {

template <typename T>
struct AdanHyper {
  T lr, beta1, beta2, beta3, eps;
  T decay;                                              // 1 - lr wd with no_prox, else 1
  T prox;                                               // 1 + lr wd without no_prox, else 1
  T one_minus_beta1, one_minus_beta2, one_minus_beta3;  // complements taken in double
  bool maximize, has_decay, has_prox;
  // The same hyper-parameters in another math type (kernels receive them in double).
  template <typename U>
  FUSED_OPTIM_HOST_DEVICE AdanHyper<U> To() const {
    return {U(lr),   U(beta1),           U(beta2),           U(beta3),           U(eps),   U(decay),
            U(prox), U(one_minus_beta1), U(one_minus_beta2), U(one_minus_beta3), maximize, has_decay,
            has_prox};
  }
};

// Per-tensor scalars: they depend on the tensor's own step count.
template <typename T>
struct AdanStepScalars {
  T bc1, bc2;     // 1 - beta1^step, 1 - beta2^step
  T bc3_sqrt;     // sqrt(1 - beta3^step)
  bool has_prev;  // step > 1: a previous gradient exists (on the first step the difference is 0)
};

template <typename T>
FUSED_OPTIM_HOST_DEVICE inline void AdanStep(T& p, T grad, T& m, T& v, T& n, T& prev, const AdanHyper<T>& h,
                                             const AdanStepScalars<T>& s) {
  const T g = MaximizeFlip(grad, h.maximize);
  const T d = s.has_prev ? g - prev : T(0);
  m = m * h.beta1 + h.one_minus_beta1 * g;
  v = v * h.beta2 + h.one_minus_beta2 * d;
  const T c = g + h.beta2 * d;
  n = n * h.beta3 + h.one_minus_beta3 * c * c;
  const T denom = Sqrt(n) / s.bc3_sqrt + h.eps;
  const T u = (m / s.bc1 + h.beta2 * v / s.bc2) / denom;
  p = h.has_decay ? p * h.decay : p;
  p = p + (-h.lr) * u;
  p = h.has_prox ? p / h.prox : p;
  prev = g;
}

template <typename T>
struct AdanGrads {
  T p, grad, m, v, n, prev;
};

// Gradients of the out-of-place step with respect to (p, grad, m, v, n, prev), given the gradients
// flowing into (p', m', v', n', prev'). Recomputes the forward intermediates (p' is linear in p, so
// p itself is not needed).
template <typename T>
FUSED_OPTIM_HOST_DEVICE inline AdanGrads<T> AdanStepBackward(T gp_new, T gm_new, T gv_new, T gn_new, T gprev_new,
                                                             T grad, T m, T v, T n, T prev, const AdanHyper<T>& h,
                                                             const AdanStepScalars<T>& s) {
  const T g = MaximizeFlip(grad, h.maximize);
  const T d = s.has_prev ? g - prev : T(0);
  const T m_new = m * h.beta1 + h.one_minus_beta1 * g;
  const T v_new = v * h.beta2 + h.one_minus_beta2 * d;
  const T c = g + h.beta2 * d;
  const T n_new = n * h.beta3 + h.one_minus_beta3 * c * c;
  const T root = Sqrt(n_new);
  const T denom = root / s.bc3_sqrt + h.eps;
  const T u = (m_new / s.bc1 + h.beta2 * v_new / s.bc2) / denom;

  const T dp_shrunk = h.has_prox ? gp_new / h.prox : gp_new;  // gradient reaching p (1 - lr wd) - lr u
  const T du = -h.lr * dp_shrunk;
  const T dnum = du / denom;
  const T dm_new = gm_new + dnum / s.bc1;
  const T dv_new = gv_new + h.beta2 * dnum / s.bc2;
  const T dn_new = gn_new + SqrtBackward(-du * u / denom / s.bc3_sqrt, root);
  const T dc = T(2) * h.one_minus_beta3 * c * dn_new;
  const T dd = s.has_prev ? h.one_minus_beta2 * dv_new + h.beta2 * dc : T(0);
  const T dg = h.one_minus_beta1 * dm_new + dc + dd + gprev_new;
  AdanGrads<T> out{};
  out.p = h.has_decay ? h.decay * dp_shrunk : dp_shrunk;
  out.grad = MaximizeFlip(dg, h.maximize);
  out.m = h.beta1 * dm_new;
  out.v = h.beta2 * dv_new;
  out.n = h.beta3 * dn_new;
  out.prev = -dd;
  return out;
}

}  // namespace fused_optim::math

// The kernel binding (see common.h): the kernel table's columns and how each element function
// maps them to the math above, shared by the CPU loops and the CUDA kernels.
namespace fused_optim::adan_cols {
enum : int { kParam, kGrad, kExpAvg, kExpAvgDiff, kExpAvgSq, kPrevGrad };
enum : int { kBc1 = 0, kBc2, kBc3Sqrt, kHasPrev, kNumScalars };  // per-tensor scalars
}  // namespace fused_optim::adan_cols

namespace fused_optim::bind {

struct AdanStep {
  static constexpr int kNumScalars = adan_cols::kNumScalars;
  template <typename T>
  using Hyper = math::AdanHyper<T>;
  template <typename T>
  using Scalars = math::AdanStepScalars<T>;
  template <typename T>
  FUSED_OPTIM_HOST_DEVICE static Scalars<T> MakeScalars(const double* row) {
    using namespace adan_cols;
    return {T(row[kBc1]), T(row[kBc2]), T(row[kBc3Sqrt]), row[kHasPrev] != 0.0};
  }
  // The row of step count `step` (the count after this update): the bias corrections, and whether
  // a previous gradient exists.
  FUSED_OPTIM_HOST_DEVICE static void StepRow(const Hyper<double>& h, double step, double* row) {
    using namespace adan_cols;
    row[kBc1] = 1.0 - pow(h.beta1, step);
    row[kBc2] = 1.0 - pow(h.beta2, step);
    row[kBc3Sqrt] = sqrt(1.0 - pow(h.beta3, step));
    row[kHasPrev] = step > 1.0 ? 1.0 : 0.0;
  }
  template <typename T>
  static auto Flags(Hyper<T>& h, Scalars<T>& s) {
    return std::tie(h.maximize, h.has_decay, h.has_prox, s.has_prev);
  }

  static constexpr int kLists = 6;
  template <typename T, typename IO>
  FUSED_OPTIM_ELEMENT static void Apply(const IO& io, const Hyper<T>& h, const Scalars<T>& s) {
    using namespace adan_cols;
    T p = io.Load(kParam), m = io.Load(kExpAvg), v = io.Load(kExpAvgDiff), n = io.Load(kExpAvgSq);
    T prev = io.Load(kPrevGrad);
    math::AdanStep(p, io.Load(kGrad), m, v, n, prev, h, s);
    io.Store(kParam, p);
    io.Store(kExpAvg, m);
    io.Store(kExpAvgDiff, v);
    io.Store(kExpAvgSq, n);
    io.Store(kPrevGrad, prev);
  }
};

struct AdanBackward : AdanStep {           // the same hyper-parameters, scalars and flags
  using C = BackwardOf<AdanStep::kLists>;  // the standard layout
  static constexpr int kLists = C::kLists;
  template <typename T, typename IO>
  FUSED_OPTIM_ELEMENT static void Apply(const IO& io, const Hyper<T>& h, const Scalars<T>& s) {
    using namespace adan_cols;
    const math::AdanGrads<T> r = math::AdanStepBackward<T>(
        io.Load(C::GradNew(kParam)), io.Load(C::GradNew(kExpAvg)), io.Load(C::GradNew(kExpAvgDiff)),
        io.Load(C::GradNew(kExpAvgSq)), io.Load(C::GradNew(kPrevGrad)), io.Load(C::In(kGrad)), io.Load(C::In(kExpAvg)),
        io.Load(C::In(kExpAvgDiff)), io.Load(C::In(kExpAvgSq)), io.Load(C::In(kPrevGrad)), h, s);
    io.Store(C::Out(kParam), r.p);
    io.Store(C::Out(kGrad), r.grad);
    io.Store(C::Out(kExpAvg), r.m);
    io.Store(C::Out(kExpAvgDiff), r.v);
    io.Store(C::Out(kExpAvgSq), r.n);
    io.Store(C::Out(kPrevGrad), r.prev);
  }
};

}  // namespace fused_optim::bind
