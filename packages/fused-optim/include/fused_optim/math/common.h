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

// The gradient after the `maximize` flip and L2 weight decay folded into it.
template <typename T>
FUSED_OPTIM_HOST_DEVICE inline T EffectiveGrad(T grad, T param, bool maximize, bool has_l2, T weight_decay) {
  T g = maximize ? -grad : grad;
  return has_l2 ? g + weight_decay * param : g;
}

}  // namespace fused_optim::math

// What a kernel binding is: the one place that maps a kernel table's columns (csrc/kernels.h) to
// an algorithm's math, read by the CPU loop (csrc/cpu/kernels.cpp) and the CUDA kernel
// (csrc/cuda/kernels.cu) alike. A binding K (fused_optim::bind::<Name>) has
//
//   K::Hyper<T>                 the hyper-parameter struct (kernels receive it in double);
//   K::Scalars<T>, MakeScalars  the per-tensor scalars (e.g. bias corrections) from a table row;
//   K::Flags(h, s)              the boolean options, as std::tie of references: the CPU loops
//                               compile one loop per combination of them;
//   K::kLists, K::Apply(io, h, s)  the column count and the element function (FUSED_OPTIM_ELEMENT),
//                               which reads a column with io.Load(col) and writes one with
//                               io.Store(col, value).
//
// An absent optional column loads as zero and a store to it is dropped. A backward binding derives
// from its step's binding, whose Hyper, Scalars and Flags it shares.

// Element functions are always inlined into the loop that runs them: a call left in a CPU loop
// stops it from vectorizing (and the loops are built for wider ISAs than this header, which
// gcc's own inlining heuristics would not cross).
#if defined(__CUDACC__)
#define FUSED_OPTIM_ELEMENT __host__ __device__ __forceinline__
#else
#define FUSED_OPTIM_ELEMENT __attribute__((always_inline, flatten)) inline
#endif

namespace fused_optim::bind {

// For algorithms without per-tensor scalars.
struct NoScalars {
  template <typename T>
  struct Scalars {};
  template <typename T>
  FUSED_OPTIM_HOST_DEVICE static Scalars<T> MakeScalars(const double* /*row*/) {
    return {};
  }
};

}  // namespace fused_optim::bind
