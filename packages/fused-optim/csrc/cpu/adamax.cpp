// CPU loops for Adamax: indexing and dtype only, math in include/fused_optim/math/adamax.h.
#include "cpu/for_each_chunk.h"
#include "kernels.h"

namespace fused_optim::cpu {

void AdamaxStep(const KernelTable& table, const math::AdamaxHyper<double>& hyper) {
  using namespace adamax_cols;
  DispatchFloating(table.dtype, [&]<typename scalar_t, typename T>() {
    const math::AdamaxHyper<T> h0 = hyper.template To<T>();
    ForEachChunk<scalar_t>(table, [&](int64_t t, int64_t begin, int64_t end) {
      const math::AdamaxHyper<T> h = h0;
      const T clr = T(table.Scalar(t, kClr));
      scalar_t* __restrict__ p = table.Dst<scalar_t>(t, kParam);
      const scalar_t* __restrict__ g = table.Src<scalar_t>(t, kGrad);
      scalar_t* __restrict__ m = table.Dst<scalar_t>(t, kExpAvg);
      scalar_t* __restrict__ u = table.Dst<scalar_t>(t, kExpInf);
      for (int64_t i = begin; i < end; ++i) {
        T pi = p[i], mi = m[i], ui = u[i];
        math::AdamaxStep(pi, static_cast<T>(g[i]), mi, ui, clr, h);
        p[i] = pi, m[i] = mi, u[i] = ui;
      }
    });
  });
}

void AdamaxBackward(const KernelTable& table, const math::AdamaxHyper<double>& hyper) {
  using namespace adamax_cols;
  DispatchFloating(table.dtype, [&]<typename scalar_t, typename T>() {
    const math::AdamaxHyper<T> h0 = hyper.template To<T>();
    ForEachChunk<scalar_t>(table, [&](int64_t t, int64_t begin, int64_t end) {
      const math::AdamaxHyper<T> h = h0;
      const T clr = T(table.Scalar(t, kClr));
      const scalar_t* __restrict__ gp = table.Src<scalar_t>(t, kGParamNew);
      const scalar_t* __restrict__ gm = table.Src<scalar_t>(t, kGExpAvgNew);
      const scalar_t* __restrict__ gu = table.Src<scalar_t>(t, kGExpInfNew);
      const scalar_t* __restrict__ p = table.Src<scalar_t>(t, kInParam);
      const scalar_t* __restrict__ g = table.Src<scalar_t>(t, kInGrad);
      const scalar_t* __restrict__ m = table.Src<scalar_t>(t, kInExpAvg);
      const scalar_t* __restrict__ u = table.Src<scalar_t>(t, kInExpInf);
      scalar_t* __restrict__ dp = table.Dst<scalar_t>(t, kOutParam);
      scalar_t* __restrict__ dg = table.Dst<scalar_t>(t, kOutGrad);
      scalar_t* __restrict__ dm = table.Dst<scalar_t>(t, kOutExpAvg);
      scalar_t* __restrict__ du = table.Dst<scalar_t>(t, kOutExpInf);
      for (int64_t i = begin; i < end; ++i) {
        const math::AdamaxGrads<T> r = math::AdamaxStepBackward<T>(
            LoadOr0<T>(gp, i), LoadOr0<T>(gm, i), LoadOr0<T>(gu, i), static_cast<T>(p[i]), static_cast<T>(g[i]),
            static_cast<T>(m[i]), static_cast<T>(u[i]), clr, h);
        dp[i] = r.p, dg[i] = r.grad, dm[i] = r.m, du[i] = r.u;
      }
    });
  });
}

}  // namespace fused_optim::cpu
