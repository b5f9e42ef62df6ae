// The CPU multi-tensor driver: every tensor of a call is cut into chunks and all chunks run in
// one at::parallel_for region (so torch.set_num_threads applies). The per-algorithm files own
// only the element loop over a chunk.
#pragma once

#include <ATen/Parallel.h>
#include <c10/util/BFloat16.h>
#include <c10/util/Half.h>

#include <cstring>
#include <vector>

#include "kernel_table.h"

namespace fused_optim::cpu {

inline constexpr int64_t kChunkSize = 1 << 14;     // elements per work item: a few lists fit in L2
inline constexpr int64_t kSerialBelow = 1 << 15;   // below this many elements threads cost more than they save

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

// Reads an optional input (null means zeros).
template <typename T, typename scalar_t>
inline T LoadOr0(const scalar_t* p, int64_t i) {
  return p ? static_cast<T>(p[i]) : T(0);
}

}  // namespace fused_optim::cpu
