// Adamax's kernel bindings (see binding.h): its table columns and their mapping to math/adamax.h.
#pragma once

#include "fused_optim/math/adamax.h"
#include "kernels/binding.h"

namespace fused_optim {
namespace adamax_cols {
enum : int { kParam, kGrad, kExpAvg, kExpInf };
enum : int {
  kGParamNew = 0,
  kGExpAvgNew,
  kGExpInfNew,
  kInParam,
  kInGrad,
  kInExpAvg,
  kInExpInf,
  kOutParam,
  kOutGrad,
  kOutExpAvg,
  kOutExpInf
};
enum : int { kClr = 0 };  // per-tensor scalar: lr / (1 - beta1^step)
}  // namespace adamax_cols

namespace bind {

struct Adamax {
  template <typename T>
  using Hyper = math::AdamaxHyper<T>;
  template <typename T>
  struct Scalars {
    T clr;
  };
  template <typename T>
  FUSED_OPTIM_HOST_DEVICE static Scalars<T> MakeScalars(const double* row) {
    return {T(row[adamax_cols::kClr])};
  }
  template <typename T>
  static auto Flags(Hyper<T>& h, Scalars<T>& /*s*/) {
    return std::tie(h.maximize, h.has_l2, h.lerp_small);
  }
};

struct AdamaxStep : Adamax {
  static constexpr int kLists = 4;
  template <typename T, typename IO>
  FUSED_OPTIM_ELEMENT static void Apply(const IO& io, const Hyper<T>& h, const Scalars<T>& s) {
    using namespace adamax_cols;
    T p = io.Load(kParam), m = io.Load(kExpAvg), u = io.Load(kExpInf);
    math::AdamaxStep(p, io.Load(kGrad), m, u, s.clr, h);
    io.Store(kParam, p);
    io.Store(kExpAvg, m);
    io.Store(kExpInf, u);
  }
};

struct AdamaxBackward : Adamax {
  static constexpr int kLists = 11;
  template <typename T, typename IO>
  FUSED_OPTIM_ELEMENT static void Apply(const IO& io, const Hyper<T>& h, const Scalars<T>& s) {
    using namespace adamax_cols;
    const math::AdamaxGrads<T> r =
        math::AdamaxStepBackward<T>(io.Load(kGParamNew), io.Load(kGExpAvgNew), io.Load(kGExpInfNew), io.Load(kInParam),
                                    io.Load(kInGrad), io.Load(kInExpAvg), io.Load(kInExpInf), s.clr, h);
    io.Store(kOutParam, r.p);
    io.Store(kOutGrad, r.grad);
    io.Store(kOutExpAvg, r.m);
    io.Store(kOutExpInf, r.u);
  }
};

}  // namespace bind
}  // namespace fused_optim
