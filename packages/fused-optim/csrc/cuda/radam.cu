// CUDA launches for RAdam: indexing and dtype only, math in include/fused_optim/math/radam.h.
#include "cuda/multi_tensor.cuh"
#include "kernels.h"

namespace fused_optim::cuda {
namespace {

template <typename T, int NL>
__device__ __forceinline__ math::RadamStepScalars<T> StepScalars(const LaunchMeta<NL>& m, int t) {
  using namespace radam_cols;
  return {T(m.scalars[t][kBc1]), T(m.scalars[t][kBc2Sqrt]), T(m.scalars[t][kRect]), m.scalars[t][kAdaptive] != 0.0};
}

template <typename S, typename T>
struct RadamStepOp {
  math::RadamHyper<T> h;
  template <int NL>
  __device__ void operator()(const LaunchMeta<NL>& m, int t, int64_t i) const {
    using namespace radam_cols;
    T p = LoadOr0<T, S>(m.src[kParam][t], i), mi = LoadOr0<T, S>(m.src[kExpAvg][t], i);
    T v = LoadOr0<T, S>(m.src[kExpAvgSq][t], i);
    math::RadamStep(p, LoadOr0<T, S>(m.src[kGrad][t], i), mi, v, h, StepScalars<T>(m, t));
    StoreIf<S>(m.dst[kParam][t], i, p);
    StoreIf<S>(m.dst[kExpAvg][t], i, mi);
    StoreIf<S>(m.dst[kExpAvgSq][t], i, v);
  }
};

template <typename S, typename T>
struct RadamBackwardOp {
  math::RadamHyper<T> h;
  template <int NL>
  __device__ void operator()(const LaunchMeta<NL>& m, int t, int64_t i) const {
    using namespace radam_cols;
    const math::RadamGrads<T> r =
        math::RadamStepBackward<T>(LoadOr0<T, S>(m.src[kGParamNew][t], i), LoadOr0<T, S>(m.src[kGExpAvgNew][t], i),
                                   LoadOr0<T, S>(m.src[kGExpAvgSqNew][t], i), LoadOr0<T, S>(m.src[kInParam][t], i),
                                   LoadOr0<T, S>(m.src[kInGrad][t], i), LoadOr0<T, S>(m.src[kInExpAvg][t], i),
                                   LoadOr0<T, S>(m.src[kInExpAvgSq][t], i), h, StepScalars<T>(m, t));
    StoreIf<S>(m.dst[kOutParam][t], i, r.p);
    StoreIf<S>(m.dst[kOutGrad][t], i, r.grad);
    StoreIf<S>(m.dst[kOutExpAvg][t], i, r.m);
    StoreIf<S>(m.dst[kOutExpAvgSq][t], i, r.v);
  }
};

}  // namespace

void RadamStep(const KernelTable& table, const math::RadamHyper<double>& hyper) {
  DispatchFloating(table.dtype, [&]<typename S, typename T>() {
    LaunchMultiTensor<4>(table, RadamStepOp<S, T>{hyper.template To<T>()}, "radam step");
  });
}

void RadamBackward(const KernelTable& table, const math::RadamHyper<double>& hyper) {
  DispatchFloating(table.dtype, [&]<typename S, typename T>() {
    LaunchMultiTensor<11>(table, RadamBackwardOp<S, T>{hyper.template To<T>()}, "radam backward");
  });
}

}  // namespace fused_optim::cuda
