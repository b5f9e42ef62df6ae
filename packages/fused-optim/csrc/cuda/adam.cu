// CUDA launches for Adam/AdamW and the Adam direction: indexing and dtype only, math in
// include/fused_optim/math/adam.h.
#include "cuda/multi_tensor.cuh"
#include "kernels.h"

namespace fused_optim::cuda {
namespace {

template <typename S, typename T>
struct AdamStepOp {
  math::AdamHyper<T> h;
  template <int NL>
  __device__ void operator()(const LaunchMeta<NL>& m, int t, int64_t i) const {
    using namespace adam_cols;
    const math::AdamStepScalars<T> s{T(m.scalars[t][kStepSize]), T(m.scalars[t][kBc2Sqrt])};
    T p = LoadOr0<T, S>(m.src[kParam][t], i), mi = LoadOr0<T, S>(m.src[kExpAvg][t], i);
    T v = LoadOr0<T, S>(m.src[kExpAvgSq][t], i), vmax = LoadOr0<T, S>(m.src[kMaxExpAvgSq][t], i);
    math::AdamStep(p, LoadOr0<T, S>(m.src[kGrad][t], i), mi, v, vmax, h, s);
    StoreIf<S>(m.dst[kParam][t], i, p);
    StoreIf<S>(m.dst[kExpAvg][t], i, mi);
    StoreIf<S>(m.dst[kExpAvgSq][t], i, v);
    if (h.amsgrad) StoreIf<S>(m.dst[kMaxExpAvgSq][t], i, vmax);
  }
};

template <typename S, typename T>
struct AdamBackwardOp {
  math::AdamHyper<T> h;
  template <int NL>
  __device__ void operator()(const LaunchMeta<NL>& m, int t, int64_t i) const {
    using namespace adam_cols;
    const math::AdamStepScalars<T> s{T(m.scalars[t][kStepSize]), T(m.scalars[t][kBc2Sqrt])};
    const math::AdamGrads<T> r =
        math::AdamStepBackward<T>(LoadOr0<T, S>(m.src[kGParamNew][t], i), LoadOr0<T, S>(m.src[kGExpAvgNew][t], i),
                                  LoadOr0<T, S>(m.src[kGExpAvgSqNew][t], i), LoadOr0<T, S>(m.src[kGMaxNew][t], i),
                                  LoadOr0<T, S>(m.src[kInParam][t], i), LoadOr0<T, S>(m.src[kInGrad][t], i),
                                  LoadOr0<T, S>(m.src[kInExpAvg][t], i), LoadOr0<T, S>(m.src[kInExpAvgSq][t], i),
                                  LoadOr0<T, S>(m.src[kInMax][t], i), h, s);
    StoreIf<S>(m.dst[kOutParam][t], i, r.p);
    StoreIf<S>(m.dst[kOutGrad][t], i, r.grad);
    StoreIf<S>(m.dst[kOutExpAvg][t], i, r.m);
    StoreIf<S>(m.dst[kOutExpAvgSq][t], i, r.v);
    StoreIf<S>(m.dst[kOutMax][t], i, r.vmax);
  }
};

template <typename S, typename T>
struct AdamDirectionOp {
  math::AdamDirectionHyper<T> h;
  template <int NL>
  __device__ void operator()(const LaunchMeta<NL>& m, int t, int64_t i) const {
    using namespace adam_direction_cols;
    T mi = LoadOr0<T, S>(m.src[kExpAvg][t], i), v = LoadOr0<T, S>(m.src[kExpAvgSq][t], i);
    const T d = math::AdamDirection(LoadOr0<T, S>(m.src[kGrad][t], i), mi, v, h);
    StoreIf<S>(m.dst[kExpAvg][t], i, mi);
    StoreIf<S>(m.dst[kExpAvgSq][t], i, v);
    StoreIf<S>(m.dst[kDirection][t], i, d);
  }
};

template <typename S, typename T>
struct AdamDirectionBackwardOp {
  math::AdamDirectionHyper<T> h;
  template <int NL>
  __device__ void operator()(const LaunchMeta<NL>& m, int t, int64_t i) const {
    using namespace adam_direction_cols;
    const math::AdamDirectionGrads<T> r = math::AdamDirectionBackward<T>(
        LoadOr0<T, S>(m.src[kGDirection][t], i), LoadOr0<T, S>(m.src[kGExpAvgNew][t], i),
        LoadOr0<T, S>(m.src[kGExpAvgSqNew][t], i), LoadOr0<T, S>(m.src[kInGrad][t], i),
        LoadOr0<T, S>(m.src[kInExpAvg][t], i), LoadOr0<T, S>(m.src[kInExpAvgSq][t], i), h);
    StoreIf<S>(m.dst[kOutGrad][t], i, r.grad);
    StoreIf<S>(m.dst[kOutExpAvg][t], i, r.m);
    StoreIf<S>(m.dst[kOutExpAvgSq][t], i, r.v);
  }
};

}  // namespace

void AdamStep(const KernelTable& table, const math::AdamHyper<double>& hyper) {
  DispatchFloating(table.dtype, [&]<typename S, typename T>() {
    LaunchMultiTensor<5>(table, AdamStepOp<S, T>{hyper.template To<T>()}, "adam step");
  });
}

void AdamBackward(const KernelTable& table, const math::AdamHyper<double>& hyper) {
  DispatchFloating(table.dtype, [&]<typename S, typename T>() {
    LaunchMultiTensor<14>(table, AdamBackwardOp<S, T>{hyper.template To<T>()}, "adam backward");
  });
}

void AdamDirection(const KernelTable& table, const math::AdamDirectionHyper<double>& hyper) {
  DispatchFloating(table.dtype, [&]<typename S, typename T>() {
    LaunchMultiTensor<4>(table, AdamDirectionOp<S, T>{hyper.template To<T>()}, "adam direction");
  });
}

void AdamDirectionBackward(const KernelTable& table, const math::AdamDirectionHyper<double>& hyper) {
  DispatchFloating(table.dtype, [&]<typename S, typename T>() {
    LaunchMultiTensor<9>(table, AdamDirectionBackwardOp<S, T>{hyper.template To<T>()}, "adam direction backward");
  });
}

}  // namespace fused_optim::cuda
