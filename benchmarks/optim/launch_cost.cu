// What one kernel launch costs by the size of its parameter, on the host and on the device: every
// fused-optim launch passes its whole LaunchMeta by value (csrc/cuda/launch_plan.h: ~32 KB, sized
// for a few hundred tensors, whatever the launch holds), where torch's multi-tensor kernels pass
// 4 KB. If a launch of 32 KB costs much more than one of 4 KB, a small step (one tensor, the
// differentiable update's two launches; Adafactor's dozen) pays it each time, and a LaunchMeta
// sized to the launch's slots would be worth its extra kernel instantiations.
//
//   nvcc -std=c++20 -O3 -arch=sm_90 benchmarks/optim/launch_cost.cu -o launch_cost && ./launch_cost
//
// Each size's kernel does nothing but read its parameter's last byte (so it must be there). Host
// time: the launch calls of a burst, on the host's clock, the device not waited for (a burst is
// shorter than the launch queue, so no call blocks on a full queue). Device time: CUDA events
// around the same burst, the device's interval per launch. Best of 5 bursts of each, after one.
#include <cuda_runtime.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>

namespace {

void Check(cudaError_t err, const char* what) {
  if (err != cudaSuccess) {
    std::fprintf(stderr, "launch_cost: %s: %s\n", what, cudaGetErrorString(err));
    std::exit(1);
  }
}

template <int Bytes>
struct Param {
  unsigned char bytes[Bytes];
};

template <int Bytes>
__global__ void ReadsItsParam(const __grid_constant__ Param<Bytes> param, int* out) {
  if (threadIdx.x == 0 && param.bytes[Bytes - 1] == 1) *out = 1;
}

constexpr int kBurst = 400;  // launches per burst (the queue holds about a thousand)

struct Cost {
  double host_us, device_us;
};

template <int Bytes>
Cost CostOf(int blocks, int* out) {
  Param<Bytes> param{};  // zeros: the kernel writes nothing
  const auto burst = [&] {
    for (int i = 0; i < kBurst; ++i) ReadsItsParam<Bytes><<<blocks, 256>>>(param, out);
  };
  burst();
  Check(cudaDeviceSynchronize(), "the first burst");
  cudaEvent_t start, end;
  Check(cudaEventCreate(&start), "cudaEventCreate");
  Check(cudaEventCreate(&end), "cudaEventCreate");
  Cost best{1e30, 1e30};
  for (int round = 0; round < 5; ++round) {
    Check(cudaEventRecord(start), "cudaEventRecord");
    const auto t0 = std::chrono::steady_clock::now();
    burst();
    const auto t1 = std::chrono::steady_clock::now();
    Check(cudaEventRecord(end), "cudaEventRecord");
    Check(cudaEventSynchronize(end), "cudaEventSynchronize");
    float ms = 0.0f;
    Check(cudaEventElapsedTime(&ms, start, end), "cudaEventElapsedTime");
    best.host_us = std::min(best.host_us, std::chrono::duration<double, std::micro>(t1 - t0).count() / kBurst);
    best.device_us = std::min(best.device_us, 1e3 * ms / kBurst);
  }
  Check(cudaGetLastError(), "the launches");
  Check(cudaEventDestroy(start), "cudaEventDestroy");
  Check(cudaEventDestroy(end), "cudaEventDestroy");
  return best;
}

template <int Bytes>
void Row(int* out) {
  for (const int blocks : {1, 132}) {
    const Cost cost = CostOf<Bytes>(blocks, out);
    std::printf("| %d | %d | %.2f | %.2f |\n", Bytes, blocks, cost.host_us, cost.device_us);
  }
}

}  // namespace

int main() {
  cudaDeviceProp prop{};
  Check(cudaGetDeviceProperties(&prop, 0), "cudaGetDeviceProperties");
  int* out = nullptr;
  Check(cudaMalloc(&out, sizeof(int)), "cudaMalloc");
  std::printf("%s: one launch of an empty kernel of 256 threads per block, by parameter bytes\n\n", prop.name);
  std::printf("| param bytes | blocks | host us / launch | device us / launch |\n|---|---|---|---|\n");
  Row<16>(out);
  Row<256>(out);
  Row<4096>(out);
  Row<8192>(out);
  Row<16384>(out);
  Row<32000>(out);
  Check(cudaFree(out), "cudaFree");
  return 0;
}
