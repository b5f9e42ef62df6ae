// CPU loops for Adadelta: indexing and dtype only, math in include/fused_optim/math/adadelta.h.
#include "cpu/for_each_chunk.h"
#include "kernels.h"

namespace fused_optim::cpu {

void AdadeltaStep(const KernelTable& table, const math::AdadeltaHyper<double>& hyper) {
  using namespace adadelta_cols;
  DispatchFloating(table.dtype, [&]<typename scalar_t, typename T>() {
    const math::AdadeltaHyper<T> h0 = hyper.template To<T>();
    ForEachChunk<scalar_t>(table, [&](int64_t t, int64_t begin, int64_t end) {
      const math::AdadeltaHyper<T> h = h0;
      scalar_t* __restrict__ p = table.Dst<scalar_t>(t, kParam);
      const scalar_t* __restrict__ g = table.Src<scalar_t>(t, kGrad);
      scalar_t* __restrict__ v = table.Dst<scalar_t>(t, kSquareAvg);
      scalar_t* __restrict__ u = table.Dst<scalar_t>(t, kAccDelta);
      for (int64_t i = begin; i < end; ++i) {
        T pi = p[i], vi = v[i], ui = u[i];
        math::AdadeltaStep(pi, static_cast<T>(g[i]), vi, ui, h);
        p[i] = pi, v[i] = vi, u[i] = ui;
      }
    });
  });
}

void AdadeltaBackward(const KernelTable& table, const math::AdadeltaHyper<double>& hyper) {
  using namespace adadelta_cols;
  DispatchFloating(table.dtype, [&]<typename scalar_t, typename T>() {
    const math::AdadeltaHyper<T> h0 = hyper.template To<T>();
    ForEachChunk<scalar_t>(table, [&](int64_t t, int64_t begin, int64_t end) {
      const math::AdadeltaHyper<T> h = h0;
      const scalar_t* __restrict__ gp = table.Src<scalar_t>(t, kGParamNew);
      const scalar_t* __restrict__ gv = table.Src<scalar_t>(t, kGSquareAvgNew);
      const scalar_t* __restrict__ gu = table.Src<scalar_t>(t, kGAccDeltaNew);
      const scalar_t* __restrict__ p = table.Src<scalar_t>(t, kInParam);
      const scalar_t* __restrict__ g = table.Src<scalar_t>(t, kInGrad);
      const scalar_t* __restrict__ v = table.Src<scalar_t>(t, kInSquareAvg);
      const scalar_t* __restrict__ u = table.Src<scalar_t>(t, kInAccDelta);
      scalar_t* __restrict__ dp = table.Dst<scalar_t>(t, kOutParam);
      scalar_t* __restrict__ dg = table.Dst<scalar_t>(t, kOutGrad);
      scalar_t* __restrict__ dv = table.Dst<scalar_t>(t, kOutSquareAvg);
      scalar_t* __restrict__ du = table.Dst<scalar_t>(t, kOutAccDelta);
      for (int64_t i = begin; i < end; ++i) {
        const math::AdadeltaGrads<T> r = math::AdadeltaStepBackward<T>(
            LoadOr0<T>(gp, i), LoadOr0<T>(gv, i), LoadOr0<T>(gu, i), static_cast<T>(p[i]), static_cast<T>(g[i]),
            static_cast<T>(v[i]), static_cast<T>(u[i]), h);
        dp[i] = r.p, dg[i] = r.grad, dv[i] = r.v, du[i] = r.u;
      }
    });
  });
}

}  // namespace fused_optim::cpu
