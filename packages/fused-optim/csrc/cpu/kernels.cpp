// The CPU side of every kernel: each binding (math/<algo>.h) runs over every chunk of a
// KernelTable (csrc/kernels.h) in one at::parallel_for region (so torch.set_num_threads applies),
// once per combination of its flags in the float/double loops.
//
// This file is built three times: for the baseline x86-64 ISA (namespace cpu), with
// -DFUSED_OPTIM_CPU_AVX2 (cpu_avx2) and with -DFUSED_OPTIM_CPU_AVX512 (cpu_avx512); the widest the
// machine supports is chosen at run time (csrc/multi_tensor.h). Only the loops defined after
// FUSED_OPTIM_CPU_ISA_TARGET below get the wider code: the helpers above it keep the baseline ISA
// (and may still be inlined into the wide loops), and no shared inline function is ever compiled
// for AVX2/AVX-512, which the linker could otherwise pick for the baseline path.
#include <ATen/Parallel.h>
#include <c10/util/BFloat16.h>
#include <c10/util/Half.h>

#include <cstring>
#include <tuple>
#include <type_traits>
#include <vector>

#include "kernels.h"

namespace fused_optim::cpu_loop {

inline constexpr int64_t kChunkSize = 1 << 14;    // elements per work item: a few lists fit in L2
inline constexpr int64_t kSerialBelow = 1 << 15;  // below this many elements threads cost more than they save

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

// torch.amp's unscale (KernelTable::grad_scale): the chunk of the gradient column multiplied in
// place by the scale's reciprocal (in the math type, as GradScaler's own unscale does), just
// before the step reads it from cache. A multiply, not a division: the loop keeps up with memory.
template <typename scalar_t>
inline void UnscaleChunk(const KernelTable& table, int64_t t, int64_t begin, int64_t end) {
  using T = std::conditional_t<std::is_same_v<scalar_t, double>, double, float>;
  scalar_t* grad = table.Dst<scalar_t>(t, table.grad_col);
  const T inv_scale = static_cast<T>(1) / static_cast<T>(*table.grad_scale);
  for (int64_t i = begin; i < end; ++i) grad[i] = static_cast<scalar_t>(static_cast<T>(grad[i]) * inv_scale);
}

// body(t, begin, end) for chunks covering every tensor of the table (none where found_inf skips
// the step).
template <typename scalar_t, typename Body>
void ForEachChunk(const KernelTable& table, const Body& body) {
  if (table.found_inf != nullptr && *table.found_inf != 0.0f) return;
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
      if (table.grad_scale != nullptr) UnscaleChunk<scalar_t>(table, t, begin, end);
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

// Stand-ins for absent columns in the element loops (RunKernel below): an absent optional input
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

}  // namespace fused_optim::cpu_loop

#if defined(FUSED_OPTIM_CPU_AVX512)
#define FUSED_OPTIM_CPU_ISA_TARGET _Pragma("GCC target(\"avx512f,prefer-vector-width=512\")")
#define FUSED_OPTIM_CPU_NS cpu_avx512
#elif defined(FUSED_OPTIM_CPU_AVX2)
#define FUSED_OPTIM_CPU_ISA_TARGET _Pragma("GCC target(\"avx2\")")
#define FUSED_OPTIM_CPU_NS cpu_avx2
#else
#define FUSED_OPTIM_CPU_ISA_TARGET
#define FUSED_OPTIM_CPU_NS cpu
#endif

FUSED_OPTIM_CPU_ISA_TARGET
namespace fused_optim::FUSED_OPTIM_CPU_NS {
namespace {
using namespace ::fused_optim::cpu_loop;

template <typename scalar_t, typename T, int NL>
struct ChunkIO {
  const scalar_t* read[NL];  // per column: its chunk, or zeros for an absent column
  scalar_t* write[NL];       // per column: its chunk, or scratch for an absent one
  int64_t i;
  T Load(int col) const { return static_cast<T>(read[col][i]); }
  void Store(int col, T value) const { write[col][i] = static_cast<scalar_t>(value); }
};

template <typename K>
void RunKernel(const KernelTable& table, const typename K::template Hyper<double>& hyper) {
  DispatchFloating<c10::Half, c10::BFloat16>(table.dtype, [&]<typename scalar_t, typename T>() {
    using HyperT = typename K::template Hyper<T>;
    using ScalarsT = typename K::template Scalars<T>;
    const HyperT h0 = hyper.template To<T>();
    ForEachChunk<scalar_t>(table, [&](int64_t t, int64_t begin, int64_t end) {
      ChunkIO<scalar_t, T, K::kLists> io0{};
      for (int col = 0; col < K::kLists; ++col) {
        scalar_t* dst = table.Dst<scalar_t>(t, col);
        const scalar_t* src = table.Src<scalar_t>(t, col);
        // A functional op's outputs already hold the inputs' values (ForEachChunk copied them).
        io0.read[col] = dst ? dst + begin : src ? src + begin : ZerosChunk<scalar_t>();
        io0.write[col] = dst ? dst + begin : ScratchChunk<scalar_t>();
      }
      HyperT h1 = h0;
      ScalarsT s1 = K::template MakeScalars<T>(table.scalars.data() + t * table.num_scalars);
      std::apply(
          [&](auto... flags) {
            Specialize<scalar_t>(
                [&](auto... c) {
                  HyperT hc = h1;
                  ScalarsT sc = s1;
                  K::Flags(hc, sc) = std::make_tuple(static_cast<bool>(c)...);
                  const HyperT h = hc;  // the options, now compile-time constants
                  const ScalarsT s = sc;
                  const ChunkIO<scalar_t, T, K::kLists> io1 = io0;
                  const int64_t n = end - begin;
#pragma GCC ivdep  // elementwise: iteration i touches index i only
                  for (int64_t i = 0; i < n; ++i) {
                    ChunkIO<scalar_t, T, K::kLists> io = io1;
                    io.i = i;
                    K::Apply(io, h, s);
                  }
                },
                flags...);
          },
          K::Flags(h1, s1));
    });
  });
}

}  // namespace

#define FUSED_OPTIM_DEFINE_CPU_KERNEL(name) \
  void name(const KernelTable& table, const bind::name::Hyper<double>& hyper) { RunKernel<bind::name>(table, hyper); }
FUSED_OPTIM_FOR_EACH_KERNEL(FUSED_OPTIM_DEFINE_CPU_KERNEL)

}  // namespace fused_optim::FUSED_OPTIM_CPU_NS
