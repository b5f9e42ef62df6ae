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

// Whether the AVX2 build of the CPU loops may run: the CPU has AVX2 and FUSED_OPTIM_NO_AVX2 is
// unset (the switch exists so tests can check both builds give identical results).
bool UseAvx2();

template <typename Hyper>
using KernelFn = void (*)(const KernelTable&, const Hyper&);

template <typename Hyper>
void Launch(MultiTensorCall& call, KernelTable& table, KernelFn<Hyper> cpu_kernel,
            std::type_identity_t<KernelFn<Hyper>> cpu_avx2_kernel, std::type_identity_t<KernelFn<Hyper>> cuda_kernel,
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
    } else if (cpu_avx2_kernel != nullptr && UseAvx2()) {
      cpu_avx2_kernel(table, hyper);
    } else {
      cpu_kernel(table, hyper);
    }
  }
  call.Finish();
}

#if defined(__x86_64__) && defined(__GNUC__)
#define FUSED_OPTIM_CPU_AVX2_KERNEL(name) (&::fused_optim::cpu_avx2::name)
#else
#define FUSED_OPTIM_CPU_AVX2_KERNEL(name) nullptr
#endif

#define FUSED_OPTIM_LAUNCH(call, table, name, hyper)                                                     \
  ::fused_optim::Launch(call, table, &::fused_optim::cpu::name, FUSED_OPTIM_CPU_AVX2_KERNEL(name), \
                        FUSED_OPTIM_CUDA_KERNEL(name), hyper)

using OptionalTensorList = c10::List<std::optional<at::Tensor>>;
using TensorVector = std::vector<at::Tensor>;

}  // namespace fused_optim
