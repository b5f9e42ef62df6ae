// The CUDA launch plan of a multi-tensor kernel, as plain C++ that nvcc and the host compiler both
// build: which tensors, chunks and per-tensor scalars of a KernelTable go into each launch
// (LaunchMeta, the kernel's argument), the limits that bound it, and the kernel body (how a block
// finds its tensor and chunk, and how a thread reads and writes its elements: 16 bytes of each
// column at a time where the tensors are aligned, VectorIO, else one element at a time, ElementIO);
// and the same for the two passes of per-tensor sums of products (ForEachSumsLaunch).
// csrc/cuda/kernels.cu launches it on the GPU; csrc/cuda/launch_emulation.cpp runs the same body
// on the host, block by block, so that CPU tests (CI has no GPU) reach every index and limit of the
// CUDA path.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <span>
#include <stdexcept>
#include <string>
#include <type_traits>
#include <vector>

#include "kernels.h"

namespace fused_optim::cuda {

// Threads per block.
inline constexpr int kBlockSize = 256;
// Elements per block. Small chunks give many blocks, and many resident threads are what hides
// memory latency here: a group's loads cannot be hoisted above the previous group's stores (the
// lists may alias as far as the compiler knows), so each thread has one group (kVectorBytes of
// each column) in flight. A 16-bit chunk is one group per thread. (benchmarks/optim/
// kernel_bandwidth.cu builds other sizes through the macro, to measure them against this one.)
#ifndef FUSED_OPTIM_CUDA_CHUNK_SIZE
#define FUSED_OPTIM_CUDA_CHUNK_SIZE 2048
#endif
inline constexpr int64_t kChunkSize = FUSED_OPTIM_CUDA_CHUNK_SIZE;
// Bytes of one column that a thread reads or writes at once on the vector path (VectorIO): the
// widest access a thread has, 128 bits, for every binding. Its group then holds 16 bytes of each
// column in registers; the widest, Adan's backward (17 columns, bf16), takes 116 registers and
// spills nothing (nvcc 13.0, sm_90), so no binding needs a narrower group.
inline constexpr int kVectorBytes = 16;
// Slots (tensors, or runs of a tensor's chunks) per launch, at most: bounds the advance kernel's
// threads (one per slot) and the planner's buffer. Each binding's launch holds as many slots as its
// kernel argument fits (kSlotsPerLaunch), from 81 (Adan's backward, 17 columns) to 265 (SGD's step).
inline constexpr int kMaxSlotsPerLaunch = 512;
// Blocks per launch (gridDim.x's limit); a tensor with more chunks continues in the next launch.
inline constexpr int64_t kMaxGridBlocks = 2147483647;
// Bytes of kernel arguments (CUDA >= 12.1 on Volta and newer; LaunchMeta and the bound op travel
// by value).
inline constexpr size_t kMaxKernelParamBytes = 32764;

// The most lists of any binding (math/<algo>.h): the emulation's per-column checks are sized from it.
#define FUSED_OPTIM_NUM_LISTS(name) bind::name::kLists,
inline constexpr int kMaxLists = std::max({FUSED_OPTIM_FOR_EACH_KERNEL(FUSED_OPTIM_NUM_LISTS)});
#undef FUSED_OPTIM_NUM_LISTS

// The kernel's argument, passed by value: up to N slots, each a run of chunks of one tensor (its
// pointers and element count start at the slot's first chunk), for a binding of NL lists, NS
// per-tensor scalars and NSt state scalars (at least 1 each: C++ has no empty arrays). Everything
// the kernel reads per tensor is an array indexed by slot, filled by FillLaunchMeta from the table
// (add a per-tensor pointer array or a per-call value there); kSlotsPerLaunch sizes N so that every
// binding's argument fits the parameter limit, whatever is added. The planner packs as many
// tensors into a launch as fit, so a step of a few hundred tensors is one launch (each launch costs
// the host a few microseconds, the most of a small step's host time).
template <int NL, int NS, int NSt, int N>
struct LaunchMetaN {
  static constexpr int kLists = NL;
  static constexpr int kSlots = N;
  void* dst[NL][N];
  const void* src[NL][N];
  int64_t numel[N];
  double scalars[N][NS];
  // The state scalars (KernelTable::state), read by each thread's set-up; `advance[s]`: the slot
  // holds its tensor's last chunk, so the advance kernel writes their new values after this launch.
  StateScalar state[N][NSt];
  // capturable: each slot's step counter on the device (KernelTable::steps), from which every
  // thread computes the slot's per-tensor scalars and which the advance kernel increments;
  // `device_steps` false: `scalars` holds the host's rows.
  StateScalar step[N];
  // Block b works on the slot s with first_block[s] <= b < first_block[s + 1], s < num_slots.
  int64_t first_block[N + 1];
  int num_slots;
  bool device_steps;
  bool advance[N];
  DType default_dtype;
  // The table's AMP arguments (KernelTable::grad_scale), the same for every launch of a call.
  const float* grad_scale;
  const float* found_inf;
  int grad_col;
};

template <typename K, int N>
using LaunchMetaFor = LaunchMetaN<K::kLists, std::max(K::kNumScalars, 1), std::max(kStateScalarsOf<K>, 1), N>;

// Binding K's slots per launch: the most (a multiple of 8 plus 1, at most kMaxSlotsPerLaunch) for
// which its kernel arguments, LaunchMeta and the bound op (two copies of its hyper-parameters at
// most, plus slack for padding), fit the CUDA parameter limit. The argument grows by the same
// bytes for every 8 slots (the bool array then fills whole words), so the size at N is exact, and
// checked below.
template <typename K>
inline constexpr int kSlotsPerLaunch = [] {
  constexpr size_t kOthers = 2 * sizeof(typename K::template Hyper<double>) + 16;
  constexpr size_t kOne = sizeof(LaunchMetaFor<K, 1>);
  constexpr size_t kPerEight = sizeof(LaunchMetaFor<K, 9>) - kOne;
  static_assert(kOne + kOthers <= kMaxKernelParamBytes, "a binding's one-slot launch exceeds the parameter limit");
  return static_cast<int>(
      std::min<size_t>(1 + 8 * ((kMaxKernelParamBytes - kOthers - kOne) / kPerEight), kMaxSlotsPerLaunch));
}();

template <typename K>
using LaunchMeta = LaunchMetaFor<K, kSlotsPerLaunch<K>>;

// A binding's view of one element on the scalar path (see math/common.h): an absent column reads 0
// and drops its store. A functional op reads the caller's tensor (src) and writes a fresh one (dst).
template <typename S, typename T, typename Meta>
struct ElementIO {
  const Meta& meta;
  int slot;
  int64_t i;
  FUSED_OPTIM_ELEMENT T Load(int col) const {
    const void* p = meta.src[col][slot];
    return p ? static_cast<T>(static_cast<const S*>(p)[i]) : T(0);
  }
  FUSED_OPTIM_ELEMENT void Store(int col, T value) const {
    void* p = meta.dst[col][slot];
    if (p) static_cast<S*>(p)[i] = static_cast<S>(value);
  }
};

// Full unrolling, where the group's registers need it: in device code (the host compiler, nvcc's
// host pass included, warns on the pragma; the emulation runs the same loops rolled).
#if defined(__CUDA_ARCH__)
#define FUSED_OPTIM_UNROLL _Pragma("unroll")
#else
#define FUSED_OPTIM_UNROLL
#endif

// kVectorBytes of consecutive elements of storage type S: one access of the vector path. An
// aggregate of S, so reading an S array through it is allowed, and 16-byte aligned, so nvcc
// makes each copy from or to global memory one 128-bit access.
template <typename S>
struct alignas(kVectorBytes) Pack {
  static constexpr int kWidth = kVectorBytes / static_cast<int>(sizeof(S));
  S v[kWidth];
};

// The vector path's invariants of a binding's Apply, which hold for every binding today: which
// columns an element loads and stores depends on hyper-parameter flags only, never on data (so the
// W elements of a group load and store the same columns), and no element loads a column after
// storing it (its register then holds the new value). The device build checks nothing (this type);
// the host emulation passes a checking one (csrc/cuda/launch_emulation.cpp) whose calls throw
// std::logic_error.
struct NoBindingCheck {
  FUSED_OPTIM_ELEMENT void Load(int /*col*/, int /*j*/) {}
  FUSED_OPTIM_ELEMENT void Store(int /*col*/, int /*j*/) {}
  FUSED_OPTIM_ELEMENT void End(int /*width*/) {}
};

// One thread's group of W consecutive elements on the vector path: every column's W values in
// registers, in the storage type. A column is read with one 16-byte load on its first Load (a
// binding reads some columns only under a flag, e.g. Adam's max_exp_avg_sq with amsgrad, so
// loading every non-null column up front would waste bandwidth) and written with one 16-byte
// store after the group's last element, where any element stored it.
template <typename S, int NL, typename Check>
struct VectorGroup {
  Pack<S> values[NL];
  bool loaded[NL];
  bool written[NL];
  bool unscaled;  // torch.amp's gradient column (VectorIO::Load)
  Check check;
};

// 16-byte loads and stores of the pack of elements [first, first + W) of a column at p. On the
// device each is one access of CUDA's 128-bit type, spelled out: nvcc 13.0 split a copy of the Pack
// itself (its elements live in separate registers) and, for the stores, even a copy of a uint4,
// into one store per element or word (sm_90 PTX: 8 st.global.u16 per bf16 column of a group, 4
// st.global.f32 per fp32 one), which left the 16-bit steps at half the copy bandwidth. __stwb is
// the plain store (write-back, PTX's default) as one st.global.v4.u32.
template <typename S>
FUSED_OPTIM_ELEMENT Pack<S> LoadPack(const void* p, int64_t first) {
  const S* at = static_cast<const S*>(p) + first;
#if defined(__CUDA_ARCH__)
  static_assert(sizeof(Pack<S>) == sizeof(uint4));
  const uint4 bits = *reinterpret_cast<const uint4*>(at);
  Pack<S> pack;
  memcpy(&pack, &bits, sizeof(pack));
  return pack;
#else
  return *reinterpret_cast<const Pack<S>*>(at);
#endif
}
template <typename S>
FUSED_OPTIM_ELEMENT void StorePack(void* p, int64_t first, const Pack<S>& pack) {
  S* at = static_cast<S*>(p) + first;
#if defined(__CUDA_ARCH__)
  uint4 bits;
  memcpy(&bits, &pack, sizeof(bits));
  __stwb(reinterpret_cast<uint4*>(at), bits);
#else
  *reinterpret_cast<Pack<S>*>(at) = pack;
#endif
}

// The column whose Load unscales torch.amp's gradients on the vector path: the gradients of a step
// table, which MultiTensorCall::AddStep lays out as params, grads, states (the only tables with a
// grad_scale). A constant, so that one column's Load carries the unscale, not every column's
// (which took a third of the compile time and up to 50% more registers); a table with its
// gradients elsewhere takes the scalar path.
inline constexpr int kVectorGradCol = 1;

// torch.amp's unscale of a pack, each element as BoundOp::operator() unscales it.
template <typename S, typename T>
FUSED_OPTIM_ELEMENT Pack<S> Unscaled(Pack<S> pack, T inv_scale) {
  FUSED_OPTIM_UNROLL
  for (int k = 0; k < Pack<S>::kWidth; ++k) pack.v[k] = static_cast<S>(static_cast<T>(pack.v[k]) * inv_scale);
  return pack;
}

// A binding's view of element j of a group (see VectorGroup), with the same semantics as
// ElementIO: an absent column reads 0 and drops its store, each value is rounded to S as it is
// stored, a functional op reads src and writes dst, and torch.amp's gradient column is unscaled,
// stored back, and read unscaled. Every group member is indexed by the binding's constant column
// numbers only (a runtime index, such as meta.grad_col's, would put the group in local memory).
template <typename S, typename T, typename Meta, typename Check>
struct VectorIO {
  const Meta& meta;
  VectorGroup<S, Meta::kLists, Check>& group;
  int slot;
  int64_t first;
  int j;
  T inv_scale;
  FUSED_OPTIM_ELEMENT T Load(int col) const {
    group.check.Load(col, j);
    if (!group.loaded[col]) {
      group.loaded[col] = true;
      const void* src = meta.src[col][slot];
      void* dst = meta.dst[col][slot];
      const bool unscale = col == kVectorGradCol && meta.grad_scale != nullptr;  // meta.grad_col, see RunBlock
      if (unscale) group.unscaled = true;
      if (unscale && src == dst) {  // an in-place step: the unscaled values are read, and stored at the end
        group.values[col] = Unscaled(LoadPack<S>(dst, first), inv_scale);
        group.written[col] = true;
      } else {
        if (unscale) StorePack<S>(dst, first, Unscaled(LoadPack<S>(dst, first), inv_scale));  // Apply reads src
        if (src) {
          group.values[col] = LoadPack<S>(src, first);
        } else {
          FUSED_OPTIM_UNROLL
          for (int k = 0; k < Pack<S>::kWidth; ++k) group.values[col].v[k] = static_cast<S>(T(0));
        }
      }
    }
    return static_cast<T>(group.values[col].v[j]);
  }
  FUSED_OPTIM_ELEMENT void Store(int col, T value) const {
    group.check.Store(col, j);
    group.values[col].v[j] = static_cast<S>(value);
    group.written[col] = true;
  }
};

// Binding K with its hyper-parameters in math type T, over storage type S: the kernel's other
// argument. Half and BFloat16 are the device's 16-bit types, which state scalars may have.
template <typename K, typename S, typename T, typename Half, typename BFloat16>
struct BoundOp {
  using Meta = LaunchMeta<K>;                     // the kernel's argument
  static constexpr int kWidth = Pack<S>::kWidth;  // elements of a group on the vector path
  typename K::template Hyper<T> h;
  typename K::template Hyper<double> h_double;  // where StepRow reads them (device step counters)
  // The row slot `slot` reads: the host's, or the one of its device step counter in `buffer`.
  FUSED_OPTIM_ELEMENT const double* Row(const Meta& meta, int slot, double* buffer) const {
    return TensorRow<K, Half, BFloat16>(meta.scalars[slot], meta.device_steps ? &meta.step[slot] : nullptr, h_double,
                                        buffer);
  }
  FUSED_OPTIM_ELEMENT auto Scalars(const Meta& meta, int slot) const {
    double buffer[kRowBuffer<K>];
    return TensorScalars<K, T, Half, BFloat16>(Row(meta, slot, buffer), meta.state[slot], meta.default_dtype);
  }
  // torch.amp's 1 / grad_scale in the math type, as the CPU loops take it (1 without a scale):
  // once per thread, a load and a division the element loop would otherwise repeat.
  FUSED_OPTIM_ELEMENT T InvScale(const Meta& meta) const {
    return meta.grad_scale != nullptr ? static_cast<T>(1) / static_cast<T>(*meta.grad_scale) : static_cast<T>(1);
  }
  FUSED_OPTIM_ELEMENT void operator()(const Meta& meta, int slot, int64_t i, const typename K::template Scalars<T>& s,
                                      T inv_scale) const {
    if (meta.grad_scale != nullptr) {  // torch.amp's unscale, stored back before the step reads it
      S* grad = static_cast<S*>(meta.dst[meta.grad_col][slot]);
      grad[i] = static_cast<S>(static_cast<T>(grad[i]) * inv_scale);
    }
    K::Apply(ElementIO<S, T, Meta>{meta, slot, i}, h, s);
  }
  // Elements [first, first + W) at once (the vector path): the same as operator() on each, where
  // every non-null pointer of the slot is 16-byte aligned and `first` a multiple of W.
  template <typename Check>
  FUSED_OPTIM_ELEMENT void Group(const Meta& meta, int slot, int64_t first, const typename K::template Scalars<T>& s,
                                 T inv_scale) const {
    constexpr int NL = Meta::kLists;
    VectorGroup<S, NL, Check> group;
    FUSED_OPTIM_UNROLL
    for (int c = 0; c < NL; ++c) group.loaded[c] = group.written[c] = false;
    group.unscaled = false;
    FUSED_OPTIM_UNROLL
    for (int j = 0; j < Pack<S>::kWidth; ++j) {
      K::Apply(VectorIO<S, T, Meta, Check>{meta, group, slot, first, j, inv_scale}, h, s);
    }
    group.check.End(Pack<S>::kWidth);
    FUSED_OPTIM_UNROLL
    for (int c = 0; c < NL; ++c) {
      void* p = meta.dst[c][slot];
      if (group.written[c] && p) StorePack<S>(p, first, group.values[c]);
    }
    if (meta.grad_scale != nullptr && !group.unscaled) {  // a binding that does not read the gradient
      void* grad = meta.dst[kVectorGradCol][slot];
      StorePack<S>(grad, first, Unscaled(LoadPack<S>(grad, first), inv_scale));
    }
  }
  // The state scalars' new values (K::Advance), then the device step counter's, once no block
  // reads them any more (the row first, from the counter before its advance).
  FUSED_OPTIM_ELEMENT void Advance(const Meta& meta, int slot) const {
    if (meta.found_inf != nullptr && *meta.found_inf != 0.0f) return;  // torch.amp skips this step
    double buffer[kRowBuffer<K>];
    AdvanceState<K, Half, BFloat16>(Row(meta, slot, buffer), meta.state[slot], meta.default_dtype);
    if (meta.device_steps) AdvanceStep<Half, BFloat16>(&meta.step[slot]);
  }
};

// Whether every non-null pointer of the slot is 16-byte aligned (slots start at whole chunks of
// their tensors, so the tensors' own addresses decide): its chunks then take the vector path.
template <typename Meta>
FUSED_OPTIM_ELEMENT bool VectorAligned(const Meta& meta, int slot) {
  uintptr_t bits = 0;
  FUSED_OPTIM_UNROLL
  for (int l = 0; l < Meta::kLists; ++l) {
    bits |= reinterpret_cast<uintptr_t>(meta.src[l][slot]) | reinterpret_cast<uintptr_t>(meta.dst[l][slot]);
  }
  return bits % kVectorBytes == 0;
}

// The slot that block `block` works on: the last s < num_slots with first_block[s] <= block (a
// slot of no chunks, an empty tensor's, shares its first_block with the next). A binary search:
// a launch holds up to a few hundred slots, and every thread of a block finds the same one.
template <typename Meta>
FUSED_OPTIM_ELEMENT int SlotOf(const Meta& meta, int64_t block) {
  int lo = 0;
  int hi = meta.num_slots - 1;
  while (lo < hi) {
    const int mid = (lo + hi + 1) / 2;
    if (meta.first_block[mid] <= block) {
      lo = mid;
    } else {
      hi = mid - 1;
    }
  }
  return lo;
}

// The kernel body: thread `thread` of the `threads` of block `block` runs `op` on its share of the
// block's chunk. Thread t takes the W-element groups t, t + threads, ... (consecutive threads read
// consecutive 16 bytes), where the slot is aligned; the elements after the last whole group, and
// an unaligned slot's, go one at a time. `Check`: see NoBindingCheck.
template <typename Check = NoBindingCheck, typename Meta, typename Op>
FUSED_OPTIM_ELEMENT void RunBlock(const Meta& meta, const Op& op, int64_t block, int64_t thread, int64_t threads) {
  if (meta.found_inf != nullptr && *meta.found_inf != 0.0f) return;  // torch.amp skips this step
  const int s = SlotOf(meta, block);
  const int64_t begin = (block - meta.first_block[s]) * kChunkSize;
  const int64_t end = meta.numel[s] - begin < kChunkSize ? meta.numel[s] : begin + kChunkSize;
  // The per-tensor scalars once per thread: state scalars are loads the compiler could not hoist
  // above the element loop's stores.
  const auto scalars = op.Scalars(meta, s);
  const auto inv_scale = op.InvScale(meta);
  int64_t scalar_begin = begin;
  if (VectorAligned(meta, s) && (meta.grad_scale == nullptr || meta.grad_col == kVectorGradCol)) {
    constexpr int kWidth = Op::kWidth;
    const int64_t groups = (end - begin) / kWidth;
    for (int64_t g = thread; g < groups; g += threads) {
      op.template Group<Check>(meta, s, begin + g * kWidth, scalars, inv_scale);
    }
    scalar_begin = begin + groups * kWidth;
  }
  for (int64_t i = scalar_begin + thread; i < end; i += threads) op(meta, s, i, scalars, inv_scale);
}

// The advance kernel's body (after the launch's blocks, on the same stream): thread `slot`
// advances its slot's state scalars where the slot ends its tensor.
template <typename Meta, typename Op>
FUSED_OPTIM_ELEMENT void AdvanceSlot(const Meta& meta, const Op& op, int slot) {
  if (slot < meta.num_slots && meta.advance[slot]) op.Advance(meta, slot);
}

// Every binding's kernel arguments fit the limit (kSlotsPerLaunch's arithmetic, checked).
#define FUSED_OPTIM_CHECK_KERNEL_PARAMS(name)                                                                        \
  static_assert(sizeof(LaunchMeta<bind::name>) + 2 * sizeof(bind::name::Hyper<double>) + 16 <= kMaxKernelParamBytes, \
                #name ": its LaunchMeta and hyper-parameters exceed the CUDA kernel parameter limit");
FUSED_OPTIM_FOR_EACH_KERNEL(FUSED_OPTIM_CHECK_KERNEL_PARAMS)
#undef FUSED_OPTIM_CHECK_KERNEL_PARAMS

// The chunks of a tensor of `numel` elements (its blocks in a launch plan).
inline int64_t ChunksOf(int64_t numel) { return numel / kChunkSize + (numel % kChunkSize != 0); }

// One slot of a planned launch: `chunks` chunks (blocks) of tensor `tensor`, from its `first_chunk`.
struct PlanSlot {
  int64_t tensor, first_chunk, chunks;
};
struct PlannedLaunch {
  PlanSlot slots[kMaxSlotsPerLaunch];
  int num_slots = 0;
  int64_t blocks = 0;  // one per chunk: the sum of the slots' chunks
};

// Splits the blocks of `num_tensors` tensors (tensor t has blocks_of(t), in order) into launches,
// calling on_launch(const PlannedLaunch&) for each in order: tensors in order, a tensor of no
// blocks in none; a launch closes at `max_slots` slots (the binding's kSlotsPerLaunch) or
// `max_blocks` blocks (a tensor's remaining blocks then continue in the next, PlanSlot::first_chunk
// saying where). Reads counts alone, so tests can plan sizes no machine could allocate; the
// emulation may lower `max_blocks` to split small tensors. With `keep_empty` a tensor of no blocks
// gets a slot of its own (its state scalars still advance).
template <typename BlocksOf, typename OnLaunch>
void PlanBlocks(int64_t num_tensors, BlocksOf&& blocks_of, int max_slots, OnLaunch&& on_launch,
                int64_t max_blocks = kMaxGridBlocks, bool keep_empty = false) {
  if (max_blocks < 1 || max_blocks > kMaxGridBlocks) throw std::logic_error("fused_optim: bad CUDA grid limit");
  if (max_slots < 1 || max_slots > kMaxSlotsPerLaunch) throw std::logic_error("fused_optim: bad CUDA slot limit");
  PlannedLaunch launch;
  const auto close = [&] {
    on_launch(static_cast<const PlannedLaunch&>(launch));
    launch.num_slots = 0;
    launch.blocks = 0;
  };
  for (int64_t t = 0; t < num_tensors; ++t) {
    const int64_t chunks = blocks_of(t);
    if (chunks == 0 && keep_empty) {
      launch.slots[launch.num_slots++] = PlanSlot{t, 0, 0};
      if (launch.num_slots == max_slots) close();
    }
    for (int64_t done = 0; done < chunks;) {
      const int64_t take = std::min(chunks - done, max_blocks - launch.blocks);
      launch.slots[launch.num_slots++] = PlanSlot{t, done, take};
      launch.blocks += take;
      done += take;
      if (launch.num_slots == max_slots || launch.blocks == max_blocks) close();
    }
  }
  if (launch.num_slots > 0) close();
}

// The element-wise kernels' plan: one block per chunk of tensors with these element counts.
template <typename OnLaunch>
void PlanLaunches(const int64_t* numel, int64_t num_tensors, int max_slots, OnLaunch&& on_launch,
                  int64_t max_blocks = kMaxGridBlocks, bool keep_empty = false) {
  const auto chunks = [numel](int64_t t) {
    if (numel[t] < 0) throw std::logic_error("fused_optim: negative element count in a CUDA launch plan");
    return ChunksOf(numel[t]);
  };
  PlanBlocks(num_tensors, chunks, max_slots, on_launch, max_blocks, keep_empty);
}

// A launch's slot-to-block map (Meta::num_slots and first_block, which SlotOf reads), from its plan.
template <typename Meta>
void FillSlotBlocks(const PlannedLaunch& launch, Meta& meta) {
  int64_t blocks = 0;
  meta.num_slots = launch.num_slots;
  for (int s = 0; s < launch.num_slots; ++s) {
    meta.first_block[s] = blocks;
    blocks += launch.slots[s].chunks;
  }
  meta.first_block[launch.num_slots] = blocks;
}

inline int64_t ElementSize(DType dtype) { return dtype == DType::kDouble ? 8 : dtype == DType::kFloat ? 4 : 2; }

// p advanced by `bytes`, or null.
template <typename P>
P Advance(P p, int64_t bytes) {
  using Byte = std::conditional_t<std::is_const_v<std::remove_pointer_t<P>>, const char, char>;
  return p == nullptr ? p : static_cast<P>(static_cast<Byte*>(p) + bytes);
}

// One planned launch's kernel argument, from the table. A slot that continues a tensor from an
// earlier launch starts at its first chunk: the kernel indexes every slot from 0.
template <typename Meta>
void FillLaunchMeta(const KernelTable& table, const PlannedLaunch& launch, Meta& meta) {
  constexpr int NL = Meta::kLists;
  FillSlotBlocks(launch, meta);
  meta.device_steps = !table.steps.empty();
  for (int s = 0; s < launch.num_slots; ++s) {
    const PlanSlot& slot = launch.slots[s];
    const int64_t t = slot.tensor;
    const int64_t skipped = slot.first_chunk * kChunkSize;
    for (int l = 0; l < NL; ++l) {
      meta.dst[l][s] = Advance(table.dst[t * NL + l], skipped * ElementSize(table.dtype));
      meta.src[l][s] = Advance(table.src[t * NL + l], skipped * ElementSize(table.dtype));
    }
    meta.numel[s] = table.numel[t] - skipped;
    for (int k = 0; k < table.num_scalars; ++k) meta.scalars[s][k] = table.Scalar(t, k);
    for (int k = 0; k < table.num_state; ++k) meta.state[s][k] = table.State(t)[k];
    if (meta.device_steps) meta.step[s] = table.steps[t];
    const int64_t chunks = ChunksOf(table.numel[t]);
    meta.advance[s] = AdvancesAfterUpdate(table) && slot.first_chunk + slot.chunks == chunks;
  }
  meta.default_dtype = table.default_dtype;
  meta.grad_scale = table.grad_scale;
  meta.found_inf = table.found_inf;
  meta.grad_col = table.grad_col;
}

// Checks `table` against binding K (its list, scalar and state counts), then calls
// launch(const LaunchMeta<K>&, int64_t blocks) for each launch of its plan (a launch may have no
// blocks: its slots are empty tensors whose state scalars advance).
template <typename K, typename Launch>
void ForEachLaunch(const KernelTable& table, const char* what, Launch&& launch, int64_t max_blocks = kMaxGridBlocks) {
  constexpr int kLists = K::kLists;
  if (table.num_lists != kLists) {
    throw std::logic_error(std::string("fused_optim: ") + what + " takes " + std::to_string(kLists) +
                           " lists, the table has " + std::to_string(table.num_lists));
  }
  if (table.num_scalars != K::kNumScalars) {
    throw std::logic_error(std::string("fused_optim: ") + what + " reads " + std::to_string(K::kNumScalars) +
                           " per-tensor scalars, the table has " + std::to_string(table.num_scalars));
  }
  if (table.num_state != 0 && table.num_state != kStateScalarsOf<K>) {
    throw std::logic_error(std::string("fused_optim: ") + what + " reads " + std::to_string(kStateScalarsOf<K>) +
                           " state scalars, the table has " + std::to_string(table.num_state));
  }
  CheckDeviceSteps<K>(table, what);
  LaunchMeta<K> meta{};  // up to 32 KiB, zeroed once per call (well under a microsecond)
  PlanLaunches(
      table.numel.data(), table.num_tensors, kSlotsPerLaunch<K>,
      [&](const PlannedLaunch& planned) {
        FillLaunchMeta(table, planned, meta);
        launch(static_cast<const LaunchMeta<K>&>(meta), planned.blocks);
      },
      max_blocks, AdvancesAfterUpdate(table));
}

// Per-tensor sums of a table's columns (Adafactor's norms of its parameters and updates, its
// backward's sums, the sums of its row averages), computed on the device in two passes with no
// atomics, so that every run adds in the same order. Several sums of the same table share the two
// passes (each a launch where the table fits one): sum k of tensor t is the pass's entry k n + t
// of n tensors, planned as a tensor of its own. The first pass plans its blocks as a kernel's
// (PlanLaunches: one block per chunk of each entry); each thread sums its strided share of the
// chunk's terms (products, or one column's values, as the entry's DeviceSum says) in double, the
// block adds its threads' sums by GroupTree, and writes one partial per chunk. The second pass
// gives each entry one block, which adds its chunks' partials the same way and writes the entry's
// total as its DeviceSum says.
struct SumsMeta {
  static constexpr int kSlots = kMaxSlotsPerLaunch;
  const void* x[kSlots];  // the two columns, where a launch reads them (null: absent, zeros)
  const void* y[kSlots];
  int64_t numel[kSlots];
  int64_t first_block[kSlots + 1];  // as LaunchMetaN's (SlotOf)
  int64_t first_partial[kSlots];    // the index of the slot's first chunk among the call's partials
  DeviceSum kind[kSlots];
  int num_slots;
};
struct TotalsMeta {
  static constexpr int kTensors = kMaxSlotsPerLaunch;
  int64_t first_partial[kTensors + 1];  // entry first_tensor + b's partials: [first_partial[b], first_partial[b + 1])
  DeviceSum kind[kTensors];
  int64_t first_tensor;
  int num_tensors;
  DType dtype;
};
static_assert(sizeof(SumsMeta) <= kMaxKernelParamBytes && sizeof(TotalsMeta) <= kMaxKernelParamBytes,
              "a sums pass's argument exceeds the CUDA kernel parameter limit");

// One level of the tree over each group of `group` threads of a block (a power of two dividing
// kBlockSize; the whole block by default): after the levels stride = group / 2, then halving down
// to 1, values[first] holds the sum of the group's values, `first` its first thread. The device
// runs each level with every thread of the block, a __syncthreads() after each (GroupSum in
// kernels.cu); GroupTree runs them on the host.
FUSED_OPTIM_ELEMENT void TreeLevel(double* values, int thread, int stride, int group = kBlockSize) {
  if (thread % group < stride) values[thread] += values[thread + stride];
}
inline double GroupTree(double* values, int group = kBlockSize) {  // values: the group's own
  for (int stride = group / 2; stride > 0; stride /= 2) {
    for (int thread = 0; thread < stride; ++thread) TreeLevel(values, thread, stride, group);
  }
  return values[0];
}

// First pass: thread `thread`'s sum of its terms (x y, or x alone for DeviceSum::kValues) of block
// `block`'s chunk, in double (S: the storage type, T: its math type); the block's partial goes to
// PartialOf(meta, block).
template <typename S, typename T>
FUSED_OPTIM_ELEMENT double ChunkProducts(const SumsMeta& meta, int64_t block, int64_t thread, int64_t threads) {
  const int s = SlotOf(meta, block);
  const int64_t begin = (block - meta.first_block[s]) * kChunkSize;
  const int64_t end = meta.numel[s] - begin < kChunkSize ? meta.numel[s] : begin + kChunkSize;
  const S* x = static_cast<const S*>(meta.x[s]);
  const S* y = static_cast<const S*>(meta.y[s]);
  double sum = 0.0;
  if (x == nullptr) return sum;
  if (meta.kind[s] == DeviceSum::kValues) {
    for (int64_t i = begin + thread; i < end; i += threads) sum += static_cast<double>(static_cast<T>(x[i]));
    return sum;
  }
  if (y == nullptr) return sum;
  for (int64_t i = begin + thread; i < end; i += threads) {
    sum += static_cast<double>(static_cast<T>(x[i])) * static_cast<double>(static_cast<T>(y[i]));
  }
  return sum;
}
template <typename Meta>
FUSED_OPTIM_ELEMENT int64_t PartialOf(const Meta& meta, int64_t block) {
  const int s = SlotOf(meta, block);
  return meta.first_partial[s] + (block - meta.first_block[s]);
}

// Second pass: thread `thread`'s sum of its strided share of the partials of the launch's entry
// `b`; then Total turns the block's sum into what that entry of `out` holds.
FUSED_OPTIM_ELEMENT double PartialsShare(const TotalsMeta& meta, const double* partials, int64_t b, int64_t thread,
                                         int64_t threads) {
  double sum = 0.0;
  for (int64_t i = meta.first_partial[b] + thread; i < meta.first_partial[b + 1]; i += threads) sum += partials[i];
  return sum;
}
template <typename Half, typename BFloat16>
FUSED_OPTIM_ELEMENT double Total(const TotalsMeta& meta, int64_t b, double sum) {
  switch (meta.kind[b]) {
    case DeviceSum::kNorm:
      return RoundTo<Half, BFloat16>(meta.dtype, sqrt(sum));
    case DeviceSum::kValues:
      return RoundTo<Half, BFloat16>(meta.dtype, sum);
    default:
      return sum;
  }
}

// The first pass's partials for `num_sums` sums of the table: one per chunk of each entry.
inline int64_t NumPartials(const KernelTable& table, int num_sums) {
  int64_t chunks = 0;
  for (int64_t t = 0; t < table.num_tensors; ++t) chunks += ChunksOf(table.numel[t]);
  return chunks * num_sums;
}

// Plans both passes of `sums` of `table` (see SumsMeta): calls chunks(const SumsMeta&, int64_t
// blocks) for each launch of the first, then totals(const TotalsMeta&, int64_t blocks) for each of
// the second (one block per entry, an empty tensor's total 0). `max_blocks`: as PlanLaunches's.
template <typename Chunks, typename Totals>
void ForEachSumsLaunch(const KernelTable& table, std::span<const DeviceSumOf> sums, Chunks&& chunks, Totals&& totals,
                       int64_t max_blocks = kMaxGridBlocks) {
  for (const DeviceSumOf& of : sums) {
    if (of.a < 0 || of.b < 0 || of.a >= table.num_lists || of.b >= table.num_lists) {
      throw std::logic_error("fused_optim: a sums pass over a column the table does not have");
    }
  }
  const int64_t n = table.num_tensors;
  const int64_t entries = n * static_cast<int64_t>(sums.size());  // entry e: sum e / n of tensor e % n
  std::vector<int64_t> numel(static_cast<size_t>(entries));
  std::vector<int64_t> first_partial(static_cast<size_t>(entries) + 1, 0);
  for (int64_t e = 0; e < entries; ++e) {
    numel[e] = table.numel[e % n];
    first_partial[e + 1] = first_partial[e] + ChunksOf(numel[e]);
  }
  const auto column = [&](int64_t t, int col, int64_t skipped) {  // where a launch reads it, from chunk `skipped`
    const int64_t at = t * table.num_lists + col;
    const void* p = table.src[at] != nullptr ? table.src[at] : table.dst[at];
    return Advance(p, skipped * kChunkSize * ElementSize(table.dtype));
  };
  SumsMeta meta{};
  PlanLaunches(
      numel.data(), entries, SumsMeta::kSlots,
      [&](const PlannedLaunch& launch) {
        FillSlotBlocks(launch, meta);
        for (int s = 0; s < launch.num_slots; ++s) {
          const PlanSlot& slot = launch.slots[s];
          const DeviceSumOf& of = sums[slot.tensor / n];
          const int64_t t = slot.tensor % n;
          meta.x[s] = column(t, of.a, slot.first_chunk);
          meta.y[s] = column(t, of.b, slot.first_chunk);
          meta.kind[s] = of.kind;
          meta.numel[s] = numel[slot.tensor] - slot.first_chunk * kChunkSize;
          meta.first_partial[s] = first_partial[slot.tensor] + slot.first_chunk;
        }
        chunks(static_cast<const SumsMeta&>(meta), launch.blocks);
      },
      max_blocks);
  TotalsMeta total{};
  total.dtype = table.dtype;
  for (int64_t first = 0; first < entries; first += TotalsMeta::kTensors) {
    total.first_tensor = first;
    total.num_tensors = static_cast<int>(std::min<int64_t>(TotalsMeta::kTensors, entries - first));
    for (int b = 0; b <= total.num_tensors; ++b) total.first_partial[b] = first_partial[first + b];
    for (int b = 0; b < total.num_tensors; ++b) total.kind[b] = sums[(first + b) / n].kind;
    totals(static_cast<const TotalsMeta&>(total), static_cast<int64_t>(total.num_tensors));
  }
}

}  // namespace fused_optim::cuda
