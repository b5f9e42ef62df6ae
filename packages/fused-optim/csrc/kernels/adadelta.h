// Adadelta's kernel bindings (see binding.h): its table columns and their mapping to
// math/adadelta.h.
#pragma once

#include "fused_optim/math/adadelta.h"
#include "kernels/binding.h"

namespace fused_optim {
namespace adadelta_cols {
enum : int { kParam, kGrad, kSquareAvg, kAccDelta };
enum : int {
  kGParamNew = 0,
  kGSquareAvgNew,
  kGAccDeltaNew,
  kInParam,
  kInGrad,
  kInSquareAvg,
  kInAccDelta,
  kOutParam,
  kOutGrad,
  kOutSquareAvg,
  kOutAccDelta
};
}  // namespace adadelta_cols

namespace bind {

struct Adadelta : NoScalars {
  template <typename T>
  using Hyper = math::AdadeltaHyper<T>;
  template <typename T>
  static auto Flags(Hyper<T>& h, Scalars<T>& /*s*/) {
    return std::tie(h.maximize, h.has_l2);
  }
};

struct AdadeltaStep : Adadelta {
  static constexpr int kLists = 4;
  template <typename T, typename IO>
  FUSED_OPTIM_ELEMENT static void Apply(const IO& io, const Hyper<T>& h, const Scalars<T>& /*s*/) {
    using namespace adadelta_cols;
    T p = io.Load(kParam), v = io.Load(kSquareAvg), u = io.Load(kAccDelta);
    math::AdadeltaStep(p, io.Load(kGrad), v, u, h);
    io.Store(kParam, p);
    io.Store(kSquareAvg, v);
    io.Store(kAccDelta, u);
  }
};

struct AdadeltaBackward : Adadelta {
  static constexpr int kLists = 11;
  template <typename T, typename IO>
  FUSED_OPTIM_ELEMENT static void Apply(const IO& io, const Hyper<T>& h, const Scalars<T>& /*s*/) {
    using namespace adadelta_cols;
    const math::AdadeltaGrads<T> r = math::AdadeltaStepBackward<T>(
        io.Load(kGParamNew), io.Load(kGSquareAvgNew), io.Load(kGAccDeltaNew), io.Load(kInParam), io.Load(kInGrad),
        io.Load(kInSquareAvg), io.Load(kInAccDelta), h);
    io.Store(kOutParam, r.p);
    io.Store(kOutGrad, r.grad);
    io.Store(kOutSquareAvg, r.v);
    io.Store(kOutAccDelta, r.u);
  }
};

}  // namespace bind
}  // namespace fused_optim
