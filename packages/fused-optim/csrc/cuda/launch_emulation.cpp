// The CUDA kernels emulated on the host, for tests: the launch plan, the kernel argument, the
// block-to-(tensor, chunk) indexing and the element access of csrc/cuda/launch_plan.h, run block
// by block and thread by thread, from the same KernelTable as the CPU loops. In this debug mode
// (fused_optim._C._emulate_cuda, off by default) every CPU call of an op runs these instead of
// the CPU loops, so CI, which has no GPU, sees a wrong index, a missing scalar or a limit of the
// CUDA path as a CPU test failure. Built in every build, CUDA or not.
#include <torch/headeronly/util/BFloat16.h>
#include <torch/headeronly/util/Half.h>

#include <atomic>
#include <cstdint>
#include <stdexcept>
#include <string>

#include "cuda/launch_plan.h"
#include "kernels.h"

namespace fused_optim::cuda_emulation {
namespace {

std::atomic<int64_t> launches{0};
std::atomic<int64_t> grid_limit{cuda::kMaxGridBlocks};

template <typename K>
void RunKernel(const KernelTable& table, const typename K::template Hyper<double>& hyper, const char* what) {
  DispatchFloating<c10::Half, c10::BFloat16>(table.dtype, [&]<typename S, typename T>() {
    const cuda::BoundOp<K, S, T, c10::Half, c10::BFloat16> op{hyper.template To<T>(), hyper};
    cuda::ForEachLaunch<K>(
        table, what,
        [&](const cuda::LaunchMeta<K::kLists>& meta, int64_t blocks, int slots) {
          launches.fetch_add(1, std::memory_order_relaxed);
          for (int64_t block = 0; block < blocks; ++block) {
            for (int thread = 0; thread < cuda::kBlockSize; ++thread) {
              cuda::RunBlock(meta, op, block, thread, cuda::kBlockSize);
            }
          }
          if (table.advance_state || !table.steps.empty()) {
            for (int slot = 0; slot < cuda::kTensorsPerLaunch; ++slot) cuda::AdvanceSlot(meta, op, slot, slots);
          }
        },
        grid_limit.load());
  });
}

}  // namespace

int64_t Launches() { return launches.load(); }

int64_t SetGridLimit(int64_t max_blocks) {
  if (max_blocks < 1 || max_blocks > cuda::kMaxGridBlocks) {
    throw std::invalid_argument("the emulated grid limit must be in [1, " + std::to_string(cuda::kMaxGridBlocks) + "]");
  }
  return grid_limit.exchange(max_blocks);
}

#define FUSED_OPTIM_DEFINE_EMULATED_KERNEL(name)                                \
  void name(const KernelTable& table, const bind::name::Hyper<double>& hyper) { \
    RunKernel<bind::name>(table, hyper, #name);                                 \
  }
FUSED_OPTIM_FOR_EACH_KERNEL(FUSED_OPTIM_DEFINE_EMULATED_KERNEL)

}  // namespace fused_optim::cuda_emulation
