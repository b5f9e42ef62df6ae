// CPU loops for Adagrad: indexing and dtype only, math in include/fused_optim/math/adagrad.h.
// Every loop runs over one chunk with chunk-relative pointers (see for_each_chunk.h).
#include "cpu/for_each_chunk.h"
#include "cpu/isa.h"
#include "kernels.h"

FUSED_OPTIM_CPU_ISA_TARGET
namespace fused_optim::FUSED_OPTIM_CPU_NS {
using namespace ::fused_optim::cpu;  // the chunk driver in for_each_chunk.h (no-op in cpu itself)

void AdagradStep(const KernelTable& table, const math::AdagradHyper<double>& hyper) {
  using namespace adagrad_cols;
  DispatchFloating(table.dtype, [&]<typename scalar_t, typename T>() {
    const math::AdagradHyper<T> h0 = hyper.template To<T>();
    ForEachChunk<scalar_t>(table, [&](int64_t t, int64_t begin, int64_t end) {
      const math::AdagradHyper<T> h = h0;
      const T clr = T(table.Scalar(t, kClr));
      scalar_t* p = table.Dst<scalar_t>(t, kParam) + begin;
      const scalar_t* g = In<scalar_t>(table, t, kGrad, begin);
      scalar_t* sum = table.Dst<scalar_t>(t, kSum) + begin;
      Specialize<scalar_t>(
          [&](auto c0, auto c1) {
            math::AdagradHyper<T> hc = h;
            hc.maximize = c0;
            hc.has_l2 = c1;
            const auto& h = hc;  // the options, now compile-time constants
            const int64_t n = end - begin;
#pragma GCC ivdep  // elementwise: iteration i touches index i only
            for (int64_t i = 0; i < n; ++i) {
              T pi = p[i], si = sum[i];
              math::AdagradStep(pi, static_cast<T>(g[i]), si, clr, h);
              p[i] = static_cast<scalar_t>(pi), sum[i] = static_cast<scalar_t>(si);
            }
          },
          h.maximize, h.has_l2);
    });
  });
}

void AdagradBackward(const KernelTable& table, const math::AdagradHyper<double>& hyper) {
  using namespace adagrad_cols;
  DispatchFloating(table.dtype, [&]<typename scalar_t, typename T>() {
    const math::AdagradHyper<T> h0 = hyper.template To<T>();
    ForEachChunk<scalar_t>(table, [&](int64_t t, int64_t begin, int64_t end) {
      const math::AdagradHyper<T> h = h0;
      const T clr = T(table.Scalar(t, kClr));
      const scalar_t* gp = In<scalar_t>(table, t, kGParamNew, begin);
      const scalar_t* gsum = In<scalar_t>(table, t, kGSumNew, begin);
      const scalar_t* p = In<scalar_t>(table, t, kInParam, begin);
      const scalar_t* g = In<scalar_t>(table, t, kInGrad, begin);
      const scalar_t* sum = In<scalar_t>(table, t, kInSum, begin);
      scalar_t* dp = Out<scalar_t>(table, t, kOutParam, begin);
      scalar_t* dg = Out<scalar_t>(table, t, kOutGrad, begin);
      scalar_t* dsum = Out<scalar_t>(table, t, kOutSum, begin);
      Specialize<scalar_t>(
          [&](auto c0, auto c1) {
            math::AdagradHyper<T> hc = h;
            hc.maximize = c0;
            hc.has_l2 = c1;
            const auto& h = hc;  // the options, now compile-time constants
            const int64_t n = end - begin;
#pragma GCC ivdep  // elementwise: iteration i touches index i only
            for (int64_t i = 0; i < n; ++i) {
              const math::AdagradGrads<T> r =
                  math::AdagradStepBackward<T>(static_cast<T>(gp[i]), static_cast<T>(gsum[i]), static_cast<T>(p[i]),
                                               static_cast<T>(g[i]), static_cast<T>(sum[i]), clr, h);
              dp[i] = static_cast<scalar_t>(r.p), dg[i] = static_cast<scalar_t>(r.grad),
              dsum[i] = static_cast<scalar_t>(r.sum);
            }
          },
          h.maximize, h.has_l2);
    });
  });
}

}  // namespace fused_optim::FUSED_OPTIM_CPU_NS
