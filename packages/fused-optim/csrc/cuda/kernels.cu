// The CUDA side of every kernel: each binding (math/<algo>.h) runs over every element of a
// KernelTable (csrc/kernels.h); one launch updates up to kTensorsPerLaunch tensors of a call, each
// block owning one chunk of one tensor.
// Depends on the CUDA runtime only (no torch headers), so nvcc compiles it in seconds.
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cstdint>
#include <stdexcept>
#include <string>

#include "kernels.h"

namespace fused_optim::cuda {

inline constexpr int kBlockSize = 256;
// Elements per block. Small chunks give many blocks, and many resident threads are what hides
// memory latency here: an element's loads cannot be hoisted above the previous element's stores
// (the lists may alias as far as the compiler knows), so each thread has one access in flight.
inline constexpr int64_t kChunkSize = 2048;
inline constexpr int kTensorsPerLaunch = 32;
inline constexpr int kMaxScalars = 5;
inline constexpr int kMaxState = 3;                    // state scalars per tensor (ASGD's eta, mu and step)
inline constexpr int64_t kMaxGridBlocks = 2147483647;  // gridDim.x limit

// Passed by value as the kernel argument (CUDA >= 12.1 allows 32 KiB of kernel parameters).
template <int NL>
struct LaunchMeta {
  void* dst[NL][kTensorsPerLaunch];
  const void* src[NL][kTensorsPerLaunch];
  int64_t numel[kTensorsPerLaunch];
  double scalars[kTensorsPerLaunch][kMaxScalars];
  StateScalar state[kTensorsPerLaunch][kMaxState];  // read by the set-up, written by AdvanceKernel
  DType default_dtype;
  // Block b works on the slot t with first_block[t] <= b < first_block[t + 1].
  int64_t first_block[kTensorsPerLaunch + 1];
  // The table's AMP arguments (KernelTable::grad_scale), the same for every launch of a call.
  const float* grad_scale;
  const float* found_inf;
  int grad_col;
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
__global__ void __launch_bounds__(kBlockSize)
    MultiTensorKernel(const __grid_constant__ LaunchMeta<NL> meta, const Op op) {
  if (meta.found_inf != nullptr && *meta.found_inf != 0.0f) return;  // torch.amp skips this step
  const int64_t block = blockIdx.x;
  int t = 0;
  while (meta.first_block[t + 1] <= block) ++t;  // at most kTensorsPerLaunch steps, uniform per block
  const int64_t begin = (block - meta.first_block[t]) * kChunkSize;
  const int64_t end = begin + kChunkSize < meta.numel[t] ? begin + kChunkSize : meta.numel[t];
  // The per-tensor scalars once per thread: state scalars are loads the compiler could not hoist
  // above the element loop's stores.
  const auto scalars = op.Scalars(meta, t);
  for (int64_t i = begin + threadIdx.x; i < end; i += blockDim.x) op(meta, t, i, scalars);
}

// After MultiTensorKernel on the same stream (so no block still reads them): each slot's state
// scalars advance, one thread per tensor.
template <int NL, typename Op>
__global__ void AdvanceKernel(const __grid_constant__ LaunchMeta<NL> meta, int slots, const Op op) {
  const int t = static_cast<int>(threadIdx.x);
  if (t < slots) op.Advance(meta, t);
}

inline void CheckLaunch(const char* what) {
  const cudaError_t err = cudaGetLastError();
  if (err != cudaSuccess) {
    throw std::runtime_error(std::string("fused_optim: CUDA launch of ") + what +
                             " failed: " + cudaGetErrorString(err));
  }
}

// Runs `op` on every element of every tensor of the table, on the table's stream: one launch per
// kTensorsPerLaunch non-empty tensors, one block per chunk of each.
template <int NL, typename Op>
void LaunchMultiTensor(const KernelTable& table, const Op& op, const char* what) {
  static_assert(sizeof(LaunchMeta<NL>) <= 32000, "kernel parameters over the CUDA limit");
  if (table.num_lists != NL) throw std::logic_error(std::string("fused_optim: wrong list count for ") + what);
  if (table.num_scalars > kMaxScalars) throw std::logic_error("fused_optim: too many per-tensor scalars");
  cudaStream_t stream = static_cast<cudaStream_t>(table.stream);
  if (table.num_state > kMaxState) throw std::logic_error("fused_optim: too many state scalars");
  LaunchMeta<NL> meta{};
  meta.default_dtype = table.default_dtype;
  meta.grad_scale = table.grad_scale;
  meta.found_inf = table.found_inf;
  meta.grad_col = table.grad_col;
  int slot = 0;
  int64_t blocks = 0;
  const auto run = [&]() {
    meta.first_block[slot] = blocks;
    if (blocks > 0) {
      MultiTensorKernel<NL, Op><<<static_cast<unsigned>(blocks), kBlockSize, 0, stream>>>(meta, op);
      CheckLaunch(what);
    }
    if (table.advance_state) {
      AdvanceKernel<NL, Op><<<1, kTensorsPerLaunch, 0, stream>>>(meta, slot, op);
      CheckLaunch(what);
    }
    slot = 0;
    blocks = 0;
  };
  for (int64_t t = 0; t < table.num_tensors; ++t) {
    const int64_t n = table.numel[t];
    if (n == 0 && !table.advance_state) continue;  // an empty tensor's state still advances
    const int64_t chunks = (n + kChunkSize - 1) / kChunkSize;
    if (blocks + chunks > kMaxGridBlocks && slot > 0) run();  // a grid holds 2^31 - 1 blocks
    for (int l = 0; l < NL; ++l) {
      meta.dst[l][slot] = table.dst[t * NL + l];
      meta.src[l][slot] = table.src[t * NL + l];
    }
    meta.numel[slot] = n;
    for (int k = 0; k < table.num_scalars; ++k) meta.scalars[slot][k] = table.Scalar(t, k);
    for (int k = 0; k < table.num_state; ++k) meta.state[slot][k] = table.State(t)[k];
    meta.first_block[slot] = blocks;
    blocks += chunks;
    if (++slot == kTensorsPerLaunch) run();
  }
  if (slot > 0) run();
}

// A binding's view of one element (see math/common.h): an absent column reads 0 and
// drops its store.
template <typename S, typename T, int NL>
struct ElementIO {
  const LaunchMeta<NL>& meta;
  int t;
  int64_t i;
  __device__ T Load(int col) const { return LoadOr0<T, S>(meta.src[col][t], i); }
  __device__ void Store(int col, T value) const { StoreIf<S>(meta.dst[col][t], i, value); }
};

template <typename K, typename S, typename T>
struct BoundOp {
  typename K::template Hyper<T> h;
  template <int NL>
  __device__ auto Scalars(const LaunchMeta<NL>& meta, int t) const {
    return TensorScalars<K, T, __half, __nv_bfloat16>(meta.scalars[t], meta.state[t], meta.default_dtype);
  }
  template <int NL>
  __device__ void operator()(const LaunchMeta<NL>& meta, int t, int64_t i,
                             const typename K::template Scalars<T>& s) const {
    if (meta.grad_scale != nullptr) {  // torch.amp's unscale, stored back before the step reads it
      S* grad = static_cast<S*>(meta.dst[meta.grad_col][t]);
      const T inv_scale = static_cast<T>(1) / static_cast<T>(*meta.grad_scale);  // as the CPU loops
      grad[i] = static_cast<S>(static_cast<T>(grad[i]) * inv_scale);
    }
    K::Apply(ElementIO<S, T, NL>{meta, t, i}, h, s);
  }
  template <int NL>
  __device__ void Advance(const LaunchMeta<NL>& meta, int t) const {
    AdvanceState<K, __half, __nv_bfloat16>(meta.scalars[t], meta.state[t], meta.default_dtype);
  }
};

// Runs binding K over every element of the table, on the table's stream.
template <typename K>
void RunKernel(const KernelTable& table, const typename K::template Hyper<double>& hyper, const char* what) {
  DispatchFloating<__half, __nv_bfloat16>(table.dtype, [&]<typename S, typename T>() {
    LaunchMultiTensor<K::kLists>(table, BoundOp<K, S, T>{hyper.template To<T>()}, what);
  });
}

#define FUSED_OPTIM_DEFINE_CUDA_KERNEL(name)                                    \
  void name(const KernelTable& table, const bind::name::Hyper<double>& hyper) { \
    RunKernel<bind::name>(table, hyper, #name);                                 \
  }

FUSED_OPTIM_FOR_EACH_KERNEL(FUSED_OPTIM_DEFINE_CUDA_KERNEL)

}  // namespace fused_optim::cuda
