// Routes a prepared KernelTable to the CPU loop or the CUDA launch for the call's device.
#pragma once

#include <c10/util/Exception.h>

#include <type_traits>

#include "kernels.h"
#include "multi_tensor.h"

#ifdef FUSED_OPTIM_WITH_CUDA
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>
#define FUSED_OPTIM_CUDA_KERNEL(name) (&::fused_optim::cuda::name)
#else
#define FUSED_OPTIM_CUDA_KERNEL(name) nullptr
#endif

namespace fused_optim {

// Which build of the CPU loops runs: the widest the CPU supports, capped by the environment
// variable FUSED_OPTIM_CPU_ISA=baseline|avx2|avx512 (tests use it to check that every build gives
// identical results).
enum class CpuIsa { kBaseline, kAvx2, kAvx512 };
CpuIsa SelectedCpuIsa();

template <typename Hyper>
using KernelFn = void (*)(const KernelTable&, const Hyper&);

template <typename Hyper>
void Launch(MultiTensorCall& call, KernelTable& table, KernelFn<Hyper> cpu_kernel,
            std::type_identity_t<KernelFn<Hyper>> cpu_avx2_kernel,
            std::type_identity_t<KernelFn<Hyper>> cpu_avx512_kernel, std::type_identity_t<KernelFn<Hyper>> cuda_kernel,
            const Hyper& hyper) {
  if (table.num_tensors > 0) {
    if (call.on_cuda()) {
#ifdef FUSED_OPTIM_WITH_CUDA
      const c10::cuda::CUDAGuard guard(call.device());
      table.stream = c10::cuda::getCurrentCUDAStream().stream();
      cuda_kernel(table, hyper);
#else
      (void)cuda_kernel;
      TORCH_CHECK(false, "fused_optim was built without CUDA kernels (FUSED_OPTIM_CUDA=OFF or a CPU-only torch)");
#endif
    } else if (cpu_avx512_kernel != nullptr && SelectedCpuIsa() == CpuIsa::kAvx512) {
      cpu_avx512_kernel(table, hyper);
    } else if (cpu_avx2_kernel != nullptr && SelectedCpuIsa() >= CpuIsa::kAvx2) {
      cpu_avx2_kernel(table, hyper);
    } else {
      cpu_kernel(table, hyper);
    }
  }
  call.Finish();
}

#if defined(__x86_64__) && defined(__GNUC__)
#define FUSED_OPTIM_CPU_AVX2_KERNEL(name) (&::fused_optim::cpu_avx2::name)
#define FUSED_OPTIM_CPU_AVX512_KERNEL(name) (&::fused_optim::cpu_avx512::name)
#else
#define FUSED_OPTIM_CPU_AVX2_KERNEL(name) nullptr
#define FUSED_OPTIM_CPU_AVX512_KERNEL(name) nullptr
#endif

#define FUSED_OPTIM_LAUNCH(call, table, name, hyper)                                               \
  ::fused_optim::Launch(call, table, &::fused_optim::cpu::name, FUSED_OPTIM_CPU_AVX2_KERNEL(name), \
                        FUSED_OPTIM_CPU_AVX512_KERNEL(name), FUSED_OPTIM_CUDA_KERNEL(name), hyper)

using OptionalTensorList = c10::List<std::optional<at::Tensor>>;
using TensorVector = std::vector<at::Tensor>;

}  // namespace fused_optim
