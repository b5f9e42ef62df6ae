// SGD's kernel bindings (see binding.h): its table columns and their mapping to math/sgd.h.
#pragma once

#include "fused_optim/math/sgd.h"
#include "kernels/binding.h"

namespace fused_optim {
namespace sgd_cols {
enum : int { kParam, kGrad, kBuf };
enum : int { kGParamNew, kGBufNew, kOutParam, kOutGrad, kOutBuf };  // backward
}  // namespace sgd_cols

namespace bind {

struct Sgd : NoScalars {
  template <typename T>
  using Hyper = math::SgdHyper<T>;
  template <typename T>
  static auto Flags(Hyper<T>& h, Scalars<T>& /*s*/) {
    return std::tie(h.has_momentum, h.first_step, h.nesterov, h.maximize, h.has_l2);
  }
};

struct SgdStep : Sgd {
  static constexpr int kLists = 3;
  template <typename T, typename IO>
  FUSED_OPTIM_ELEMENT static void Apply(const IO& io, const Hyper<T>& h, const Scalars<T>& /*s*/) {
    using namespace sgd_cols;
    T p = io.Load(kParam), buf = h.first_step ? T(0) : io.Load(kBuf);
    math::SgdStep(p, io.Load(kGrad), buf, h);
    io.Store(kParam, p);
    if (h.has_momentum) io.Store(kBuf, buf);
  }
};

struct SgdBackward : Sgd {
  static constexpr int kLists = 5;
  template <typename T, typename IO>
  FUSED_OPTIM_ELEMENT static void Apply(const IO& io, const Hyper<T>& h, const Scalars<T>& /*s*/) {
    using namespace sgd_cols;
    const math::SgdGrads<T> r = math::SgdStepBackward<T>(io.Load(kGParamNew), io.Load(kGBufNew), h);
    io.Store(kOutParam, r.p);
    io.Store(kOutGrad, r.grad);
    io.Store(kOutBuf, r.buf);
  }
};

}  // namespace bind
}  // namespace fused_optim
