// Building blocks shared by every optimizer's element-wise math, host and device alike, and the
// contract of a kernel binding (the section closing each math/<algo>.h).
#pragma once

#include <math.h>

#include <tuple>

#if defined(__CUDACC__) || defined(__HIPCC__)
#define FUSED_OPTIM_HOST_DEVICE __host__ __device__
#elif defined(__GNUC__)
// Always inlined on the host: the CPU loops vectorize only once every call in them is inlined,
// and gcc's size heuristics give up on the larger backward functions otherwise.
#define FUSED_OPTIM_HOST_DEVICE __attribute__((always_inline))
#else
#define FUSED_OPTIM_HOST_DEVICE
#endif

namespace fused_optim::math {

// Options arrive as run-time flags but are written as selects (c ? a : b), never as if-blocks:
// both sides are cheap, and branch-free bodies let the compiler vectorize the CPU loops.

FUSED_OPTIM_HOST_DEVICE inline float Sqrt(float x) { return sqrtf(x); }
FUSED_OPTIM_HOST_DEVICE inline double Sqrt(double x) { return sqrt(x); }

template <typename T>
FUSED_OPTIM_HOST_DEVICE inline T Abs(T x) {
  return x < T(0) ? -x : x;  // NaN stays NaN: the comparison is false
}

// sign(x) with sign(0) == 0, the subgradient autograd uses for abs().
template <typename T>
FUSED_OPTIM_HOST_DEVICE inline T Sign(T x) {
  return T(x > T(0)) - T(x < T(0));
}

// max that propagates NaN from either side, like torch.maximum. Branch-free (bitwise |) so CPU
// loops stay vectorizable.
template <typename T>
FUSED_OPTIM_HOST_DEVICE inline T MaxNan(T a, T b) {
  return ((a > b) | (a != a)) ? a : b;
}

// Linear interpolation self + w * (end - self), written from the end point when w is large
// so that w == 1 returns end exactly (the formula torch.lerp uses).
// `small` must be |w| < 0.5; callers pass it precomputed so a loop can fix the formula once.
template <typename T>
FUSED_OPTIM_HOST_DEVICE inline T Lerp(T self, T end, T w, bool small) {
  return small ? self + w * (end - self) : end - (end - self) * (T(1) - w);
}

// Gradient of sqrt(x) scaled by an upstream gradient: upstream / (2 sqrt(x)) where the
// root is passed in. A zero upstream gives zero even at x == 0, where the product
// 0 * inf would be NaN: that 0/0 is the case where the forward value cannot depend on x.
template <typename T>
FUSED_OPTIM_HOST_DEVICE inline T SqrtBackward(T upstream, T root) {
  return upstream == T(0) ? T(0) : upstream / (T(2) * root);
}

// Splits the gradient of max(a, b) between its arguments: all to the larger one, half each on
// a tie (torch.maximum's convention). Returns the share of `a`; b gets upstream minus it.
template <typename T>
FUSED_OPTIM_HOST_DEVICE inline T MaxBackwardShareOfFirst(T upstream, T a, T b) {
  const T share = a > b ? T(1) : (a < b ? T(0) : T(0.5));
  return upstream * share;
}

// The `maximize` flip: a maximized objective's gradient is negated. The flip is its own backward.
template <typename T>
FUSED_OPTIM_HOST_DEVICE inline T MaximizeFlip(T x, bool maximize) {
  return maximize ? -x : x;
}

// The gradient after the `maximize` flip and L2 weight decay folded into it.
template <typename T>
FUSED_OPTIM_HOST_DEVICE inline T EffectiveGrad(T grad, T param, bool maximize, bool has_l2, T weight_decay) {
  T g = MaximizeFlip(grad, maximize);
  return has_l2 ? g + weight_decay * param : g;
}

// EffectiveGrad's backward, into a gradient struct `out`: out.grad from dg (the gradient reaching
// g'), and out.p = gp (the gradient reaching param by its other paths) plus the L2 term's share.
template <typename T, typename Grads, typename Hyper>
FUSED_OPTIM_HOST_DEVICE inline void EffectiveGradBackward(Grads& out, T gp, T dg, const Hyper& h) {
  out.p = gp + (h.has_l2 ? h.weight_decay * dg : T(0));
  out.grad = MaximizeFlip(dg, h.maximize);
}

// The Adam family (Adam, NAdam, RAdam) shares its hyper-parameters, its moment updates and their
// backward; each algorithm adds only how the moments move the parameter.
template <typename T>
struct AdamFamilyHyper {
  T lr, beta1, beta2, eps, weight_decay;
  T decay;                             // 1 - lr * weight_decay, the decoupled shrink factor
  T one_minus_beta1, one_minus_beta2;  // complements taken in double, as torch.optim takes them
  bool maximize, has_l2, has_decay, lerp_small;
  // From torch.optim's arguments (on the host, once the op has checked them).
  static AdamFamilyHyper Make(T lr, T beta1, T beta2, T eps, T weight_decay, bool decoupled, bool maximize) {
    const T omb1 = T(1) - beta1;
    return {lr,
            beta1,
            beta2,
            eps,
            weight_decay,
            T(1) - lr * weight_decay,
            omb1,
            T(1) - beta2,
            maximize,
            weight_decay != T(0) && !decoupled,
            weight_decay != T(0) && decoupled,
            Abs(omb1) < T(0.5)};
  }
  // The same hyper-parameters in another math type (kernels receive them in double).
  template <typename U>
  FUSED_OPTIM_HOST_DEVICE AdamFamilyHyper<U> To() const {
    return {U(lr),    U(beta1), U(beta2),  U(eps),    U(weight_decay), U(decay), U(one_minus_beta1), U(one_minus_beta2),
            maximize, has_l2,   has_decay, lerp_small};
  }
};

// The gradient the moments see (the maximize flip, L2 decay folded in) and the new moments
//   m' = lerp(m, g, 1 - b1),  v' = b2 v + (1 - b2) g^2   (torch.optim's operation order).
template <typename T>
struct AdamMoments {
  T g, m, v;
};
template <typename T>
FUSED_OPTIM_HOST_DEVICE inline AdamMoments<T> UpdateMoments(T grad, T p, T m, T v, const AdamFamilyHyper<T>& h) {
  const T g = EffectiveGrad(grad, p, h.maximize, h.has_l2, h.weight_decay);
  return {g, Lerp(m, g, h.one_minus_beta1, h.lerp_small), v * h.beta2 + h.one_minus_beta2 * g * g};
}

// Their backward, and the weight decay's: the gradients of (p, grad, m, v) from those reaching
// p' directly (gp_new), g other than through the moments (dg_direct) and the new moments.
template <typename T>
struct AdamMomentGrads {
  T p, grad, m, v;
};
template <typename T>
FUSED_OPTIM_HOST_DEVICE inline AdamMomentGrads<T> UpdateMomentsBackward(T gp_new, T dg_direct, T dm_new, T dv_new, T g,
                                                                        const AdamFamilyHyper<T>& h) {
  const T dg = dg_direct + h.one_minus_beta1 * dm_new + T(2) * h.one_minus_beta2 * g * dv_new;
  AdamMomentGrads<T> out{};
  out.m = h.beta1 * dm_new;
  out.v = h.beta2 * dv_new;
  EffectiveGradBackward(out, h.has_decay ? h.decay * gp_new : gp_new, dg, h);
  return out;
}

}  // namespace fused_optim::math

// What a kernel binding is: the one place that maps a kernel table's columns (csrc/kernels.h) to
// an algorithm's math, read by the CPU loop (csrc/cpu/kernels.cpp) and the CUDA kernel
// (csrc/cuda/kernels.cu) alike. A binding K (fused_optim::bind::<Name>) has
//
//   K::Hyper<T>                 the hyper-parameter struct (kernels receive it in double);
//   K::Scalars<T>, MakeScalars  the per-tensor scalars (e.g. bias corrections) from a table row;
//   K::kNumScalars              that row's length (the table's num_scalars; with the lists and state
//                               scalars, it sizes the binding's CUDA launch argument);
//   K::kStateScalars            (optional) how many one-element state tensors per parameter (ASGD's
//                               eta, mu and step) the kernels read and advance themselves, where
//                               they live: MakeScalars(row, state) then reads them through
//                               state.Load(k), and Advance(row, state) writes their new values after
//                               the update (csrc/kernels.h's StateIO); a binding without Advance
//                               only reads them (Adafactor's apply passes: the op's norms);
//   K::Flags(h, s)              the boolean options, as std::tie of references: the CPU loops
//                               compile one loop per combination of them;
//   K::kLists, K::Apply(io, h, s)  the column count and the element function (FUSED_OPTIM_ELEMENT),
//                               which reads a column with io.Load(col) and writes one with
//                               io.Store(col, value).
//
// An absent optional column loads as zero and a store to it is dropped. Which columns Apply loads
// and stores depends on the flags alone, never on the data, and it never loads a column after
// storing it: the CPU loops of 16-bit tensors ask Apply once which columns it uses, and the CUDA
// kernel keeps a group of elements in registers (csrc/cuda/launch_plan.h; its emulation checks
// both). A backward binding derives from its step's binding, whose Hyper, Scalars and Flags it
// shares.

// Element functions are always inlined into the loop that runs them: a call left in a CPU loop
// stops it from vectorizing (and the loops are built for wider ISAs than this header, which
// gcc's own inlining heuristics would not cross).
#if defined(__CUDACC__)
#define FUSED_OPTIM_ELEMENT __host__ __device__ __forceinline__
#else
#define FUSED_OPTIM_ELEMENT __attribute__((always_inline, flatten)) inline
#endif

// The step table of the Adam-family algorithms without further state (NAdam, RAdam).
namespace fused_optim::adam_family_cols {
enum : int { kParam, kGrad, kExpAvg, kExpAvgSq };
}  // namespace fused_optim::adam_family_cols

namespace fused_optim::bind {

// The columns of a backward table in the standard order (the order the ops' UpdateBackward adds
// them in), from those of its step's N lists (param, grad, then the states): the gradients
// reaching the step's results (every column but grad), the step's inputs, then their gradients.
template <int N>
struct BackwardOf {
  static constexpr int kLists = 3 * N - 1;
  FUSED_OPTIM_HOST_DEVICE static constexpr int GradNew(int col) { return col == 0 ? 0 : col - 1; }  // col != grad
  FUSED_OPTIM_HOST_DEVICE static constexpr int In(int col) { return N - 1 + col; }
  FUSED_OPTIM_HOST_DEVICE static constexpr int Out(int col) { return 2 * N - 1 + col; }
};

// The step and backward bindings of an Adam-family algorithm whose step table is adam_family_cols
// and whose backward has the standard layout, from its base binding A: Hyper, Scalars, MakeScalars
// and Flags, and its math as A::Step(p, grad, m, v, h, s) (in place) and
// A::StepBackward(gp', gm', gv', p, grad, m, v, h, s) (returning math::AdamMomentGrads).
template <typename A>
struct AdamFamilyStep : A {
  static constexpr int kLists = 4;
  template <typename T, typename IO>
  FUSED_OPTIM_ELEMENT static void Apply(const IO& io, const typename A::template Hyper<T>& h,
                                        const typename A::template Scalars<T>& s) {
    using namespace adam_family_cols;
    T p = io.Load(kParam), m = io.Load(kExpAvg), v = io.Load(kExpAvgSq);
    A::Step(p, io.Load(kGrad), m, v, h, s);
    io.Store(kParam, p);
    io.Store(kExpAvg, m);
    io.Store(kExpAvgSq, v);
  }
};
template <typename A>
struct AdamFamilyBackward : A {
  using C = BackwardOf<AdamFamilyStep<A>::kLists>;
  static constexpr int kLists = C::kLists;
  template <typename T, typename IO>
  FUSED_OPTIM_ELEMENT static void Apply(const IO& io, const typename A::template Hyper<T>& h,
                                        const typename A::template Scalars<T>& s) {
    using namespace adam_family_cols;
    const math::AdamMomentGrads<T> r = A::StepBackward(
        io.Load(C::GradNew(kParam)), io.Load(C::GradNew(kExpAvg)), io.Load(C::GradNew(kExpAvgSq)),
        io.Load(C::In(kParam)), io.Load(C::In(kGrad)), io.Load(C::In(kExpAvg)), io.Load(C::In(kExpAvgSq)), h, s);
    io.Store(C::Out(kParam), r.p);
    io.Store(C::Out(kGrad), r.grad);
    io.Store(C::Out(kExpAvg), r.m);
    io.Store(C::Out(kExpAvgSq), r.v);
  }
};

// For algorithms whose one per-tensor scalar is a step size (`clr`) from the tensor's step count.
struct StepSizeScalar {
  static constexpr int kNumScalars = 1;
  template <typename T>
  struct Scalars {
    T clr;
  };
  template <typename T>
  FUSED_OPTIM_HOST_DEVICE static Scalars<T> MakeScalars(const double* row) {
    return {T(row[0])};
  }
};

// For algorithms without per-tensor scalars.
struct NoScalars {
  static constexpr int kNumScalars = 0;
  template <typename T>
  struct Scalars {};
  template <typename T>
  FUSED_OPTIM_HOST_DEVICE static Scalars<T> MakeScalars(const double* /*row*/) {
    return {};
  }
};

}  // namespace fused_optim::bind
