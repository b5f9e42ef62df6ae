// CPU loops for Adamax: indexing and dtype only, math in include/fused_optim/math/adamax.h.
// Every loop runs over one chunk with chunk-relative pointers (see for_each_chunk.h).
#include "cpu/for_each_chunk.h"
#include "cpu/isa.h"
#include "kernels.h"

FUSED_OPTIM_CPU_ISA_TARGET
namespace fused_optim::FUSED_OPTIM_CPU_NS {
using namespace ::fused_optim::cpu;  // the chunk driver in for_each_chunk.h (no-op in cpu itself)

void AdamaxStep(const KernelTable& table, const math::AdamaxHyper<double>& hyper) {
  using namespace adamax_cols;
  DispatchFloating(table.dtype, [&]<typename scalar_t, typename T>() {
    const math::AdamaxHyper<T> h0 = hyper.template To<T>();
    ForEachChunk<scalar_t>(table, [&](int64_t t, int64_t begin, int64_t end) {
      const math::AdamaxHyper<T> h = h0;
      const T clr = T(table.Scalar(t, kClr));
      scalar_t* p = table.Dst<scalar_t>(t, kParam) + begin;
      const scalar_t* g = In<scalar_t>(table, t, kGrad, begin);
      scalar_t* m = table.Dst<scalar_t>(t, kExpAvg) + begin;
      scalar_t* u = table.Dst<scalar_t>(t, kExpInf) + begin;
      Specialize<scalar_t>(
          [&](auto c0, auto c1, auto c2) {
            math::AdamaxHyper<T> hc = h;
            hc.maximize = c0;
            hc.has_l2 = c1;
            hc.lerp_small = c2;
            const auto& h = hc;  // the options, now compile-time constants
            const int64_t n = end - begin;
#pragma GCC ivdep  // elementwise: iteration i touches index i only
            for (int64_t i = 0; i < n; ++i) {
              T pi = p[i], mi = m[i], ui = u[i];
              math::AdamaxStep(pi, static_cast<T>(g[i]), mi, ui, clr, h);
              p[i] = static_cast<scalar_t>(pi), m[i] = static_cast<scalar_t>(mi), u[i] = static_cast<scalar_t>(ui);
            }
          },
          h.maximize, h.has_l2, h.lerp_small);
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
      const scalar_t* gp = In<scalar_t>(table, t, kGParamNew, begin);
      const scalar_t* gm = In<scalar_t>(table, t, kGExpAvgNew, begin);
      const scalar_t* gu = In<scalar_t>(table, t, kGExpInfNew, begin);
      const scalar_t* p = In<scalar_t>(table, t, kInParam, begin);
      const scalar_t* g = In<scalar_t>(table, t, kInGrad, begin);
      const scalar_t* m = In<scalar_t>(table, t, kInExpAvg, begin);
      const scalar_t* u = In<scalar_t>(table, t, kInExpInf, begin);
      scalar_t* dp = Out<scalar_t>(table, t, kOutParam, begin);
      scalar_t* dg = Out<scalar_t>(table, t, kOutGrad, begin);
      scalar_t* dm = Out<scalar_t>(table, t, kOutExpAvg, begin);
      scalar_t* du = Out<scalar_t>(table, t, kOutExpInf, begin);
      Specialize<scalar_t>(
          [&](auto c0, auto c1, auto c2) {
            math::AdamaxHyper<T> hc = h;
            hc.maximize = c0;
            hc.has_l2 = c1;
            hc.lerp_small = c2;
            const auto& h = hc;  // the options, now compile-time constants
            const int64_t n = end - begin;
#pragma GCC ivdep  // elementwise: iteration i touches index i only
            for (int64_t i = 0; i < n; ++i) {
              const math::AdamaxGrads<T> r = math::AdamaxStepBackward<T>(
                  static_cast<T>(gp[i]), static_cast<T>(gm[i]), static_cast<T>(gu[i]), static_cast<T>(p[i]),
                  static_cast<T>(g[i]), static_cast<T>(m[i]), static_cast<T>(u[i]), clr, h);
              dp[i] = static_cast<scalar_t>(r.p), dg[i] = static_cast<scalar_t>(r.grad);
              dm[i] = static_cast<scalar_t>(r.m), du[i] = static_cast<scalar_t>(r.u);
            }
          },
          h.maximize, h.has_l2, h.lerp_small);
    });
  });
}

}  // namespace fused_optim::FUSED_OPTIM_CPU_NS
