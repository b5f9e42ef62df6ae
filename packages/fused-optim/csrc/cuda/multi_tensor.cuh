// The CUDA multi-tensor launch: one kernel launch updates up to kTensorsPerLaunch tensors of a
// call (more launches only for very large groups), each block owning one chunk of one tensor.
// The per-algorithm .cu files supply an element functor; the math lives in the shared headers.
// Depends on the CUDA runtime only (no torch headers), so nvcc compiles it in seconds.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cstdint>
#include <stdexcept>
#include <string>

#include "kernel_table.h"

namespace fused_optim::cuda {

inline constexpr int kBlockSize = 512;
inline constexpr int64_t kChunkSize = 65536;  // elements per block
inline constexpr int kTensorsPerLaunch = 32;
inline constexpr int kBlocksPerLaunch = 640;
inline constexpr int kMaxScalars = 4;

// Passed by value as the kernel argument (CUDA >= 12.1 allows 32 KiB of kernel parameters).
template <int NL>
struct LaunchMeta {
  void* dst[NL][kTensorsPerLaunch];
  const void* src[NL][kTensorsPerLaunch];
  int64_t numel[kTensorsPerLaunch];
  double scalars[kTensorsPerLaunch][kMaxScalars];
  int block_tensor[kBlocksPerLaunch];
  int block_chunk[kBlocksPerLaunch];
};

template <typename T, typename S>
__device__ __forceinline__ T LoadOr0(const void* p, int64_t i) {
  return p ? static_cast<T>(static_cast<const S*>(p)[i]) : T(0);
}

template <typename S, typename T>
__device__ __forceinline__ void StoreIf(void* p, int64_t i, T value) {
  if (p) static_cast<S*>(p)[i] = static_cast<S>(value);
}

template <int NL, typename Op>
__global__ void __launch_bounds__(kBlockSize) MultiTensorKernel(const __grid_constant__ LaunchMeta<NL> meta,
                                                               const Op op) {
  const int t = meta.block_tensor[blockIdx.x];
  const int64_t begin = static_cast<int64_t>(meta.block_chunk[blockIdx.x]) * kChunkSize;
  const int64_t end = begin + kChunkSize < meta.numel[t] ? begin + kChunkSize : meta.numel[t];
  for (int64_t i = begin + threadIdx.x; i < end; i += blockDim.x) op(meta, t, i);
}

inline void CheckLaunch(const char* what) {
  const cudaError_t err = cudaGetLastError();
  if (err != cudaSuccess) {
    throw std::runtime_error(std::string("fused_optim: CUDA launch of ") + what + " failed: " +
                             cudaGetErrorString(err));
  }
}

template <int NL>
void CopySlot(LaunchMeta<NL>& meta, int from, int to) {
  for (int l = 0; l < NL; ++l) {
    meta.dst[l][to] = meta.dst[l][from];
    meta.src[l][to] = meta.src[l][from];
  }
  meta.numel[to] = meta.numel[from];
  for (int k = 0; k < kMaxScalars; ++k) meta.scalars[to][k] = meta.scalars[from][k];
}

// Runs `op` on every element of every tensor of the table, on the table's stream.
template <int NL, typename Op>
void LaunchMultiTensor(const KernelTable& table, const Op& op, const char* what) {
  static_assert(sizeof(LaunchMeta<NL>) <= 32000, "kernel parameters over the CUDA limit");
  if (table.num_lists != NL) throw std::logic_error(std::string("fused_optim: wrong list count for ") + what);
  if (table.num_scalars > kMaxScalars) throw std::logic_error("fused_optim: too many per-tensor scalars");
  cudaStream_t stream = static_cast<cudaStream_t>(table.stream);
  LaunchMeta<NL> meta{};
  int slot = 0;
  int blocks = 0;
  const auto run = [&](int num_blocks) {
    MultiTensorKernel<NL, Op><<<num_blocks, kBlockSize, 0, stream>>>(meta, op);
    CheckLaunch(what);
  };
  for (int64_t t = 0; t < table.num_tensors; ++t) {
    const int64_t n = table.numel[t];
    if (n == 0) continue;
    for (int l = 0; l < NL; ++l) {
      meta.dst[l][slot] = table.dst[t * NL + l];
      meta.src[l][slot] = table.src[t * NL + l];
    }
    meta.numel[slot] = n;
    for (int k = 0; k < table.num_scalars; ++k) meta.scalars[slot][k] = table.Scalar(t, k);
    const int64_t chunks = (n + kChunkSize - 1) / kChunkSize;
    for (int64_t c = 0; c < chunks; ++c) {
      meta.block_tensor[blocks] = slot;
      meta.block_chunk[blocks] = static_cast<int>(c);
      ++blocks;
      const bool last_chunk = c == chunks - 1;
      if (blocks == kBlocksPerLaunch || (slot + 1 == kTensorsPerLaunch && last_chunk)) {
        run(blocks);
        blocks = 0;
        if (last_chunk) {
          slot = -1;  // the next tensor starts a fresh table
        } else {
          CopySlot(meta, slot, 0);  // this tensor's remaining chunks continue from slot 0
          slot = 0;
        }
      }
    }
    ++slot;
  }
  if (blocks > 0) run(blocks);
}

// Calls f.template operator()<storage type, math type>() for the table's dtype.
template <typename F>
void DispatchFloating(DType dtype, F&& f) {
  switch (dtype) {
    case DType::kFloat:
      f.template operator()<float, float>();
      break;
    case DType::kDouble:
      f.template operator()<double, double>();
      break;
    case DType::kHalf:
      f.template operator()<__half, float>();
      break;
    case DType::kBFloat16:
      f.template operator()<__nv_bfloat16, float>();
      break;
  }
}

}  // namespace fused_optim::cuda
