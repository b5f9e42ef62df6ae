// CPU loops for SGD: indexing and dtype only, math in include/fused_optim/math/sgd.h.
#include "cpu/for_each_chunk.h"
#include "kernels.h"

namespace fused_optim::cpu {

void SgdStep(const KernelTable& table, const math::SgdHyper<double>& hyper) {
  using namespace sgd_cols;
  DispatchFloating(table.dtype, [&]<typename scalar_t, typename T>() {
    const math::SgdHyper<T> h0 = hyper.template To<T>();
    ForEachChunk<scalar_t>(table, [&](int64_t t, int64_t begin, int64_t end) {
      const math::SgdHyper<T> h = h0;
      scalar_t* __restrict__ p = table.Dst<scalar_t>(t, kParam);
      const scalar_t* __restrict__ g = table.Src<scalar_t>(t, kGrad);
      if (h.has_momentum) {
        scalar_t* __restrict__ buf = table.Dst<scalar_t>(t, kBuf);
        for (int64_t i = begin; i < end; ++i) {
          T pi = p[i], bi = h.first_step ? T(0) : T(buf[i]);
          math::SgdStep(pi, static_cast<T>(g[i]), bi, h);
          p[i] = pi, buf[i] = bi;
        }
      } else {
        for (int64_t i = begin; i < end; ++i) {
          T pi = p[i], unused = T(0);
          math::SgdStep(pi, static_cast<T>(g[i]), unused, h);
          p[i] = pi;
        }
      }
    });
  });
}

void SgdBackward(const KernelTable& table, const math::SgdHyper<double>& hyper) {
  using namespace sgd_cols;
  DispatchFloating(table.dtype, [&]<typename scalar_t, typename T>() {
    const math::SgdHyper<T> h0 = hyper.template To<T>();
    ForEachChunk<scalar_t>(table, [&](int64_t t, int64_t begin, int64_t end) {
      const math::SgdHyper<T> h = h0;
      const scalar_t* __restrict__ gp = table.Src<scalar_t>(t, kGParamNew);
      const scalar_t* __restrict__ gbuf = table.Src<scalar_t>(t, kGBufNew);
      scalar_t* __restrict__ dp = table.Dst<scalar_t>(t, kOutParam);
      scalar_t* __restrict__ dg = table.Dst<scalar_t>(t, kOutGrad);
      scalar_t* __restrict__ dbuf = table.Dst<scalar_t>(t, kOutBuf);
      for (int64_t i = begin; i < end; ++i) {
        const math::SgdGrads<T> r = math::SgdStepBackward<T>(LoadOr0<T>(gp, i), LoadOr0<T>(gbuf, i), h);
        dp[i] = r.p, dg[i] = r.grad;
        if (dbuf) dbuf[i] = r.buf;
      }
    });
  });
}

}  // namespace fused_optim::cpu
