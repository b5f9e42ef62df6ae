// CUDA launches for Adagrad: indexing and dtype only, math in include/fused_optim/math/adagrad.h.
#include "cuda/multi_tensor.cuh"
#include "kernels.h"

namespace fused_optim::cuda {
namespace {

template <typename S, typename T>
struct AdagradStepOp {
  math::AdagradHyper<T> h;
  template <int NL>
  __device__ void operator()(const LaunchMeta<NL>& m, int t, int64_t i) const {
    using namespace adagrad_cols;
    T p = LoadOr0<T, S>(m.src[kParam][t], i), sum = LoadOr0<T, S>(m.src[kSum][t], i);
    math::AdagradStep(p, LoadOr0<T, S>(m.src[kGrad][t], i), sum, T(m.scalars[t][kClr]), h);
    StoreIf<S>(m.dst[kParam][t], i, p);
    StoreIf<S>(m.dst[kSum][t], i, sum);
  }
};

template <typename S, typename T>
struct AdagradBackwardOp {
  math::AdagradHyper<T> h;
  template <int NL>
  __device__ void operator()(const LaunchMeta<NL>& m, int t, int64_t i) const {
    using namespace adagrad_cols;
    const math::AdagradGrads<T> r =
        math::AdagradStepBackward<T>(LoadOr0<T, S>(m.src[kGParamNew][t], i), LoadOr0<T, S>(m.src[kGSumNew][t], i),
                                     LoadOr0<T, S>(m.src[kInParam][t], i), LoadOr0<T, S>(m.src[kInGrad][t], i),
                                     LoadOr0<T, S>(m.src[kInSum][t], i), T(m.scalars[t][kClr]), h);
    StoreIf<S>(m.dst[kOutParam][t], i, r.p);
    StoreIf<S>(m.dst[kOutGrad][t], i, r.grad);
    StoreIf<S>(m.dst[kOutSum][t], i, r.sum);
  }
};

}  // namespace

void AdagradStep(const KernelTable& table, const math::AdagradHyper<double>& hyper) {
  DispatchFloating(table.dtype, [&]<typename S, typename T>() {
    LaunchMultiTensor<3>(table, AdagradStepOp<S, T>{hyper.template To<T>()}, "adagrad step");
  });
}

void AdagradBackward(const KernelTable& table, const math::AdagradHyper<double>& hyper) {
  DispatchFloating(table.dtype, [&]<typename S, typename T>() {
    LaunchMultiTensor<8>(table, AdagradBackwardOp<S, T>{hyper.template To<T>()}, "adagrad backward");
  });
}

}  // namespace fused_optim::cuda
