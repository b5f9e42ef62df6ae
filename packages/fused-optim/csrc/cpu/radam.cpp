// CPU loops for RAdam: indexing and dtype only, math in include/fused_optim/math/radam.h.
#include "cpu/for_each_chunk.h"
#include "kernels.h"

namespace fused_optim::cpu {
namespace {

template <typename T>
math::RadamStepScalars<T> StepScalars(const KernelTable& table, int64_t t) {
  using namespace radam_cols;
  return {T(table.Scalar(t, kBc1)), T(table.Scalar(t, kBc2Sqrt)), T(table.Scalar(t, kRect)),
          table.Scalar(t, kAdaptive) != 0.0};
}

}  // namespace

void RadamStep(const KernelTable& table, const math::RadamHyper<double>& hyper) {
  using namespace radam_cols;
  DispatchFloating(table.dtype, [&]<typename scalar_t, typename T>() {
    const math::RadamHyper<T> h0 = hyper.template To<T>();
    ForEachChunk<scalar_t>(table, [&](int64_t t, int64_t begin, int64_t end) {
      const math::RadamHyper<T> h = h0;
      const math::RadamStepScalars<T> s = StepScalars<T>(table, t);
      scalar_t* __restrict__ p = table.Dst<scalar_t>(t, kParam);
      const scalar_t* __restrict__ g = table.Src<scalar_t>(t, kGrad);
      scalar_t* __restrict__ m = table.Dst<scalar_t>(t, kExpAvg);
      scalar_t* __restrict__ v = table.Dst<scalar_t>(t, kExpAvgSq);
      for (int64_t i = begin; i < end; ++i) {
        T pi = p[i], mi = m[i], vi = v[i];
        math::RadamStep(pi, static_cast<T>(g[i]), mi, vi, h, s);
        p[i] = pi, m[i] = mi, v[i] = vi;
      }
    });
  });
}

void RadamBackward(const KernelTable& table, const math::RadamHyper<double>& hyper) {
  using namespace radam_cols;
  DispatchFloating(table.dtype, [&]<typename scalar_t, typename T>() {
    const math::RadamHyper<T> h0 = hyper.template To<T>();
    ForEachChunk<scalar_t>(table, [&](int64_t t, int64_t begin, int64_t end) {
      const math::RadamHyper<T> h = h0;
      const math::RadamStepScalars<T> s = StepScalars<T>(table, t);
      const scalar_t* __restrict__ gp = table.Src<scalar_t>(t, kGParamNew);
      const scalar_t* __restrict__ gm = table.Src<scalar_t>(t, kGExpAvgNew);
      const scalar_t* __restrict__ gv = table.Src<scalar_t>(t, kGExpAvgSqNew);
      const scalar_t* __restrict__ p = table.Src<scalar_t>(t, kInParam);
      const scalar_t* __restrict__ g = table.Src<scalar_t>(t, kInGrad);
      const scalar_t* __restrict__ m = table.Src<scalar_t>(t, kInExpAvg);
      const scalar_t* __restrict__ v = table.Src<scalar_t>(t, kInExpAvgSq);
      scalar_t* __restrict__ dp = table.Dst<scalar_t>(t, kOutParam);
      scalar_t* __restrict__ dg = table.Dst<scalar_t>(t, kOutGrad);
      scalar_t* __restrict__ dm = table.Dst<scalar_t>(t, kOutExpAvg);
      scalar_t* __restrict__ dv = table.Dst<scalar_t>(t, kOutExpAvgSq);
      for (int64_t i = begin; i < end; ++i) {
        const math::RadamGrads<T> r = math::RadamStepBackward<T>(
            LoadOr0<T>(gp, i), LoadOr0<T>(gm, i), LoadOr0<T>(gv, i), static_cast<T>(p[i]), static_cast<T>(g[i]),
            static_cast<T>(m[i]), static_cast<T>(v[i]), h, s);
        dp[i] = r.p, dg[i] = r.grad, dm[i] = r.m, dv[i] = r.v;
      }
    });
  });
}

}  // namespace fused_optim::cpu
