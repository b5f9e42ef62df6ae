// RAdam's kernel bindings (see binding.h): its table columns and their mapping to math/radam.h.
#pragma once

#include "fused_optim/math/radam.h"
#include "kernels/binding.h"

namespace fused_optim {
namespace radam_cols {
enum : int { kParam, kGrad, kExpAvg, kExpAvgSq };
enum : int {
  kGParamNew = 0,
  kGExpAvgNew,
  kGExpAvgSqNew,
  kInParam,
  kInGrad,
  kInExpAvg,
  kInExpAvgSq,
  kOutParam,
  kOutGrad,
  kOutExpAvg,
  kOutExpAvgSq
};
enum : int { kBc1 = 0, kBc2Sqrt, kRect, kAdaptive };  // per-tensor scalars
}  // namespace radam_cols

namespace bind {

struct Radam {
  template <typename T>
  using Hyper = math::RadamHyper<T>;
  template <typename T>
  using Scalars = math::RadamStepScalars<T>;
  template <typename T>
  FUSED_OPTIM_HOST_DEVICE static Scalars<T> MakeScalars(const double* row) {
    using namespace radam_cols;
    return {T(row[kBc1]), T(row[kBc2Sqrt]), T(row[kRect]), row[kAdaptive] != 0.0};
  }
  template <typename T>
  static auto Flags(Hyper<T>& h, Scalars<T>& s) {
    return std::tie(h.maximize, h.has_l2, h.has_decay, h.lerp_small, s.adaptive);
  }
};

struct RadamStep : Radam {
  static constexpr int kLists = 4;
  template <typename T, typename IO>
  FUSED_OPTIM_ELEMENT static void Apply(const IO& io, const Hyper<T>& h, const Scalars<T>& s) {
    using namespace radam_cols;
    T p = io.Load(kParam), m = io.Load(kExpAvg), v = io.Load(kExpAvgSq);
    math::RadamStep(p, io.Load(kGrad), m, v, h, s);
    io.Store(kParam, p);
    io.Store(kExpAvg, m);
    io.Store(kExpAvgSq, v);
  }
};

struct RadamBackward : Radam {
  static constexpr int kLists = 11;
  template <typename T, typename IO>
  FUSED_OPTIM_ELEMENT static void Apply(const IO& io, const Hyper<T>& h, const Scalars<T>& s) {
    using namespace radam_cols;
    const math::RadamGrads<T> r =
        math::RadamStepBackward<T>(io.Load(kGParamNew), io.Load(kGExpAvgNew), io.Load(kGExpAvgSqNew), io.Load(kInParam),
                                   io.Load(kInGrad), io.Load(kInExpAvg), io.Load(kInExpAvgSq), h, s);
    io.Store(kOutParam, r.p);
    io.Store(kOutGrad, r.grad);
    io.Store(kOutExpAvg, r.m);
    io.Store(kOutExpAvgSq, r.v);
  }
};

}  // namespace bind
}  // namespace fused_optim
