// Muon (Jordan et al., 2024, "Muon: An optimizer for hidden layers in neural networks") element-wise
// math, as torch.optim.Muon. A step is three passes; only the first is Muon's own kernel:
//   direction  b <- lerp(b, g, 1 - mu);  d = nesterov ? lerp(g, b, mu) : b
//   orthogonalize  O = NS(d), Newton-Schulz on each matrix: batched matrix products, not
//              element-wise (fused_optim/ops.py, newton_schulz)
//   apply      p <- p (1 - lr wd) - lr' O: exactly Adafactor's apply kernel (math/adafactor.h),
//              with the per-tensor coefficient -lr' (the shape-adjusted learning rate)
// The direction is linear in (g, b), so its backward reads no forward value.
#pragma once

#include "fused_optim/math/common.h"

namespace fused_optim::math {

template <typename T>
struct MuonHyper {
  T momentum, one_minus_momentum;  // the complement taken in double, as torch.optim takes it
  // Which of torch.lerp's two formulas each interpolation takes (its weight below 0.5): the
  // momentum's (weight 1 - mu) and the Nesterov blend's (weight mu).
  bool nesterov, momentum_small, blend_small;
  // The same hyper-parameters in another math type (kernels receive them in double).
  template <typename U>
  FUSED_OPTIM_HOST_DEVICE MuonHyper<U> To() const {
    return {U(momentum), U(one_minus_momentum), nesterov, momentum_small, blend_small};
  }
};

// The new momentum buffer (in place) and the direction to orthogonalize.
template <typename T>
FUSED_OPTIM_HOST_DEVICE inline T MuonDirection(T grad, T& buf, const MuonHyper<T>& h) {
  buf = Lerp(buf, grad, h.one_minus_momentum, h.momentum_small);
  return h.nesterov ? Lerp(grad, buf, h.momentum, h.blend_small) : buf;
}

template <typename T>
struct MuonDirectionGrads {
  T grad, buf;
};

// Given the gradients of the direction (gd) and of the new buffer (gb'): the buffer's total
// gradient is gb' + mu gd with Nesterov (d = (1 - mu) g + mu b'), gb' + gd without (d = b'); then
// through b' = mu b + (1 - mu) g.
template <typename T>
FUSED_OPTIM_HOST_DEVICE inline MuonDirectionGrads<T> MuonDirectionBackward(T gd, T gb_new, const MuonHyper<T>& h) {
  const T db_new = gb_new + (h.nesterov ? h.momentum * gd : gd);
  const T dg_direct = h.nesterov ? h.one_minus_momentum * gd : T(0);
  return {dg_direct + h.one_minus_momentum * db_new, h.momentum * db_new};
}

}  // namespace fused_optim::math

// The kernel binding (see common.h): the kernel table's columns and how each element function
// maps them to the math above, shared by the CPU loops and the CUDA kernels.
namespace fused_optim::muon_cols {
enum : int { kGrad, kMomentumBuffer, kDirection };
// The backward reads no forward input: the direction is linear.
enum : int { kGDirection = 0, kGMomentumBufferNew, kOutGrad, kOutMomentumBuffer };
}  // namespace fused_optim::muon_cols

namespace fused_optim::bind {

struct MuonDirection : NoScalars {
  template <typename T>
  using Hyper = math::MuonHyper<T>;
  template <typename T>
  static auto Flags(Hyper<T>& h, Scalars<T>& /*s*/) {
    return std::tie(h.nesterov, h.momentum_small, h.blend_small);
  }

  static constexpr int kLists = 3;
  template <typename T, typename IO>
  FUSED_OPTIM_ELEMENT static void Apply(const IO& io, const Hyper<T>& h, const Scalars<T>& /*s*/) {
    using namespace muon_cols;
    T buf = io.Load(kMomentumBuffer);
    const T d = math::MuonDirection(io.Load(kGrad), buf, h);
    io.Store(kMomentumBuffer, buf);
    io.Store(kDirection, d);
  }
};

struct MuonDirectionBackward : MuonDirection {  // the same hyper-parameters and flags
  static constexpr int kLists = 4;
  template <typename T, typename IO>
  FUSED_OPTIM_ELEMENT static void Apply(const IO& io, const Hyper<T>& h, const Scalars<T>& /*s*/) {
    using namespace muon_cols;
    const math::MuonDirectionGrads<T> r =
        math::MuonDirectionBackward<T>(io.Load(kGDirection), io.Load(kGMomentumBufferNew), h);
    io.Store(kOutGrad, r.grad);
    io.Store(kOutMomentumBuffer, r.buf);
  }
};

}  // namespace fused_optim::bind
