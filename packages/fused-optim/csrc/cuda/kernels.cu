// The CUDA side of every kernel: each binding (math/<algo>.h) runs over every element of a
// KernelTable (csrc/kernels.h) in the launches that csrc/cuda/launch_plan.h plans (one block per
// chunk of a tensor, as many tensors a launch as the kernel argument holds). This file only launches: the plan,
// its limits and the kernel body are host-testable C++ in launch_plan.h.
// Also the device's reductions (csrc/kernels.h): the per-tensor sums (SumsOfProducts, Adafactor's
// norms) and Adafactor's matrix passes (csrc/cuda/matrix_passes.h).
// Depends on the CUDA runtime only (no torch headers), so nvcc compiles it in seconds.
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cstdint>
#include <stdexcept>
#include <string>

#include "cuda/launch_plan.h"
#include "cuda/matrix_passes.h"
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

// The sum of `value` over each group of `group` threads of the block (the whole block by default),
// in the order of GroupTree (launch_plan.h): each level of the tree run by every thread, a barrier
// after each; each group's first thread returns its group's sum.
__device__ double GroupSum(double value, int group = kBlockSize) {
  __shared__ double values[kBlockSize];
  const int thread = static_cast<int>(threadIdx.x);
  values[thread] = value;
  __syncthreads();
  for (int stride = group / 2; stride > 0; stride /= 2) {
    TreeLevel(values, thread, stride, group);
    __syncthreads();
  }
  return values[thread - thread % group];
}

// The two passes of SumsOfProducts (launch_plan.h's ForEachSumsLaunch).
template <typename S, typename T>
__global__ void __launch_bounds__(kBlockSize) ChunkSumsKernel(const __grid_constant__ SumsMeta meta, double* partials) {
  const double sum = GroupSum(ChunkProducts<S, T>(meta, blockIdx.x, threadIdx.x, blockDim.x));
  if (threadIdx.x == 0) partials[PartialOf(meta, blockIdx.x)] = sum;
}

__global__ void __launch_bounds__(kBlockSize)
    TotalsKernel(const __grid_constant__ TotalsMeta meta, const double* partials, double* out) {
  const double sum = GroupSum(PartialsShare(meta, partials, blockIdx.x, threadIdx.x, blockDim.x));
  if (threadIdx.x == 0) out[meta.first_tensor + blockIdx.x] = Total<__half, __nv_bfloat16>(meta, blockIdx.x, sum);
}

void SumsOfProducts(const KernelTable& table, const DeviceSumOf* sums, int num_sums, double* partials, double* out) {
  cudaStream_t stream = static_cast<cudaStream_t>(table.stream);
  DispatchFloating<__half, __nv_bfloat16>(table.dtype, [&]<typename S, typename T>() {
    ForEachSumsLaunch(
        table, std::span<const DeviceSumOf>(sums, num_sums),
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

// Pass P of the matrix passes (matrix_passes.h): each thread's share of the block's item, and for
// kRowNorms each row's group's sum of them stored as the row's norm.
template <MatrixPass P, typename S, typename T>
__global__ void __launch_bounds__(kBlockSize) MatrixKernel(const __grid_constant__ MatrixMeta meta, double* partials) {
  const MatrixItem at = ItemOf(meta, blockIdx.x);
  const double share = MatrixThread<P, S, T>(meta, partials, at, threadIdx.x, blockDim.x);
  if constexpr (P == MatrixPass::kRowNorms) {
    const double sum = GroupSum(share, RowGroup(meta.cols[at.slot]));
    const int64_t row = GroupRow(meta, at, threadIdx.x);
    if (row >= 0) StoreNorm<S, T>(meta.out[at.slot], row, sum);
  }
}

// Launches each planned launch of a matrix pass on `stream` (storage type S, math type T).
template <typename S, typename T>
struct MatrixLauncher {
  cudaStream_t stream;
  double* partials;
  const char* what;
  template <MatrixPass P>
  void operator()(Pass<P>, const MatrixMeta& meta, int64_t blocks) const {
    MatrixKernel<P, S, T><<<static_cast<unsigned>(blocks), kBlockSize, 0, stream>>>(meta, partials);
    CheckLaunch(what);
  }
};

void NormsAlongRowsAndColumns(DType dtype, int64_t num_tensors, const void* const* data, const int64_t* dims,
                              void* const* row_norms, void* const* col_norms, double* partials, void* stream) {
  DispatchFloating<__half, __nv_bfloat16>(dtype, [&]<typename S, typename T>() {
    const MatrixLauncher<S, T> launch{static_cast<cudaStream_t>(stream), partials, "NormsAlongRowsAndColumns"};
    ForEachNormsLaunch(num_tensors, dims, data, row_norms, col_norms, launch);
  });
}

void ProductsOfRowsAndColumns(DType dtype, int64_t num_tensors, const void* const* rows, const void* const* cols,
                              void* const* out, const int64_t* dims, void* stream) {
  DispatchFloating<__half, __nv_bfloat16>(dtype, [&]<typename S, typename T>() {
    const MatrixLauncher<S, T> launch{static_cast<cudaStream_t>(stream), nullptr, "ProductsOfRowsAndColumns"};
    ForEachProductsLaunch(num_tensors, dims, rows, cols, out, launch);
  });
}

#define FUSED_OPTIM_DEFINE_CUDA_KERNEL(name)                                    \
  void name(const KernelTable& table, const bind::name::Hyper<double>& hyper) { \
    RunKernel<bind::name>(table, hyper, #name);                                 \
  }

FUSED_OPTIM_FOR_EACH_KERNEL(FUSED_OPTIM_DEFINE_CUDA_KERNEL)

}  // namespace fused_optim::cuda
