// CPU loops for Adagrad: indexing and dtype only, math in include/fused_optim/math/adagrad.h.
#include "cpu/for_each_chunk.h"
#include "kernels.h"

namespace fused_optim::cpu {

void AdagradStep(const KernelTable& table, const math::AdagradHyper<double>& hyper) {
  using namespace adagrad_cols;
  DispatchFloating(table.dtype, [&]<typename scalar_t, typename T>() {
    const math::AdagradHyper<T> h0 = hyper.template To<T>();
    ForEachChunk<scalar_t>(table, [&](int64_t t, int64_t begin, int64_t end) {
      const math::AdagradHyper<T> h = h0;
      const T clr = T(table.Scalar(t, kClr));
      scalar_t* __restrict__ p = table.Dst<scalar_t>(t, kParam);
      const scalar_t* __restrict__ g = table.Src<scalar_t>(t, kGrad);
      scalar_t* __restrict__ sum = table.Dst<scalar_t>(t, kSum);
      for (int64_t i = begin; i < end; ++i) {
        T pi = p[i], si = sum[i];
        math::AdagradStep(pi, static_cast<T>(g[i]), si, clr, h);
        p[i] = pi, sum[i] = si;
      }
    });
  });
}

void AdagradBackward(const KernelTable& table, const math::AdagradHyper<double>& hyper) {
  using namespace adagrad_cols;
  DispatchFloating(table.dtype, [&]<typename scalar_t, typename T>() {
    const math::AdagradHyper<T> h0 = hyper.template To<T>();
    ForEachChunk<scalar_t>(table, [&](int64_t t, int64_t begin, int64_t end) {
      const math::AdagradHyper<T> h = h0;
      const T clr = T(table.Scalar(t, kClr));
      const scalar_t* __restrict__ gp = table.Src<scalar_t>(t, kGParamNew);
      const scalar_t* __restrict__ gsum = table.Src<scalar_t>(t, kGSumNew);
      const scalar_t* __restrict__ p = table.Src<scalar_t>(t, kInParam);
      const scalar_t* __restrict__ g = table.Src<scalar_t>(t, kInGrad);
      const scalar_t* __restrict__ sum = table.Src<scalar_t>(t, kInSum);
      scalar_t* __restrict__ dp = table.Dst<scalar_t>(t, kOutParam);
      scalar_t* __restrict__ dg = table.Dst<scalar_t>(t, kOutGrad);
      scalar_t* __restrict__ dsum = table.Dst<scalar_t>(t, kOutSum);
      for (int64_t i = begin; i < end; ++i) {
        const math::AdagradGrads<T> r = math::AdagradStepBackward<T>(
            LoadOr0<T>(gp, i), LoadOr0<T>(gsum, i), static_cast<T>(p[i]), static_cast<T>(g[i]),
            static_cast<T>(sum[i]), clr, h);
        dp[i] = r.p, dg[i] = r.grad, dsum[i] = r.sum;
      }
    });
  });
}

}  // namespace fused_optim::cpu
