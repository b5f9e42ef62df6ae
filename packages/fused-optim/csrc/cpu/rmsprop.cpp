// CPU loops for RMSprop: indexing and dtype only, math in include/fused_optim/math/rmsprop.h.
// Every loop runs over one chunk with chunk-relative pointers (see for_each_chunk.h).
#include "cpu/for_each_chunk.h"
#include "cpu/isa.h"
#include "kernels.h"

FUSED_OPTIM_CPU_ISA_TARGET
namespace fused_optim::FUSED_OPTIM_CPU_NS {
using namespace ::fused_optim::cpu;  // the chunk driver in for_each_chunk.h (no-op in cpu itself)

void RmspropStep(const KernelTable& table, const math::RmspropHyper<double>& hyper) {
  using namespace rmsprop_cols;
  DispatchFloating(table.dtype, [&]<typename scalar_t, typename T>() {
    const math::RmspropHyper<T> h0 = hyper.template To<T>();
    ForEachChunk<scalar_t>(table, [&](int64_t t, int64_t begin, int64_t end) {
      const math::RmspropHyper<T> h = h0;
      scalar_t* p = table.Dst<scalar_t>(t, kParam) + begin;
      const scalar_t* g = In<scalar_t>(table, t, kGrad, begin);
      scalar_t* v = table.Dst<scalar_t>(t, kSquareAvg) + begin;
      scalar_t* ga_w = Out<scalar_t>(table, t, kGradAvg, begin);
      const scalar_t* ga_r = table.Dst<scalar_t>(t, kGradAvg) ? ga_w : ZerosChunk<scalar_t>();
      scalar_t* buf_w = Out<scalar_t>(table, t, kBuf, begin);
      const scalar_t* buf_r = table.Dst<scalar_t>(t, kBuf) ? buf_w : ZerosChunk<scalar_t>();
      Specialize<scalar_t>(
          [&](auto c0, auto c1, auto c2, auto c3, auto c4) {
            math::RmspropHyper<T> hc = h;
            hc.centered = c0;
            hc.has_momentum = c1;
            hc.maximize = c2;
            hc.has_l2 = c3;
            hc.lerp_small = c4;
            const auto& h = hc;  // the options, now compile-time constants
            const int64_t n = end - begin;
            // Constants in the float/double loops: the optional streams only when their option is on.
            const bool centered = c0, has_momentum = c1;
#pragma GCC ivdep  // elementwise: iteration i touches index i only
            for (int64_t i = 0; i < n; ++i) {
              T pi = p[i], vi = v[i];
              T gai = centered ? static_cast<T>(ga_r[i]) : T(0), bi = has_momentum ? static_cast<T>(buf_r[i]) : T(0);
              math::RmspropStep(pi, static_cast<T>(g[i]), vi, gai, bi, h);
              p[i] = static_cast<scalar_t>(pi), v[i] = static_cast<scalar_t>(vi);
              if (centered) ga_w[i] = static_cast<scalar_t>(gai);
              if (has_momentum) buf_w[i] = static_cast<scalar_t>(bi);
            }
          },
          h.centered, h.has_momentum, h.maximize, h.has_l2, h.lerp_small);
    });
  });
}

void RmspropBackward(const KernelTable& table, const math::RmspropHyper<double>& hyper) {
  using namespace rmsprop_cols;
  DispatchFloating(table.dtype, [&]<typename scalar_t, typename T>() {
    const math::RmspropHyper<T> h0 = hyper.template To<T>();
    ForEachChunk<scalar_t>(table, [&](int64_t t, int64_t begin, int64_t end) {
      const math::RmspropHyper<T> h = h0;
      const scalar_t* gp = In<scalar_t>(table, t, kGParamNew, begin);
      const scalar_t* gv = In<scalar_t>(table, t, kGSquareAvgNew, begin);
      const scalar_t* gga = In<scalar_t>(table, t, kGGradAvgNew, begin);
      const scalar_t* gbuf = In<scalar_t>(table, t, kGBufNew, begin);
      const scalar_t* p = In<scalar_t>(table, t, kInParam, begin);
      const scalar_t* g = In<scalar_t>(table, t, kInGrad, begin);
      const scalar_t* v = In<scalar_t>(table, t, kInSquareAvg, begin);
      const scalar_t* ga = In<scalar_t>(table, t, kInGradAvg, begin);
      scalar_t* dp = Out<scalar_t>(table, t, kOutParam, begin);
      scalar_t* dg = Out<scalar_t>(table, t, kOutGrad, begin);
      scalar_t* dv = Out<scalar_t>(table, t, kOutSquareAvg, begin);
      scalar_t* dga = Out<scalar_t>(table, t, kOutGradAvg, begin);
      scalar_t* dbuf = Out<scalar_t>(table, t, kOutBuf, begin);
      Specialize<scalar_t>(
          [&](auto c0, auto c1, auto c2, auto c3, auto c4) {
            math::RmspropHyper<T> hc = h;
            hc.centered = c0;
            hc.has_momentum = c1;
            hc.maximize = c2;
            hc.has_l2 = c3;
            hc.lerp_small = c4;
            const auto& h = hc;  // the options, now compile-time constants
            const int64_t n = end - begin;
#pragma GCC ivdep  // elementwise: iteration i touches index i only
            for (int64_t i = 0; i < n; ++i) {
              const math::RmspropGrads<T> r = math::RmspropStepBackward<T>(
                  static_cast<T>(gp[i]), static_cast<T>(gv[i]), static_cast<T>(gga[i]), static_cast<T>(gbuf[i]),
                  static_cast<T>(p[i]), static_cast<T>(g[i]), static_cast<T>(v[i]), static_cast<T>(ga[i]), h);
              dp[i] = static_cast<scalar_t>(r.p), dg[i] = static_cast<scalar_t>(r.grad),
              dv[i] = static_cast<scalar_t>(r.v);
              dga[i] = static_cast<scalar_t>(r.grad_avg), dbuf[i] = static_cast<scalar_t>(r.buf);
            }
          },
          h.centered, h.has_momentum, h.maximize, h.has_l2, h.lerp_small);
    });
  });
}

}  // namespace fused_optim::FUSED_OPTIM_CPU_NS
