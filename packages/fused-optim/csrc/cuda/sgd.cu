// CUDA launches for SGD: indexing and dtype only, math in include/fused_optim/math/sgd.h.
#include "cuda/multi_tensor.cuh"
#include "kernels.h"

namespace fused_optim::cuda {
namespace {

template <typename S, typename T>
struct SgdStepOp {
  math::SgdHyper<T> h;
  template <int NL>
  __device__ void operator()(const LaunchMeta<NL>& m, int t, int64_t i) const {
    using namespace sgd_cols;
    T p = LoadOr0<T, S>(m.src[kParam][t], i);
    T buf = h.first_step ? T(0) : LoadOr0<T, S>(m.src[kBuf][t], i);
    math::SgdStep(p, LoadOr0<T, S>(m.src[kGrad][t], i), buf, h);
    StoreIf<S>(m.dst[kParam][t], i, p);
    if (h.has_momentum) StoreIf<S>(m.dst[kBuf][t], i, buf);
  }
};

template <typename S, typename T>
struct SgdBackwardOp {
  math::SgdHyper<T> h;
  template <int NL>
  __device__ void operator()(const LaunchMeta<NL>& m, int t, int64_t i) const {
    using namespace sgd_cols;
    const math::SgdGrads<T> r =
        math::SgdStepBackward<T>(LoadOr0<T, S>(m.src[kGParamNew][t], i), LoadOr0<T, S>(m.src[kGBufNew][t], i), h);
    StoreIf<S>(m.dst[kOutParam][t], i, r.p);
    StoreIf<S>(m.dst[kOutGrad][t], i, r.grad);
    StoreIf<S>(m.dst[kOutBuf][t], i, r.buf);
  }
};

}  // namespace

void SgdStep(const KernelTable& table, const math::SgdHyper<double>& hyper) {
  DispatchFloating(table.dtype, [&]<typename S, typename T>() {
    LaunchMultiTensor<3>(table, SgdStepOp<S, T>{hyper.template To<T>()}, "sgd step");
  });
}

void SgdBackward(const KernelTable& table, const math::SgdHyper<double>& hyper) {
  DispatchFloating(table.dtype, [&]<typename S, typename T>() {
    LaunchMultiTensor<5>(table, SgdBackwardOp<S, T>{hyper.template To<T>()}, "sgd backward");
  });
}

}  // namespace fused_optim::cuda
