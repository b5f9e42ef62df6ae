// The device kernels behind every op. Each algorithm's table columns and their mapping to its math
// live once, in its binding (csrc/kernels/<algo>.h), shared by the op glue (csrc/ops), the CPU
// loops (csrc/cpu) and the CUDA launches (csrc/cuda). Plain C++ only, so nvcc needs no torch.
//
// Column order of each KernelTable: a step table is used by the in-place op (dst == src) and by
// the functional op (dst = fresh output, src = caller's tensor). A backward table lists the
// incoming gradients, the forward inputs and then the outgoing gradients.
#pragma once

#include "kernel_table.h"
#include "kernels/adadelta.h"
#include "kernels/adagrad.h"
#include "kernels/adam.h"
#include "kernels/adamax.h"
#include "kernels/radam.h"
#include "kernels/rmsprop.h"
#include "kernels/sgd.h"

// Every kernel, by its binding's name (X is applied to each).
// clang-format off
#define FUSED_OPTIM_FOR_EACH_KERNEL(X)                                   \
  X(SgdStep) X(SgdBackward)                                              \
  X(AdamStep) X(AdamBackward) X(AdamDirection) X(AdamDirectionBackward)  \
  X(RmspropStep) X(RmspropBackward)                                      \
  X(AdagradStep) X(AdagradBackward)                                      \
  X(AdadeltaStep) X(AdadeltaBackward)                                    \
  X(AdamaxStep) X(AdamaxBackward)                                        \
  X(RadamStep) X(RadamBackward)
// clang-format on

// Hyper-parameters travel in double; each kernel narrows them to its math type.
#define FUSED_OPTIM_DECLARE_KERNEL(name) void name(const KernelTable& table, const bind::name::Hyper<double>& hyper);

namespace fused_optim {
namespace cpu {
FUSED_OPTIM_FOR_EACH_KERNEL(FUSED_OPTIM_DECLARE_KERNEL)
}
namespace cpu_avx2 {  // the same loops built for AVX2 (x86-64 only)
FUSED_OPTIM_FOR_EACH_KERNEL(FUSED_OPTIM_DECLARE_KERNEL)
}
namespace cpu_avx512 {  // and for AVX-512F
FUSED_OPTIM_FOR_EACH_KERNEL(FUSED_OPTIM_DECLARE_KERNEL)
}
namespace cuda {
FUSED_OPTIM_FOR_EACH_KERNEL(FUSED_OPTIM_DECLARE_KERNEL)
}
}  // namespace fused_optim

#undef FUSED_OPTIM_DECLARE_KERNEL
