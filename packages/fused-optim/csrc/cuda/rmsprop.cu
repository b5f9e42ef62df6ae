// CUDA launches for RMSprop: indexing and dtype only, math in include/fused_optim/math/rmsprop.h.
#include "cuda/multi_tensor.cuh"
#include "kernels.h"

namespace fused_optim::cuda {
namespace {

template <typename S, typename T>
struct RmspropStepOp {
  math::RmspropHyper<T> h;
  template <int NL>
  __device__ void operator()(const LaunchMeta<NL>& m, int t, int64_t i) const {
    using namespace rmsprop_cols;
    T p = LoadOr0<T, S>(m.src[kParam][t], i), v = LoadOr0<T, S>(m.src[kSquareAvg][t], i);
    T ga = LoadOr0<T, S>(m.src[kGradAvg][t], i), buf = LoadOr0<T, S>(m.src[kBuf][t], i);
    math::RmspropStep(p, LoadOr0<T, S>(m.src[kGrad][t], i), v, ga, buf, h);
    StoreIf<S>(m.dst[kParam][t], i, p);
    StoreIf<S>(m.dst[kSquareAvg][t], i, v);
    StoreIf<S>(m.dst[kGradAvg][t], i, ga);
    StoreIf<S>(m.dst[kBuf][t], i, buf);
  }
};

template <typename S, typename T>
struct RmspropBackwardOp {
  math::RmspropHyper<T> h;
  template <int NL>
  __device__ void operator()(const LaunchMeta<NL>& m, int t, int64_t i) const {
    using namespace rmsprop_cols;
    const math::RmspropGrads<T> r = math::RmspropStepBackward<T>(
        LoadOr0<T, S>(m.src[kGParamNew][t], i), LoadOr0<T, S>(m.src[kGSquareAvgNew][t], i),
        LoadOr0<T, S>(m.src[kGGradAvgNew][t], i), LoadOr0<T, S>(m.src[kGBufNew][t], i),
        LoadOr0<T, S>(m.src[kInParam][t], i), LoadOr0<T, S>(m.src[kInGrad][t], i),
        LoadOr0<T, S>(m.src[kInSquareAvg][t], i), LoadOr0<T, S>(m.src[kInGradAvg][t], i), h);
    StoreIf<S>(m.dst[kOutParam][t], i, r.p);
    StoreIf<S>(m.dst[kOutGrad][t], i, r.grad);
    StoreIf<S>(m.dst[kOutSquareAvg][t], i, r.v);
    StoreIf<S>(m.dst[kOutGradAvg][t], i, r.grad_avg);
    StoreIf<S>(m.dst[kOutBuf][t], i, r.buf);
  }
};

}  // namespace

void RmspropStep(const KernelTable& table, const math::RmspropHyper<double>& hyper) {
  DispatchFloating(table.dtype, [&]<typename S, typename T>() {
    LaunchMultiTensor<5>(table, RmspropStepOp<S, T>{hyper.template To<T>()}, "rmsprop step");
  });
}

void RmspropBackward(const KernelTable& table, const math::RmspropHyper<double>& hyper) {
  DispatchFloating(table.dtype, [&]<typename S, typename T>() {
    LaunchMultiTensor<13>(table, RmspropBackwardOp<S, T>{hyper.template To<T>()}, "rmsprop backward");
  });
}

}  // namespace fused_optim::cuda
