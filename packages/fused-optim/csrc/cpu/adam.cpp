// CPU loops for Adam/AdamW and the Adam direction: indexing and dtype only, math in
// include/fused_optim/math/adam.h.
#include "cpu/for_each_chunk.h"
#include "kernels.h"

namespace fused_optim::cpu {

void AdamStep(const KernelTable& table, const math::AdamHyper<double>& hyper) {
  using namespace adam_cols;
  DispatchFloating(table.dtype, [&]<typename scalar_t, typename T>() {
    const math::AdamHyper<T> h0 = hyper.template To<T>();
    ForEachChunk<scalar_t>(table, [&](int64_t t, int64_t begin, int64_t end) {
      const math::AdamHyper<T> h = h0;
      const math::AdamStepScalars<T> s{T(table.Scalar(t, kStepSize)), T(table.Scalar(t, kBc2Sqrt))};
      scalar_t* __restrict__ p = table.Dst<scalar_t>(t, kParam);
      const scalar_t* __restrict__ g = table.Src<scalar_t>(t, kGrad);
      scalar_t* __restrict__ m = table.Dst<scalar_t>(t, kExpAvg);
      scalar_t* __restrict__ v = table.Dst<scalar_t>(t, kExpAvgSq);
      if (h.amsgrad) {
        scalar_t* __restrict__ vmax = table.Dst<scalar_t>(t, kMaxExpAvgSq);
        for (int64_t i = begin; i < end; ++i) {
          T pi = p[i], mi = m[i], vi = v[i], vmi = vmax[i];
          math::AdamStep(pi, static_cast<T>(g[i]), mi, vi, vmi, h, s);
          p[i] = pi, m[i] = mi, v[i] = vi, vmax[i] = vmi;
        }
      } else {
        for (int64_t i = begin; i < end; ++i) {
          T pi = p[i], mi = m[i], vi = v[i], unused = T(0);
          math::AdamStep(pi, static_cast<T>(g[i]), mi, vi, unused, h, s);
          p[i] = pi, m[i] = mi, v[i] = vi;
        }
      }
    });
  });
}

void AdamBackward(const KernelTable& table, const math::AdamHyper<double>& hyper) {
  using namespace adam_cols;
  DispatchFloating(table.dtype, [&]<typename scalar_t, typename T>() {
    const math::AdamHyper<T> h0 = hyper.template To<T>();
    ForEachChunk<scalar_t>(table, [&](int64_t t, int64_t begin, int64_t end) {
      const math::AdamHyper<T> h = h0;
      const math::AdamStepScalars<T> s{T(table.Scalar(t, kStepSize)), T(table.Scalar(t, kBc2Sqrt))};
      const scalar_t* __restrict__ gp = table.Src<scalar_t>(t, kGParamNew);
      const scalar_t* __restrict__ gm = table.Src<scalar_t>(t, kGExpAvgNew);
      const scalar_t* __restrict__ gv = table.Src<scalar_t>(t, kGExpAvgSqNew);
      const scalar_t* __restrict__ gvmax = table.Src<scalar_t>(t, kGMaxNew);
      const scalar_t* __restrict__ p = table.Src<scalar_t>(t, kInParam);
      const scalar_t* __restrict__ g = table.Src<scalar_t>(t, kInGrad);
      const scalar_t* __restrict__ m = table.Src<scalar_t>(t, kInExpAvg);
      const scalar_t* __restrict__ v = table.Src<scalar_t>(t, kInExpAvgSq);
      const scalar_t* __restrict__ vmax = table.Src<scalar_t>(t, kInMax);
      scalar_t* __restrict__ dp = table.Dst<scalar_t>(t, kOutParam);
      scalar_t* __restrict__ dg = table.Dst<scalar_t>(t, kOutGrad);
      scalar_t* __restrict__ dm = table.Dst<scalar_t>(t, kOutExpAvg);
      scalar_t* __restrict__ dv = table.Dst<scalar_t>(t, kOutExpAvgSq);
      scalar_t* __restrict__ dvmax = table.Dst<scalar_t>(t, kOutMax);
      for (int64_t i = begin; i < end; ++i) {
        const math::AdamGrads<T> r = math::AdamStepBackward<T>(
            LoadOr0<T>(gp, i), LoadOr0<T>(gm, i), LoadOr0<T>(gv, i), LoadOr0<T>(gvmax, i), static_cast<T>(p[i]),
            static_cast<T>(g[i]), static_cast<T>(m[i]), static_cast<T>(v[i]), LoadOr0<T>(vmax, i), h, s);
        dp[i] = r.p, dg[i] = r.grad, dm[i] = r.m, dv[i] = r.v;
        if (dvmax) dvmax[i] = r.vmax;
      }
    });
  });
}

void AdamDirection(const KernelTable& table, const math::AdamDirectionHyper<double>& hyper) {
  using namespace adam_direction_cols;
  DispatchFloating(table.dtype, [&]<typename scalar_t, typename T>() {
    const math::AdamDirectionHyper<T> h0 = hyper.template To<T>();
    ForEachChunk<scalar_t>(table, [&](int64_t t, int64_t begin, int64_t end) {
      const math::AdamDirectionHyper<T> h = h0;
      const scalar_t* __restrict__ g = table.Src<scalar_t>(t, kGrad);
      scalar_t* __restrict__ m = table.Dst<scalar_t>(t, kExpAvg);
      scalar_t* __restrict__ v = table.Dst<scalar_t>(t, kExpAvgSq);
      scalar_t* __restrict__ d = table.Dst<scalar_t>(t, kDirection);
      for (int64_t i = begin; i < end; ++i) {
        T mi = m[i], vi = v[i];
        d[i] = math::AdamDirection(static_cast<T>(g[i]), mi, vi, h);
        m[i] = mi, v[i] = vi;
      }
    });
  });
}

void AdamDirectionBackward(const KernelTable& table, const math::AdamDirectionHyper<double>& hyper) {
  using namespace adam_direction_cols;
  DispatchFloating(table.dtype, [&]<typename scalar_t, typename T>() {
    const math::AdamDirectionHyper<T> h0 = hyper.template To<T>();
    ForEachChunk<scalar_t>(table, [&](int64_t t, int64_t begin, int64_t end) {
      const math::AdamDirectionHyper<T> h = h0;
      const scalar_t* __restrict__ g = table.Src<scalar_t>(t, kInGrad);
      const scalar_t* __restrict__ m = table.Src<scalar_t>(t, kInExpAvg);
      const scalar_t* __restrict__ v = table.Src<scalar_t>(t, kInExpAvgSq);
      const scalar_t* __restrict__ gd = table.Src<scalar_t>(t, kGDirection);
      const scalar_t* __restrict__ gm = table.Src<scalar_t>(t, kGExpAvgNew);
      const scalar_t* __restrict__ gv = table.Src<scalar_t>(t, kGExpAvgSqNew);
      scalar_t* __restrict__ dg = table.Dst<scalar_t>(t, kOutGrad);
      scalar_t* __restrict__ dm = table.Dst<scalar_t>(t, kOutExpAvg);
      scalar_t* __restrict__ dv = table.Dst<scalar_t>(t, kOutExpAvgSq);
      for (int64_t i = begin; i < end; ++i) {
        const math::AdamDirectionGrads<T> r = math::AdamDirectionBackward<T>(
            LoadOr0<T>(gd, i), LoadOr0<T>(gm, i), LoadOr0<T>(gv, i), static_cast<T>(g[i]), static_cast<T>(m[i]),
            static_cast<T>(v[i]), h);
        dg[i] = r.grad, dm[i] = r.m, dv[i] = r.v;
      }
    });
  });
}

}  // namespace fused_optim::cpu
