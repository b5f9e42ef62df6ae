// Rprop (Riedmiller & Braun, 1993) element-wise math, as torch.optim.Rprop.
//   g' = ±g;  f = eta+ if g' prev > 0, eta- if g' prev < 0, else 1
//   s <- clamp(s f, s_min, s_max);  g' <- 0 where g' prev < 0;  p <- p - sign(g') s;  prev <- g'
// The learning rate only sets the initial step sizes (state), so it does not appear here.
#pragma once

#include "fused_optim/math/common.h"

namespace fused_optim::math {

template <typename T>
struct RpropHyper {
  T eta_minus, eta_plus, step_size_min, step_size_max;
  bool maximize;
  // The same hyper-parameters in another math type (kernels receive them in double).
  template <typename U>
  FUSED_OPTIM_HOST_DEVICE RpropHyper<U> To() const {
    return {U(eta_minus), U(eta_plus), U(step_size_min), U(step_size_max), maximize};
  }
};

// torch.clamp(x, lo, hi): max with lo, then min with hi (so hi wins when lo > hi); NaN stays NaN.
template <typename T>
FUSED_OPTIM_HOST_DEVICE inline T Clamp(T x, T lo, T hi) {
  const T lower = MaxNan(x, lo);
  return lower > hi ? hi : lower;
}

// The step-size factor for the sign agreement `prod` = g' * prev (torch.sign(NaN) is 0: factor 1).
template <typename T>
FUSED_OPTIM_HOST_DEVICE inline T RpropFactor(T prod, const RpropHyper<T>& h) {
  return prod > T(0) ? h.eta_plus : (prod < T(0) ? h.eta_minus : T(1));
}

template <typename T>
FUSED_OPTIM_HOST_DEVICE inline void RpropStep(T& p, T grad, T& prev, T& step_size, const RpropHyper<T>& h) {
  const T g = MaximizeFlip(grad, h.maximize);
  const T prod = g * prev;
  step_size = Clamp(step_size * RpropFactor(prod, h), h.step_size_min, h.step_size_max);
  const T kept = prod < T(0) ? T(0) : g;  // a sign change skips this step's move
  p = p + T(-1) * (Sign(kept) * step_size);
  prev = kept;
}

template <typename T>
struct RpropGrads {
  T p, grad, prev, step_size;
};

// Gradients of the out-of-place step with respect to (p, grad, prev, step_size), given the
// gradients flowing into (p', prev', step_size'). Signs and comparisons are piecewise constant
// (zero derivative, as autograd gives them); the step size flows through the clamp, whose
// derivative is torch's: 1 where lo <= x <= hi, else 0.
template <typename T>
FUSED_OPTIM_HOST_DEVICE inline RpropGrads<T> RpropStepBackward(T gp_new, T gprev_new, T gs_new, T grad, T prev,
                                                               T step_size, const RpropHyper<T>& h) {
  const T g = MaximizeFlip(grad, h.maximize);
  const T prod = g * prev;
  const T factor = RpropFactor(prod, h);
  const T scaled = step_size * factor;
  const bool changed = prod < T(0);
  const T kept = changed ? T(0) : g;
  const T ds_new = gs_new - Sign(kept) * gp_new;
  const bool inside = (scaled >= h.step_size_min) & (scaled <= h.step_size_max);
  RpropGrads<T> out{};
  out.p = gp_new;
  out.step_size = inside ? factor * ds_new : T(0);
  out.prev = T(0);
  const T dg = changed ? T(0) : gprev_new;
  out.grad = MaximizeFlip(dg, h.maximize);
  return out;
}

}  // namespace fused_optim::math

// The kernel binding (see common.h): the kernel table's columns and how each element function
// maps them to the math above, shared by the CPU loops and the CUDA kernels.
namespace fused_optim {
namespace rprop_cols {
enum : int { kParam, kGrad, kPrev, kStepSize };
enum : int {
  kGParamNew = 0,
  kGPrevNew,
  kGStepSizeNew,
  kInGrad,
  kInPrev,
  kInStepSize,
  kOutParam,
  kOutGrad,
  kOutPrev,
  kOutStepSize
};
}  // namespace rprop_cols

namespace bind {

struct Rprop : NoScalars {
  template <typename T>
  using Hyper = math::RpropHyper<T>;
  template <typename T>
  static auto Flags(Hyper<T>& h, Scalars<T>& /*s*/) {
    return std::tie(h.maximize);
  }
};

struct RpropStep : Rprop {
  static constexpr int kLists = 4;
  template <typename T, typename IO>
  FUSED_OPTIM_ELEMENT static void Apply(const IO& io, const Hyper<T>& h, const Scalars<T>& /*s*/) {
    using namespace rprop_cols;
    T p = io.Load(kParam), prev = io.Load(kPrev), step_size = io.Load(kStepSize);
    math::RpropStep(p, io.Load(kGrad), prev, step_size, h);
    io.Store(kParam, p);
    io.Store(kPrev, prev);
    io.Store(kStepSize, step_size);
  }
};

struct RpropBackward : Rprop {
  static constexpr int kLists = 10;
  template <typename T, typename IO>
  FUSED_OPTIM_ELEMENT static void Apply(const IO& io, const Hyper<T>& h, const Scalars<T>& /*s*/) {
    using namespace rprop_cols;
    const math::RpropGrads<T> r =
        math::RpropStepBackward<T>(io.Load(kGParamNew), io.Load(kGPrevNew), io.Load(kGStepSizeNew), io.Load(kInGrad),
                                   io.Load(kInPrev), io.Load(kInStepSize), h);
    io.Store(kOutParam, r.p);
    io.Store(kOutGrad, r.grad);
    io.Store(kOutPrev, r.prev);
    io.Store(kOutStepSize, r.step_size);
  }
};

}  // namespace bind
}  // namespace fused_optim
