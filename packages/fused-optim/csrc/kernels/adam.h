// Adam/AdamW's and the Adam direction's kernel bindings (see binding.h): their table columns and
// their mapping to math/adam.h.
#pragma once

#include "fused_optim/math/adam.h"
#include "kernels/binding.h"

namespace fused_optim {
namespace adam_cols {
enum : int { kParam, kGrad, kExpAvg, kExpAvgSq, kMaxExpAvgSq };
enum : int {
  kGParamNew = 0,
  kGExpAvgNew,
  kGExpAvgSqNew,
  kGMaxNew,
  kInParam,
  kInGrad,
  kInExpAvg,
  kInExpAvgSq,
  kInMax,
  kOutParam,
  kOutGrad,
  kOutExpAvg,
  kOutExpAvgSq,
  kOutMax
};
enum : int { kStepSize = 0, kBc2Sqrt };  // per-tensor scalars
}  // namespace adam_cols
namespace adam_direction_cols {
enum : int { kGrad, kExpAvg, kExpAvgSq, kDirection };
enum : int {
  kInGrad = 0,
  kInExpAvg,
  kInExpAvgSq,
  kGDirection,
  kGExpAvgNew,
  kGExpAvgSqNew,
  kOutGrad,
  kOutExpAvg,
  kOutExpAvgSq
};
}  // namespace adam_direction_cols

namespace bind {

struct Adam {
  template <typename T>
  using Hyper = math::AdamHyper<T>;
  template <typename T>
  using Scalars = math::AdamStepScalars<T>;
  template <typename T>
  FUSED_OPTIM_HOST_DEVICE static Scalars<T> MakeScalars(const double* row) {
    return {T(row[adam_cols::kStepSize]), T(row[adam_cols::kBc2Sqrt])};
  }
  template <typename T>
  static auto Flags(Hyper<T>& h, Scalars<T>& /*s*/) {
    return std::tie(h.amsgrad, h.maximize, h.has_l2, h.has_decay, h.lerp_small);
  }
};

struct AdamStep : Adam {
  static constexpr int kLists = 5;
  template <typename T, typename IO>
  FUSED_OPTIM_ELEMENT static void Apply(const IO& io, const Hyper<T>& h, const Scalars<T>& s) {
    using namespace adam_cols;
    T p = io.Load(kParam), m = io.Load(kExpAvg), v = io.Load(kExpAvgSq);
    T vmax = h.amsgrad ? io.Load(kMaxExpAvgSq) : T(0);  // no max stream without amsgrad
    math::AdamStep(p, io.Load(kGrad), m, v, vmax, h, s);
    io.Store(kParam, p);
    io.Store(kExpAvg, m);
    io.Store(kExpAvgSq, v);
    if (h.amsgrad) io.Store(kMaxExpAvgSq, vmax);
  }
};

struct AdamBackward : Adam {
  static constexpr int kLists = 14;
  template <typename T, typename IO>
  FUSED_OPTIM_ELEMENT static void Apply(const IO& io, const Hyper<T>& h, const Scalars<T>& s) {
    using namespace adam_cols;
    const math::AdamGrads<T> r = math::AdamStepBackward<T>(
        io.Load(kGParamNew), io.Load(kGExpAvgNew), io.Load(kGExpAvgSqNew), io.Load(kGMaxNew), io.Load(kInParam),
        io.Load(kInGrad), io.Load(kInExpAvg), io.Load(kInExpAvgSq), io.Load(kInMax), h, s);
    io.Store(kOutParam, r.p);
    io.Store(kOutGrad, r.grad);
    io.Store(kOutExpAvg, r.m);
    io.Store(kOutExpAvgSq, r.v);
    io.Store(kOutMax, r.vmax);
  }
};

struct AdamDirectionBase : NoScalars {
  template <typename T>
  using Hyper = math::AdamDirectionHyper<T>;
  template <typename T>
  static auto Flags(Hyper<T>& /*h*/, Scalars<T>& /*s*/) {
    return std::tie();
  }
};

struct AdamDirection : AdamDirectionBase {
  static constexpr int kLists = 4;
  template <typename T, typename IO>
  FUSED_OPTIM_ELEMENT static void Apply(const IO& io, const Hyper<T>& h, const Scalars<T>& /*s*/) {
    using namespace adam_direction_cols;
    T m = io.Load(kExpAvg), v = io.Load(kExpAvgSq);
    const T d = math::AdamDirection(io.Load(kGrad), m, v, h);
    io.Store(kExpAvg, m);
    io.Store(kExpAvgSq, v);
    io.Store(kDirection, d);
  }
};

struct AdamDirectionBackward : AdamDirectionBase {
  static constexpr int kLists = 9;
  template <typename T, typename IO>
  FUSED_OPTIM_ELEMENT static void Apply(const IO& io, const Hyper<T>& h, const Scalars<T>& /*s*/) {
    using namespace adam_direction_cols;
    const math::AdamDirectionGrads<T> r =
        math::AdamDirectionBackward<T>(io.Load(kGDirection), io.Load(kGExpAvgNew), io.Load(kGExpAvgSqNew),
                                       io.Load(kInGrad), io.Load(kInExpAvg), io.Load(kInExpAvgSq), h);
    io.Store(kOutGrad, r.grad);
    io.Store(kOutExpAvg, r.m);
    io.Store(kOutExpAvgSq, r.v);
  }
};

}  // namespace bind
}  // namespace fused_optim
