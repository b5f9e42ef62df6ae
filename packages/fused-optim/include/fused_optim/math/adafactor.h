// Adafactor (Shazeer & Stern, 2018) element-wise math, as torch.optim.Adafactor. The step has
// per-tensor reductions (the RMS of the parameter and of the update, and for matrices the row and
// column means of g^2) between its element-wise passes; the op (csrc/ops/adafactor.cpp) runs the
// reductions and these passes in turn:
//   factors    matrices: r <- lerp(r, |g|_row^2 / cols, t^c), c <- lerp(c, |g|_col^2 / rows, t^c),
//              from the norms of g's rows and columns (the op's reductions), all matrices at once
//   direction  g' = ±g;  v <- lerp(v, g'^2, t^c) (vectors; matrices: v = r c / max(mean(r), eps1),
//              r c from the op, and for a 2-D one mean(r) from the sum of r it gives, else the
//              division done by the op);  u = g' / sqrt(max(v, eps1^2))
//   apply      p <- p (1 - lr wd) + coef u,  coef = -max(eps2, RMS(p)) min(lr, 1/sqrt(t)) / max(1, RMS(u) / d)
// The apply pass reads the two norms where the reductions left them (state scalars, on the
// parameters' device) and computes coef itself (AdafactorStepSizeOf), so no norm crosses to the
// host. The functional op's backward runs the same passes in reverse; through the per-tensor
// reductions its element-wise pieces take per-tensor coefficients computed the same way (the
// gradient of coef with respect to u and p is a multiple of u and of p), and the factored
// estimate's row/column sums are again ATen reductions in the op.
#pragma once

#include "fused_optim/math/common.h"

namespace fused_optim::math {

template <typename T>
struct AdafactorHyper {
  T eps1_sq;          // the floor of the second-moment estimate
  T decay;            // 1 - lr * weight_decay
  T lr, beta2_decay;  // read by the step's entries of a row alone (bind::Adafactor::StepEntries)
  bool maximize, has_decay;
  // The same hyper-parameters in another math type (kernels receive them in double).
  template <typename U>
  FUSED_OPTIM_HOST_DEVICE AdafactorHyper<U> To() const {
    return {U(eps1_sq), U(decay), U(lr), U(beta2_decay), maximize, has_decay};
  }
};

// Per-tensor scalars: the second-moment weight t^c (with its lerp form) and the step coefficient;
// for the backward, the coefficients of u and of p in the gradients of coef * u.
template <typename T>
struct AdafactorStepScalars {
  T weight, coef, update_coef, param_coef;
  T mean_over;  // the factors pass: the length of the dimension a norm reduced
  T divisor;    // the factored direction: the estimate's max(mean(r), eps1) (1 where the op divided)
  bool lerp_small;
};

// Every pass's two results: (variance, update) for the vector direction, and for the backward
// passes (param, update) for the apply pass, (grad, state) for the direction passes.
template <typename T>
struct AdafactorPair {
  T a, b;
};

// One tensor's step size and, for the backward, its gradient, in double wherever the apply
// pass runs: from the norms of p and u (as the reductions computed them, in the tensor's dtype),
// rho = min(lr, 1/sqrt(t)), sqrt(numel), eps2, the clipping threshold d and, for the backward,
// dcoef = sum(gp' u). alpha = max(eps2, RMS(p)) rho, denom = max(1, RMS(u) / d), coef = -alpha / denom;
// coef's gradient is update_coef u + param_coef p, zero through a max that eps2 or 1 holds. The
// maxima keep their first argument unless the second is larger, as Python's max (torch.optim's)
// does, so a NaN norm loses to eps2 or 1 there too.
struct AdafactorStepSize {
  double coef, update_coef, param_coef;
};

FUSED_OPTIM_HOST_DEVICE inline AdafactorStepSize AdafactorStepSizeOf(double param_norm, double update_norm,
                                                                     double dcoef, double rho, double root_numel,
                                                                     double eps2, double d) {
  const double param_rms = param_norm / root_numel;
  const double alpha = (eps2 < param_rms ? param_rms : eps2) * rho;
  const double update_ratio = update_norm / (root_numel * d);
  const double denom = 1.0 < update_ratio ? update_ratio : 1.0;
  const double ddenom = dcoef * alpha / (denom * denom);
  const double dalpha = -dcoef / denom;
  return {-alpha / denom, update_ratio >= 1.0 && update_norm > 0.0 ? ddenom / (update_norm * root_numel * d) : 0.0,
          param_rms >= eps2 && param_norm > 0.0 ? dalpha * rho / (param_norm * root_numel) : 0.0};
}

// A matrix's row (or column) average of g^2 from the norm of its row (column), the length of
// which is mean_over, rounded as torch's square_ then div_: the new average.
template <typename T>
FUSED_OPTIM_HOST_DEVICE inline T AdafactorFactor(T factor, T norm, const AdafactorStepScalars<T>& s) {
  return Lerp(factor, norm * norm / s.mean_over, s.weight, s.lerp_small);
}

// The scaled update from a second-moment estimate (torch: clamp_min, rsqrt, times the gradient).
template <typename T>
FUSED_OPTIM_HOST_DEVICE inline T AdafactorScaled(T g, T estimate, const AdafactorHyper<T>& h) {
  return (T(1) / Sqrt(MaxNan(estimate, h.eps1_sq))) * g;
}

// Vectors (and scalars): the new full second moment and the update.
template <typename T>
FUSED_OPTIM_HOST_DEVICE inline AdafactorPair<T> AdafactorVectorDirection(T grad, T variance, const AdafactorHyper<T>& h,
                                                                         const AdafactorStepScalars<T>& s) {
  const T g = MaximizeFlip(grad, h.maximize);
  const T v_new = Lerp(variance, g * g, s.weight, s.lerp_small);
  return {v_new, AdafactorScaled(g, v_new, h)};
}

// Matrices: the update from the op's product r c of the row and column averages, divided here
// (torch: div_ of the product).
template <typename T>
FUSED_OPTIM_HOST_DEVICE inline T AdafactorFactoredDirection(T grad, T product, const AdafactorHyper<T>& h,
                                                            const AdafactorStepScalars<T>& s) {
  return AdafactorScaled(MaximizeFlip(grad, h.maximize), product / s.divisor, h);
}

// The divisor of a matrix's estimate from the sum of its row averages over `rows` of them: the mean
// (torch: mean, then clamp_min_, whose NaN passes) floored at eps1.
template <typename T>
FUSED_OPTIM_HOST_DEVICE inline T AdafactorDivisor(T row_sum, T rows, T eps1) {
  const T mean = row_sum / rows;
  return mean < eps1 ? eps1 : mean;
}

// The new parameter.
template <typename T>
FUSED_OPTIM_HOST_DEVICE inline T AdafactorApply(T p, T u, const AdafactorHyper<T>& h,
                                                const AdafactorStepScalars<T>& s) {
  p = h.has_decay ? p * h.decay : p;
  return p + s.coef * u;
}

// The apply pass's gradients: dp = gp' (1 - lr wd) + param_coef p, du = coef gp' + update_coef u.
template <typename T>
FUSED_OPTIM_HOST_DEVICE inline AdafactorPair<T> AdafactorApplyBackward(T gp_new, T u, T p, const AdafactorHyper<T>& h,
                                                                       const AdafactorStepScalars<T>& s) {
  return {(h.has_decay ? gp_new * h.decay : gp_new) + s.param_coef * p, s.coef * gp_new + s.update_coef * u};
}

// The scaled update's gradients given du: through g' (du / sqrt(e)) and through the clamped
// estimate e (-du g' / (2 e^1.5), zero where the floor eps1^2 holds it; torch's clamp passes ties).
template <typename T>
FUSED_OPTIM_HOST_DEVICE inline AdafactorPair<T> AdafactorScaledBackward(T du, T g, T estimate,
                                                                        const AdafactorHyper<T>& h) {
  const T q = T(1) / Sqrt(MaxNan(estimate, h.eps1_sq));
  return {du * q, estimate >= h.eps1_sq ? T(-0.5) * du * g * (q * q * q) : T(0)};
}

// Vectors: the gradients of the raw gradient and of the old second moment, given du and the new
// second moment's incoming gradient gv'.
template <typename T>
FUSED_OPTIM_HOST_DEVICE inline AdafactorPair<T> AdafactorVectorDirectionBackward(T du, T gv_new, T grad, T variance,
                                                                                 const AdafactorHyper<T>& h,
                                                                                 const AdafactorStepScalars<T>& s) {
  const T g = MaximizeFlip(grad, h.maximize);
  const T v_new = Lerp(variance, g * g, s.weight, s.lerp_small);
  const AdafactorPair<T> r = AdafactorScaledBackward(du, g, v_new, h);
  const T dv_new = gv_new + r.b;
  return {MaximizeFlip(r.a + T(2) * s.weight * g * dv_new, h.maximize), (T(1) - s.weight) * dv_new};
}

// Matrices: the gradient of the raw gradient through g' / sqrt(e) alone (the op adds the part
// through the row/column means) and the gradient of the estimate e.
template <typename T>
FUSED_OPTIM_HOST_DEVICE inline AdafactorPair<T> AdafactorFactoredDirectionBackward(T du, T grad, T estimate,
                                                                                   const AdafactorHyper<T>& h) {
  const AdafactorPair<T> r = AdafactorScaledBackward(du, MaximizeFlip(grad, h.maximize), estimate, h);
  return {MaximizeFlip(r.a, h.maximize), r.b};
}

}  // namespace fused_optim::math

// The kernel bindings (see common.h): the kernel table's columns and how each element function
// maps them to the math above, shared by the CPU loops and the CUDA kernels.
namespace fused_optim {
namespace adafactor_cols {
enum : int { kGrad, kVariance, kUpdate };  // AdafactorVectorDirection
enum : int { kEstimate = 1 };              // AdafactorFactoredDirection: the estimate becomes the update
enum : int { kParam = 0, kApplyUpdate };   // AdafactorApply (its backward: the standard layout)
enum : int { kFactor = 0, kFactorNorm };   // AdafactorFactors: a row or column average, g's norm along it
// The direction passes' backward: incoming gradients, forward inputs, then outgoing gradients.
enum : int { kGVarianceNew = 0, kDUpdate, kBGrad, kBVariance, kOutGrad, kOutVariance };  // ...VectorDirectionBackward
enum : int { kFUpdate = 0, kFGrad, kFEstimate, kFOutGrad, kFOutEstimate };               // ...FactoredDirectionBackward
// Per-tensor scalars: the second-moment weight t^c (with its lerp form), the length a mean is over
// (the factors pass: a factor's norm's; the factored direction: the rows') and the floor eps1 of
// the estimate's divisor; the apply passes' inputs of AdafactorStepSizeOf other than the norms.
enum : int { kWeight = 0, kSmall, kMeanOver, kFloor, kRho, kRootNumel, kEps2, kClip, kNumScalars };
// The apply passes' state scalars, which they read and never advance: the norms of p and u, and
// the backward's dcoef = sum(gp' u).
enum : int { kParamNorm = 0, kUpdateNorm, kStepSizeGrad, kNumState };
}  // namespace adafactor_cols

namespace bind {

struct Adafactor {
  static constexpr int kNumScalars = adafactor_cols::kNumScalars;
  template <typename T>
  using Hyper = math::AdafactorHyper<T>;
  template <typename T>
  using Scalars = math::AdafactorStepScalars<T>;
  // The entries of a row that come from step count `step`: the second-moment weight t^c (with the
  // form torch's lerp takes for it) and the relative step size rho = min(lr, 1/sqrt(t)). Every
  // pass's row holds them (each reads its own), filled by the host from the count it incremented
  // or, with device step counters (capturable), by the kernel over the host's row, which holds
  // the tensor's other scalars. kStepEntries lists the entries it writes.
  static constexpr int kStepEntries[] = {adafactor_cols::kWeight, adafactor_cols::kSmall, adafactor_cols::kRho};
  FUSED_OPTIM_HOST_DEVICE static void StepEntries(const Hyper<double>& h, double step, double* row) {
    using namespace adafactor_cols;
    const double weight = pow(step, h.beta2_decay);
    row[kWeight] = weight;
    row[kSmall] = fabs(weight) < 0.5 ? 1.0 : 0.0;
    const double inverse_root = 1.0 / sqrt(step);
    row[kRho] = inverse_root < h.lr ? inverse_root : h.lr;  // Python's min(lr, ...): lr on a tie or a NaN
  }
  FUSED_OPTIM_HOST_DEVICE static void StepRow(const Hyper<double>& h, double step, const double* host_row,
                                              double* row) {
    for (int k = 0; k < kNumScalars; ++k) row[k] = host_row[k];
    StepEntries(h, step, row);
  }
  template <typename T>
  FUSED_OPTIM_HOST_DEVICE static Scalars<T> MakeScalars(const double* row) {  // the direction passes'
    using namespace adafactor_cols;
    return {T(row[kWeight]), T(0), T(0), T(0), T(row[kMeanOver]), T(1), row[kSmall] != 0.0};
  }
  // The apply passes': the step size from the norms (and dcoef) where the reductions left them.
  template <typename T, typename StateIO>
  FUSED_OPTIM_HOST_DEVICE static Scalars<T> ApplyScalars(const double* row, const StateIO& state, double dcoef) {
    using namespace adafactor_cols;
    const math::AdafactorStepSize s = math::AdafactorStepSizeOf(state.Load(kParamNorm), state.Load(kUpdateNorm), dcoef,
                                                                row[kRho], row[kRootNumel], row[kEps2], row[kClip]);
    return {T(0), T(s.coef), T(s.update_coef), T(s.param_coef), T(0), T(1), false};
  }
  template <typename T>
  static auto Flags(Hyper<T>& h, Scalars<T>& s) {
    return std::tie(h.maximize, h.has_decay, s.lerp_small);
  }
  // A pass's two results, to their columns.
  template <typename T, typename IO>
  FUSED_OPTIM_ELEMENT static void Store(const IO& io, int a, int b, const math::AdafactorPair<T>& r) {
    io.Store(a, r.a);
    io.Store(b, r.b);
  }
};

// One table per kind of factor (the rows of every matrix, then the columns): the average in place,
// the norm read.
struct AdafactorFactors : Adafactor {
  static constexpr int kLists = 2;
  template <typename T, typename IO>
  FUSED_OPTIM_ELEMENT static void Apply(const IO& io, const Hyper<T>& /*h*/, const Scalars<T>& s) {
    using namespace adafactor_cols;
    io.Store(kFactor, math::AdafactorFactor(io.Load(kFactor), io.Load(kFactorNorm), s));
  }
};

struct AdafactorVectorDirection : Adafactor {
  static constexpr int kLists = 3;
  template <typename T, typename IO>
  FUSED_OPTIM_ELEMENT static void Apply(const IO& io, const Hyper<T>& h, const Scalars<T>& s) {
    using namespace adafactor_cols;
    Store(io, kVariance, kUpdate, math::AdafactorVectorDirection(io.Load(kGrad), io.Load(kVariance), h, s));
  }
};

// Its state scalar, read and never advanced: the sum of a 2-D matrix's row averages (the divisor
// is then their mean floored at eps1), or 0 over mean_over 1 floored at 1 where the op divided.
struct AdafactorFactoredDirection : Adafactor {
  static constexpr int kLists = 2;
  static constexpr int kStateScalars = 1;
  template <typename T, typename StateIO>
  FUSED_OPTIM_HOST_DEVICE static Scalars<T> MakeScalars(const double* row, const StateIO& state) {
    using namespace adafactor_cols;
    Scalars<T> s = Adafactor::MakeScalars<T>(row);
    s.divisor = math::AdafactorDivisor(T(state.Load(0)), T(row[kMeanOver]), T(row[kFloor]));
    return s;
  }
  template <typename T, typename IO>
  FUSED_OPTIM_ELEMENT static void Apply(const IO& io, const Hyper<T>& h, const Scalars<T>& s) {
    using namespace adafactor_cols;
    io.Store(kEstimate, math::AdafactorFactoredDirection(io.Load(kGrad), io.Load(kEstimate), h, s));
  }
};

struct AdafactorApply : Adafactor {
  static constexpr int kLists = 2;
  static constexpr int kStateScalars = adafactor_cols::kStepSizeGrad;  // the two norms
  template <typename T, typename StateIO>
  FUSED_OPTIM_HOST_DEVICE static Scalars<T> MakeScalars(const double* row, const StateIO& state) {
    return ApplyScalars<T>(row, state, 0.0);
  }
  template <typename T, typename IO>
  FUSED_OPTIM_ELEMENT static void Apply(const IO& io, const Hyper<T>& h, const Scalars<T>& s) {
    using namespace adafactor_cols;
    io.Store(kParam, math::AdafactorApply(io.Load(kParam), io.Load(kApplyUpdate), h, s));
  }
};

// The update is the apply pass's read-only input (the grad's place in a step table).
struct AdafactorApplyBackward : Adafactor {
  using C = BackwardOf<AdafactorApply::kLists>;  // the standard layout
  static constexpr int kLists = C::kLists;
  static constexpr int kStateScalars = adafactor_cols::kNumState;  // the norms and dcoef
  template <typename T, typename StateIO>
  FUSED_OPTIM_HOST_DEVICE static Scalars<T> MakeScalars(const double* row, const StateIO& state) {
    return ApplyScalars<T>(row, state, state.Load(adafactor_cols::kStepSizeGrad));
  }
  template <typename T, typename IO>
  FUSED_OPTIM_ELEMENT static void Apply(const IO& io, const Hyper<T>& h, const Scalars<T>& s) {
    using namespace adafactor_cols;
    Store(io, C::Out(kParam), C::Out(kApplyUpdate),
          math::AdafactorApplyBackward(io.Load(C::GradNew(kParam)), io.Load(C::In(kApplyUpdate)),
                                       io.Load(C::In(kParam)), h, s));
  }
};

struct AdafactorVectorDirectionBackward : Adafactor {
  static constexpr int kLists = 6;
  template <typename T, typename IO>
  FUSED_OPTIM_ELEMENT static void Apply(const IO& io, const Hyper<T>& h, const Scalars<T>& s) {
    using namespace adafactor_cols;
    Store(io, kOutGrad, kOutVariance,
          math::AdafactorVectorDirectionBackward(io.Load(kDUpdate), io.Load(kGVarianceNew), io.Load(kBGrad),
                                                 io.Load(kBVariance), h, s));
  }
};

struct AdafactorFactoredDirectionBackward : Adafactor {
  static constexpr int kLists = 5;
  template <typename T, typename IO>
  FUSED_OPTIM_ELEMENT static void Apply(const IO& io, const Hyper<T>& h, const Scalars<T>& /*s*/) {
    using namespace adafactor_cols;
    Store(io, kFOutGrad, kFOutEstimate,
          math::AdafactorFactoredDirectionBackward(io.Load(kFUpdate), io.Load(kFGrad), io.Load(kFEstimate), h));
  }
};

}  // namespace bind
}  // namespace fused_optim
