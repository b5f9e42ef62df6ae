// RMSprop's kernel bindings (see binding.h): its table columns and their mapping to math/rmsprop.h.
#pragma once

#include "fused_optim/math/rmsprop.h"
#include "kernels/binding.h"

namespace fused_optim {
namespace rmsprop_cols {
enum : int { kParam, kGrad, kSquareAvg, kGradAvg, kBuf };
enum : int {
  kGParamNew = 0,
  kGSquareAvgNew,
  kGGradAvgNew,
  kGBufNew,
  kInParam,
  kInGrad,
  kInSquareAvg,
  kInGradAvg,
  kOutParam,
  kOutGrad,
  kOutSquareAvg,
  kOutGradAvg,
  kOutBuf
};
}  // namespace rmsprop_cols

namespace bind {

struct Rmsprop : NoScalars {
  template <typename T>
  using Hyper = math::RmspropHyper<T>;
  template <typename T>
  static auto Flags(Hyper<T>& h, Scalars<T>& /*s*/) {
    return std::tie(h.centered, h.has_momentum, h.maximize, h.has_l2, h.lerp_small);
  }
};

struct RmspropStep : Rmsprop {
  static constexpr int kLists = 5;
  template <typename T, typename IO>
  FUSED_OPTIM_ELEMENT static void Apply(const IO& io, const Hyper<T>& h, const Scalars<T>& /*s*/) {
    using namespace rmsprop_cols;
    // The optional streams only when their option is on.
    T p = io.Load(kParam), v = io.Load(kSquareAvg);
    T grad_avg = h.centered ? io.Load(kGradAvg) : T(0), buf = h.has_momentum ? io.Load(kBuf) : T(0);
    math::RmspropStep(p, io.Load(kGrad), v, grad_avg, buf, h);
    io.Store(kParam, p);
    io.Store(kSquareAvg, v);
    if (h.centered) io.Store(kGradAvg, grad_avg);
    if (h.has_momentum) io.Store(kBuf, buf);
  }
};

struct RmspropBackward : Rmsprop {
  static constexpr int kLists = 13;
  template <typename T, typename IO>
  FUSED_OPTIM_ELEMENT static void Apply(const IO& io, const Hyper<T>& h, const Scalars<T>& /*s*/) {
    using namespace rmsprop_cols;
    const math::RmspropGrads<T> r = math::RmspropStepBackward<T>(
        io.Load(kGParamNew), io.Load(kGSquareAvgNew), io.Load(kGGradAvgNew), io.Load(kGBufNew), io.Load(kInParam),
        io.Load(kInGrad), io.Load(kInSquareAvg), io.Load(kInGradAvg), h);
    io.Store(kOutParam, r.p);
    io.Store(kOutGrad, r.grad);
    io.Store(kOutSquareAvg, r.v);
    io.Store(kOutGradAvg, r.grad_avg);
    io.Store(kOutBuf, r.buf);
  }
};

}  // namespace bind
}  // namespace fused_optim
