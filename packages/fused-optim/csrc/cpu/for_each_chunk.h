// The CPU multi-tensor driver: every tensor of a call is cut into chunks and all chunks run in
// one at::parallel_for region (so torch.set_num_threads applies). The element loop over a chunk
// is cpu/run_kernel.h's.
#pragma once

#include <ATen/Parallel.h>
#include <c10/util/BFloat16.h>
#include <c10/util/Half.h>

#include <cstring>
#include <tuple>
#include <type_traits>
#include <vector>

#include "kernel_table.h"

namespace fused_optim::cpu {

inline constexpr int64_t kChunkSize = 1 << 14;    // elements per work item: a few lists fit in L2
inline constexpr int64_t kSerialBelow = 1 << 15;  // below this many elements threads cost more than they save

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
      f.template operator()<c10::Half, float>();
      break;
    case DType::kBFloat16:
      f.template operator()<c10::BFloat16, float>();
      break;
  }
}

// Calls f with each flag turned into std::true_type/std::false_type, so that the element loop
// is compiled once per combination of options with no run-time select left in it (the compiler
// vectorizes such loops, not ones selecting on a run-time flag). float16/bfloat16 loops convert
// every element anyway and keep run-time flags, which bounds the number of instantiations.
template <typename F>
void WithConstants(F&& f) {
  f();
}

template <typename F, typename... Flags>
void WithConstants(F&& f, bool flag, Flags... rest) {
  if (flag) {
    WithConstants([&](auto... c) { f(std::true_type{}, c...); }, rest...);
  } else {
    WithConstants([&](auto... c) { f(std::false_type{}, c...); }, rest...);
  }
}

template <typename scalar_t, typename F, typename... Flags>
void Specialize(F&& f, Flags... flags) {
  if constexpr (std::is_same_v<scalar_t, float> || std::is_same_v<scalar_t, double>) {
    WithConstants(f, static_cast<bool>(flags)...);
  } else {
    f(static_cast<bool>(flags)...);
  }
}

// Functional ops start from the caller's values: copy each chunk into the fresh output just
// before the in-place loop runs on it, while it is still in cache.
template <typename scalar_t>
inline void CopyChunkInputs(const KernelTable& table, int64_t t, int64_t begin, int64_t end) {
  for (int l = 0; l < table.num_lists; ++l) {
    scalar_t* dst = table.Dst<scalar_t>(t, l);
    const scalar_t* src = table.Src<scalar_t>(t, l);
    if (dst != nullptr && src != nullptr && dst != src) {
      std::memcpy(dst + begin, src + begin, static_cast<size_t>(end - begin) * sizeof(scalar_t));
    }
  }
}

// body(t, begin, end) for chunks covering every tensor of the table.
template <typename scalar_t, typename Body>
void ForEachChunk(const KernelTable& table, const Body& body) {
  std::vector<int64_t> chunk_tensor;
  std::vector<int64_t> chunk_begin;
  int64_t total = 0;
  for (int64_t t = 0; t < table.num_tensors; ++t) {
    const int64_t n = table.numel[t];
    total += n;
    for (int64_t b = 0; b < n; b += kChunkSize) {
      chunk_tensor.push_back(t);
      chunk_begin.push_back(b);
    }
  }
  const auto run = [&](int64_t lo, int64_t hi) {
    for (int64_t c = lo; c < hi; ++c) {
      const int64_t t = chunk_tensor[c];
      const int64_t begin = chunk_begin[c];
      const int64_t end = begin + kChunkSize < table.numel[t] ? begin + kChunkSize : table.numel[t];
      CopyChunkInputs<scalar_t>(table, t, begin, end);
      body(t, begin, end);
    }
  };
  const int64_t num_chunks = static_cast<int64_t>(chunk_tensor.size());
  if (total < kSerialBelow) {
    run(0, num_chunks);
  } else {
    at::parallel_for(0, num_chunks, 1, run);
  }
}

// Stand-ins for absent columns in the element loops (cpu/run_kernel.h): an absent optional input
// reads a shared block of zeros and an absent optional output writes a per-thread scratch block,
// so the loops carry no per-element branch and the compiler can vectorize them.
template <typename scalar_t>
const scalar_t* ZerosChunk() {
  alignas(64) static const scalar_t zeros[kChunkSize] = {};
  return zeros;
}

template <typename scalar_t>
scalar_t* ScratchChunk() {
  alignas(64) static thread_local scalar_t scratch[kChunkSize];
  return scratch;
}

}  // namespace fused_optim::cpu
