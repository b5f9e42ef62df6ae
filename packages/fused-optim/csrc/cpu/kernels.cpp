// The CPU side of every kernel: each binding (math/<algo>.h) runs over every chunk of a
// KernelTable (csrc/kernels.h) in one parallel_for region of torch's stable ABI (so torch.set_num_threads applies),
// with one loop per combination of its flags. float16/bfloat16 tables run the float32 loops on
// blocks widened from each chunk and narrow the results back (RunWideChunk), so their math is
// float32's, vectorized, and rounded once per stored value.
//
// This file is built three times: for the baseline x86-64 ISA (namespace cpu), with
// -DFUSED_OPTIM_CPU_AVX2 (cpu_avx2) and with -DFUSED_OPTIM_CPU_AVX512 (cpu_avx512); the widest the
// machine supports is chosen at run time (csrc/multi_tensor.h). Only the loops defined after
// FUSED_OPTIM_CPU_ISA_TARGET below get the wider code: the helpers above it keep the baseline ISA
// (and may still be inlined into the wide loops), and no shared inline function is ever compiled
// for AVX2/AVX-512, which the linker could otherwise pick for the baseline path.
#include <torch/csrc/stable/ops.h>
#include <torch/headeronly/util/BFloat16.h>
#include <torch/headeronly/util/Half.h>

#if defined(__x86_64__) || defined(_M_X64)
#include <immintrin.h>
#endif

#include <algorithm>
#include <bit>
#include <cstdint>
#include <cstring>
#include <tuple>
#include <type_traits>
#include <vector>

#include "kernels.h"

namespace fused_optim::cpu_loop {

inline constexpr int64_t kChunkSize = 1 << 14;    // elements per work item: a few lists fit in L2
inline constexpr int64_t kSerialBelow = 1 << 15;  // below this many elements threads cost more than they save
// float16/bfloat16 tables widen each chunk to float32 this many elements at a time: the buffers of
// every column (up to 17 lists of 4 KiB) stay in L1/L2 between the widening, the float loop and
// the narrowing.
inline constexpr int64_t kWideBlock = 1 << 10;
inline constexpr int64_t kWidePiece = kWideBlock / 4;  // the float32 loop's share between prefetches

// Calls f with each flag turned into std::true_type/std::false_type, so that the element loop
// is compiled once per combination of options with no run-time select left in it (the compiler
// vectorizes such loops, not ones selecting on a run-time flag).
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

// The number of chunks of a tensor of n elements.
inline int64_t ChunksOf(int64_t n) { return (n + kChunkSize - 1) / kChunkSize; }

// body(c, t, begin, end) for chunks covering every tensor of the table, numbered c = 0, 1, ... in
// order of tensor, then of position.
template <typename Body>
void ForEachNumberedChunk(const KernelTable& table, const Body& body) {
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
      body(c, t, begin, end);
    }
  };
  const int64_t num_chunks = static_cast<int64_t>(chunk_tensor.size());
  if (total < kSerialBelow) {
    run(0, num_chunks);
  } else {
    torch::stable::parallel_for(0, num_chunks, 1, run);
  }
}

// body(t, begin, end) for chunks covering every tensor of the table (none where found_inf skips
// the step).
template <typename Body>
void ForEachChunk(const KernelTable& table, const Body& body) {
  if (table.found_inf != nullptr && *table.found_inf != 0.0f) return;
  ForEachNumberedChunk(table, [&](int64_t /*c*/, int64_t t, int64_t begin, int64_t end) { body(t, begin, end); });
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

// The per-thread float32 copies of a 16-bit block, one row per column of a table of NL lists.
// Rows lie a cache line more than 4 KiB apart: at exactly 4 KiB, element i of every column would
// share its address's low 12 bits, and the loop's stores would stall its loads of the other
// columns (4K aliasing), which made the 16-bit loops run at half speed.
inline constexpr int64_t kWideRow = kWideBlock + 16;
template <int NL>
float (*WideBlocks()) [kWideRow] {
  alignas(64) static thread_local float blocks[NL][kWideRow];
  return blocks;
}
// The 16-bit storage formats, element by element, with round-to-nearest-even narrowing and the
// special values c10::BFloat16/c10::Half give: NaN narrows to the canonical quiet NaN (bfloat16:
// 0x7FC0 whatever its sign; float16: the sign kept, 0x7E00), a widened signaling NaN comes out
// quiet, infinities, signed zeros and subnormals convert exactly, and finite values past the
// largest 16-bit one round to infinity. Plain integer and float code, always inlined, so that the
// loops of every ISA build (below) vectorize it; the wide builds convert float16 with F16C and
// AVX-512 instead, which give the same bits (tests compare the builds).
#define FUSED_OPTIM_CONVERT inline __attribute__((always_inline))

FUSED_OPTIM_CONVERT float BFloat16BitsToFloat(uint16_t b) {
  return std::bit_cast<float>(uint32_t{b} << 16);
}

FUSED_OPTIM_CONVERT uint16_t FloatToBFloat16Bits(float f) {
  const uint32_t u = std::bit_cast<uint32_t>(f);
  // Adding 0x7FFF, plus one when the kept part is odd, carries into the kept 16 bits exactly when
  // the dropped half is above the midpoint, or at it with an odd kept part: ties go to even.
  const uint32_t rounded = (u + 0x7FFFu + ((u >> 16) & 1u)) >> 16;
  const bool nan = (u & 0x7FFFFFFFu) > 0x7F800000u;
  return static_cast<uint16_t>(nan ? 0x7FC0u : rounded);
}

FUSED_OPTIM_CONVERT float HalfBitsToFloat(uint16_t h) {
  const uint32_t sign = uint32_t{h & 0x8000u} << 16;
  const uint32_t mag = h & 0x7FFFu;
  // Normal numbers: the exponent and mantissa move into place and the exponent's bias grows from
  // 15 to 127. Infinity and NaN keep an all-ones exponent; a NaN becomes quiet (its top mantissa
  // bit set), as widening by a float multiply or by F16C makes it.
  const uint32_t normal = (mag << 13) + (112u << 23);
  const uint32_t special = (mag << 13) | 0x7F800000u | (mag > 0x7C00u ? 0x00400000u : 0u);
  // Subnormals and zero are mag * 2^-24, which float holds exactly.
  const uint32_t subnormal = std::bit_cast<uint32_t>(static_cast<float>(static_cast<int32_t>(mag)) * 0x1p-24f);
  const uint32_t bits = mag >= 0x7C00u ? special : mag >= 0x0400u ? normal : subnormal;
  return std::bit_cast<float>(sign | bits);
}

FUSED_OPTIM_CONVERT uint16_t FloatToHalfBits(float f) {
  const uint32_t u = std::bit_cast<uint32_t>(f);
  const uint32_t sign = (u >> 16) & 0x8000u;
  const uint32_t a = u & 0x7FFFFFFFu;
  // From float16's smallest normal (2^-14) up: the exponent's bias shrinks from 127 to 15 and the
  // 13 dropped mantissa bits round to nearest even (as for bfloat16 above); a carry out of the
  // mantissa moves up the exponent, which is the correctly rounded result.
  const uint32_t rebiased = a - (112u << 23);
  const uint32_t normal = (rebiased + 0x0FFFu + ((rebiased >> 13) & 1u)) >> 13;
  // Below it, float16 steps by 2^-24: adding 0.5 (whose float spacing is 2^-24) rounds |f| to that
  // step, to nearest even, in the float adder; the low bits of the sum are then the subnormal's
  // mantissa (0x400, the smallest normal, when it rounds up to 2^-14).
  const uint32_t subnormal = std::bit_cast<uint32_t>(std::bit_cast<float>(a) + 0.5f) - 0x3F000000u;
  // 65520 = 0x477FF000 is halfway between the largest float16 (65504) and 2^16: it and all above
  // round to infinity.
  const uint32_t bits = a > 0x7F800000u ? 0x7E00u : a >= 0x477FF000u ? 0x7C00u : a >= 0x38800000u ? normal : subnormal;
  return static_cast<uint16_t>(sign | bits);
}

}  // namespace fused_optim::cpu_loop

#if defined(FUSED_OPTIM_CPU_AVX512)
#define FUSED_OPTIM_CPU_ISA_TARGET _Pragma("GCC target(\"avx512f,prefer-vector-width=512\")")
#define FUSED_OPTIM_CPU_NS cpu_avx512
#elif defined(FUSED_OPTIM_CPU_AVX2)
// Every AVX2 CPU has F16C (float16 conversions); the run-time choice checks both (multi_tensor.cpp).
#define FUSED_OPTIM_CPU_ISA_TARGET _Pragma("GCC target(\"avx2,f16c\")")
#define FUSED_OPTIM_CPU_NS cpu_avx2
#else
#define FUSED_OPTIM_CPU_ISA_TARGET
#define FUSED_OPTIM_CPU_NS cpu
#endif

FUSED_OPTIM_CPU_ISA_TARGET
namespace fused_optim::FUSED_OPTIM_CPU_NS {
namespace {
using namespace ::fused_optim::cpu_loop;

// torch.amp's unscale (KernelTable::grad_scale): n gradient values multiplied in place by the
// scale's reciprocal (in the math type, as GradScaler's own unscale does), just before the step
// reads them from cache; torch's fused steps also leave the gradients unscaled. A multiply, not a
// division: the loop keeps up with memory. Defined here, after the ISA target, so that each build
// vectorizes it for its own ISA, as the element loops.
template <typename T>
void Unscale(T* grad, int64_t n, const float* grad_scale) {
  const T inv_scale = T(1) / static_cast<T>(*grad_scale);
  for (int64_t i = 0; i < n; ++i) grad[i] = grad[i] * inv_scale;
}

// Which columns an element function loads and which it stores, found by running it once on a
// stand-in element with the call's options (a state that an option switches off is not stored).
// The 16-bit loops widen only the columns it loads and narrow back only those it stores: a
// read-only input (the gradient) is never rewritten.
template <int NL>
struct ColumnUse {
  mutable bool loads[NL] = {};
  mutable bool stores[NL] = {};
  float Load(int col) const {
    loads[col] = true;
    return 1.0f;
  }
  void Store(int col, float /*value*/) const { stores[col] = true; }
};

template <typename T, int NL>
struct ChunkIO {
  const T* read[NL];  // per column: its chunk, or zeros for an absent column
  T* write[NL];       // per column: its chunk, or scratch for an absent one
  int64_t i;
  T Load(int col) const { return read[col][i]; }
  void Store(int col, T value) const { write[col][i] = value; }
};

// The element loop over n elements of io's columns, compiled once per combination of the
// binding's flags (WithConstants). The float32 instantiation serves float, float16 and bfloat16.
template <typename K, typename T>
void RunLoop(const ChunkIO<T, K::kLists>& io1, const typename K::template Hyper<T>& h1,
             const typename K::template Scalars<T>& s1, int64_t n) {
  using HyperT = typename K::template Hyper<T>;
  using ScalarsT = typename K::template Scalars<T>;
  HyperT h2 = h1;
  ScalarsT s2 = s1;
  std::apply(
      [&](auto... flags) {
        WithConstants(
            [&](auto... c) {
              HyperT hc = h1;
              ScalarsT sc = s1;
              K::Flags(hc, sc) = std::make_tuple(static_cast<bool>(c)...);
              const HyperT h = hc;  // the options, now compile-time constants
              const ScalarsT s = sc;
#pragma GCC ivdep  // elementwise: iteration i touches index i only
              for (int64_t i = 0; i < n; ++i) {
                ChunkIO<T, K::kLists> io = io1;
                io.i = i;
                K::Apply(io, h, s);
              }
            },
            static_cast<bool>(flags)...);
      },
      K::Flags(h2, s2));
}

// The 16-bit formats: each widens n stored elements to float32 and narrows them back (the
// element conversions above, or F16C/AVX-512 in the wide builds).
struct BFloat16Bits {
  // gcc vectorizes the element conversions, but in the AVX-512F build only 256 bits wide (16-bit
  // lanes in 512-bit registers need AVX-512BW), so that build spells them out: the same integer
  // steps as FloatToBFloat16Bits, 16 lanes at a time, narrowed by vpmovdw. The zero-masked forms
  // (all lanes): gcc 12's plain ones start from an undefined register, which it then reports as
  // maybe uninitialized (some 180 warnings in every build log).
#if defined(FUSED_OPTIM_CPU_AVX512)
  static constexpr __mmask16 kAll = 0xFFFF;
#endif
  static void Widen(const uint16_t* in, float* out, int64_t n) {
    int64_t i = 0;
#if defined(FUSED_OPTIM_CPU_AVX512)
    for (; i + 16 <= n; i += 16) {
      const __m512i wide =
          _mm512_maskz_cvtepu16_epi32(kAll, _mm256_loadu_si256(reinterpret_cast<const __m256i*>(in + i)));
      _mm512_storeu_ps(out + i, _mm512_castsi512_ps(_mm512_maskz_slli_epi32(kAll, wide, 16)));
    }
#endif
    for (; i < n; ++i) out[i] = BFloat16BitsToFloat(in[i]);
  }
  static void Narrow(const float* in, uint16_t* out, int64_t n) {
    int64_t i = 0;
#if defined(FUSED_OPTIM_CPU_AVX512)
    const __m512i one = _mm512_set1_epi32(1);
    const __m512i half_minus_one = _mm512_set1_epi32(0x7FFF);
    const __m512i canonical_nan = _mm512_set1_epi32(0x7FC0);
    for (; i + 16 <= n; i += 16) {
      const __m512 x = _mm512_loadu_ps(in + i);
      const __m512i u = _mm512_castps_si512(x);
      const __m512i odd = _mm512_and_si512(_mm512_maskz_srli_epi32(kAll, u, 16), one);
      __m512i rounded = _mm512_maskz_srli_epi32(kAll, _mm512_add_epi32(_mm512_add_epi32(u, half_minus_one), odd), 16);
      rounded = _mm512_mask_mov_epi32(rounded, _mm512_cmp_ps_mask(x, x, _CMP_UNORD_Q), canonical_nan);
      _mm256_storeu_si256(reinterpret_cast<__m256i*>(out + i), _mm512_maskz_cvtepi32_epi16(kAll, rounded));
    }
#endif
    for (; i < n; ++i) out[i] = FloatToBFloat16Bits(in[i]);
  }
};

struct HalfBits {
#if defined(FUSED_OPTIM_CPU_AVX512)
  // The masked forms (all lanes) of the conversions: the plain ones start from an undefined
  // register, which gcc 12 reports as maybe uninitialized.
  static constexpr __mmask16 kAll = 0xFFFF;
#endif
  static void Widen(const uint16_t* in, float* out, int64_t n) {
    int64_t i = 0;
#if defined(FUSED_OPTIM_CPU_AVX512)
    for (; i + 16 <= n; i += 16) {
      const __m256i h = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(in + i));
      _mm512_storeu_ps(out + i, _mm512_mask_cvtph_ps(_mm512_setzero_ps(), kAll, h));
    }
#elif defined(FUSED_OPTIM_CPU_AVX2)
    for (; i + 8 <= n; i += 8) {
      _mm256_storeu_ps(out + i, _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(in + i))));
    }
#endif
    for (; i < n; ++i) out[i] = HalfBitsToFloat(in[i]);
  }
  static void Narrow(const float* in, uint16_t* out, int64_t n) {
    int64_t i = 0;
    // F16C keeps a NaN's sign and top payload bits; c10 gives the canonical NaN with the sign, so
    // NaNs are replaced by the signed canonical float NaN (which narrows to that) first.
#if defined(FUSED_OPTIM_CPU_AVX512)
    const __m512i sign = _mm512_set1_epi32(static_cast<int>(0x80000000u));
    const __m512i quiet_nan = _mm512_set1_epi32(0x7FC00000);
    for (; i + 16 <= n; i += 16) {
      __m512 x = _mm512_loadu_ps(in + i);
      const __m512i canonical = _mm512_or_si512(_mm512_and_si512(_mm512_castps_si512(x), sign), quiet_nan);
      x = _mm512_mask_mov_ps(x, _mm512_cmp_ps_mask(x, x, _CMP_UNORD_Q), _mm512_castsi512_ps(canonical));
      const __m256i h = _mm512_mask_cvtps_ph(_mm256_setzero_si256(), kAll, x, _MM_FROUND_TO_NEAREST_INT);
      _mm256_storeu_si256(reinterpret_cast<__m256i*>(out + i), h);
    }
#elif defined(FUSED_OPTIM_CPU_AVX2)
    const __m256 sign = _mm256_castsi256_ps(_mm256_set1_epi32(static_cast<int>(0x80000000u)));
    const __m256 quiet_nan = _mm256_castsi256_ps(_mm256_set1_epi32(0x7FC00000));
    for (; i + 8 <= n; i += 8) {
      __m256 x = _mm256_loadu_ps(in + i);
      const __m256 canonical = _mm256_or_ps(_mm256_and_ps(x, sign), quiet_nan);
      x = _mm256_blendv_ps(x, canonical, _mm256_cmp_ps(x, x, _CMP_UNORD_Q));
      _mm_storeu_si128(reinterpret_cast<__m128i*>(out + i), _mm256_cvtps_ph(x, _MM_FROUND_TO_NEAREST_INT));
    }
#endif
    for (; i < n; ++i) out[i] = FloatToHalfBits(in[i]);
  }
};

// One chunk of a float/double table, in place on the tensors (a functional op's outputs first
// receive the inputs' values).
template <typename K, typename T>
void RunChunk(const KernelTable& table, int64_t t, int64_t begin, int64_t end, const typename K::template Hyper<T>& h,
              const typename K::template Scalars<T>& s) {
  CopyChunkInputs<T>(table, t, begin, end);
  if (table.grad_scale != nullptr) {
    Unscale<T>(table.Dst<T>(t, table.grad_col) + begin, end - begin, table.grad_scale);
  }
  ChunkIO<T, K::kLists> io{};
  for (int col = 0; col < K::kLists; ++col) {
    T* dst = table.Dst<T>(t, col);
    const T* src = table.Src<T>(t, col);
    io.read[col] = dst ? dst + begin : src ? src + begin : ZerosChunk<T>();
    io.write[col] = dst ? dst + begin : ScratchChunk<T>();
  }
  RunLoop<K, T>(io, h, s, end - begin);
}

// One chunk of a 16-bit table, a block at a time: the columns the kernel loads are widened into
// float32 blocks, the float32 loop runs over them, and the columns it stores are narrowed into
// their outputs. A functional op's output column that the kernel leaves alone gets the input's
// values copied.
template <typename K, typename Format>
void RunWideChunk(const KernelTable& table, int64_t t, int64_t begin, int64_t end,
                  const typename K::template Hyper<float>& h, const typename K::template Scalars<float>& s) {
  constexpr int NL = K::kLists;
  ColumnUse<NL> use;
  K::Apply(use, h, s);
  // torch.amp: the gradient column is unscaled in its float block and stored back unscaled.
  const bool unscale = table.grad_scale != nullptr;
  if (unscale) use.stores[table.grad_col] = true;
  float (*blocks)[kWideRow] = WideBlocks<NL>();
  const uint16_t* in[NL];
  uint16_t* out[NL];
  ChunkIO<float, NL> io{};
  for (int col = 0; col < NL; ++col) {
    uint16_t* dst = table.Dst<uint16_t>(t, col);
    const uint16_t* src = table.Src<uint16_t>(t, col);
    in[col] = src ? src : dst;  // a functional op's inputs are read where the caller has them
    out[col] = dst;
    io.read[col] = use.loads[col] && in[col] ? blocks[col] : ZerosChunk<float>();
    io.write[col] = blocks[col];  // also the scratch of an absent output
    if (!use.stores[col] && dst && src && dst != src) {
      std::memcpy(dst + begin, src + begin, static_cast<size_t>(end - begin) * sizeof(uint16_t));
    }
  }
  for (int64_t b = begin; b < end; b += kWideBlock) {
    const int64_t n = end - b < kWideBlock ? end - b : kWideBlock;
    for (int col = 0; col < NL; ++col) {
      if (use.loads[col] && in[col]) Format::Widen(in[col] + b, blocks[col], n);
    }
    if (unscale) Unscale<float>(blocks[table.grad_col], n, table.grad_scale);
    // The float32 loop runs a quarter block at a time, each quarter first asking for a quarter
    // of the next block's input lines: the memory keeps fetching while the math runs (in one
    // burst per block the prefetches would only wait for free fill buffers). A prefetch never
    // faults, so past the end is harmless.
    for (int64_t at = 0; at < n; at += kWidePiece) {
      for (int col = 0; col < NL; ++col) {
        if (use.loads[col] && in[col]) {
          const char* next = reinterpret_cast<const char*>(in[col] + b + kWideBlock + at);
          for (int64_t byte = 0; byte < kWidePiece * 2; byte += 64) __builtin_prefetch(next + byte, 0, 3);
        }
      }
      ChunkIO<float, NL> piece = io;
      for (int col = 0; col < NL; ++col) {
        piece.read[col] += at;
        piece.write[col] += at;
      }
      RunLoop<K, float>(piece, h, s, n - at < kWidePiece ? n - at : kWidePiece);
    }
    for (int col = 0; col < NL; ++col) {
      if (use.stores[col] && out[col]) Format::Narrow(blocks[col], out[col] + b, n);
    }
  }
}

template <typename K>
void RunKernel(const KernelTable& table, const typename K::template Hyper<double>& hyper, const char* what) {
  CheckDeviceSteps<K>(table, what);
  DispatchFloating<HalfBits, BFloat16Bits>(table.dtype, [&]<typename Storage, typename T>() {
    const typename K::template Hyper<T> h = hyper.template To<T>();
    ForEachChunk(table, [&](int64_t t, int64_t begin, int64_t end) {
      double fresh[kRowBuffer<K>];
      const double* row = TensorRow<K, c10::Half, c10::BFloat16>(table.scalars.data() + t * table.num_scalars,
                                                                 DeviceStep(table, t), hyper, fresh);
      const auto s = TensorScalars<K, T, c10::Half, c10::BFloat16>(row, table.State(t), table.default_dtype);
      if constexpr (std::is_same_v<Storage, T>) {
        RunChunk<K, T>(table, t, begin, end, h, s);
      } else {
        RunWideChunk<K, Storage>(table, t, begin, end, h, s);
      }
    });
  });
  // The state scalars' and device step counters' new values, once no chunk reads them any more
  // (the rows first, from the counters before their advance).
  if (table.found_inf != nullptr && *table.found_inf != 0.0f) return;
  const bool advance_state = kStateScalarsOf<K> > 0 && table.advance_state;
  const bool advance_steps = AdvancesSteps(table);
  if (!advance_state && !advance_steps) return;
  for (int64_t t = 0; t < table.num_tensors; ++t) {
    const StateScalar* step = DeviceStep(table, t);
    if (advance_state) {
      double fresh[kRowBuffer<K>];
      const double* row =
          TensorRow<K, c10::Half, c10::BFloat16>(table.scalars.data() + t * table.num_scalars, step, hyper, fresh);
      AdvanceState<K, c10::Half, c10::BFloat16>(row, table.State(t), table.default_dtype);
    }
    if (advance_steps) AdvanceStep<c10::Half, c10::BFloat16>(step);
  }
}

// One chunk's sum of products (SumsOfProducts in csrc/kernels.h): the product of element i of the
// chunk's two columns goes into partial sum i % kLanes, in double (where a product of floats is
// exact), and the partials are added in order at the end. The lanes are written out so that every
// ISA build vectorizes the loop without reordering a single addition: each build gives the same sum.
class ProductSums {
 public:
  static constexpr int kLanes = 16;
  // n more elements of the chunk; only its last piece may leave a lane cycle unfinished.
  template <typename T>
  void Add(const T* x, const T* y, int64_t n) {
    double acc[kLanes];  // a local copy: x and y (double columns) could otherwise alias the lanes
    for (int j = 0; j < kLanes; ++j) acc[j] = lanes_[j];
    int64_t i = 0;
    for (; i + kLanes <= n; i += kLanes) {
      for (int j = 0; j < kLanes; ++j) acc[j] += static_cast<double>(x[i + j]) * static_cast<double>(y[i + j]);
    }
    for (int j = 0; i + j < n; ++j) acc[j] += static_cast<double>(x[i + j]) * static_cast<double>(y[i + j]);
    for (int j = 0; j < kLanes; ++j) lanes_[j] = acc[j];
  }
  double Total() const {
    double total = 0.0;
    for (const double lane : lanes_) total += lane;
    return total;
  }

 private:
  double lanes_[kLanes] = {};
};
static_assert(kWideBlock % ProductSums::kLanes == 0 && kChunkSize % kWideBlock == 0,
              "a widened block must start a lane cycle");

// The host matrix passes' work items: blocks of this many of a matrix's rows, about a chunk's
// elements each (at least a row), set by the shape alone (0 for a matrix without rows).
int64_t RowsPerBlock(int64_t rows, int64_t cols) {
  const int64_t blocks = std::min<int64_t>(rows, std::max<int64_t>(1, rows * cols / kChunkSize));
  return rows > 0 ? (rows + blocks - 1) / blocks : 0;
}

}  // namespace

void SquaresAlongRowsAndColumns(DType dtype, int64_t num_tensors, const void* const* data, const int64_t* dims,
                                double* row_sums, double* col_sums) {
  // One work item per block of a matrix's rows: its rows' sums are final, its columns' partial sums
  // go to a slot of its own, added in block order below. The blocks depend on the shape alone.
  struct Block {
    int64_t t, matrix, row_begin, row_end, row_out, col_out, partial;
  };
  std::vector<Block> blocks;
  int64_t row_at = 0, col_at = 0, partials = 0, total = 0;
  for (int64_t t = 0; t < num_tensors; ++t) {
    const int64_t batch = dims[3 * t], rows = dims[3 * t + 1], cols = dims[3 * t + 2];
    const int64_t block_rows = RowsPerBlock(rows, cols);
    for (int64_t m = 0; m < batch; ++m) {
      for (int64_t r = 0; r < rows; r += block_rows) {
        blocks.push_back({t, m, r, std::min(rows, r + block_rows), row_at + m * rows, col_at + m * cols, partials});
        partials += cols;
      }
    }
    row_at += batch * rows;
    col_at += batch * cols;
    total += batch * rows * cols;
  }
  std::vector<double> partial(static_cast<size_t>(partials), 0.0);
  DispatchFloating<HalfBits, BFloat16Bits>(dtype, [&]<typename Storage, typename T>() {
    constexpr bool kWide = !std::is_same_v<Storage, T>;
    using Stored = std::conditional_t<kWide, uint16_t, T>;
    const auto run = [&](int64_t lo, int64_t hi) {
      alignas(64) float widened[kWideBlock];
      for (int64_t k = lo; k < hi; ++k) {
        const Block& b = blocks[k];
        const int64_t rows = dims[3 * b.t + 1], cols = dims[3 * b.t + 2];
        double* col = partial.data() + b.partial;
        for (int64_t i = b.row_begin; i < b.row_end; ++i) {
          const Stored* row = static_cast<const Stored*>(data[b.t]) + (b.matrix * rows + i) * cols;
          ProductSums sums;
          for (int64_t at = 0; at < cols; at += kWideBlock) {  // a piece of the row at a time
            const int64_t n = std::min(kWideBlock, cols - at);
            const auto* x = [&] {
              if constexpr (kWide) {
                Storage::Widen(row + at, widened, n);
                return static_cast<const float*>(widened);
              } else {
                return row + at;
              }
            }();
            sums.Add(x, x, n);
            for (int64_t j = 0; j < n; ++j) col[at + j] += static_cast<double>(x[j]) * static_cast<double>(x[j]);
          }
          row_sums[b.row_out + i] = sums.Total();
        }
      }
    };
    const int64_t num_blocks = static_cast<int64_t>(blocks.size());
    if (total < kSerialBelow) {
      run(0, num_blocks);
    } else {
      torch::stable::parallel_for(0, num_blocks, 1, run);
    }
  });
  for (int64_t j = 0; j < col_at; ++j) col_sums[j] = 0.0;
  for (const Block& b : blocks) {  // in order: the same sums on any thread count
    const int64_t cols = dims[3 * b.t + 2];
    for (int64_t j = 0; j < cols; ++j) col_sums[b.col_out + j] += partial[b.partial + j];
  }
}

void ProductsOfRowsAndColumns(DType dtype, int64_t num_tensors, const void* const* rows, const void* const* cols,
                              void* const* out, const int64_t* dims) {
  // One work item per block of a matrix's rows, as above (each element is one product: any split
  // gives the same values; the blocks only spread the work).
  struct Block {
    int64_t t, matrix, row_begin, row_end;
  };
  std::vector<Block> blocks;
  int64_t total = 0;
  for (int64_t t = 0; t < num_tensors; ++t) {
    const int64_t batch = dims[3 * t], m = dims[3 * t + 1], n = dims[3 * t + 2];
    const int64_t block_rows = RowsPerBlock(m, n);
    for (int64_t b = 0; b < batch && n > 0; ++b) {
      for (int64_t r = 0; r < m; r += block_rows) blocks.push_back({t, b, r, std::min(m, r + block_rows)});
    }
    total += batch * m * n;
  }
  DispatchFloating<HalfBits, BFloat16Bits>(dtype, [&]<typename Storage, typename T>() {
    constexpr bool kWide = !std::is_same_v<Storage, T>;
    using Stored = std::conditional_t<kWide, uint16_t, T>;
    const auto run = [&](int64_t lo, int64_t hi) {
      alignas(64) float widened[kWideBlock];
      alignas(64) float products[kWideBlock];
      for (int64_t k = lo; k < hi; ++k) {
        const Block& b = blocks[k];
        const int64_t m = dims[3 * b.t + 1], n = dims[3 * b.t + 2];
        const Stored* r = static_cast<const Stored*>(rows[b.t]) + b.matrix * m;
        const Stored* c = static_cast<const Stored*>(cols[b.t]) + b.matrix * n;
        Stored* o = static_cast<Stored*>(out[b.t]) + b.matrix * m * n;
        if constexpr (kWide) {  // a piece of c widened once for the block's rows; exact float products
          for (int64_t at = 0; at < n; at += kWideBlock) {
            const int64_t len = std::min(kWideBlock, n - at);
            Storage::Widen(c + at, widened, len);
            for (int64_t i = b.row_begin; i < b.row_end; ++i) {
              float ri = 0.0f;
              Storage::Widen(r + i, &ri, 1);
              for (int64_t j = 0; j < len; ++j) products[j] = ri * widened[j];
              Storage::Narrow(products, o + i * n + at, len);
            }
          }
        } else {
          for (int64_t i = b.row_begin; i < b.row_end; ++i) {
            const T ri = r[i];
            T* row = o + i * n;
            for (int64_t j = 0; j < n; ++j) row[j] = ri * c[j];
          }
        }
      }
    };
    const int64_t num_blocks = static_cast<int64_t>(blocks.size());
    if (total < kSerialBelow) {
      run(0, num_blocks);
    } else {
      torch::stable::parallel_for(0, num_blocks, 1, run);
    }
  });
}

void SumsOfProducts(const KernelTable& table, int a, int b, double* out) {
  int64_t num_chunks = 0;
  for (int64_t t = 0; t < table.num_tensors; ++t) num_chunks += ChunksOf(table.numel[t]);
  std::vector<double> partial(static_cast<size_t>(num_chunks), 0.0);
  DispatchFloating<HalfBits, BFloat16Bits>(table.dtype, [&]<typename Storage, typename T>() {
    constexpr bool kWide = !std::is_same_v<Storage, T>;
    using Stored = std::conditional_t<kWide, uint16_t, T>;
    const auto column = [&](int64_t t, int col) {  // where a launch would read it; null: absent (zeros)
      const Stored* src = table.Src<Stored>(t, col);
      return src != nullptr ? src : table.Dst<Stored>(t, col);
    };
    ForEachNumberedChunk(table, [&](int64_t c, int64_t t, int64_t begin, int64_t end) {
      const Stored* x = column(t, a);
      const Stored* y = column(t, b);
      if (x == nullptr || y == nullptr) return;
      ProductSums sums;
      if constexpr (!kWide) {
        sums.Add(x + begin, y + begin, end - begin);
      } else {  // float16/bfloat16: widened a block at a time (once where both columns are one)
        alignas(64) float x_block[kWideBlock];
        alignas(64) float y_block[kWideBlock];
        for (int64_t at = begin; at < end; at += kWideBlock) {
          const int64_t n = end - at < kWideBlock ? end - at : kWideBlock;
          Storage::Widen(x + at, x_block, n);
          if (y != x) Storage::Widen(y + at, y_block, n);
          sums.Add(x_block, y != x ? y_block : x_block, n);
        }
      }
      partial[c] = sums.Total();
    });
  });
  int64_t c = 0;
  for (int64_t t = 0; t < table.num_tensors; ++t) {
    double sum = 0.0;
    for (int64_t k = ChunksOf(table.numel[t]); k > 0; --k) sum += partial[c++];
    out[t] = sum;
  }
}

#define FUSED_OPTIM_DEFINE_CPU_KERNEL(name)                                     \
  void name(const KernelTable& table, const bind::name::Hyper<double>& hyper) { \
    RunKernel<bind::name>(table, hyper, #name);                                 \
  }
FUSED_OPTIM_FOR_EACH_KERNEL(FUSED_OPTIM_DEFINE_CPU_KERNEL)

}  // namespace fused_optim::FUSED_OPTIM_CPU_NS
