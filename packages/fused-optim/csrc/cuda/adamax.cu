// CUDA launches for Adamax: indexing and dtype only, math in include/fused_optim/math/adamax.h.
#include "cuda/multi_tensor.cuh"
#include "kernels.h"

namespace fused_optim::cuda {
namespace {

template <typename S, typename T>
struct AdamaxStepOp {
  math::AdamaxHyper<T> h;
  template <int NL>
  __device__ void operator()(const LaunchMeta<NL>& m, int t, int64_t i) const {
    using namespace adamax_cols;
    T p = LoadOr0<T, S>(m.src[kParam][t], i), mi = LoadOr0<T, S>(m.src[kExpAvg][t], i);
    T u = LoadOr0<T, S>(m.src[kExpInf][t], i);
    math::AdamaxStep(p, LoadOr0<T, S>(m.src[kGrad][t], i), mi, u, T(m.scalars[t][kClr]), h);
    StoreIf<S>(m.dst[kParam][t], i, p);
    StoreIf<S>(m.dst[kExpAvg][t], i, mi);
    StoreIf<S>(m.dst[kExpInf][t], i, u);
  }
};

template <typename S, typename T>
struct AdamaxBackwardOp {
  math::AdamaxHyper<T> h;
  template <int NL>
  __device__ void operator()(const LaunchMeta<NL>& m, int t, int64_t i) const {
    using namespace adamax_cols;
    const math::AdamaxGrads<T> r =
        math::AdamaxStepBackward<T>(LoadOr0<T, S>(m.src[kGParamNew][t], i), LoadOr0<T, S>(m.src[kGExpAvgNew][t], i),
                                    LoadOr0<T, S>(m.src[kGExpInfNew][t], i), LoadOr0<T, S>(m.src[kInParam][t], i),
                                    LoadOr0<T, S>(m.src[kInGrad][t], i), LoadOr0<T, S>(m.src[kInExpAvg][t], i),
                                    LoadOr0<T, S>(m.src[kInExpInf][t], i), T(m.scalars[t][kClr]), h);
    StoreIf<S>(m.dst[kOutParam][t], i, r.p);
    StoreIf<S>(m.dst[kOutGrad][t], i, r.grad);
    StoreIf<S>(m.dst[kOutExpAvg][t], i, r.m);
    StoreIf<S>(m.dst[kOutExpInf][t], i, r.u);
  }
};

}  // namespace

void AdamaxStep(const KernelTable& table, const math::AdamaxHyper<double>& hyper) {
  DispatchFloating(table.dtype, [&]<typename S, typename T>() {
    LaunchMultiTensor<4>(table, AdamaxStepOp<S, T>{hyper.template To<T>()}, "adamax step");
  });
}

void AdamaxBackward(const KernelTable& table, const math::AdamaxHyper<double>& hyper) {
  DispatchFloating(table.dtype, [&]<typename S, typename T>() {
    LaunchMultiTensor<11>(table, AdamaxBackwardOp<S, T>{hyper.template To<T>()}, "adamax backward");
  });
}

}  // namespace fused_optim::cuda
