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
#include <utility>

#include "cuda/launch_plan.h"
#include "cuda/matrix_passes.h"
#include "kernels.h"
#include "modes.h"

namespace fused_optim::cuda_emulation {
namespace {

std::atomic<int64_t> launches{0};
std::atomic<int64_t> grid_limit{cuda::kMaxGridBlocks};
std::atomic<int64_t> vector_groups{0};

// The vector path's invariants of a binding (cuda::NoBindingCheck), checked here, where it costs
// no GPU time: one bit per element of the group, per column.
struct BindingCheck {
  uint32_t loaded[cuda::kMaxLists] = {};
  uint32_t stored[cuda::kMaxLists] = {};
  void Load(int col, int j) {
    if (stored[col] >> j & 1u) {
      throw std::logic_error("loads column " + std::to_string(col) + " after storing it in the same element");
    }
    loaded[col] |= 1u << j;
  }
  void Store(int col, int j) { stored[col] |= 1u << j; }
  void End(int width) const {
    vector_groups.fetch_add(1, std::memory_order_relaxed);
    const uint32_t all = (1u << width) - 1u;
    for (int col = 0; col < cuda::kMaxLists; ++col) {
      for (const auto& [mask, what] : {std::pair{loaded[col], "loads"}, std::pair{stored[col], "stores"}}) {
        if (mask != 0 && mask != all) {
          throw std::logic_error(std::string(what) + " column " + std::to_string(col) + " for some elements of a " +
                                 std::to_string(width) +
                                 "-element group and not others (it must depend on flags, "
                                 "not on data)");
        }
      }
    }
  }
};

template <typename K>
void RunKernel(const KernelTable& table, const typename K::template Hyper<double>& hyper, const char* what) {
  DispatchFloating<c10::Half, c10::BFloat16>(table.dtype, [&]<typename S, typename T>() {
    const cuda::BoundOp<K, S, T, c10::Half, c10::BFloat16> op{hyper.template To<T>(), hyper};
    cuda::ForEachLaunch<K>(
        table, what,
        [&](const cuda::LaunchMeta<K>& meta, int64_t blocks) {
          // Counted as kernels.cu launches: the blocks where there are any, then the advance kernel.
          const bool advances = AdvancesAfterUpdate(table);
          launches.fetch_add((blocks > 0 ? 1 : 0) + (advances ? 1 : 0), std::memory_order_relaxed);
          if (!CudaEmulationRunsBlocks()) return;
          try {
            for (int64_t block = 0; block < blocks; ++block) {
              for (int thread = 0; thread < cuda::kBlockSize; ++thread) {
                cuda::RunBlock<BindingCheck>(meta, op, block, thread, cuda::kBlockSize);
              }
            }
          } catch (const std::logic_error& e) {
            throw std::logic_error(std::string("fused_optim: the CUDA kernel of ") + what + " " + e.what());
          }
          if (advances) {
            for (int slot = 0; slot < meta.num_slots; ++slot) cuda::AdvanceSlot(meta, op, slot);
          }
        },
        grid_limit.load());
  });
}

// Test-only bindings that break the vector path's invariants, for BindingCheckProbe: one stores
// only where its value is positive, one loads a column after storing it; one keeps both.
struct ProbeHyper {
  template <typename U>
  ProbeHyper To() const {
    return {};
  }
};
struct ProbeBinding : bind::NoScalars {
  template <typename T>
  using Hyper = ProbeHyper;
  static constexpr int kLists = 1;
};
struct StoresWherePositive : ProbeBinding {
  template <typename T, typename IO>
  static void Apply(const IO& io, const Hyper<T>& /*h*/, const Scalars<T>& /*s*/) {
    const T x = io.Load(0);
    if (x > T(0)) io.Store(0, x + T(1));
  }
};
struct LoadsAfterStoring : ProbeBinding {
  template <typename T, typename IO>
  static void Apply(const IO& io, const Hyper<T>& /*h*/, const Scalars<T>& /*s*/) {
    io.Store(0, io.Load(0) + T(1));
    io.Store(0, io.Load(0) + T(1));
  }
};
struct AddsOne : ProbeBinding {
  template <typename T, typename IO>
  static void Apply(const IO& io, const Hyper<T>& /*h*/, const Scalars<T>& /*s*/) {
    io.Store(0, io.Load(0) + T(1));
  }
};

}  // namespace

double BindingCheckProbe(const std::string& binding) {
  alignas(cuda::kVectorBytes) float data[2 * cuda::kChunkSize];  // a whole chunk and part of one
  for (int i = 0; i < 2 * cuda::kChunkSize; ++i) data[i] = i % 3 == 0 ? -1.0f : 1.0f;
  KernelTable table;
  table.num_lists = 1;
  table.num_tensors = 1;
  table.dst = {data};
  table.src = {data};
  table.numel = {cuda::kChunkSize + 7};
  if (binding == "StoresWherePositive") {
    RunKernel<StoresWherePositive>(table, {}, "StoresWherePositive");
  } else if (binding == "LoadsAfterStoring") {
    RunKernel<LoadsAfterStoring>(table, {}, "LoadsAfterStoring");
  } else if (binding == "AddsOne") {
    RunKernel<AddsOne>(table, {}, "AddsOne");
  } else {
    throw std::invalid_argument("no probe binding named " + binding);
  }
  double sum = 0.0;
  for (int64_t i = 0; i < table.numel[0]; ++i) sum += data[i];
  return sum;
}

int64_t Launches() { return launches.load(); }

int64_t VectorGroups() { return vector_groups.load(); }

int64_t SetGridLimit(int64_t max_blocks) {
  if (max_blocks < 1 || max_blocks > cuda::kMaxGridBlocks) {
    throw std::invalid_argument("the emulated grid limit must be in [1, " + std::to_string(cuda::kMaxGridBlocks) + "]");
  }
  return grid_limit.exchange(max_blocks);
}

namespace {
// One emulated launch of a reduction's `blocks` blocks of kBlockSize threads: thread_value(block,
// thread) runs each thread's share; then, for each group of group_of(block) threads,
// group_sum(block, the group's first thread, the sum of its values) takes the group's sum added as
// the device's GroupSum adds it (GroupTree).
template <typename ThreadValue, typename GroupOf, typename TakeSum>
void RunReductionLaunch(int64_t blocks, ThreadValue&& thread_value, GroupOf&& group_of, TakeSum&& group_sum) {
  launches.fetch_add(1, std::memory_order_relaxed);
  if (!CudaEmulationRunsBlocks()) return;
  double values[cuda::kBlockSize];
  for (int64_t block = 0; block < blocks; ++block) {
    for (int thread = 0; thread < cuda::kBlockSize; ++thread) values[thread] = thread_value(block, thread);
    const int group = group_of(block);
    for (int first = 0; first < cuda::kBlockSize; first += group) {
      group_sum(block, first, cuda::GroupTree(values + first, group));
    }
  }
}
constexpr auto kWholeBlock = [](int64_t /*block*/) { return cuda::kBlockSize; };
}  // namespace

void SumsOfProducts(const KernelTable& table, const DeviceSumOf* sums, int num_sums, double* partials, double* out) {
  DispatchFloating<c10::Half, c10::BFloat16>(table.dtype, [&]<typename S, typename T>() {
    cuda::ForEachSumsLaunch(
        table, std::span<const DeviceSumOf>(sums, num_sums),
        [&](const cuda::SumsMeta& meta, int64_t blocks) {
          RunReductionLaunch(
              blocks,
              [&](int64_t block, int thread) {
                return cuda::ChunkProducts<S, T>(meta, block, thread, cuda::kBlockSize);
              },
              kWholeBlock,
              [&](int64_t block, int /*first*/, double sum) { partials[cuda::PartialOf(meta, block)] = sum; });
        },
        [&](const cuda::TotalsMeta& meta, int64_t blocks) {
          RunReductionLaunch(
              blocks,
              [&](int64_t block, int thread) {
                return cuda::PartialsShare(meta, partials, block, thread, cuda::kBlockSize);
              },
              kWholeBlock,
              [&](int64_t block, int /*first*/, double sum) {
                out[meta.first_tensor + block] = cuda::Total<c10::Half, c10::BFloat16>(meta, block, sum);
              });
        },
        grid_limit.load());
  });
}

int64_t NumPartials(const KernelTable& table, int num_sums) { return cuda::NumPartials(table, num_sums); }

namespace {
// Runs each planned launch of a matrix pass block by block, thread by thread (storage type S, math
// type T), as cuda::MatrixKernel does on the device.
template <typename S, typename T>
struct MatrixLauncher {
  double* partials;
  template <cuda::MatrixPass P>
  void operator()(cuda::Pass<P>, const cuda::MatrixMeta& meta, int64_t blocks) const {
    constexpr bool kRows = P == cuda::MatrixPass::kRowNorms;  // (only a row's norm is a sum over threads)
    RunReductionLaunch(
        blocks,
        [&](int64_t block, int thread) {
          return cuda::MatrixThread<P, S, T>(meta, partials, cuda::ItemOf(meta, block), thread, cuda::kBlockSize);
        },
        [&](int64_t block) {
          return kRows ? cuda::RowGroup(meta.cols[cuda::ItemOf(meta, block).slot]) : cuda::kBlockSize;
        },
        [&]([[maybe_unused]] int64_t block, [[maybe_unused]] int first, [[maybe_unused]] double sum) {
          if constexpr (kRows) {
            const cuda::MatrixItem at = cuda::ItemOf(meta, block);
            const int64_t row = cuda::GroupRow(meta, at, first);
            if (row >= 0) cuda::StoreNorm<S, T>(meta.out[at.slot], row, sum);
          }
        });
  }
};
}  // namespace

void NormsAlongRowsAndColumns(DType dtype, int64_t num_tensors, const void* const* data, const int64_t* dims,
                              void* const* row_norms, void* const* col_norms, double* partials, void* /*stream*/) {
  DispatchFloating<c10::Half, c10::BFloat16>(dtype, [&]<typename S, typename T>() {
    cuda::ForEachNormsLaunch(num_tensors, dims, data, row_norms, col_norms, MatrixLauncher<S, T>{partials},
                             grid_limit.load());
  });
}

void ProductsOfRowsAndColumns(DType dtype, int64_t num_tensors, const void* const* rows, const void* const* cols,
                              void* const* out, const int64_t* dims, void* /*stream*/) {
  DispatchFloating<c10::Half, c10::BFloat16>(dtype, [&]<typename S, typename T>() {
    cuda::ForEachProductsLaunch(num_tensors, dims, rows, cols, out, MatrixLauncher<S, T>{nullptr}, grid_limit.load());
  });
}

int64_t ColumnPartials(int64_t num_tensors, const int64_t* dims) { return cuda::ColumnPartials(num_tensors, dims); }

#define FUSED_OPTIM_DEFINE_EMULATED_KERNEL(name)                                \
  void name(const KernelTable& table, const bind::name::Hyper<double>& hyper) { \
    RunKernel<bind::name>(table, hyper, #name);                                 \
  }
FUSED_OPTIM_FOR_EACH_KERNEL(FUSED_OPTIM_DEFINE_EMULATED_KERNEL)

}  // namespace fused_optim::cuda_emulation
