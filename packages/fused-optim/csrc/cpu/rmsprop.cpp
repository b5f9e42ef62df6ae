// CPU loops for RMSprop: indexing and dtype only, math in include/fused_optim/math/rmsprop.h.
#include "cpu/for_each_chunk.h"
#include "kernels.h"

namespace fused_optim::cpu {

void RmspropStep(const KernelTable& table, const math::RmspropHyper<double>& hyper) {
  using namespace rmsprop_cols;
  DispatchFloating(table.dtype, [&]<typename scalar_t, typename T>() {
    const math::RmspropHyper<T> h0 = hyper.template To<T>();
    ForEachChunk<scalar_t>(table, [&](int64_t t, int64_t begin, int64_t end) {
      const math::RmspropHyper<T> h = h0;
      scalar_t* __restrict__ p = table.Dst<scalar_t>(t, kParam);
      const scalar_t* __restrict__ g = table.Src<scalar_t>(t, kGrad);
      scalar_t* __restrict__ v = table.Dst<scalar_t>(t, kSquareAvg);
      scalar_t* __restrict__ ga = table.Dst<scalar_t>(t, kGradAvg);  // null unless centered
      scalar_t* __restrict__ buf = table.Dst<scalar_t>(t, kBuf);     // null unless momentum > 0
      for (int64_t i = begin; i < end; ++i) {
        T pi = p[i], vi = v[i], gai = ga ? T(ga[i]) : T(0), bi = buf ? T(buf[i]) : T(0);
        math::RmspropStep(pi, static_cast<T>(g[i]), vi, gai, bi, h);
        p[i] = pi, v[i] = vi;
        if (ga) ga[i] = gai;
        if (buf) buf[i] = bi;
      }
    });
  });
}

void RmspropBackward(const KernelTable& table, const math::RmspropHyper<double>& hyper) {
  using namespace rmsprop_cols;
  DispatchFloating(table.dtype, [&]<typename scalar_t, typename T>() {
    const math::RmspropHyper<T> h0 = hyper.template To<T>();
    ForEachChunk<scalar_t>(table, [&](int64_t t, int64_t begin, int64_t end) {
      const math::RmspropHyper<T> h = h0;
      const scalar_t* __restrict__ gp = table.Src<scalar_t>(t, kGParamNew);
      const scalar_t* __restrict__ gv = table.Src<scalar_t>(t, kGSquareAvgNew);
      const scalar_t* __restrict__ gga = table.Src<scalar_t>(t, kGGradAvgNew);
      const scalar_t* __restrict__ gbuf = table.Src<scalar_t>(t, kGBufNew);
      const scalar_t* __restrict__ p = table.Src<scalar_t>(t, kInParam);
      const scalar_t* __restrict__ g = table.Src<scalar_t>(t, kInGrad);
      const scalar_t* __restrict__ v = table.Src<scalar_t>(t, kInSquareAvg);
      const scalar_t* __restrict__ ga = table.Src<scalar_t>(t, kInGradAvg);
      scalar_t* __restrict__ dp = table.Dst<scalar_t>(t, kOutParam);
      scalar_t* __restrict__ dg = table.Dst<scalar_t>(t, kOutGrad);
      scalar_t* __restrict__ dv = table.Dst<scalar_t>(t, kOutSquareAvg);
      scalar_t* __restrict__ dga = table.Dst<scalar_t>(t, kOutGradAvg);
      scalar_t* __restrict__ dbuf = table.Dst<scalar_t>(t, kOutBuf);
      for (int64_t i = begin; i < end; ++i) {
        const math::RmspropGrads<T> r = math::RmspropStepBackward<T>(
            LoadOr0<T>(gp, i), LoadOr0<T>(gv, i), LoadOr0<T>(gga, i), LoadOr0<T>(gbuf, i), static_cast<T>(p[i]),
            static_cast<T>(g[i]), static_cast<T>(v[i]), LoadOr0<T>(ga, i), h);
        dp[i] = r.p, dg[i] = r.grad, dv[i] = r.v;
        if (dga) dga[i] = r.grad_avg;
        if (dbuf) dbuf[i] = r.buf;
      }
    });
  });
}

}  // namespace fused_optim::cpu
