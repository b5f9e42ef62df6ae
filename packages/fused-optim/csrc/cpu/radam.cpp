// CPU loops for RAdam: indexing and dtype only, math in include/fused_optim/math/radam.h.
// Every loop runs over one chunk with chunk-relative pointers (see for_each_chunk.h).
#include "cpu/for_each_chunk.h"
#include "cpu/isa.h"
#include "kernels.h"

FUSED_OPTIM_CPU_ISA_TARGET
namespace fused_optim::FUSED_OPTIM_CPU_NS {
using namespace ::fused_optim::cpu;  // the chunk driver in for_each_chunk.h (no-op in cpu itself)

void RadamStep(const KernelTable& table, const math::RadamHyper<double>& hyper) {
  using namespace radam_cols;
  DispatchFloating(table.dtype, [&]<typename scalar_t, typename T>() {
    const math::RadamHyper<T> h0 = hyper.template To<T>();
    ForEachChunk<scalar_t>(table, [&](int64_t t, int64_t begin, int64_t end) {
      const math::RadamHyper<T> h = h0;
      const math::RadamStepScalars<T> s{T(table.Scalar(t, kBc1)), T(table.Scalar(t, kBc2Sqrt)),
                                        T(table.Scalar(t, kRect)), table.Scalar(t, kAdaptive) != 0.0};
      scalar_t* p = table.Dst<scalar_t>(t, kParam) + begin;
      const scalar_t* g = In<scalar_t>(table, t, kGrad, begin);
      scalar_t* m = table.Dst<scalar_t>(t, kExpAvg) + begin;
      scalar_t* v = table.Dst<scalar_t>(t, kExpAvgSq) + begin;
      Specialize<scalar_t>(
          [&](auto c0, auto c1, auto c2, auto c3, auto c4) {
            math::RadamHyper<T> hc = h;
            hc.maximize = c0;
            hc.has_l2 = c1;
            hc.has_decay = c2;
            hc.lerp_small = c3;
            const auto& h = hc;  // the options, now compile-time constants
            math::RadamStepScalars<T> sc = s;
            sc.adaptive = c4;
            const auto& s = sc;
            const int64_t n = end - begin;
#pragma GCC ivdep  // elementwise: iteration i touches index i only
            for (int64_t i = 0; i < n; ++i) {
              T pi = p[i], mi = m[i], vi = v[i];
              math::RadamStep(pi, static_cast<T>(g[i]), mi, vi, h, s);
              p[i] = static_cast<scalar_t>(pi), m[i] = static_cast<scalar_t>(mi), v[i] = static_cast<scalar_t>(vi);
            }
          },
          h.maximize, h.has_l2, h.has_decay, h.lerp_small, s.adaptive);
    });
  });
}

void RadamBackward(const KernelTable& table, const math::RadamHyper<double>& hyper) {
  using namespace radam_cols;
  DispatchFloating(table.dtype, [&]<typename scalar_t, typename T>() {
    const math::RadamHyper<T> h0 = hyper.template To<T>();
    ForEachChunk<scalar_t>(table, [&](int64_t t, int64_t begin, int64_t end) {
      const math::RadamHyper<T> h = h0;
      const math::RadamStepScalars<T> s{T(table.Scalar(t, kBc1)), T(table.Scalar(t, kBc2Sqrt)),
                                        T(table.Scalar(t, kRect)), table.Scalar(t, kAdaptive) != 0.0};
      const scalar_t* gp = In<scalar_t>(table, t, kGParamNew, begin);
      const scalar_t* gm = In<scalar_t>(table, t, kGExpAvgNew, begin);
      const scalar_t* gv = In<scalar_t>(table, t, kGExpAvgSqNew, begin);
      const scalar_t* p = In<scalar_t>(table, t, kInParam, begin);
      const scalar_t* g = In<scalar_t>(table, t, kInGrad, begin);
      const scalar_t* m = In<scalar_t>(table, t, kInExpAvg, begin);
      const scalar_t* v = In<scalar_t>(table, t, kInExpAvgSq, begin);
      scalar_t* dp = Out<scalar_t>(table, t, kOutParam, begin);
      scalar_t* dg = Out<scalar_t>(table, t, kOutGrad, begin);
      scalar_t* dm = Out<scalar_t>(table, t, kOutExpAvg, begin);
      scalar_t* dv = Out<scalar_t>(table, t, kOutExpAvgSq, begin);
      Specialize<scalar_t>(
          [&](auto c0, auto c1, auto c2, auto c3, auto c4) {
            math::RadamHyper<T> hc = h;
            hc.maximize = c0;
            hc.has_l2 = c1;
            hc.has_decay = c2;
            hc.lerp_small = c3;
            const auto& h = hc;  // the options, now compile-time constants
            math::RadamStepScalars<T> sc = s;
            sc.adaptive = c4;
            const auto& s = sc;
            const int64_t n = end - begin;
#pragma GCC ivdep  // elementwise: iteration i touches index i only
            for (int64_t i = 0; i < n; ++i) {
              const math::RadamGrads<T> r = math::RadamStepBackward<T>(
                  static_cast<T>(gp[i]), static_cast<T>(gm[i]), static_cast<T>(gv[i]), static_cast<T>(p[i]),
                  static_cast<T>(g[i]), static_cast<T>(m[i]), static_cast<T>(v[i]), h, s);
              dp[i] = static_cast<scalar_t>(r.p), dg[i] = static_cast<scalar_t>(r.grad);
              dm[i] = static_cast<scalar_t>(r.m), dv[i] = static_cast<scalar_t>(r.v);
            }
          },
          h.maximize, h.has_l2, h.has_decay, h.lerp_small, s.adaptive);
    });
  });
}

}  // namespace fused_optim::FUSED_OPTIM_CPU_NS
