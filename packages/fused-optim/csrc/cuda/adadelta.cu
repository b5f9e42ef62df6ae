// CUDA launches for Adadelta: indexing and dtype only, math in include/fused_optim/math/adadelta.h.
#include "cuda/multi_tensor.cuh"
#include "kernels.h"

namespace fused_optim::cuda {
namespace {

template <typename S, typename T>
struct AdadeltaStepOp {
  math::AdadeltaHyper<T> h;
  template <int NL>
  __device__ void operator()(const LaunchMeta<NL>& m, int t, int64_t i) const {
    using namespace adadelta_cols;
    T p = LoadOr0<T, S>(m.src[kParam][t], i), v = LoadOr0<T, S>(m.src[kSquareAvg][t], i);
    T u = LoadOr0<T, S>(m.src[kAccDelta][t], i);
    math::AdadeltaStep(p, LoadOr0<T, S>(m.src[kGrad][t], i), v, u, h);
    StoreIf<S>(m.dst[kParam][t], i, p);
    StoreIf<S>(m.dst[kSquareAvg][t], i, v);
    StoreIf<S>(m.dst[kAccDelta][t], i, u);
  }
};

template <typename S, typename T>
struct AdadeltaBackwardOp {
  math::AdadeltaHyper<T> h;
  template <int NL>
  __device__ void operator()(const LaunchMeta<NL>& m, int t, int64_t i) const {
    using namespace adadelta_cols;
    const math::AdadeltaGrads<T> r = math::AdadeltaStepBackward<T>(
        LoadOr0<T, S>(m.src[kGParamNew][t], i), LoadOr0<T, S>(m.src[kGSquareAvgNew][t], i),
        LoadOr0<T, S>(m.src[kGAccDeltaNew][t], i), LoadOr0<T, S>(m.src[kInParam][t], i),
        LoadOr0<T, S>(m.src[kInGrad][t], i), LoadOr0<T, S>(m.src[kInSquareAvg][t], i),
        LoadOr0<T, S>(m.src[kInAccDelta][t], i), h);
    StoreIf<S>(m.dst[kOutParam][t], i, r.p);
    StoreIf<S>(m.dst[kOutGrad][t], i, r.grad);
    StoreIf<S>(m.dst[kOutSquareAvg][t], i, r.v);
    StoreIf<S>(m.dst[kOutAccDelta][t], i, r.u);
  }
};

}  // namespace

void AdadeltaStep(const KernelTable& table, const math::AdadeltaHyper<double>& hyper) {
  DispatchFloating(table.dtype, [&]<typename S, typename T>() {
    LaunchMultiTensor<4>(table, AdadeltaStepOp<S, T>{hyper.template To<T>()}, "adadelta step");
  });
}

void AdadeltaBackward(const KernelTable& table, const math::AdadeltaHyper<double>& hyper) {
  DispatchFloating(table.dtype, [&]<typename S, typename T>() {
    LaunchMultiTensor<11>(table, AdadeltaBackwardOp<S, T>{hyper.template To<T>()}, "adadelta backward");
  });
}

}  // namespace fused_optim::cuda
