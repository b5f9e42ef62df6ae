// Device time of fused-optim's element-wise CUDA kernels, apart from torch and from the host: issue
// 23's bandwidth figure (the bytes a step reads and writes per second, as a share of a device-to-
// device copy timed in the same run). The kernels are csrc/cuda/launch_plan.h's, launched as
// csrc/cuda/kernels.cu launches them, over tensors of zeros; CUDA events time bursts of
// back-to-back launches, so neither torch's dispatch nor the host's share of a step is counted.
//
//   nvcc -std=c++20 -O3 --fmad=false -arch=sm_90 -I packages/fused-optim/csrc -I packages/fused-optim/include
//        [-DFUSED_OPTIM_CUDA_CHUNK_SIZE=4096] benchmarks/optim/kernel_bandwidth.cu -o kernel_bandwidth
//
// (--fmad=false as the wheel builds its kernels: the figures are those of the code the wheel runs.)
//   ./kernel_bandwidth            # a markdown table: one row per (kernel, dtype, shape)
//
// FUSED_OPTIM_CUDA_CHUNK_SIZE (elements per block; the wheel's is launch_plan.h's default) lets
// ci/gpu_check.sh compare builds that differ only in it, in one run.
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cstdio>
#include <cstdlib>
#include <vector>

#include "cuda/launch_plan.h"

namespace {

using fused_optim::DType;
using fused_optim::KernelTable;
namespace cuda = fused_optim::cuda;

void Check(cudaError_t err, const char* what) {
  if (err != cudaSuccess) {
    std::fprintf(stderr, "kernel_bandwidth: %s: %s\n", what, cudaGetErrorString(err));
    std::exit(1);
  }
}

template <typename Meta, typename Op>
__global__ void __launch_bounds__(cuda::kBlockSize) Kernel(const __grid_constant__ Meta meta, const Op op) {
  cuda::RunBlock(meta, op, blockIdx.x, threadIdx.x, blockDim.x);
}

// Binding K over the table, as kernels.cu's RunKernel launches it (no state scalars to advance).
template <typename K>
void Launch(const KernelTable& table, const typename K::template Hyper<double>& hyper) {
  fused_optim::DispatchFloating<__half, __nv_bfloat16>(table.dtype, [&]<typename S, typename T>() {
    using Op = cuda::BoundOp<K, S, T, __half, __nv_bfloat16>;
    const Op op{hyper.template To<T>(), hyper};
    cuda::ForEachLaunch<K>(table, "kernel_bandwidth", [&](const cuda::LaunchMeta<K>& meta, int64_t blocks) {
      Kernel<cuda::LaunchMeta<K>, Op><<<static_cast<unsigned>(blocks), cuda::kBlockSize>>>(meta, op);
    });
  });
}

// Microseconds per call of `f`: the best of 5 bursts of `calls` back-to-back calls, after 3.
template <typename F>
double MicrosecondsPerCall(F&& f, int calls) {
  for (int i = 0; i < 3; ++i) f();
  cudaEvent_t start, end;
  Check(cudaEventCreate(&start), "cudaEventCreate");
  Check(cudaEventCreate(&end), "cudaEventCreate");
  float best = 1e30f;
  for (int burst = 0; burst < 5; ++burst) {
    Check(cudaEventRecord(start), "cudaEventRecord");
    for (int i = 0; i < calls; ++i) f();
    Check(cudaEventRecord(end), "cudaEventRecord");
    Check(cudaEventSynchronize(end), "the burst");
    float ms = 0;
    Check(cudaEventElapsedTime(&ms, start, end), "cudaEventElapsedTime");
    best = ms < best ? ms : best;
  }
  Check(cudaEventDestroy(start), "cudaEventDestroy");
  Check(cudaEventDestroy(end), "cudaEventDestroy");
  return 1e3 * best / calls;
}

// `tensors` tensors splitting `lists` buffers (columns `present` of the binding's `num_lists`, the
// others absent), each column in place (dst = src), with `num_scalars` per-tensor scalars.
KernelTable MakeTable(DType dtype, int num_lists, const std::vector<int>& present, int num_scalars,
                      const std::vector<void*>& buffers, int64_t total, int tensors, int element_size) {
  KernelTable table;
  table.dtype = dtype;
  table.num_lists = num_lists;
  table.num_scalars = num_scalars;
  table.num_tensors = tensors;
  const int64_t each = total / tensors;
  for (int t = 0; t < tensors; ++t) {
    for (int col = 0; col < num_lists; ++col) {
      void* p = nullptr;
      for (size_t k = 0; k < present.size(); ++k) {
        if (present[k] == col) p = static_cast<char*>(buffers[k]) + t * each * element_size;
      }
      table.dst.push_back(p);
      table.src.push_back(p);
    }
    table.numel.push_back(each);
    for (int k = 0; k < num_scalars; ++k) table.scalars.push_back(k == 0 ? 1e-2 : 0.03);  // step size, sqrt(bc2)
  }
  return table;
}

}  // namespace

int main() {
  constexpr int64_t kTotal = int64_t{64} << 20;  // elements per list: issue 23's 1 x 64M and 4 x 4M (x4)
  constexpr int64_t kCopyBytes = int64_t{1} << 30;
  int device = 0;
  cudaDeviceProp prop{};
  Check(cudaGetDevice(&device), "cudaGetDevice");
  Check(cudaGetDeviceProperties(&prop, device), "cudaGetDeviceProperties");

  void* from = nullptr;
  void* to = nullptr;
  Check(cudaMalloc(&from, kCopyBytes), "cudaMalloc");
  Check(cudaMalloc(&to, kCopyBytes), "cudaMalloc");
  Check(cudaMemset(from, 0, kCopyBytes), "cudaMemset");
  const double copy_us =
      MicrosecondsPerCall([&] { cudaMemcpyAsync(to, from, kCopyBytes, cudaMemcpyDeviceToDevice); }, 10);
  const double copy_gbs = 2.0 * kCopyBytes / copy_us / 1e3;  // read + written
  Check(cudaFree(from), "cudaFree");
  Check(cudaFree(to), "cudaFree");

  std::printf("%s, chunk %lld elements, block %d threads; 1 GiB device-to-device copy: %.0f GB/s\n\n", prop.name,
              static_cast<long long>(cuda::kChunkSize), cuda::kBlockSize, copy_gbs);
  std::printf("| kernel | dtype | tensors | us / step | GB/s | of copy |\n|---|---|---|---|---|---|\n");

  const fused_optim::math::AdamHyper<double> adam{
      fused_optim::math::AdamFamilyHyper<double>::Make(1e-3, 0.9, 0.999, 1e-8, 0.0, false, false), false};
  fused_optim::math::SgdHyper<double> sgd{};
  sgd.lr = 1e-3, sgd.momentum = 0.9, sgd.one_minus_dampening = 1.0, sgd.has_momentum = true;
  struct Type {
    DType dtype;
    int size;
    const char* name;
  };
  for (const Type type :
       {Type{DType::kFloat, 4, "float32"}, Type{DType::kBFloat16, 2, "bfloat16"}, Type{DType::kHalf, 2, "float16"}}) {
    std::vector<void*> buffers(4);  // params, grads and two states: zeros, so no NaN or denormal
    for (void*& b : buffers) {
      Check(cudaMalloc(&b, kTotal * type.size), "cudaMalloc");
      Check(cudaMemset(b, 0, kTotal * type.size), "cudaMemset");
    }
    for (const int tensors : {1, 4}) {
      // Adam (no amsgrad): reads p, g, m, v and writes p, m, v.
      namespace ac = fused_optim::adam_cols;
      const KernelTable adam_table = MakeTable(
          type.dtype, fused_optim::bind::AdamStep::kLists, {ac::kParam, ac::kGrad, ac::kExpAvg, ac::kExpAvgSq},
          fused_optim::bind::AdamStep::kNumScalars, buffers, kTotal, tensors, type.size);
      // SGD with momentum (after its first step): reads p, g, buf and writes p, buf.
      namespace sc = fused_optim::sgd_cols;
      const KernelTable sgd_table =
          MakeTable(type.dtype, fused_optim::bind::SgdStep::kLists, {sc::kParam, sc::kGrad, sc::kBuf}, 0, buffers,
                    kTotal, tensors, type.size);
      struct Row {
        const char* name;
        int passes;
        double us;
      };
      const Row rows[] = {
          {"AdamStep", 7, MicrosecondsPerCall([&] { Launch<fused_optim::bind::AdamStep>(adam_table, adam); }, 20)},
          {"SgdStep (momentum)", 5,
           MicrosecondsPerCall([&] { Launch<fused_optim::bind::SgdStep>(sgd_table, sgd); }, 20)},
      };
      Check(cudaGetLastError(), "the kernels");
      for (const Row& row : rows) {
        const double gbs = static_cast<double>(row.passes) * kTotal * type.size / row.us / 1e3;
        std::printf("| %s | %s | %d x %lldM | %.1f | %.0f | %.2f |\n", row.name, type.name, tensors,
                    static_cast<long long>((kTotal / tensors) >> 20), row.us, gbs, gbs / copy_gbs);
      }
    }
    for (void* b : buffers) Check(cudaFree(b), "cudaFree");
  }
  return 0;
}
