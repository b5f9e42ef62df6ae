// CPU loops for Adadelta: indexing and dtype only, math in include/fused_optim/math/adadelta.h.
// Every loop runs over one chunk with chunk-relative pointers (see for_each_chunk.h).
#include "cpu/for_each_chunk.h"
#include "cpu/isa.h"
#include "kernels.h"

FUSED_OPTIM_CPU_ISA_TARGET
namespace fused_optim::FUSED_OPTIM_CPU_NS {
using namespace ::fused_optim::cpu;  // the chunk driver in for_each_chunk.h (no-op in cpu itself)

void AdadeltaStep(const KernelTable& table, const math::AdadeltaHyper<double>& hyper) {
  using namespace adadelta_cols;
  DispatchFloating(table.dtype, [&]<typename scalar_t, typename T>() {
    const math::AdadeltaHyper<T> h0 = hyper.template To<T>();
    ForEachChunk<scalar_t>(table, [&](int64_t t, int64_t begin, int64_t end) {
      const math::AdadeltaHyper<T> h = h0;
      scalar_t* p = table.Dst<scalar_t>(t, kParam) + begin;
      const scalar_t* g = In<scalar_t>(table, t, kGrad, begin);
      scalar_t* v = table.Dst<scalar_t>(t, kSquareAvg) + begin;
      scalar_t* u = table.Dst<scalar_t>(t, kAccDelta) + begin;
      Specialize<scalar_t>(
          [&](auto c0, auto c1) {
            math::AdadeltaHyper<T> hc = h;
            hc.maximize = c0;
            hc.has_l2 = c1;
            const auto& h = hc;  // the options, now compile-time constants
            const int64_t n = end - begin;
#pragma GCC ivdep  // elementwise: iteration i touches index i only
            for (int64_t i = 0; i < n; ++i) {
              T pi = p[i], vi = v[i], ui = u[i];
              math::AdadeltaStep(pi, static_cast<T>(g[i]), vi, ui, h);
              p[i] = static_cast<scalar_t>(pi), v[i] = static_cast<scalar_t>(vi), u[i] = static_cast<scalar_t>(ui);
            }
          },
          h.maximize, h.has_l2);
    });
  });
}

void AdadeltaBackward(const KernelTable& table, const math::AdadeltaHyper<double>& hyper) {
  using namespace adadelta_cols;
  DispatchFloating(table.dtype, [&]<typename scalar_t, typename T>() {
    const math::AdadeltaHyper<T> h0 = hyper.template To<T>();
    ForEachChunk<scalar_t>(table, [&](int64_t t, int64_t begin, int64_t end) {
      const math::AdadeltaHyper<T> h = h0;
      const scalar_t* gp = In<scalar_t>(table, t, kGParamNew, begin);
      const scalar_t* gv = In<scalar_t>(table, t, kGSquareAvgNew, begin);
      const scalar_t* gu = In<scalar_t>(table, t, kGAccDeltaNew, begin);
      const scalar_t* p = In<scalar_t>(table, t, kInParam, begin);
      const scalar_t* g = In<scalar_t>(table, t, kInGrad, begin);
      const scalar_t* v = In<scalar_t>(table, t, kInSquareAvg, begin);
      const scalar_t* u = In<scalar_t>(table, t, kInAccDelta, begin);
      scalar_t* dp = Out<scalar_t>(table, t, kOutParam, begin);
      scalar_t* dg = Out<scalar_t>(table, t, kOutGrad, begin);
      scalar_t* dv = Out<scalar_t>(table, t, kOutSquareAvg, begin);
      scalar_t* du = Out<scalar_t>(table, t, kOutAccDelta, begin);
      Specialize<scalar_t>(
          [&](auto c0, auto c1) {
            math::AdadeltaHyper<T> hc = h;
            hc.maximize = c0;
            hc.has_l2 = c1;
            const auto& h = hc;  // the options, now compile-time constants
            const int64_t n = end - begin;
#pragma GCC ivdep  // elementwise: iteration i touches index i only
            for (int64_t i = 0; i < n; ++i) {
              const math::AdadeltaGrads<T> r = math::AdadeltaStepBackward<T>(
                  static_cast<T>(gp[i]), static_cast<T>(gv[i]), static_cast<T>(gu[i]), static_cast<T>(p[i]),
                  static_cast<T>(g[i]), static_cast<T>(v[i]), static_cast<T>(u[i]), h);
              dp[i] = static_cast<scalar_t>(r.p), dg[i] = static_cast<scalar_t>(r.grad);
              dv[i] = static_cast<scalar_t>(r.v), du[i] = static_cast<scalar_t>(r.u);
            }
          },
          h.maximize, h.has_l2);
    });
  });
}

}  // namespace fused_optim::FUSED_OPTIM_CPU_NS
