// The contract between the op glue (csrc/ops) and the devices (csrc/cpu/kernels.cpp,
// csrc/cuda/kernels.cu): the KernelTable one call is described by, and the list of every kernel.
// Plain C++ with no torch types, so nvcc compiles the CUDA side against the CUDA runtime alone.
#pragma once

#include <cstdint>
#include <vector>

#include "fused_optim/math/adadelta.h"
#include "fused_optim/math/adafactor.h"
#include "fused_optim/math/adagrad.h"
#include "fused_optim/math/adam.h"
#include "fused_optim/math/adamax.h"
#include "fused_optim/math/adan.h"
#include "fused_optim/math/asgd.h"
#include "fused_optim/math/lion.h"
#include "fused_optim/math/nadam.h"
#include "fused_optim/math/radam.h"
#include "fused_optim/math/rmsprop.h"
#include "fused_optim/math/rprop.h"
#include "fused_optim/math/sgd.h"

// Every kernel, by its binding's name (fused_optim::bind::<name>, written in math/<algo>.h).
// One row per algorithm; each device file expands this list once (X is applied to each name).
// clang-format off
#define FUSED_OPTIM_FOR_EACH_KERNEL(X)                                   \
  X(SgdStep) X(SgdBackward)                                              \
  X(AdamStep) X(AdamBackward) X(AdamDirection) X(AdamDirectionBackward)  \
  X(RmspropStep) X(RmspropBackward)                                      \
  X(AdagradStep) X(AdagradBackward)                                      \
  X(AdadeltaStep) X(AdadeltaBackward)                                    \
  X(AdamaxStep) X(AdamaxBackward)                                        \
  X(RadamStep) X(RadamBackward)                                          \
  X(LionStep) X(LionBackward)                                            \
  X(AdanStep) X(AdanBackward)                                            \
  X(NadamStep) X(NadamBackward)                                          \
  X(RpropStep) X(RpropBackward)                                          \
  X(AsgdStep) X(AsgdBackward)                                            \
  X(AdafactorVectorDirection) X(AdafactorFactoredDirection) X(AdafactorApply)  \
  X(AdafactorVectorDirectionBackward) X(AdafactorFactoredDirectionBackward)     \
  X(AdafactorApplyBackward)
// clang-format on

namespace fused_optim {

enum class DType : int { kFloat, kDouble, kHalf, kBFloat16 };

// One multi-tensor call. Rows are tensor indices, columns are the op's lists (params, grads,
// states...), in the order of the binding's column enum. `dst` is where a list's result goes;
// `src` is where its input values come from. They are the same pointer for in-place lists and
// read-only inputs; a functional op points `dst` at a fresh output and `src` at the caller's
// tensor. An absent optional input has both null (read as 0). A backward table lists the incoming
// gradients, the forward inputs and then the outgoing gradients.
struct KernelTable {
  DType dtype = DType::kFloat;
  int num_lists = 0;
  int num_scalars = 0;  // per-tensor scalars, e.g. bias corrections that depend on each step count
  int64_t num_tensors = 0;
  std::vector<void*> dst;
  std::vector<const void*> src;
  std::vector<int64_t> numel;
  std::vector<double> scalars;
  void* stream = nullptr;  // cudaStream_t for CUDA tables

  template <typename S>
  S* Dst(int64_t t, int list) const {
    return static_cast<S*>(dst[t * num_lists + list]);
  }
  template <typename S>
  const S* Src(int64_t t, int list) const {
    return static_cast<const S*>(src[t * num_lists + list]);
  }
  double Scalar(int64_t t, int k) const { return scalars[t * num_scalars + k]; }
};

// Calls f.template operator()<storage type, math type>() for the table's dtype; each device names
// its own 16-bit storage types (their math runs in float).
template <typename Half, typename BFloat16, typename F>
void DispatchFloating(DType dtype, F&& f) {
  if (dtype == DType::kFloat) return f.template operator()<float, float>();
  if (dtype == DType::kDouble) return f.template operator()<double, double>();
  if (dtype == DType::kHalf) return f.template operator()<Half, float>();
  f.template operator()<BFloat16, float>();  // DType::kBFloat16
}

// Each kernel once per device build: the CPU loops for the baseline ISA, AVX2 and AVX-512F (x86-64
// only; the widest the machine has runs), the CUDA launch, and that launch emulated on the host
// (a test mode, csrc/cuda/launch_emulation.cpp). Hyper-parameters travel in double; each kernel
// narrows them to its math type.
#define FUSED_OPTIM_DECLARE_KERNEL(name) void name(const KernelTable& table, const bind::name::Hyper<double>& hyper);
namespace cpu {
FUSED_OPTIM_FOR_EACH_KERNEL(FUSED_OPTIM_DECLARE_KERNEL)
}
namespace cpu_avx2 {
FUSED_OPTIM_FOR_EACH_KERNEL(FUSED_OPTIM_DECLARE_KERNEL)
}
namespace cpu_avx512 {
FUSED_OPTIM_FOR_EACH_KERNEL(FUSED_OPTIM_DECLARE_KERNEL)
}
namespace cuda {
FUSED_OPTIM_FOR_EACH_KERNEL(FUSED_OPTIM_DECLARE_KERNEL)
}
namespace cuda_emulation {
FUSED_OPTIM_FOR_EACH_KERNEL(FUSED_OPTIM_DECLARE_KERNEL)
int64_t Launches();  // emulated launches so far (tests check that the mode took effect)
// Lowers the emulated grid's block limit (tests: small tensors then span launches); returns the
// previous one.
int64_t SetGridLimit(int64_t max_blocks);
}  // namespace cuda_emulation
#undef FUSED_OPTIM_DECLARE_KERNEL

}  // namespace fused_optim
