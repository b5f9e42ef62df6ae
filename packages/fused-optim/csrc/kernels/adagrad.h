// Adagrad's kernel bindings (see binding.h): its table columns and their mapping to math/adagrad.h.
#pragma once

#include "fused_optim/math/adagrad.h"
#include "kernels/binding.h"

namespace fused_optim {
namespace adagrad_cols {
enum : int { kParam, kGrad, kSum };
enum : int { kGParamNew = 0, kGSumNew, kInParam, kInGrad, kInSum, kOutParam, kOutGrad, kOutSum };
enum : int { kClr = 0 };  // per-tensor scalar: the decayed learning rate
}  // namespace adagrad_cols

namespace bind {

struct Adagrad {
  template <typename T>
  using Hyper = math::AdagradHyper<T>;
  template <typename T>
  struct Scalars {
    T clr;
  };
  template <typename T>
  FUSED_OPTIM_HOST_DEVICE static Scalars<T> MakeScalars(const double* row) {
    return {T(row[adagrad_cols::kClr])};
  }
  template <typename T>
  static auto Flags(Hyper<T>& h, Scalars<T>& /*s*/) {
    return std::tie(h.maximize, h.has_l2);
  }
};

struct AdagradStep : Adagrad {
  static constexpr int kLists = 3;
  template <typename T, typename IO>
  FUSED_OPTIM_ELEMENT static void Apply(const IO& io, const Hyper<T>& h, const Scalars<T>& s) {
    using namespace adagrad_cols;
    T p = io.Load(kParam), sum = io.Load(kSum);
    math::AdagradStep(p, io.Load(kGrad), sum, s.clr, h);
    io.Store(kParam, p);
    io.Store(kSum, sum);
  }
};

struct AdagradBackward : Adagrad {
  static constexpr int kLists = 8;
  template <typename T, typename IO>
  FUSED_OPTIM_ELEMENT static void Apply(const IO& io, const Hyper<T>& h, const Scalars<T>& s) {
    using namespace adagrad_cols;
    const math::AdagradGrads<T> r = math::AdagradStepBackward<T>(
        io.Load(kGParamNew), io.Load(kGSumNew), io.Load(kInParam), io.Load(kInGrad), io.Load(kInSum), s.clr, h);
    io.Store(kOutParam, r.p);
    io.Store(kOutGrad, r.grad);
    io.Store(kOutSum, r.sum);
  }
};

}  // namespace bind
}  // namespace fused_optim
