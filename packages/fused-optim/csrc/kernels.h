// The device kernels behind every op: list layouts shared by the op glue (csrc/ops), the CPU
// loops (csrc/cpu) and the CUDA launches (csrc/cuda). Plain C++ only, so nvcc needs no torch.
#pragma once

#include "fused_optim/math/adadelta.h"
#include "fused_optim/math/adagrad.h"
#include "fused_optim/math/adam.h"
#include "fused_optim/math/adamax.h"
#include "fused_optim/math/radam.h"
#include "fused_optim/math/rmsprop.h"
#include "fused_optim/math/sgd.h"
#include "kernel_table.h"

namespace fused_optim {

// Column order of each KernelTable. A step table is used by the in-place op (dst == src) and by
// the functional op (dst = fresh output, src = caller's tensor). A backward table lists the
// incoming gradients, the forward inputs and then the outgoing gradients.
namespace sgd_cols {
enum : int { kParam, kGrad, kBuf };
enum : int { kGParamNew, kGBufNew, kOutParam, kOutGrad, kOutBuf };  // backward
}  // namespace sgd_cols
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
namespace adagrad_cols {
enum : int { kParam, kGrad, kSum };
enum : int { kGParamNew = 0, kGSumNew, kInParam, kInGrad, kInSum, kOutParam, kOutGrad, kOutSum };
enum : int { kClr = 0 };
}  // namespace adagrad_cols
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
enum : int { kClr = 0 };
}  // namespace adamax_cols
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
enum : int { kBc1 = 0, kBc2Sqrt, kRect, kAdaptive };
}  // namespace radam_cols

// Hyper-parameters travel in double; each kernel narrows them to its math type.
#define FUSED_OPTIM_DECLARE_KERNELS(ns)                                                                \
  namespace ns {                                                                                       \
  void SgdStep(const KernelTable& table, const math::SgdHyper<double>& hyper);                         \
  void SgdBackward(const KernelTable& table, const math::SgdHyper<double>& hyper);                     \
  void AdamStep(const KernelTable& table, const math::AdamHyper<double>& hyper);                       \
  void AdamBackward(const KernelTable& table, const math::AdamHyper<double>& hyper);                   \
  void AdamDirection(const KernelTable& table, const math::AdamDirectionHyper<double>& hyper);         \
  void AdamDirectionBackward(const KernelTable& table, const math::AdamDirectionHyper<double>& hyper); \
  void RmspropStep(const KernelTable& table, const math::RmspropHyper<double>& hyper);                 \
  void RmspropBackward(const KernelTable& table, const math::RmspropHyper<double>& hyper);             \
  void AdagradStep(const KernelTable& table, const math::AdagradHyper<double>& hyper);                 \
  void AdagradBackward(const KernelTable& table, const math::AdagradHyper<double>& hyper);             \
  void AdadeltaStep(const KernelTable& table, const math::AdadeltaHyper<double>& hyper);               \
  void AdadeltaBackward(const KernelTable& table, const math::AdadeltaHyper<double>& hyper);           \
  void AdamaxStep(const KernelTable& table, const math::AdamaxHyper<double>& hyper);                   \
  void AdamaxBackward(const KernelTable& table, const math::AdamaxHyper<double>& hyper);               \
  void RadamStep(const KernelTable& table, const math::RadamHyper<double>& hyper);                     \
  void RadamBackward(const KernelTable& table, const math::RadamHyper<double>& hyper);                 \
  }

FUSED_OPTIM_DECLARE_KERNELS(cpu)
FUSED_OPTIM_DECLARE_KERNELS(cpu_avx2)    // the same loops built for AVX2 (x86-64 only)
FUSED_OPTIM_DECLARE_KERNELS(cpu_avx512)  // and for AVX-512F
FUSED_OPTIM_DECLARE_KERNELS(cuda)

#undef FUSED_OPTIM_DECLARE_KERNELS

}  // namespace fused_optim
