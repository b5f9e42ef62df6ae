// CPU loops for Adam/AdamW and the Adam direction: indexing and dtype only, math in include/fused_optim/math/adam.h.
// Every loop runs over one chunk with chunk-relative pointers (see for_each_chunk.h).
#include "cpu/for_each_chunk.h"
#include "cpu/isa.h"
#include "kernels.h"

FUSED_OPTIM_CPU_ISA_TARGET
namespace fused_optim::FUSED_OPTIM_CPU_NS {
using namespace ::fused_optim::cpu;  // the chunk driver in for_each_chunk.h (no-op in cpu itself)

void AdamStep(const KernelTable& table, const math::AdamHyper<double>& hyper) {
  using namespace adam_cols;
  DispatchFloating(table.dtype, [&]<typename scalar_t, typename T>() {
    const math::AdamHyper<T> h0 = hyper.template To<T>();
    ForEachChunk<scalar_t>(table, [&](int64_t t, int64_t begin, int64_t end) {
      const math::AdamHyper<T> h = h0;
      const math::AdamStepScalars<T> s{T(table.Scalar(t, kStepSize)), T(table.Scalar(t, kBc2Sqrt))};
      scalar_t* p = table.Dst<scalar_t>(t, kParam) + begin;
      const scalar_t* g = In<scalar_t>(table, t, kGrad, begin);
      scalar_t* m = table.Dst<scalar_t>(t, kExpAvg) + begin;
      scalar_t* v = table.Dst<scalar_t>(t, kExpAvgSq) + begin;
      scalar_t* vmax_w = Out<scalar_t>(table, t, kMaxExpAvgSq, begin);
      const scalar_t* vmax_r = table.Dst<scalar_t>(t, kMaxExpAvgSq) ? vmax_w : ZerosChunk<scalar_t>();
      Specialize<scalar_t>(
          [&](auto c0, auto c1, auto c2, auto c3, auto c4) {
            math::AdamHyper<T> hc = h;
            hc.amsgrad = c0;
            hc.maximize = c1;
            hc.has_l2 = c2;
            hc.has_decay = c3;
            hc.lerp_small = c4;
            const auto& h = hc;  // the options, now compile-time constants
            const int64_t n = end - begin;
            const bool ams = c0;  // a constant in the float/double loops: no max stream without amsgrad
#pragma GCC ivdep                 // elementwise: iteration i touches index i only
            for (int64_t i = 0; i < n; ++i) {
              T pi = p[i], mi = m[i], vi = v[i], vmi = ams ? static_cast<T>(vmax_r[i]) : T(0);
              math::AdamStep(pi, static_cast<T>(g[i]), mi, vi, vmi, h, s);
              p[i] = static_cast<scalar_t>(pi), m[i] = static_cast<scalar_t>(mi), v[i] = static_cast<scalar_t>(vi);
              if (ams) vmax_w[i] = static_cast<scalar_t>(vmi);
            }
          },
          h.amsgrad, h.maximize, h.has_l2, h.has_decay, h.lerp_small);
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
      const scalar_t* gp = In<scalar_t>(table, t, kGParamNew, begin);
      const scalar_t* gm = In<scalar_t>(table, t, kGExpAvgNew, begin);
      const scalar_t* gv = In<scalar_t>(table, t, kGExpAvgSqNew, begin);
      const scalar_t* gvmax = In<scalar_t>(table, t, kGMaxNew, begin);
      const scalar_t* p = In<scalar_t>(table, t, kInParam, begin);
      const scalar_t* g = In<scalar_t>(table, t, kInGrad, begin);
      const scalar_t* m = In<scalar_t>(table, t, kInExpAvg, begin);
      const scalar_t* v = In<scalar_t>(table, t, kInExpAvgSq, begin);
      const scalar_t* vmax = In<scalar_t>(table, t, kInMax, begin);
      scalar_t* dp = Out<scalar_t>(table, t, kOutParam, begin);
      scalar_t* dg = Out<scalar_t>(table, t, kOutGrad, begin);
      scalar_t* dm = Out<scalar_t>(table, t, kOutExpAvg, begin);
      scalar_t* dv = Out<scalar_t>(table, t, kOutExpAvgSq, begin);
      scalar_t* dvmax = Out<scalar_t>(table, t, kOutMax, begin);
      Specialize<scalar_t>(
          [&](auto c0, auto c1, auto c2, auto c3, auto c4) {
            math::AdamHyper<T> hc = h;
            hc.amsgrad = c0;
            hc.maximize = c1;
            hc.has_l2 = c2;
            hc.has_decay = c3;
            hc.lerp_small = c4;
            const auto& h = hc;  // the options, now compile-time constants
            const int64_t n = end - begin;
#pragma GCC ivdep  // elementwise: iteration i touches index i only
            for (int64_t i = 0; i < n; ++i) {
              const math::AdamGrads<T> r =
                  math::AdamStepBackward<T>(static_cast<T>(gp[i]), static_cast<T>(gm[i]), static_cast<T>(gv[i]),
                                            static_cast<T>(gvmax[i]), static_cast<T>(p[i]), static_cast<T>(g[i]),
                                            static_cast<T>(m[i]), static_cast<T>(v[i]), static_cast<T>(vmax[i]), h, s);
              dp[i] = static_cast<scalar_t>(r.p), dg[i] = static_cast<scalar_t>(r.grad);
              dm[i] = static_cast<scalar_t>(r.m), dv[i] = static_cast<scalar_t>(r.v),
              dvmax[i] = static_cast<scalar_t>(r.vmax);
            }
          },
          h.amsgrad, h.maximize, h.has_l2, h.has_decay, h.lerp_small);
    });
  });
}

void AdamDirection(const KernelTable& table, const math::AdamDirectionHyper<double>& hyper) {
  using namespace adam_direction_cols;
  DispatchFloating(table.dtype, [&]<typename scalar_t, typename T>() {
    const math::AdamDirectionHyper<T> h0 = hyper.template To<T>();
    ForEachChunk<scalar_t>(table, [&](int64_t t, int64_t begin, int64_t end) {
      const math::AdamDirectionHyper<T> h = h0;
      const scalar_t* g = In<scalar_t>(table, t, kGrad, begin);
      scalar_t* m = table.Dst<scalar_t>(t, kExpAvg) + begin;
      scalar_t* v = table.Dst<scalar_t>(t, kExpAvgSq) + begin;
      scalar_t* d = table.Dst<scalar_t>(t, kDirection) + begin;
      const int64_t n = end - begin;
#pragma GCC ivdep  // elementwise: iteration i touches index i only
      for (int64_t i = 0; i < n; ++i) {
        T mi = m[i], vi = v[i];
        const T di = math::AdamDirection(static_cast<T>(g[i]), mi, vi, h);
        m[i] = static_cast<scalar_t>(mi), v[i] = static_cast<scalar_t>(vi), d[i] = static_cast<scalar_t>(di);
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
      const scalar_t* g = In<scalar_t>(table, t, kInGrad, begin);
      const scalar_t* m = In<scalar_t>(table, t, kInExpAvg, begin);
      const scalar_t* v = In<scalar_t>(table, t, kInExpAvgSq, begin);
      const scalar_t* gd = In<scalar_t>(table, t, kGDirection, begin);
      const scalar_t* gm = In<scalar_t>(table, t, kGExpAvgNew, begin);
      const scalar_t* gv = In<scalar_t>(table, t, kGExpAvgSqNew, begin);
      scalar_t* dg = Out<scalar_t>(table, t, kOutGrad, begin);
      scalar_t* dm = Out<scalar_t>(table, t, kOutExpAvg, begin);
      scalar_t* dv = Out<scalar_t>(table, t, kOutExpAvgSq, begin);
      const int64_t n = end - begin;
#pragma GCC ivdep  // elementwise: iteration i touches index i only
      for (int64_t i = 0; i < n; ++i) {
        const math::AdamDirectionGrads<T> r =
            math::AdamDirectionBackward<T>(static_cast<T>(gd[i]), static_cast<T>(gm[i]), static_cast<T>(gv[i]),
                                           static_cast<T>(g[i]), static_cast<T>(m[i]), static_cast<T>(v[i]), h);
        dg[i] = static_cast<scalar_t>(r.grad), dm[i] = static_cast<scalar_t>(r.m), dv[i] = static_cast<scalar_t>(r.v);
      }
    });
  });
}

}  // namespace fused_optim::FUSED_OPTIM_CPU_NS
