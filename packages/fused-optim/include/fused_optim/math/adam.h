// Adam / AdamW (Kingma & Ba, 2015; Loshchilov & Hutter, 2019) element-wise math.
//   g' = ±g (+ wd p, L2 form);  p <- p (1 - lr wd) (decoupled form)
//   m <- lerp(m, g', 1 - b1);  v <- b2 v + (1 - b2) g'^2;  vmax <- max(vmax, v) (amsgrad)
//   p <- p - (lr / bc1) m / (sqrt(v or vmax) / sqrt(bc2) + eps),  bcK = 1 - bK^step
// plus the "direction" used by diffopt: (m / bc1) / (sqrt(v / bc2 + eps_root) + eps).
#pragma once

#include "fused_optim/math/common.h"

namespace fused_optim::math {

template <typename T>
struct AdamHyper : AdamFamilyHyper<T> {
  bool amsgrad;
  // The same hyper-parameters in another math type (kernels receive them in double).
  template <typename U>
  FUSED_OPTIM_HOST_DEVICE AdamHyper<U> To() const {
    return {AdamFamilyHyper<T>::template To<U>(), amsgrad};
  }
};

// Per-tensor scalars: they depend on the tensor's own step count.
template <typename T>
struct AdamStepScalars {
  T step_size;  // lr / (1 - beta1^step)
  T bc2_sqrt;   // sqrt(1 - beta2^step)
};

// One in-place step, in torch.optim's operation order so float64 results agree to rounding.
template <typename T>
FUSED_OPTIM_HOST_DEVICE inline void AdamStep(T& p, T grad, T& m, T& v, T& vmax, const AdamHyper<T>& h,
                                             const AdamStepScalars<T>& s) {
  const AdamMoments<T> n = UpdateMoments(grad, p, m, v, h);
  p = h.has_decay ? p * h.decay : p;
  m = n.m, v = n.v;
  const T vmax_new = MaxNan(vmax, v);
  vmax = h.amsgrad ? vmax_new : vmax;
  const T denom_src = h.amsgrad ? vmax_new : v;
  const T denom = Sqrt(denom_src) / s.bc2_sqrt + h.eps;
  p = p + (-s.step_size) * (m / denom);
}

// Gradients of the out-of-place step with respect to (p, grad, m, v, vmax), given the
// gradients flowing into (p', m', v', vmax'). Recomputes the forward intermediates.
template <typename T>
struct AdamGrads : AdamMomentGrads<T> {
  T vmax;
};

template <typename T>
FUSED_OPTIM_HOST_DEVICE inline AdamGrads<T> AdamStepBackward(T gp_new, T gm_new, T gv_new, T gvmax_new, T p, T grad,
                                                             T m, T v, T vmax, const AdamHyper<T>& h,
                                                             const AdamStepScalars<T>& s) {
  const AdamMoments<T> n = UpdateMoments(grad, p, m, v, h);
  const T src = h.amsgrad ? MaxNan(vmax, n.v) : n.v;
  const T root = Sqrt(src);
  const T denom = root / s.bc2_sqrt + h.eps;
  const T u = n.m / denom;  // p' = p0 - step_size * u

  const T du = -s.step_size * gp_new;
  const T dm_new = gm_new + du / denom;
  const T ddenom = -du * u / denom;
  const T dsrc = SqrtBackward(ddenom / s.bc2_sqrt, root);
  const T dmax = gvmax_new + dsrc;  // amsgrad: split between vmax and v'
  const T to_vmax = MaxBackwardShareOfFirst(dmax, vmax, n.v);
  const T dv_new = gv_new + (h.amsgrad ? dmax - to_vmax : dsrc);
  return {UpdateMomentsBackward(gp_new, T(0), dm_new, dv_new, n.g, h), h.amsgrad ? to_vmax : T(0)};
}

// diffopt's Adam direction (no lr, no weight decay).
template <typename T>
struct AdamDirectionHyper {
  T beta1, beta2, eps, eps_root, bc1, bc2;
  T one_minus_beta1, one_minus_beta2;
  // The same hyper-parameters in another math type (kernels receive them in double).
  template <typename U>
  FUSED_OPTIM_HOST_DEVICE AdamDirectionHyper<U> To() const {
    return {U(beta1), U(beta2), U(eps), U(eps_root), U(bc1), U(bc2), U(one_minus_beta1), U(one_minus_beta2)};
  }
};

template <typename T>
FUSED_OPTIM_HOST_DEVICE inline T AdamDirection(T g, T& m, T& v, const AdamDirectionHyper<T>& h) {
  m = h.beta1 * m + h.one_minus_beta1 * g;
  v = h.beta2 * v + h.one_minus_beta2 * g * g;
  const T root = Sqrt(v / h.bc2 + h.eps_root);
  return (m / h.bc1) / (root + h.eps);
}

template <typename T>
struct AdamDirectionGrads {
  T grad, m, v;
};

template <typename T>
FUSED_OPTIM_HOST_DEVICE inline AdamDirectionGrads<T> AdamDirectionBackward(T gd, T gm_new, T gv_new, T g, T m, T v,
                                                                           const AdamDirectionHyper<T>& h) {
  const T m_new = h.beta1 * m + h.one_minus_beta1 * g;
  const T v_new = h.beta2 * v + h.one_minus_beta2 * g * g;
  const T root = Sqrt(v_new / h.bc2 + h.eps_root);
  const T denom = root + h.eps;
  const T d = (m_new / h.bc1) / denom;
  const T dm_new = gm_new + gd / (h.bc1 * denom);
  const T dv_new = gv_new + SqrtBackward(-gd * d / denom, root) / h.bc2;
  AdamDirectionGrads<T> out{};
  out.grad = h.one_minus_beta1 * dm_new + T(2) * h.one_minus_beta2 * g * dv_new;
  out.m = h.beta1 * dm_new;
  out.v = h.beta2 * dv_new;
  return out;
}

}  // namespace fused_optim::math

// The kernel binding (see common.h): the kernel table's columns and how each element function
// maps them to the math above, shared by the CPU loops and the CUDA kernels.
namespace fused_optim::adam_cols {
enum : int { kParam, kGrad, kExpAvg, kExpAvgSq, kMaxExpAvgSq };
enum : int { kStepSize = 0, kBc2Sqrt, kNumScalars };  // per-tensor scalars
}  // namespace fused_optim::adam_cols
namespace fused_optim::adam_direction_cols {
enum : int { kGrad, kExpAvg, kExpAvgSq, kDirection };
enum : int {
  kInGrad = 0,
  kInExpAvg,
  kInExpAvgSq,
  kGDirection,
  kGExpAvgNew,
  kGExpAvgSqNew,
  kOutGrad,
  kOutExpAvg,
  kOutExpAvgSq
};
}  // namespace fused_optim::adam_direction_cols

namespace fused_optim::bind {

struct AdamStep {
  static constexpr int kNumScalars = adam_cols::kNumScalars;
  template <typename T>
  using Hyper = math::AdamHyper<T>;
  template <typename T>
  using Scalars = math::AdamStepScalars<T>;
  template <typename T>
  FUSED_OPTIM_HOST_DEVICE static Scalars<T> MakeScalars(const double* row) {
    return {T(row[adam_cols::kStepSize]), T(row[adam_cols::kBc2Sqrt])};
  }
  // The row of step count `step` (the count after this update): the bias corrections.
  FUSED_OPTIM_HOST_DEVICE static void StepRow(const Hyper<double>& h, double step, double* row) {
    row[adam_cols::kStepSize] = h.lr / (1.0 - pow(h.beta1, step));
    row[adam_cols::kBc2Sqrt] = sqrt(1.0 - pow(h.beta2, step));
  }
  template <typename T>
  static auto Flags(Hyper<T>& h, Scalars<T>& /*s*/) {
    return std::tie(h.amsgrad, h.maximize, h.has_l2, h.has_decay, h.lerp_small);
  }

  static constexpr int kLists = 5;
  template <typename T, typename IO>
  FUSED_OPTIM_ELEMENT static void Apply(const IO& io, const Hyper<T>& h, const Scalars<T>& s) {
    using namespace adam_cols;
    T p = io.Load(kParam), m = io.Load(kExpAvg), v = io.Load(kExpAvgSq);
    T vmax = h.amsgrad ? io.Load(kMaxExpAvgSq) : T(0);  // no max stream without amsgrad
    math::AdamStep(p, io.Load(kGrad), m, v, vmax, h, s);
    io.Store(kParam, p);
    io.Store(kExpAvg, m);
    io.Store(kExpAvgSq, v);
    if (h.amsgrad) io.Store(kMaxExpAvgSq, vmax);
  }
};

struct AdamBackward : AdamStep {           // the same hyper-parameters, scalars and flags
  using C = BackwardOf<AdamStep::kLists>;  // the standard layout
  static constexpr int kLists = C::kLists;
  template <typename T, typename IO>
  FUSED_OPTIM_ELEMENT static void Apply(const IO& io, const Hyper<T>& h, const Scalars<T>& s) {
    using namespace adam_cols;
    const math::AdamGrads<T> r = math::AdamStepBackward<T>(
        io.Load(C::GradNew(kParam)), io.Load(C::GradNew(kExpAvg)), io.Load(C::GradNew(kExpAvgSq)),
        io.Load(C::GradNew(kMaxExpAvgSq)), io.Load(C::In(kParam)), io.Load(C::In(kGrad)), io.Load(C::In(kExpAvg)),
        io.Load(C::In(kExpAvgSq)), io.Load(C::In(kMaxExpAvgSq)), h, s);
    io.Store(C::Out(kParam), r.p);
    io.Store(C::Out(kGrad), r.grad);
    io.Store(C::Out(kExpAvg), r.m);
    io.Store(C::Out(kExpAvgSq), r.v);
    io.Store(C::Out(kMaxExpAvgSq), r.vmax);
  }
};

struct AdamDirection : NoScalars {
  template <typename T>
  using Hyper = math::AdamDirectionHyper<T>;
  template <typename T>
  static auto Flags(Hyper<T>& /*h*/, Scalars<T>& /*s*/) {
    return std::tie();
  }

  static constexpr int kLists = 4;
  template <typename T, typename IO>
  FUSED_OPTIM_ELEMENT static void Apply(const IO& io, const Hyper<T>& h, const Scalars<T>& /*s*/) {
    using namespace adam_direction_cols;
    T m = io.Load(kExpAvg), v = io.Load(kExpAvgSq);
    const T d = math::AdamDirection(io.Load(kGrad), m, v, h);
    io.Store(kExpAvg, m);
    io.Store(kExpAvgSq, v);
    io.Store(kDirection, d);
  }
};

struct AdamDirectionBackward : AdamDirection {  // the same hyper-parameters, scalars and flags
  static constexpr int kLists = 9;
  template <typename T, typename IO>
  FUSED_OPTIM_ELEMENT static void Apply(const IO& io, const Hyper<T>& h, const Scalars<T>& /*s*/) {
    using namespace adam_direction_cols;
    const math::AdamDirectionGrads<T> r =
        math::AdamDirectionBackward<T>(io.Load(kGDirection), io.Load(kGExpAvgNew), io.Load(kGExpAvgSqNew),
                                       io.Load(kInGrad), io.Load(kInExpAvg), io.Load(kInExpAvgSq), h);
    io.Store(kOutGrad, r.grad);
    io.Store(kOutExpAvg, r.m);
    io.Store(kOutExpAvgSq, r.v);
  }
};

}  // namespace fused_optim::bind
