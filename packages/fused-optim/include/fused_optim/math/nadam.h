// NAdam (Dozat, 2016) element-wise math, with torch.optim's momentum schedule.
//   g' = ±g (+ wd p, L2 form);  p <- p (1 - lr wd) (decoupled form)
//   m <- lerp(m, g', 1 - b1);  v <- b2 v + (1 - b2) g'^2;  d = sqrt(v / bc2) + eps
//   p <- p + cg g' / d + cm m / d,  cg = -lr (1 - mu_t) / (1 - prod_t),  cm = -lr mu_{t+1} / (1 - prod_{t+1})
// where mu_t = b1 (1 - 0.5 * 0.96^(t psi)) depends only on the step (computed per tensor by the
// host, or from the device step counter by the kernel: bind::Nadam::StepRow) and
// prod_t = prod_{t-1} mu_t is each parameter's mu_product state scalar, read and advanced where it
// lives (the kernels' state scalars, csrc/kernels.h).
#pragma once

#include "fused_optim/math/common.h"

namespace fused_optim::math {

// lr and momentum_decay are read by the step row alone (bind::Nadam::StepRow): the per-tensor
// coefficients carry them.
template <typename T>
struct NadamHyper : AdamFamilyHyper<T> {
  T momentum_decay;
  // The same hyper-parameters in another math type (kernels receive them in double).
  template <typename U>
  FUSED_OPTIM_HOST_DEVICE NadamHyper<U> To() const {
    return {AdamFamilyHyper<T>::template To<U>(), U(momentum_decay)};
  }
};

// Per-tensor scalars: they depend on the tensor's own step count and momentum product.
template <typename T>
struct NadamStepScalars {
  T bc2;        // 1 - beta2^step
  T grad_coef;  // -lr (1 - mu_t) / (1 - prod_t)
  T avg_coef;   // -lr mu_{t+1} / (1 - prod_t mu_{t+1})
};

// torch.optim.NAdam's momentum coefficient mu_t at step t.
FUSED_OPTIM_HOST_DEVICE inline double NadamMomentum(double beta1, double momentum_decay, double t) {
  return beta1 * (1.0 - 0.5 * pow(0.96, t * momentum_decay));
}

// One tensor's scalars from its bias correction, mu_t, mu_{t+1} and prod_t.
template <typename T>
FUSED_OPTIM_HOST_DEVICE inline NadamStepScalars<T> NadamScalars(double lr, double bc2, double mu, double mu_next,
                                                                double mu_product) {
  return {T(bc2), T(-lr * (1.0 - mu) / (1.0 - mu_product)), T(-lr * mu_next / (1.0 - mu_product * mu_next))};
}

// One in-place step, in torch.optim's (single-tensor) operation order.
template <typename T>
FUSED_OPTIM_HOST_DEVICE inline void NadamStep(T& p, T grad, T& m, T& v, const NadamHyper<T>& h,
                                              const NadamStepScalars<T>& s) {
  const AdamMoments<T> n = UpdateMoments(grad, p, m, v, h);
  p = h.has_decay ? p * h.decay : p;
  m = n.m, v = n.v;
  const T denom = Sqrt(v / s.bc2) + h.eps;
  p = p + s.grad_coef * (n.g / denom);
  p = p + s.avg_coef * (m / denom);
}

template <typename T>
using NadamGrads = AdamMomentGrads<T>;

// Gradients of the out-of-place step with respect to (p, grad, m, v), given the gradients
// flowing into (p', m', v'). Recomputes the forward intermediates.
template <typename T>
FUSED_OPTIM_HOST_DEVICE inline NadamGrads<T> NadamStepBackward(T gp_new, T gm_new, T gv_new, T p, T grad, T m, T v,
                                                               const NadamHyper<T>& h, const NadamStepScalars<T>& s) {
  const AdamMoments<T> n = UpdateMoments(grad, p, m, v, h);
  const T root = Sqrt(n.v / s.bc2);
  const T denom = root + h.eps;
  const T dm_new = gm_new + s.avg_coef * gp_new / denom;
  const T ddenom = -gp_new * (s.grad_coef * n.g + s.avg_coef * n.m) / (denom * denom);
  const T dv_new = gv_new + SqrtBackward(ddenom, root) / s.bc2;
  return UpdateMomentsBackward(gp_new, s.grad_coef * gp_new / denom, dm_new, dv_new, n.g, h);
}

}  // namespace fused_optim::math

// The kernel binding (see common.h): the per-tensor scalars' columns and how each element function
// maps them to the math above, shared by the CPU loops and the CUDA kernels.
namespace fused_optim {
namespace nadam_cols {
// Per-tensor scalars: the terms of the step count, and the factor taking the state's product to
// prod_t (mu_t for an in-place step, whose state holds prod_{t-1}; 1 for a functional op, given prod_t).
enum : int { kLr = 0, kBc2, kMu, kMuNext, kProductFactor, kNumScalars };
enum : int { kMuProduct = 0, kNumState };  // state scalars
}  // namespace nadam_cols

namespace bind {

struct Nadam {
  static constexpr int kNumScalars = nadam_cols::kNumScalars;
  template <typename T>
  using Hyper = math::NadamHyper<T>;
  template <typename T>
  using Scalars = math::NadamStepScalars<T>;
  static constexpr int kStateScalars = nadam_cols::kNumState;
  // prod_t: the state's product times the row's factor, rounded as torch.optim's in-place
  // mu_product *= mu_t rounds it.
  template <typename StateIO>
  FUSED_OPTIM_HOST_DEVICE static double Product(const double* row, const StateIO& state) {
    return state.Scaled(nadam_cols::kMuProduct, row[nadam_cols::kProductFactor]);
  }
  template <typename T, typename StateIO>
  FUSED_OPTIM_HOST_DEVICE static Scalars<T> MakeScalars(const double* row, const StateIO& state) {
    using namespace nadam_cols;
    return math::NadamScalars<T>(row[kLr], row[kBc2], row[kMu], row[kMuNext], Product(row, state));
  }
  // The row of step count `step` (the count after this update) of an in-place step, whose state
  // holds prod_{t-1} (a functional op, given prod_t, sets kProductFactor to 1).
  FUSED_OPTIM_HOST_DEVICE static void StepRow(const Hyper<double>& h, double step, double* row) {
    using namespace nadam_cols;
    row[kLr] = h.lr;
    row[kBc2] = 1.0 - pow(h.beta2, step);
    row[kMu] = math::NadamMomentum(h.beta1, h.momentum_decay, step);
    row[kMuNext] = math::NadamMomentum(h.beta1, h.momentum_decay, step + 1.0);
    row[kProductFactor] = row[kMu];
  }
  template <typename StateIO>
  FUSED_OPTIM_HOST_DEVICE static void Advance(const double* row, const StateIO& state) {
    state.Store(nadam_cols::kMuProduct, Product(row, state));
  }
  template <typename T>
  static auto Flags(Hyper<T>& h, Scalars<T>& /*s*/) {
    return std::tie(h.maximize, h.has_l2, h.has_decay, h.lerp_small);
  }
  // The math, for AdamFamilyStep and AdamFamilyBackward.
  template <typename... A>
  FUSED_OPTIM_HOST_DEVICE static void Step(A&&... a) {
    math::NadamStep(a...);
  }
  template <typename... A>
  FUSED_OPTIM_HOST_DEVICE static auto StepBackward(A... a) {
    return math::NadamStepBackward(a...);
  }
};

struct NadamStep : AdamFamilyStep<Nadam> {};
struct NadamBackward : AdamFamilyBackward<Nadam> {};

}  // namespace bind
}  // namespace fused_optim
