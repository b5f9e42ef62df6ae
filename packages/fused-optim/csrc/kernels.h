// The contract between the op glue (csrc/ops) and the devices (csrc/cpu/kernels.cpp,
// csrc/cuda/kernels.cu): the KernelTable one call is described by, and the list of every kernel.
// Plain C++ with no torch types, so nvcc compiles the CUDA side against the CUDA runtime alone.
#pragma once

#include <cstdint>
#include <stdexcept>
#include <string>
#include <vector>

#include "fused_optim/math/adadelta.h"
#include "fused_optim/math/adafactor.h"
#include "fused_optim/math/adagrad.h"
#include "fused_optim/math/adam.h"
#include "fused_optim/math/adamax.h"
#include "fused_optim/math/adan.h"
#include "fused_optim/math/asgd.h"
#include "fused_optim/math/lion.h"
#include "fused_optim/math/muon.h"
#include "fused_optim/math/nadam.h"
#include "fused_optim/math/radam.h"
#include "fused_optim/math/rmsprop.h"
#include "fused_optim/math/rprop.h"
#include "fused_optim/math/sgd.h"

// Every kernel, by its binding's name (fused_optim::bind::<name>, written in math/<algo>.h).
// One row per algorithm; each device file expands this list once (X is applied to each name).
// clang-format off
#define FUSED_OPTIM_FOR_EACH_KERNEL(X)                                   \
  X(SgdStep) X(SgdBackward)                                              \
  X(AdamStep) X(AdamBackward) X(AdamDirection) X(AdamDirectionBackward)  \
  X(RmspropStep) X(RmspropBackward)                                      \
  X(AdagradStep) X(AdagradBackward)                                      \
  X(AdadeltaStep) X(AdadeltaBackward)                                    \
  X(AdamaxStep) X(AdamaxBackward)                                        \
  X(RadamStep) X(RadamBackward)                                          \
  X(LionStep) X(LionBackward)                                            \
  X(AdanStep) X(AdanBackward)                                            \
  X(NadamStep) X(NadamBackward)                                          \
  X(RpropStep) X(RpropBackward)                                          \
  X(AsgdStep) X(AsgdBackward)                                            \
  X(AdafactorFactors) X(AdafactorVectorDirection) X(AdafactorFactoredDirection) X(AdafactorApply)  \
  X(AdafactorVectorDirectionBackward) X(AdafactorFactoredDirectionBackward)     \
  X(AdafactorApplyBackward)                                              \
  X(MuonDirection) X(MuonDirectionBackward)
// clang-format on

namespace fused_optim {

enum class DType : int { kFloat, kDouble, kHalf, kBFloat16, kInt, kLong };  // kInt, kLong: state scalars only

// A one-element state tensor that a binding with state scalars (K::kStateScalars, e.g. ASGD's eta,
// mu and step) reads in its per-tensor set-up and, where it has Advance, advances after the update
// (Adafactor's apply and factored direction only read theirs, values the op computed): its data
// pointer on the call's device, in its own dtype; or, with ptr null, `value` read on the host at
// launch (a tensor off the call's device, or a functional op's given number), whose stores the
// kernel drops.
struct StateScalar {
  void* ptr = nullptr;
  DType dtype = DType::kDouble;
  double value = 0.0;
};

// One multi-tensor call. Rows are tensor indices, columns are the op's lists (params, grads,
// states...), in the order of the binding's column enum. `dst` is where a list's result goes;
// `src` is where its input values come from. They are the same pointer for in-place lists and
// read-only inputs; a functional op points `dst` at a fresh output and `src` at the caller's
// tensor. An absent optional input has both null (read as 0). A backward table lists the incoming
// gradients, the forward inputs and then the outgoing gradients.
struct KernelTable {
  DType dtype = DType::kFloat;
  int num_lists = 0;
  int num_scalars = 0;  // per-tensor scalars, e.g. bias corrections that depend on each step count
  int64_t num_tensors = 0;
  std::vector<void*> dst;
  std::vector<const void*> src;
  std::vector<int64_t> numel;
  std::vector<double> scalars;
  int num_state = 0;                    // state scalars per tensor (the binding's kStateScalars)
  std::vector<StateScalar> state;       // num_tensors * num_state
  bool advance_state = false;           // whether the kernel advances the state it points at (an in-place step)
  DType default_dtype = DType::kFloat;  // torch's default dtype (values torch.optim makes tensors of)
  void* stream = nullptr;               // cudaStream_t for CUDA tables
  // torch.amp.GradScaler's arguments of an in-place step (null where not given), each one float32 on
  // the table's device, read by the kernel itself (on CUDA, on the device): where *found_inf != 0
  // the kernel writes nothing at all; otherwise column grad_col is multiplied by 1 / *grad_scale
  // as it is read, and the product stored back (torch's fused optimizers also leave the gradients
  // unscaled).
  const float* grad_scale = nullptr;
  const float* found_inf = nullptr;
  int grad_col = -1;
  // capturable=True (a step that a CUDA graph may capture): each tensor's step counter on the
  // table's device, one per tensor, which the kernel itself reads and advances, so that no count
  // crosses to the host. Each tensor's per-tensor scalars then come from the count this update
  // makes (the counter + 1) through the binding's StepRow, not from `scalars`, and the counter is
  // advanced after the update (not where found_inf skips it). Empty: `scalars` holds rows the host
  // computed from counters it advanced itself.
  std::vector<StateScalar> steps;
  // false: the kernel reads the counters in `steps` but leaves them, a pass before the one that
  // ends the step (Adafactor's, whose last pass advances them).
  bool advance_steps = true;

  template <typename S>
  S* Dst(int64_t t, int list) const {
    return static_cast<S*>(dst[t * num_lists + list]);
  }
  template <typename S>
  const S* Src(int64_t t, int list) const {
    return static_cast<const S*>(src[t * num_lists + list]);
  }
  double Scalar(int64_t t, int k) const { return scalars[t * num_scalars + k]; }
  const StateScalar* State(int64_t t) const { return state.data() + t * num_state; }
};

// How many state scalars binding K reads per tensor (0 for most).
template <typename K>
inline constexpr int kStateScalarsOf = [] {
  if constexpr (requires { K::kStateScalars; }) {
    return K::kStateScalars;
  } else {
    return 0;
  }
}();

// `v` as a tensor of dtype d holds it (float16 and bfloat16 through float, as c10 and CUDA convert);
// each device names its 16-bit types.
template <typename Half, typename BFloat16>
FUSED_OPTIM_HOST_DEVICE inline double RoundTo(DType d, double v) {
  switch (d) {
    case DType::kFloat:
      return static_cast<double>(static_cast<float>(v));
    case DType::kHalf:
      return static_cast<double>(static_cast<float>(Half(static_cast<float>(v))));
    case DType::kBFloat16:
      return static_cast<double>(static_cast<float>(BFloat16(static_cast<float>(v))));
    case DType::kInt:
      return static_cast<double>(static_cast<int32_t>(v));
    case DType::kLong:
      return static_cast<double>(static_cast<int64_t>(v));
    default:
      return v;
  }
}

// value * f in dtype d, as torch's in-place multiplication by a number rounds it: f to the dtype's
// compute type first (float, but double for float64), then the product (exact in double for
// float operands) to the dtype.
template <typename Half, typename BFloat16>
FUSED_OPTIM_HOST_DEVICE inline double ScaledIn(DType d, double value, double f) {
  const double factor = d == DType::kDouble ? f : static_cast<double>(static_cast<float>(f));
  return RoundTo<Half, BFloat16>(d, value * factor);
}

// A binding's view of one tensor's state scalars on the device that holds them (the CPU loops'
// and the CUDA kernels'): loads from memory or the launch-time value, stores to memory only.
template <typename Half, typename BFloat16>
struct StateIO {
  const StateScalar* state;  // this tensor's, K::kStateScalars of them
  DType default_dtype;

  FUSED_OPTIM_HOST_DEVICE double Load(int k) const {
    const StateScalar& s = state[k];
    if (s.ptr == nullptr) return s.value;
    switch (s.dtype) {
      case DType::kFloat:
        return static_cast<double>(*static_cast<const float*>(s.ptr));
      case DType::kHalf:
        return static_cast<double>(static_cast<float>(*static_cast<const Half*>(s.ptr)));
      case DType::kBFloat16:
        return static_cast<double>(static_cast<float>(*static_cast<const BFloat16*>(s.ptr)));
      case DType::kInt:
        return static_cast<double>(*static_cast<const int32_t*>(s.ptr));
      case DType::kLong:
        return static_cast<double>(*static_cast<const int64_t*>(s.ptr));
      default:
        return *static_cast<const double*>(s.ptr);
    }
  }
  // Writes `v` rounded to state k's dtype.
  FUSED_OPTIM_HOST_DEVICE void Store(int k, double v) const {
    const StateScalar& s = state[k];
    if (s.ptr == nullptr) return;
    switch (s.dtype) {
      case DType::kFloat:
        *static_cast<float*>(s.ptr) = static_cast<float>(v);
        break;
      case DType::kHalf:
        *static_cast<Half*>(s.ptr) = Half(static_cast<float>(v));
        break;
      case DType::kBFloat16:
        *static_cast<BFloat16*>(s.ptr) = BFloat16(static_cast<float>(v));
        break;
      case DType::kInt:
        *static_cast<int32_t*>(s.ptr) = static_cast<int32_t>(v);
        break;
      case DType::kLong:
        *static_cast<int64_t*>(s.ptr) = static_cast<int64_t>(v);
        break;
      default:
        *static_cast<double*>(s.ptr) = v;
    }
  }
  FUSED_OPTIM_HOST_DEVICE double Round(int k, double v) const { return RoundTo<Half, BFloat16>(state[k].dtype, v); }
  FUSED_OPTIM_HOST_DEVICE double RoundToDefault(double v) const { return RoundTo<Half, BFloat16>(default_dtype, v); }
  FUSED_OPTIM_HOST_DEVICE double Scaled(int k, double f) const {
    return ScaledIn<Half, BFloat16>(state[k].dtype, Load(k), f);
  }
};

// Whether binding K's per-tensor scalars depend on the step count: it then has
//   static void StepRow(const Hyper<double>& h, double step, double* row)   (FUSED_OPTIM_HOST_DEVICE)
// writing the row of count `step`, the one formula the host (csrc/ops) and the kernels
// (KernelTable::steps) both call; or, where a row also holds scalars that are not the step's
// (Adafactor's lengths and norms' divisors), which the host alone knows,
//   static void StepRow(const Hyper<double>& h, double step, const double* host_row, double* row)
// writing the host's row with the step's entries of count `step`.
template <typename K>
inline constexpr bool kStepRowOverHostRow =
    requires(const typename K::template Hyper<double>& h, const double* host_row, double* row) {
      K::StepRow(h, 1.0, host_row, row);
    };
template <typename K>
inline constexpr bool kHasStepRow = kStepRowOverHostRow<K> || requires(const typename K::template Hyper<double>& h,
                                                                       double* row) { K::StepRow(h, 1.0, row); };

// The row binding K reads for one tensor: the host's (`host_row`), or, where the table has device
// step counters (`step` not null), the row of the count this update makes, computed into `buffer`
// (K::kNumScalars doubles) from the counter where it lives.
template <typename K, typename Half, typename BFloat16>
FUSED_OPTIM_HOST_DEVICE inline const double* TensorRow(const double* host_row, const StateScalar* step,
                                                       const typename K::template Hyper<double>& h, double* buffer) {
  if (step == nullptr) return host_row;
  const StateIO<Half, BFloat16> counter{step, DType::kFloat};
  if constexpr (kStepRowOverHostRow<K>) {
    K::StepRow(h, counter.Round(0, counter.Load(0) + 1.0), host_row, buffer);
  } else if constexpr (kHasStepRow<K>) {
    K::StepRow(h, counter.Round(0, counter.Load(0) + 1.0), buffer);
  }
  return buffer;
}

// Device step counters (KernelTable::steps) are one per tensor, and a binding whose per-tensor
// scalars are not all the step's (a row without StepRow) cannot take them: its row would never be
// computed. Checked by every device's launch before it reads a counter.
// A table whose counters are only read (advance_steps false) advances no state scalar either: a
// launch's advance pass does both or neither.
template <typename K>
void CheckDeviceSteps(const KernelTable& table, const char* what) {
  if (table.steps.empty()) return;
  if (static_cast<int64_t>(table.steps.size()) != table.num_tensors || (K::kNumScalars > 0 && !kHasStepRow<K>) ||
      (!table.advance_steps && table.advance_state)) {
    throw std::logic_error(std::string("fused_optim: ") + what + " cannot take these device step counters");
  }
}

// Whether a table's kernel advances device step counters after its update (it has them and does
// not only read them).
inline bool AdvancesSteps(const KernelTable& table) { return !table.steps.empty() && table.advance_steps; }

// Whether a table's kernel advances anything after its update: its state scalars, or its counters.
inline bool AdvancesAfterUpdate(const KernelTable& table) { return table.advance_state || AdvancesSteps(table); }

// The size of a TensorRow buffer for binding K.
template <typename K>
inline constexpr int kRowBuffer = K::kNumScalars > 0 ? K::kNumScalars : 1;

// Tensor t's device step counter (KernelTable::steps), or null where the host computed the rows.
inline const StateScalar* DeviceStep(const KernelTable& table, int64_t t) {
  return table.steps.empty() ? nullptr : table.steps.data() + t;
}

// A device step counter's advance after the update (KernelTable::steps).
template <typename Half, typename BFloat16>
FUSED_OPTIM_HOST_DEVICE inline void AdvanceStep(const StateScalar* step) {
  const StateIO<Half, BFloat16> counter{step, DType::kFloat};
  counter.Store(0, counter.Load(0) + 1.0);
}

// One tensor's per-tensor scalars: binding K's MakeScalars of its row, and of its state scalars
// where K has them.
template <typename K, typename T, typename Half, typename BFloat16>
FUSED_OPTIM_HOST_DEVICE inline typename K::template Scalars<T> TensorScalars(const double* row,
                                                                             const StateScalar* state,
                                                                             DType default_dtype) {
  if constexpr (kStateScalarsOf<K> > 0) {
    return K::template MakeScalars<T>(row, StateIO<Half, BFloat16>{state, default_dtype});
  } else {
    return K::template MakeScalars<T>(row);
  }
}

// After the update: binding K's new values of one tensor's state scalars (nothing where K has none,
// or only reads them: Adafactor's apply passes, whose state scalars are the op's norms).
template <typename K, typename Half, typename BFloat16>
FUSED_OPTIM_HOST_DEVICE inline void AdvanceState(const double* row, const StateScalar* state, DType default_dtype) {
  using IO = StateIO<Half, BFloat16>;
  if constexpr (requires(const double* r, const IO& io) { K::Advance(r, io); }) {
    K::Advance(row, IO{state, default_dtype});
  }
}

// What a device sums pass (the CUDA builds' SumsOfProducts) writes for each tensor: the sum of the
// products of two columns, in double; the L2 norm of a column, rounded to the table's dtype (as
// torch.linalg.vector_norm of that dtype rounds it); or the sum of a column's values, rounded to
// the dtype (as ATen's sum of that dtype rounds it).
enum class DeviceSum : int { kProducts, kNorm, kValues };
// One such sum for every tensor of a table: of its columns a and b (b unread for kValues).
struct DeviceSumOf {
  int a;
  int b;
  DeviceSum kind;
};

// Calls f.template operator()<storage type, math type>() for the table's dtype; each device names
// its own 16-bit storage types (their math runs in float).
template <typename Half, typename BFloat16, typename F>
void DispatchFloating(DType dtype, F&& f) {
  if (dtype == DType::kFloat) return f.template operator()<float, float>();
  if (dtype == DType::kDouble) return f.template operator()<double, double>();
  if (dtype == DType::kHalf) return f.template operator()<Half, float>();
  f.template operator()<BFloat16, float>();  // DType::kBFloat16
}

// Each kernel once per device build: the CPU loops for the baseline ISA, AVX2 and AVX-512F (x86-64
// only; the widest the machine has runs), the CUDA launch, and that launch emulated on the host
// (a test mode, csrc/cuda/launch_emulation.cpp). Hyper-parameters travel in double; each kernel
// narrows them to its math type.
//
// The CPU builds also reduce: SumsOfProducts(table, a, b, out) writes each tensor's sum of the
// products of columns a and b (a == b: its sum of squares), from the values a launch would start
// from (src, else dst; an absent column reads as zeros), to out[t], in double. Each chunk of the
// loops keeps a fixed set of partial sums (element i into partial i % 16), which it adds in order,
// and a tensor's chunks are added in order too, so the sums depend neither on the thread count
// nor on the ISA build (-ffp-contract=off: no build fuses a multiply-add). Adafactor's norms and
// its backward's sum(gp' u), where the CPU loops run its passes. SquaresAlongRowsAndColumns(dtype,
// n, data, dims, row_sums, col_sums) takes n contiguous tensors of `dtype` viewed as batches of
// matrices (dims: batch, rows, columns per tensor) and writes the sum of the squares of each
// matrix's every row, then of its every column, to row_sums and col_sums (the matrices of one
// tensor after another, in double), all in one pass over the data: Adafactor's factored
// statistics. A row is summed as a chunk is; a column's sum adds its blocks of rows in order (the
// blocks set by the shape alone), so these too are the same on any thread count and build.
// ProductsOfRowsAndColumns(dtype, n, rows, cols, out, dims) writes Adafactor's estimate r c of n
// such batches of matrices: out[b, i, j] = rows[b, i] cols[b, j], each product rounded once to
// `dtype` (as ATen's matmul of an m x 1 by a 1 x n matrix rounds it), all contiguous.
#define FUSED_OPTIM_DECLARE_KERNEL(name) void name(const KernelTable& table, const bind::name::Hyper<double>& hyper);
#define FUSED_OPTIM_DECLARE_CPU_REDUCTIONS                                                                          \
  void SumsOfProducts(const KernelTable& table, int a, int b, double* out);                                         \
  void SquaresAlongRowsAndColumns(DType dtype, int64_t num_tensors, const void* const* data, const int64_t* dims,   \
                                  double* row_sums, double* col_sums);                                              \
  void ProductsOfRowsAndColumns(DType dtype, int64_t num_tensors, const void* const* rows, const void* const* cols, \
                                void* const* out, const int64_t* dims);
namespace cpu {
FUSED_OPTIM_FOR_EACH_KERNEL(FUSED_OPTIM_DECLARE_KERNEL)
FUSED_OPTIM_DECLARE_CPU_REDUCTIONS
}  // namespace cpu
namespace cpu_avx2 {
FUSED_OPTIM_FOR_EACH_KERNEL(FUSED_OPTIM_DECLARE_KERNEL)
FUSED_OPTIM_DECLARE_CPU_REDUCTIONS
}  // namespace cpu_avx2
namespace cpu_avx512 {
FUSED_OPTIM_FOR_EACH_KERNEL(FUSED_OPTIM_DECLARE_KERNEL)
FUSED_OPTIM_DECLARE_CPU_REDUCTIONS
}  // namespace cpu_avx512
// The CUDA builds' reductions, each in passes on the device with nothing read on the host:
// SumsOfProducts(table, sums, num_sums, partials, out) writes to out[k n + t], a double on the
// table's device, tensor t's sum k (of the n tensors; DeviceSumOf sums[k] says which), all of them
// in the same two passes (csrc/cuda/launch_plan.h's ForEachSumsLaunch); `partials` is scratch of
// cuda_emulation::NumPartials(table, num_sums) doubles on that device.
// NormsAlongRowsAndColumns(dtype, n, data, dims, row_norms, col_norms, partials, stream) takes what
// the CPU builds' SquaresAlongRowsAndColumns takes (contiguous batches of matrices on the device)
// and writes the L2 norm of each matrix's every row to row_norms[t] and of its every column to
// col_norms[t] (each tensor's own place, its matrices in turn), rounded to `dtype` and stored in it
// (as torch.linalg.vector_norm of that dtype rounds it); `partials` is scratch of
// cuda_emulation::ColumnPartials(n, dims) doubles. ProductsOfRowsAndColumns(dtype, n, rows, cols,
// out, dims, stream) is the CPU builds' on the device (csrc/cuda/matrix_passes.h has the plans).
#define FUSED_OPTIM_DECLARE_CUDA_REDUCTIONS                                                                            \
  void SumsOfProducts(const KernelTable& table, const DeviceSumOf* sums, int num_sums, double* partials, double* out); \
  void NormsAlongRowsAndColumns(DType dtype, int64_t num_tensors, const void* const* data, const int64_t* dims,        \
                                void* const* row_norms, void* const* col_norms, double* partials, void* stream);       \
  void ProductsOfRowsAndColumns(DType dtype, int64_t num_tensors, const void* const* rows, const void* const* cols,    \
                                void* const* out, const int64_t* dims, void* stream);
namespace cuda {
FUSED_OPTIM_FOR_EACH_KERNEL(FUSED_OPTIM_DECLARE_KERNEL)
FUSED_OPTIM_DECLARE_CUDA_REDUCTIONS
}  // namespace cuda
namespace cuda_emulation {
FUSED_OPTIM_FOR_EACH_KERNEL(FUSED_OPTIM_DECLARE_KERNEL)
FUSED_OPTIM_DECLARE_CUDA_REDUCTIONS
int64_t NumPartials(const KernelTable& table, int num_sums);       // SumsOfProducts's scratch, in doubles
int64_t ColumnPartials(int64_t num_tensors, const int64_t* dims);  // NormsAlongRowsAndColumns's, in doubles
int64_t Launches();      // emulated launches so far, as a GPU makes them (tests, bench_host.py --device plan)
int64_t VectorGroups();  // groups that took the vector path so far (tests check which path ran)
// Lowers the emulated grid's block limit (tests: small tensors then span launches); returns the
// previous one.
int64_t SetGridLimit(int64_t max_blocks);
// Runs one of the test-only bindings of launch_emulation.cpp that break (or keep) the vector path's
// invariants over a chunk and 7 elements; returns the sum of the result or throws the check's
// std::logic_error.
double BindingCheckProbe(const std::string& binding);
}  // namespace cuda_emulation
#undef FUSED_OPTIM_DECLARE_KERNEL
#undef FUSED_OPTIM_DECLARE_CPU_REDUCTIONS
#undef FUSED_OPTIM_DECLARE_CUDA_REDUCTIONS

}  // namespace fused_optim
