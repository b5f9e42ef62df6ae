// The CUDA side of every kernel: each binding (math/<algo>.h) runs over every element of a
// KernelTable (csrc/kernels.h) in the launches that csrc/cuda/launch_plan.h plans (one block per
// chunk of a tensor, as many tensors a launch as the kernel argument holds). This file only launches: the plan,
// its limits and the kernel body are host-testable C++ in launch_plan.h.
// Also the device's per-tensor sums of products (SumsOfProducts, Adafactor's norms).
// Depends on the CUDA runtime only (no torch headers), so nvcc compiles it in seconds.
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cstdint>
#include <stdexcept>
#include <string>

#include "cuda/launch_plan.h"
#include "kernels.h"

namespace fused_optim::cuda {

template <typename Meta, typename Op>
__global__ void __launch_bounds__(kBlockSize) MultiTensorKernel(const __grid_constant__ Meta meta, const Op op) {
  RunBlock(meta, op, blockIdx.x, threadIdx.x, blockDim.x);
}

// After MultiTensorKernel on the same stream (so no block still reads them): the state scalars and
// device step counters of each slot that ends its tensor advance, one thread per slot.
template <typename Meta, typename Op>
__global__ void AdvanceKernel(const __grid_constant__ Meta meta, const Op op) {
  AdvanceSlot(meta, op, static_cast<int>(threadIdx.x));
}

inline void CheckLaunch(const char* what) {
  const cudaError_t err = cudaGetLastError();
  if (err != cudaSuccess) {
    throw std::runtime_error(std::string("fused_optim: CUDA launch of ") + what +
                             " failed: " + cudaGetErrorString(err));
  }
}

// Runs binding K over every element of the table, on the table's stream.
template <typename K>
void RunKernel(const KernelTable& table, const typename K::template Hyper<double>& hyper, const char* what) {
  cudaStream_t stream = static_cast<cudaStream_t>(table.stream);
  DispatchFloating<__half, __nv_bfloat16>(table.dtype, [&]<typename S, typename T>() {
    using Op = BoundOp<K, S, T, __half, __nv_bfloat16>;
    const Op op{hyper.template To<T>(), hyper};
    ForEachLaunch<K>(table, what, [&](const LaunchMeta<K>& meta, int64_t blocks) {
      if (blocks > 0) {
        MultiTensorKernel<LaunchMeta<K>, Op><<<static_cast<unsigned>(blocks), kBlockSize, 0, stream>>>(meta, op);
        CheckLaunch(what);
      }
      if (AdvancesAfterUpdate(table)) {
        AdvanceKernel<LaunchMeta<K>, Op><<<1, meta.num_slots, 0, stream>>>(meta, op);
        CheckLaunch(what);
      }
    });
  });
}

// The sum of every thread's `value` in its block, in the order of BlockTree (launch_plan.h): each
// level of the tree run by every thread, a barrier after each; thread 0 returns the sum.
__device__ double BlockSum(double value) {
  __shared__ double values[kBlockSize];
  values[threadIdx.x] = value;
  __syncthreads();
  for (int stride = kBlockSize / 2; stride > 0; stride /= 2) {
    TreeLevel(values, static_cast<int>(threadIdx.x), stride);
    __syncthreads();
  }
  return values[0];
}

// The two passes of SumsOfProducts (launch_plan.h's ForEachSumsLaunch).
template <typename S, typename T>
__global__ void __launch_bounds__(kBlockSize) ChunkSumsKernel(const __grid_constant__ SumsMeta meta, double* partials) {
  const double sum = BlockSum(ChunkProducts<S, T>(meta, blockIdx.x, threadIdx.x, blockDim.x));
  if (threadIdx.x == 0) partials[PartialOf(meta, blockIdx.x)] = sum;
}

__global__ void __launch_bounds__(kBlockSize)
    TotalsKernel(const __grid_constant__ TotalsMeta meta, const double* partials, double* out) {
  const double sum = BlockSum(PartialsShare(meta, partials, blockIdx.x, threadIdx.x, blockDim.x));
  if (threadIdx.x == 0) out[meta.first_tensor + blockIdx.x] = Total<__half, __nv_bfloat16>(meta, sum);
}

void SumsOfProducts(const KernelTable& table, int a, int b, bool norms, double* partials, double* out) {
  cudaStream_t stream = static_cast<cudaStream_t>(table.stream);
  DispatchFloating<__half, __nv_bfloat16>(table.dtype, [&]<typename S, typename T>() {
    ForEachSumsLaunch(
        table, a, b, norms,
        [&](const SumsMeta& meta, int64_t blocks) {
          ChunkSumsKernel<S, T><<<static_cast<unsigned>(blocks), kBlockSize, 0, stream>>>(meta, partials);
          CheckLaunch("SumsOfProducts");
        },
        [&](const TotalsMeta& meta, int64_t blocks) {
          TotalsKernel<<<static_cast<unsigned>(blocks), kBlockSize, 0, stream>>>(meta, partials, out);
          CheckLaunch("SumsOfProducts");
        });
  });
}

#define FUSED_OPTIM_DEFINE_CUDA_KERNEL(name)                                    \
  void name(const KernelTable& table, const bind::name::Hyper<double>& hyper) { \
    RunKernel<bind::name>(table, hyper, #name);                                 \
  }

FUSED_OPTIM_FOR_EACH_KERNEL(FUSED_OPTIM_DEFINE_CUDA_KERNEL)

}  // namespace fused_optim::cuda
