// CPU loops for SGD: indexing and dtype only, math in include/fused_optim/math/sgd.h.
// Every loop runs over one chunk with chunk-relative pointers (see for_each_chunk.h).
#include "cpu/for_each_chunk.h"
#include "cpu/isa.h"
#include "kernels.h"

FUSED_OPTIM_CPU_ISA_TARGET
namespace fused_optim::FUSED_OPTIM_CPU_NS {
using namespace ::fused_optim::cpu;  // the chunk driver in for_each_chunk.h (no-op in cpu itself)

void SgdStep(const KernelTable& table, const math::SgdHyper<double>& hyper) {
  using namespace sgd_cols;
  DispatchFloating(table.dtype, [&]<typename scalar_t, typename T>() {
    const math::SgdHyper<T> h0 = hyper.template To<T>();
    ForEachChunk<scalar_t>(table, [&](int64_t t, int64_t begin, int64_t end) {
      const math::SgdHyper<T> h = h0;
      scalar_t* p = table.Dst<scalar_t>(t, kParam) + begin;
      const scalar_t* g = In<scalar_t>(table, t, kGrad, begin);
      scalar_t* buf_w = Out<scalar_t>(table, t, kBuf, begin);
      const scalar_t* buf_r = table.Dst<scalar_t>(t, kBuf) ? buf_w : ZerosChunk<scalar_t>();
      Specialize<scalar_t>(
          [&](auto c0, auto c1, auto c2, auto c3, auto c4) {
            math::SgdHyper<T> hc = h;
            hc.has_momentum = c0;
            hc.first_step = c1;
            hc.nesterov = c2;
            hc.maximize = c3;
            hc.has_l2 = c4;
            const auto& h = hc;  // the options, now compile-time constants
            const int64_t n = end - begin;
#pragma GCC ivdep  // elementwise: iteration i touches index i only
            for (int64_t i = 0; i < n; ++i) {
              T pi = p[i], bi = h.first_step ? T(0) : static_cast<T>(buf_r[i]);
              math::SgdStep(pi, static_cast<T>(g[i]), bi, h);
              p[i] = static_cast<scalar_t>(pi);
              buf_w[i] = static_cast<scalar_t>(bi);
            }
          },
          h.has_momentum, h.first_step, h.nesterov, h.maximize, h.has_l2);
    });
  });
}

void SgdBackward(const KernelTable& table, const math::SgdHyper<double>& hyper) {
  using namespace sgd_cols;
  DispatchFloating(table.dtype, [&]<typename scalar_t, typename T>() {
    const math::SgdHyper<T> h0 = hyper.template To<T>();
    ForEachChunk<scalar_t>(table, [&](int64_t t, int64_t begin, int64_t end) {
      const math::SgdHyper<T> h = h0;
      const scalar_t* gp = In<scalar_t>(table, t, kGParamNew, begin);
      const scalar_t* gbuf = In<scalar_t>(table, t, kGBufNew, begin);
      scalar_t* dp = Out<scalar_t>(table, t, kOutParam, begin);
      scalar_t* dg = Out<scalar_t>(table, t, kOutGrad, begin);
      scalar_t* dbuf = Out<scalar_t>(table, t, kOutBuf, begin);
      Specialize<scalar_t>(
          [&](auto c0, auto c1, auto c2, auto c3, auto c4) {
            math::SgdHyper<T> hc = h;
            hc.has_momentum = c0;
            hc.first_step = c1;
            hc.nesterov = c2;
            hc.maximize = c3;
            hc.has_l2 = c4;
            const auto& h = hc;  // the options, now compile-time constants
            const int64_t n = end - begin;
#pragma GCC ivdep  // elementwise: iteration i touches index i only
            for (int64_t i = 0; i < n; ++i) {
              const math::SgdGrads<T> r = math::SgdStepBackward<T>(static_cast<T>(gp[i]), static_cast<T>(gbuf[i]), h);
              dp[i] = static_cast<scalar_t>(r.p), dg[i] = static_cast<scalar_t>(r.grad),
              dbuf[i] = static_cast<scalar_t>(r.buf);
            }
          },
          h.has_momentum, h.first_step, h.nesterov, h.maximize, h.has_l2);
    });
  });
}

}  // namespace fused_optim::FUSED_OPTIM_CPU_NS
