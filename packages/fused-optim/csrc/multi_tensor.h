// The skeleton every op file (csrc/ops/<algo>.cpp) is written on: validation and marshalling of
// a multi-tensor op's arguments into a KernelTable, the launch on the call's device, the shared
// argument checks and the registration of an op file's schemas and kernels.
// Everything is checked before the caller modifies any tensor, so a rejected call leaves the
// user's tensors untouched.
#pragma once

#include <torch/headeronly/util/BFloat16.h>
#include <torch/headeronly/util/Half.h>

#include <algorithm>
#include <array>
#include <deque>
#include <initializer_list>
#include <limits>
#include <optional>
#include <span>
#include <string>
#include <tuple>
#include <type_traits>
#include <utility>
#include <vector>

#include "kept_step.h"
#include "kernels.h"
#include "modes.h"
#include "torch_api.h"
#ifndef FUSED_OPTIM_STABLE_ABI
#include "eager_call.h"
#endif

namespace fused_optim {

// A functional op's result: N tensor lists.
template <size_t... I>
auto ListsOf(std::index_sequence<I...>) -> std::tuple<std::enable_if_t<I + 1 != 0, TensorVector>...>;
template <size_t N>
using Lists = decltype(ListsOf(std::make_index_sequence<N>{}));
// N flags all true: every one of N optional lists present.
template <size_t N>
constexpr std::array<bool, N> AllPresent() {
  std::array<bool, N> all{};
  all.fill(true);
  return all;
}

// One kernel's builds (csrc/kernels.h); FUSED_OPTIM_KERNEL(name) names them all.
template <typename Hyper>
struct KernelBuilds {
  using Fn = void (*)(const KernelTable&, const Hyper&);
  Fn cpu, cpu_avx2, cpu_avx512, cuda;  // null where not built
  Fn cuda_emulation;                   // always built
};

#if defined(__x86_64__) && defined(__GNUC__)
#define FUSED_OPTIM_CPU_WIDE_KERNELS(name) &::fused_optim::cpu_avx2::name, &::fused_optim::cpu_avx512::name
#else
#define FUSED_OPTIM_CPU_WIDE_KERNELS(name) nullptr, nullptr
#endif
#ifdef FUSED_OPTIM_WITH_CUDA
#define FUSED_OPTIM_CUDA_KERNEL(name) &::fused_optim::cuda::name
#else
#define FUSED_OPTIM_CUDA_KERNEL(name) nullptr
#endif
#define FUSED_OPTIM_KERNEL(name)                                                                  \
  ::fused_optim::KernelBuilds<::fused_optim::bind::name::Hyper<double>> {                         \
    &::fused_optim::cpu::name, FUSED_OPTIM_CPU_WIDE_KERNELS(name), FUSED_OPTIM_CUDA_KERNEL(name), \
        &::fused_optim::cuda_emulation::name                                                      \
  }

// torch.amp.GradScaler's optional arguments of an in-place <algo>_step_ op, which its schema ends
// with (FUSED_OPTIM_AMP_ARGS): the scale to divide the gradients by and the flag that skips the step.
// The op's own arguments, which outlive the call.
struct Amp {
  const std::optional<Tensor>& grad_scale;
  const std::optional<Tensor>& found_inf;
};
#define FUSED_OPTIM_AMP_ARGS "Tensor? grad_scale=None, Tensor? found_inf=None"
// The same, and `capturable` (see StepInPlace), for an in-place op with step counters: its C++
// function takes (grad_scale, found_inf, capturable) last.
#define FUSED_OPTIM_STEP_ARGS FUSED_OPTIM_AMP_ARGS ", bool capturable=False"

// A table's per-tensor scalars: row(step, out) writes the `num` scalars of the tensor with step
// count `step`, called for each tensor in order.
template <typename Row>
void FillScalars(KernelTable& table, int num, const std::vector<double>& steps, const Row& row) {
  table.num_scalars = num;
  table.scalars.resize(num * steps.size());
  for (size_t t = 0; t < steps.size(); ++t) row(steps[t], table.scalars.data() + t * num);
}
// The most per-tensor scalars of any binding (math/<algo>.h): the longest row RowOfCount keeps.
#define FUSED_OPTIM_NUM_SCALARS(name) bind::name::kNumScalars,
inline constexpr int kMaxScalarsPerTensor = std::max({FUSED_OPTIM_FOR_EACH_KERNEL(FUSED_OPTIM_NUM_SCALARS)});
#undef FUSED_OPTIM_NUM_SCALARS
// A row of `num` scalars that depends on the step count alone, row(step, out), computed once per
// run of equal counts (usually once for a whole call: a row's std::pow calls cost more than a small
// tensor's update) and handed out again for the others. (In place: no allocation on a step's path.)
template <typename Row>
class RowOfCount {
 public:
  RowOfCount(int num, Row row) : row_(std::move(row)) {
    FUSED_OPTIM_CHECK(num >= 0 && num <= kMaxScalarsPerTensor, "RowOfCount: a row of ", num,
                      " scalars, longer than any binding's (a fused-optim bug)");
  }
  const double* Of(double step) {
    if (!(step == step_)) {  // (NaN at first: equal to no count)
      row_(step, values_.data());
      step_ = step;
    }
    return values_.data();
  }

 private:
  Row row_;
  std::array<double, kMaxScalarsPerTensor> values_ = {};
  double step_ = std::numeric_limits<double>::quiet_NaN();
};
// The same as FillScalars from ScalarRows (below), through RowOfCount.
template <typename Rows>
void FillStepScalars(KernelTable& table, const Rows& rows, const std::vector<double>& steps) {
  RowOfCount of_count(rows.num, rows.row);
  FillScalars(table, rows.num, steps, [&](double step, double* out) { std::copy_n(of_count.Of(step), rows.num, out); });
}

// The widest of a CPU function's builds this machine runs (a null build is skipped).
template <typename Fn>
Fn WidestCpuBuild(Fn baseline, std::type_identity_t<Fn> avx2, std::type_identity_t<Fn> avx512) {
  if (avx512 != nullptr && SelectedCpuIsa() == CpuIsa::kAvx512) return avx512;
  if (avx2 != nullptr && SelectedCpuIsa() >= CpuIsa::kAvx2) return avx2;
  return baseline;
}

// Where `device` is a GPU, on_cuda(stream) with the device current and its current stream (a
// cudaStream_t as void*); elsewhere on_host(). The one place a call's CUDA set-up is written (a
// build without CUDA refuses CUDA tensors in MultiTensorCall's constructor, so never runs on_cuda).
template <typename OnCuda, typename OnHost>
void RunOnDevice(const Device& device, [[maybe_unused]] OnCuda&& on_cuda, OnHost&& on_host) {
  if (!device.is_cuda()) return on_host();
#ifdef FUSED_OPTIM_WITH_CUDA
  const api::DeviceGuard guard(device);
  on_cuda(api::CurrentCudaStream(device.index()));
#endif
}

// Runs the kernel over `table` on `device`: the CUDA launch, its emulation (a test mode), or the
// widest CPU loops this machine runs.
template <typename Hyper>
void RunTable(const KernelBuilds<Hyper>& kernel, const Hyper& hyper, KernelTable& table, const Device& device) {
  if (table.num_tensors == 0) return;
  RunOnDevice(
      device,
      [&](void* stream) {
        table.stream = stream;
        kernel.cuda(table, hyper);
      },
      [&] {
        if (CudaEmulation()) {
          kernel.cuda_emulation(table, hyper);
        } else {
          WidestCpuBuild(kernel.cpu, kernel.cpu_avx2, kernel.cpu_avx512)(table, hyper);
        }
      });
}

// Whether found_inf (null: not given) skips the step, as MultiTensorCall::SkipStep says.
bool SkipsStep(const Tensor* found_inf, bool host_needs_answer);

// One of an in-place step's AMP arguments checked (None, or a one-element float32 tensor on the
// params' device, `device`; any device where `num_tensors` is 0): null for None, else the tensor.
const Tensor* CheckAmpArgument(const char* op, const char* name, const std::optional<Tensor>& x, const Device& device,
                               int64_t num_tensors);

// An in-place step replayed by a kept step (kept_step.h): the kept table of this thread's replay
// (null outside one), whether the kept tensors `lists` are unchanged (KeptTable::Unchanged), and
// whether this step's gradients and AMP arguments then fit it (KeptTable::Fits, with the AMP
// arguments checked as the full path checks them, and kept here for the step). Where `fits` is
// false the step takes its full path; where it is also `unchanged` the table stays kept.
struct KeptFit {
  kept::KeptTable* table = nullptr;
  bool unchanged = false;
  bool fits = false;
  const Tensor* grad_scale = nullptr;
  const Tensor* found_inf = nullptr;
};
KeptFit FitKept(const char* op, std::span<const TensorList> lists, TensorList params, TensorList grads, const Amp& amp,
                bool capturable);

// Each tensor of `list` (2+ dimensions, one dtype, on one device) as a batch of matrices: its
// (batch, rows, columns), tensor after tensor (the matrix passes' layout, csrc/kernels.h).
std::vector<int64_t> MatrixDimsOf(TensorList list);

// Where the CPU loops run, each tensor of `list` (contiguous, 2+ dimensions, one floating dtype)
// taken as a batch of matrices: the sums of the squares along every row of every matrix, then
// along every column, in double (SquaresAlongRowsAndColumns in csrc/kernels.h, one pass over each).
struct RowAndColumnSums {
  std::vector<double> rows, cols;
  std::vector<int64_t> dims;  // the list's MatrixDimsOf, read on the way
};
RowAndColumnSums SquaresAlongRowsAndColumns(TensorList list);

// Where the CUDA kernels (or their emulation) run, the same list's L2 norms along every row, then
// every column, rounded to its dtype, in one flat tensor of that dtype on its device (the rows'
// norms laid out as SquaresAlongRowsAndColumns's row sums, then the columns' as its column sums),
// made in passes there with nothing read on the host (NormsAlongRowsAndColumns in csrc/kernels.h):
// a column of a call over the row averages, then the column averages (MultiTensorCall::AddDeviceValues).
struct RowAndColumnNorms {
  Tensor norms;
  std::vector<int64_t> dims;  // the list's MatrixDimsOf, read on the way
};
RowAndColumnNorms NormsAlongRowsAndColumns(TensorList list);

// Adafactor's estimates on any device: out[t] = rows[t] cols[t] for the row averages rows[t]
// (..., m, 1) and column averages cols[t] (..., 1, n) into the contiguous (..., m, n) values at
// out[t], `like[t]`'s shape (the gradients', whose MatrixDimsOf `dims` are), all of one floating
// dtype and on one device, each product rounded once as ATen's matmul rounds it
// (ProductsOfRowsAndColumns in csrc/kernels.h: no dispatcher call per matrix; on CUDA, one pass).
void ProductsOfRowsAndColumns(TensorList rows, TensorList cols, TensorList like, std::span<const int64_t> dims,
                              std::span<void* const> out);

// Per-tensor values that one pass of an op writes and a later pass of the same op reads, never
// returned to the caller (Adafactor's updates): one flat buffer of the call's dtype on its device,
// tensor t's values (shaped like the call's t-th reference tensor) from a 64-byte boundary, so the
// CUDA kernels' vector path and the CPU loops take them as they take a tensor's. The tables reach
// them by pointer: one allocation for the list instead of a tensor per tensor (each an allocator
// call and a tensor object, through the C shim on the stable ABI).
struct Scratch {
  Tensor buffer;
  std::vector<void*> data;       // tensor t's first value (an empty tensor's: where the next starts)
  std::vector<int64_t> offsets;  // ... as an element offset into `buffer`
  // Tensor t's values as a tensor of `sizes` (a view, for the ATen ops that need one).
  Tensor View(size_t t, IntArrayRef sizes) const { return api::ContiguousViewOf(buffer, sizes, offsets[t]); }
};

class MultiTensorCall {
 public:
  // Checks::kDone: an earlier call of the same op checked every list this call is then given, its
  // reference included (its checks call: each tensor against the params, writability, no overlap
  // among the lists written in place, CheckOverlapOf for lists shaped unlike the params), so those
  // per-tensor checks and the overlap sort are not repeated here (lists the call makes itself need
  // none): a pass after the checks reads each tensor's properties once, for its table.
  enum class Checks { kAll, kDone };
  // `reference` (the params, or the grads where an op has no params) is validated here and every
  // list added later must match it tensor by tensor. The constructor adds no list itself.
  // `in_place` says where AddState writes: an <algo>_step_ op (kInPlace) updates the caller's
  // tensors, the functional <algo>_update returns fresh ones.
  MultiTensorCall(const char* op, TensorList reference, bool in_place = false, Checks checks = Checks::kAll);
  // A list shaped unlike the params (the op checks it otherwise: Adafactor's row and column
  // averages) in this call's overlap check only: read, or written in place (`writes`).
  void CheckOverlapOf(const char* name, TensorList list, bool writes);

  // A list that is only read.
  void AddInput(const char* name, TensorList list);
  // A list updated in place (non-contiguous tensors are staged and copied back by Finish()).
  void AddMutable(const char* name, TensorList list);
  // Read-only gradient inputs where None means zeros; an empty list means all zeros.
  void AddOptionalInput(const char* name, const OptionalTensorList& list);
  // A column the kernel skips (an unused optional state, e.g. max_exp_avg_sqs without amsgrad).
  void AddAbsent();
  // A read-only column of numbers the host computed: `values` holds each tensor's numel values in
  // turn, stored here in the call's dtype (rounded as a tensor of that dtype holds them). Only for
  // a call the CPU loops run (on_cpu_loops), which read host memory.
  void AddHostValues(std::span<const double> values);
  // The same from one contiguous vector of the call's dtype on the call's device, read there
  // (NormsAlongRowsAndColumns's norms).
  void AddDeviceValues(const Tensor& values);
  // A functional op's result computed from `source` (the matching input list): returns fresh
  // contiguous tensors and records `source` as where the kernel reads the starting values.
  std::vector<Tensor> AddOutputFrom(const char* name, TensorList source);
  // A fresh output with no starting values (gradients of a backward op).
  std::vector<Tensor> AddOutput();
  // Fresh scratch for this call's tensors (see Scratch), a column that its kernel reads and writes
  // in place (a kernel that reads it first needs its values put there before the launch); or one
  // made earlier; or fresh scratch that the kernel writes from `source`'s values (as AddOutputFrom).
  Scratch AddScratch();
  void AddScratch(const Scratch& scratch);
  Scratch AddScratchFrom(const char* name, TensorList source);

  // A list the step updates (params, optimizer state), so that one function lays out an
  // algorithm's step table for both ops: AddMutable for an in-place call (returns nothing),
  // AddOutputFrom for a functional one (returns the new values).
  std::vector<Tensor> AddState(const char* name, TensorList list);
  // A named list, optional where `present` can be false (an optional state not in use, e.g.
  // max_exp_avg_sqs without amsgrad: it must then be empty, see AddInputIf).
  struct NamedList {
    const char* name;
    TensorList list;
    bool present = true;
    const char* when_absent = "";
  };
  // A step table: params and states (AddState, or AddStateIf for an optional state) around the
  // read-only grads, in the order params, grads, states...; returns the new params and states (in
  // place: empty lists).
  template <size_t S>
  Lists<S + 1> AddStep(TensorList params, TensorList grads, const NamedList (&states)[S]) {
    TensorVector new_params = AddState("params", params);
    AddGrads(grads);
    return [&]<size_t... I>(std::index_sequence<I...>) {
      return Lists<S + 1>{std::move(new_params),
                          AddStateIf(states[I].present, states[I].name, states[I].list, states[I].when_absent)...};
    }(std::make_index_sequence<S>{});
  }

  // Optional lists (e.g. max_exp_avg_sqs, only with amsgrad): when `present`, the same as
  // AddInput, AddState or AddOutput; otherwise the column is absent, an output comes back empty
  // and `list` must be empty (the error says "<name> must be empty <when_absent>").
  void AddInputIf(bool present, const char* name, TensorList list, const char* when_absent);
  std::vector<Tensor> AddStateIf(bool present, const char* name, TensorList list, const char* when_absent);
  std::vector<Tensor> AddOutputIf(bool present);

  // Several columns at once, in order: read-only inputs, incoming gradients (None: zeros), and the
  // outgoing gradients of a backward op (absent where `present` says so; those come back empty).
  void AddInputs(std::initializer_list<NamedList> lists);
  struct OptionalList {
    const char* name;
    const OptionalTensorList& list;
    bool present = true;  // false: read as zeros whatever was passed (its state is not in use)
  };
  void AddOptionalInputs(std::initializer_list<OptionalList> lists);
  template <size_t N>
  Lists<N> AddOutputs(const std::array<bool, N>& present) {
    return [&]<size_t... I>(std::index_sequence<I...>) {
      return Lists<N>{AddOutputIf(present[I])...};  // braced: evaluated left to right
    }(std::make_index_sequence<N>{});
  }
  template <size_t N>
  Lists<N> AddOutputs() {
    return AddOutputs<N>(AllPresent<N>());
  }

  // An in-place step's AMP arguments (see KernelTable::grad_scale), before AddStep: each None or a
  // one-element float32 tensor on the params' device. With a grad_scale the gradients become a
  // list written in place (they are left unscaled).
  void SetAmp(const Amp& amp);
  // Whether found_inf skips the step, as far as the host can tell without waiting for the device:
  // on the CPU it is read through its data pointer; on CUDA it is read (found_inf.item(), which
  // waits for the device) only where `host_needs_answer`, for an op that also updates host-side
  // state (its step counters), and otherwise the kernel skips by itself.
  bool SkipStep(bool host_needs_answer) const { return num_tensors_ > 0 && SkipsStep(found_inf_, host_needs_answer); }

  int64_t size() const { return num_tensors_; }
  bool on_cuda() const { return device_.is_cuda(); }
  // Whether the CPU loops run this call (not CUDA, nor its emulation); RunsOnCpuLoops: a call on `device`.
  bool on_cpu_loops() const { return RunsOnCpuLoops(device_); }
  static bool RunsOnCpuLoops(const Device& device) { return !device.is_cuda() && !CudaEmulation(); }
  Device device() const { return device_; }

  // The kernel table, built once all lists are added; building it checks aliasing, the last check
  // before a tensor may be modified.
  KernelTable& Table();
  // Per-tensor scalars (e.g. bias corrections) from each tensor's step count: row(step, out)
  // writes the `num` scalars of one tensor, called for each tensor in order. Steps(step) is the
  // same count for every tensor.
  template <typename Row>
  void SetStepScalars(int num, const std::vector<double>& steps, const Row& row) {
    FillScalars(Table(), num, steps, row);
  }
  // Per-tensor scalars that are not the step count's: row(t, out) writes tensor t's `num` (the
  // others stay 0).
  template <typename Row>
  void SetTensorScalars(int num, const Row& row) {
    KernelTable& table = Table();
    table.num_scalars = num;
    table.scalars.assign(static_cast<size_t>(num * num_tensors_), 0.0);
    for (int64_t t = 0; t < num_tensors_; ++t) row(t, table.scalars.data() + t * num);
  }
  // The same from ScalarRows (FillStepScalars), and the rows' given state scalars (SetStateValues).
  template <typename Rows>
  void SetStepScalars(const Rows& rows, const std::vector<double>& steps) {
    if (!rows.state.empty()) SetStateValues(rows.state);
    FillStepScalars(Table(), rows, steps);
  }
  // Per-parameter one-element state that the kernel reads and advances where it lives (a binding
  // with K::kStateScalars, csrc/kernels.h): `lists` in the binding's order, one tensor per
  // parameter each, already checked (CheckStateScalars, CheckStepTensors). A tensor off the call's
  // device is read here (through its data pointer on the CPU) and written by FinishStateScalars.
  void SetStateScalars(std::span<const TensorList> lists);
  // Per-tensor values the kernel reads and never advances (a binding without Advance), a column
  // per state scalar: numbers the host has, one per tensor (read at launch), or, where `sums` is
  // given, sum `index` of a tensor of DeviceSums on the call's device (its element
  // index num_tensors + t is tensor t's value), read there so that none crosses to the host.
  // Adafactor's norms and sums.
  struct StateInput {
    std::span<const double> values;
    const Tensor* sums = nullptr;
    int64_t index = 0;
  };
  void SetStateInputs(std::initializer_list<StateInput> columns);
  // For a call the CPU loops run (on_cpu_loops), from the values its launch will start from
  // (SumsOfProducts, csrc/kernels.h), with no tensor made: each tensor's sum of the products of
  // lists a and b, in double; and each tensor's L2 norm of list `column`, rounded to the call's
  // dtype as torch.linalg.vector_norm's result of that dtype is.
  std::vector<double> SumsOfProducts(int a, int b);
  std::vector<double> Norms(int column);
  // For a call the CUDA kernels (or their emulation) run, the same on the call's device in two
  // passes of multi-tensor kernels (cuda::SumsOfProducts) for all of `sums`, nothing read on the
  // host: for each DeviceSumOf k, each tensor's sum of lists a and b as its kind says (kNorm,
  // a == b: its L2 norm rounded as Norms rounds it; kValues: the sum of list a rounded to the
  // dtype), at k num_tensors + t of one float64 tensor, whose sum k is a state input
  // (StateInput::sums, index k).
  Tensor DeviceSums(std::span<const DeviceSumOf> sums);
  // A functional op's state scalars, given as numbers: column k of every tensor holds values[k].
  void SetStateValues(const std::vector<double>& values);
  // After Launch of an in-place step with SetStateScalars: binding K's new values of the state
  // scalars the kernel did not reach (off the call's device) from the same Advance on the host;
  // bumps every state scalar's version counter.
  template <typename K>
  void FinishStateScalars();
  // capturable=True: the step counters `steps` (checked by CheckStepTensors, each on the params'
  // device) stay where they are and the kernel reads and advances them (KernelTable::steps), so no
  // count crosses to the host; rows of `num_scalars` per-tensor scalars are then the kernel's to
  // compute. Call before ChecksOnly: the counters are written arguments of the call, or only read
  // ones with `advance` false (KernelTable::advance_steps: a pass before the step's last).
  void UseDeviceSteps(TensorList steps, int num_scalars, bool advance = true);
  std::vector<double> Steps(int64_t step) const { return std::vector<double>(num_tensors_, static_cast<double>(step)); }
  // Builds the table (the last check) and says whether this thread is in validate-only mode (see
  // SetValidateOnly), where an in-place op returns now, before its first write.
  bool ChecksOnly();
  // Runs the kernel on the call's device, then Finish()es the call.
  template <typename Hyper>
  void Launch(const KernelBuilds<Hyper>& kernel, const Hyper& hyper);

 private:
  // Copies staged (non-contiguous) in-place lists back into the caller's tensors and bumps the
  // version counters of every tensor updated in place (so autograd sees the modification).
  void Finish();
  void CheckEmpty(const char* name, TensorList list, const char* when_absent) const;
  void CheckLike(const char* name, int64_t t, const Tensor& x) const;
  void CheckNoAliasing() const;
  // The gradients of a step table: read-only, or updated in place where a grad_scale unscales them.
  void AddGrads(TensorList grads);
  void Record(const char* name, int64_t t, const Tensor& x, bool writes);
  // Where the kernel reads x: its data, or a contiguous copy kept alive for the call.
  const void* ReadPointer(const Tensor& x);

  const char* op_;
  int64_t num_tensors_;
  ScalarType dtype_;
  Device device_;
  bool checked_ = false;  // Checks::kDone
  // Views of the op's own arguments, which outlive this object. No Tensor copies here: with
  // torch's PyObject preservation every copy of a Python-owned tensor takes the GIL twice.
  TensorList reference_;
  // Column-major: one entry per list, each of length num_tensors_.
  std::vector<std::vector<const void*>> src_;
  std::vector<std::vector<void*>> dst_;
  // (staged copy, caller's tensor) pairs to copy back.
  std::vector<std::pair<Tensor, Tensor>> staged_;
  // Keeps contiguous copies of read-only inputs alive for the kernel.
  std::vector<Tensor> keep_alive_;
  // Every caller tensor the kernel reads or writes, as passed (before staging), for the memory
  // overlap check; the written ones also get their version counters bumped by Finish().
  struct Argument {
    const char* list;
    int64_t index;
    const Tensor* tensor;  // an op argument, or an entry of owned_
    bool writes;
  };
  std::vector<Argument> arguments_;
  // Optional inputs arrive as copies; a deque keeps the addresses arguments_ points at stable.
  std::deque<Tensor> owned_;
  // AddHostValues' columns, in the call's dtype (8-byte units: room for any of them).
  std::deque<std::vector<double>> host_values_;
  std::optional<KernelTable> table_;
  bool in_place_;
  std::vector<TensorList> state_lists_;     // SetStateScalars's, by column
  std::optional<TensorList> device_steps_;  // UseDeviceSteps's
  bool advance_device_steps_ = true;
  int device_step_scalars_ = 0;
  // SetAmp's tensors (null: not given) and the gradients' column.
  const Tensor* grad_scale_ = nullptr;
  const Tensor* found_inf_ = nullptr;
  int grad_col_ = -1;
};

inline constexpr bool kInPlace = true;  // MultiTensorCall's `in_place`
// The `when_absent` of a momentum buffer list (SGD's, RMSprop's): only momentum > 0 keeps one.
inline constexpr const char* kNoMomentum = "when momentum == 0";

// One-element tensors on the CPU (step counters, per-parameter state scalars), read and written
// through their data pointers in every dtype they may have (floating or integral): item() and
// fill_() go through the dispatcher, which costs more than a small tensor's whole update. Written
// values are rounded to the tensor's dtype as fill_ rounds them (via float for float16/bfloat16)
// and the version counter is bumped; the write returns the value as stored. For a tensor off the
// CPU, or of another dtype, both give nullopt, the write having done nothing.
std::optional<double> ReadHostScalar(const Tensor& s);
std::optional<double> WriteHostScalar(const Tensor& s, double value);
// The same through a CPU tensor's data pointer and dtype, as a kept table holds them (no version
// bump: the stable build's caller bumps).
std::optional<double> ReadHostScalarAt(ScalarType dtype, const void* data);
std::optional<double> WriteHostScalarAt(ScalarType dtype, void* data, double value);

// Checks and increments torch.optim's per-parameter step counters (scalar float tensors on the
// CPU) and returns the new step values. `Check` runs before any tensor is touched: each counter
// must be a distinct, dense one-element tensor holding a finite count >= 0 that can be incremented.
void CheckStepTensors(const char* op, TensorList steps, int64_t n);
std::vector<double> IncrementSteps(TensorList steps);
// What is wrong with step count `value` in a counter of `dtype` (the end of CheckStepTensors'
// message), or null.
const char* StepCountProblem(ScalarType dtype, double value);

// Per-parameter scalar state other than the step counters (NAdam's mu_products, ASGD's etas and
// mus), which the kernels read and advance in their own dtype where they live, as torch.optim's
// in-place updates of those 0-d tensors round them. Each of `n` must be a distinct, dense,
// writable one-element floating tensor holding a finite value (on any device: torch.optim keeps
// ASGD's on the parameter's device; a value on a device is not read, which would wait for it).
void CheckStateScalars(const char* op, const char* name, TensorList scalars, int64_t n);
// capturable=True: every one of them on the params' device, where the kernel reads and advances
// it (one elsewhere would be read and written by the host at launch, which a captured step would
// replay with the value of its capture).
void CheckStateScalarsOn(const char* op, const char* name, TensorList scalars, const Device& device);

// What a tensor updated in place must satisfy, checked before anything is modified: autograd's
// in-place rules (api::InPlaceRefusal) and no element stored twice (an expanded view), which the
// kernel would update once per alias and the copy-back of a staged view would reject.
void CheckWritable(const char* op, const char* name, int64_t t, const Tensor& x);

// Python exception types via FUSED_OPTIM_CHECK_VALUE/FUSED_OPTIM_CHECK_TYPE, naming the op.
void CheckNonNegative(const char* op, const char* what, double value);
void CheckUnitInterval(const char* op, const char* what, double value);  // 0 <= value < 1
// The same for several (name, value) pairs, checked in order.
using NamedValues = std::initializer_list<std::pair<const char*, double>>;
void CheckNonNegative(const char* op, NamedValues values);
void CheckUnitInterval(const char* op, NamedValues values);
void CheckStep(const char* op, int64_t step);  // a functional op's step: the count after this update, >= 1

// The skeleton of an optimizer's three ops: an ops file (csrc/ops/<algo>.cpp) checks its
// arguments into a Hyper and passes it with its kernel, its lists and its per-tensor scalars.
//
// Per-tensor scalars computed from each tensor's step count: `num` of them, row(step, out) writes
// one tensor's (ScalarRows{2, [=](double step, double* row) {...}}); NoScalarRows() where none.
// The row must depend on the step count alone: tensors with equal counts share one computed row.
// A functional op of an algorithm with state scalars gives their values in `state`.
template <typename Row>
struct ScalarRows {
  int num;
  Row row;
  std::vector<double> state = {};
};
template <typename Row>
ScalarRows(int, Row) -> ScalarRows<Row>;
template <typename Row>
ScalarRows(int, Row, std::vector<double>) -> ScalarRows<Row>;
inline auto NoScalarRows() {
  return ScalarRows{0, [](double /*step*/, double* /*row*/) {}};
}

// An in-place step's state scalars (CheckStateScalars), in its binding's state order: each list
// named as the op names it; `count`: a step counter that the kernel advances (ASGD's), checked
// as one (CheckStepTensors). StateScalarsOf<K> pairs them with binding K's host share of their
// advance, after a full step and after a kept one.
struct StateScalarList {
  const char* name;
  TensorList list;
  bool count = false;
};
inline constexpr size_t kMaxStateScalarLists = 3;
struct StateScalarLists {
  std::span<const StateScalarList> lists;
  void (MultiTensorCall::*finish)() = nullptr;
  void (*finish_kept)(kept::KeptTable&) = nullptr;
};
template <typename K>
void AdvanceKeptHostState(kept::KeptTable& kept);  // (below)
template <typename K>
StateScalarLists StateScalarsOf(std::span<const StateScalarList> lists) {
  return {lists, &MultiTensorCall::FinishStateScalars<K>, &AdvanceKeptHostState<K>};
}

// <algo>_step_: the step table (MultiTensorCall::AddStep) updated in place after the step
// counters (`counters`, null for an algorithm without) are checked and incremented; in
// validate-only mode, or where found_inf skips the step (the counters then stay as they are, as
// torch's fused optimizers leave them), it returns before its first write. `capturable`: the
// kernel reads and advances the counters on the params' device (MultiTensorCall::UseDeviceSteps)
// and found_inf is read there too, so the step never waits for the device and a CUDA graph may
// capture it. (Without counters or state scalars the host has nothing to skip: the kernel reads
// found_inf.) `scalars`: the state scalars the kernel reads and advances (NAdam's, ASGD's). The
// rows come from the incremented counts; without counters they do not depend on a step (ASGD's
// schedule settings, lr among them) and are set on every call.
//
// Replayed by a kept step (kept_step.h), it runs the table the kept call's first step
// built and kept (kept::KeptTable) where the kept tensors are unchanged and the gradients fit.
template <typename Hyper, size_t S, typename Rows>
void StepInPlaceWith(const char* op, const KernelBuilds<Hyper>& kernel, const Hyper& hyper, TensorList params,
                     TensorList grads, const MultiTensorCall::NamedList (&states)[S], const TensorList* counters,
                     const StateScalarLists& scalars, const Amp& amp, bool capturable, const Rows& rows) {
  const bool host_counts = counters != nullptr && !capturable;  // the host reads and increments them
  // ... or may advance a state scalar off the params' device
  const bool host_needs_answer = host_counts || (!scalars.lists.empty() && !capturable);
  const bool rows_every_call = counters == nullptr && rows.num > 0;
  FUSED_OPTIM_CHECK(scalars.lists.size() <= kMaxStateScalarLists, op, ": too many state scalar lists");
  // What a kept table keeps: params, states, counters, state scalars
  std::array<TensorList, S + 2 + kMaxStateScalarLists> lists{params};
  for (size_t i = 0; i < S; ++i) lists[i + 1] = states[i].present ? states[i].list : TensorList();
  if (counters != nullptr) lists[S + 1] = *counters;
  for (size_t k = 0; k < scalars.lists.size(); ++k) lists[S + 2 + k] = scalars.lists[k].list;
  const KeptFit fit = FitKept(op, lists, params, grads, amp, capturable);
  kept::KeptTable* kept = fit.table;
  const bool unchanged = fit.unchanged;
  if (fit.fits) {
    if (ValidateOnly() || SkipsStep(fit.found_inf, host_needs_answer)) return;
    KernelTable& table = kept->Table();
    if (host_counts) FillStepScalars(table, rows, kept->IncrementSteps());  // first modification
    if (rows_every_call) FillStepScalars(table, rows, std::vector<double>(params.size(), 0.0));
    RunTable(kernel, hyper, table, kept->device());
    if (scalars.finish_kept != nullptr) scalars.finish_kept(*kept);
    kept->BumpVersions(grads, fit.grad_scale != nullptr);
    CountKeptTableStep();
    return;
  }
  MultiTensorCall call(op, params, kInPlace);
  call.SetAmp(amp);
  call.AddStep(params, grads, states);
  for (const StateScalarList& s : scalars.lists) {
    if (s.count) {
      CheckStepTensors(op, s.list, call.size());
    } else {
      CheckStateScalars(op, s.name, s.list, call.size());
    }
  }
  if (counters != nullptr) CheckStepTensors(op, *counters, call.size());
  if (capturable) {
    for (const StateScalarList& s : scalars.lists) CheckStateScalarsOn(op, s.name, s.list, call.device());
  }
  if (counters != nullptr && capturable) call.UseDeviceSteps(*counters, rows.num);
  if (call.ChecksOnly() || call.SkipStep(host_needs_answer)) return;      // nothing is written yet
  if (host_counts) call.SetStepScalars(rows, IncrementSteps(*counters));  // first modification
  if (rows_every_call) call.SetStepScalars(rows, call.Steps(0));
  const auto state_lists = std::span<const TensorList>(lists).subspan(S + 2, scalars.lists.size());
  if (!scalars.lists.empty()) call.SetStateScalars(state_lists);
  call.Launch(kernel, hyper);
  if (scalars.finish != nullptr) (call.*scalars.finish)();
  if (kept != nullptr && !unchanged) {
    std::array<kept::KeptTable::Checked, kMaxStateScalarLists + 1> checked{};  // read on every kept step
    size_t num_checked = 0;
    for (const StateScalarList& s : scalars.lists) checked[num_checked++] = {s.list, s.count};
    if (counters != nullptr && capturable) checked[num_checked++] = {*counters, true};
    kept->Keep(call.Table(), lists, host_counts ? *counters : TensorList(),
               std::span<const kept::KeptTable::Checked>(checked.data(), num_checked), state_lists, capturable);
  }
}

// An algorithm's in-place step with torch.optim's per-parameter step counters `state_steps`.
template <typename Hyper, size_t S, typename Rows = decltype(NoScalarRows())>
void StepInPlace(const char* op, const KernelBuilds<Hyper>& kernel, const Hyper& hyper, TensorList params,
                 TensorList grads, const MultiTensorCall::NamedList (&states)[S], TensorList state_steps,
                 const Amp& amp, bool capturable, const Rows& rows = NoScalarRows(),
                 const StateScalarLists& scalars = {}) {
  StepInPlaceWith(op, kernel, hyper, params, grads, states, &state_steps, scalars, amp, capturable, rows);
}
// One without step counters (SGD; ASGD, whose counters are state scalars).
template <typename Hyper, size_t S, typename Rows = decltype(NoScalarRows())>
void StepInPlace(const char* op, const KernelBuilds<Hyper>& kernel, const Hyper& hyper, TensorList params,
                 TensorList grads, const MultiTensorCall::NamedList (&states)[S], const Amp& amp,
                 bool capturable = false, const Rows& rows = NoScalarRows(), const StateScalarLists& scalars = {}) {
  StepInPlaceWith(op, kernel, hyper, params, grads, states, nullptr, scalars, amp, capturable, rows);
}

// <algo>_update: the same step out of place, at the functional step count `step` (checked where
// the algorithm reads it, i.e. has per-tensor scalars); returns the new params and states.
template <typename Hyper, size_t S, typename Rows = decltype(NoScalarRows())>
Lists<S + 1> Update(const char* op, const KernelBuilds<Hyper>& kernel, const Hyper& hyper, TensorList params,
                    TensorList grads, const MultiTensorCall::NamedList (&states)[S], int64_t step = 0,
                    const Rows& rows = NoScalarRows()) {
  if (rows.num > 0) CheckStep(op, step);
  MultiTensorCall call(op, params);
  Lists<S + 1> out = call.AddStep(params, grads, states);
  call.SetStepScalars(rows, call.Steps(step));
  call.Launch(kernel, hyper);
  return out;
}

// <algo>_update_backward: from the gradients reaching the update's results (`incoming`, None:
// zeros) and the update's `inputs`, the N gradients of its inputs (in `reference`'s shapes; an
// output comes back empty where `present` says so).
template <size_t N, typename Hyper, typename Rows = decltype(NoScalarRows())>
Lists<N> UpdateBackward(const char* op, const KernelBuilds<Hyper>& kernel, const Hyper& hyper, TensorList reference,
                        std::initializer_list<MultiTensorCall::OptionalList> incoming,
                        std::initializer_list<MultiTensorCall::NamedList> inputs,
                        const std::array<bool, N>& present = AllPresent<N>(), int64_t step = 0,
                        const Rows& rows = NoScalarRows()) {
  MultiTensorCall call(op, reference);
  call.AddOptionalInputs(incoming);
  call.AddInputs(inputs);
  Lists<N> out = call.AddOutputs<N>(present);
  call.SetStepScalars(rows, call.Steps(step));
  call.Launch(kernel, hyper);
  return out;
}
// The same for an algorithm with per-tensor scalars, at the functional step count `step`.
template <size_t N, typename Hyper, typename Rows>
Lists<N> UpdateBackward(const char* op, const KernelBuilds<Hyper>& kernel, const Hyper& hyper, TensorList reference,
                        std::initializer_list<MultiTensorCall::OptionalList> incoming,
                        std::initializer_list<MultiTensorCall::NamedList> inputs, int64_t step, const Rows& rows,
                        const std::array<bool, N>& present = AllPresent<N>()) {
  CheckStep(op, step);
  return UpdateBackward<N>(op, kernel, hyper, reference, incoming, inputs, present, step, rows);
}

template <typename Hyper>
void MultiTensorCall::Launch(const KernelBuilds<Hyper>& kernel, const Hyper& hyper) {
  RunTable(kernel, hyper, Table(), device());
  Finish();
}

// A binding's view of one tensor's state scalars for the host's share of its Advance: every one's
// value at launch (SetStateScalars read them all for a tensor with state off the call's device);
// stores reach only those off the device, through write(k, value), the kernel writes the others.
template <typename Write>
struct HostStateIO {
  const StateScalar* state;
  DType default_dtype;
  Write write;
  double Load(int k) const { return state[k].value; }
  void Store(int k, double v) const {
    if (state[k].ptr == nullptr) write(k, v);
  }
  double Round(int k, double v) const { return RoundTo<c10::Half, c10::BFloat16>(state[k].dtype, v); }
  double RoundToDefault(double v) const { return RoundTo<c10::Half, c10::BFloat16>(default_dtype, v); }
  double Scaled(int k, double f) const { return ScaledIn<c10::Half, c10::BFloat16>(state[k].dtype, Load(k), f); }
};

template <typename K>
void MultiTensorCall::FinishStateScalars() {
  const KernelTable& table = Table();
  for (int64_t t = 0; t < num_tensors_; ++t) {
    const StateScalar* state = table.State(t);
    bool off_device = false;
    for (int k = 0; k < table.num_state; ++k) {
      if (state[k].ptr == nullptr) {
        off_device = true;
      } else {  // written by the kernel, through its data pointer
        api::BumpVersion(state_lists_[k][t]);
      }
    }
    if (!off_device) continue;
    const auto write = [&](int k, double v) {
      const Tensor& s = state_lists_[k][t];
      if (!WriteHostScalar(s, v)) api::Fill(s, v);
    };
    K::Advance(table.scalars.data() + t * table.num_scalars,
               HostStateIO<decltype(write)>{state, table.default_dtype, write});
  }
}

// The same after a kept step (kept::KeptTable::host_state: every state scalar of such a tensor
// is on the CPU, read by Fits), through the kept data pointers.
template <typename K>
void AdvanceKeptHostState(kept::KeptTable& kept) {
  const KernelTable& table = kept.Table();
  const auto& host = kept.host_state();
  for (size_t i = 0; i < host.size(); i += table.num_state) {  // a tensor's columns, in order
    const auto write = [&](int k, double v) { WriteHostScalarAt(host[i + k].dtype, host[i + k].data, v); };
    K::Advance(table.scalars.data() + host[i].t * table.num_scalars,
               HostStateIO<decltype(write)>{table.State(host[i].t), table.default_dtype, write});
  }
}

// Declares and implements an op file's ops, for every device, from one list:
//
//   FUSED_OPTIM_OPS(adam, op) {
//     op.Add<&AdamStepInPlace>("adam_step_(Tensor(a!)[] params, ...) -> ()");
//     ...
//   }
//
// In the stable build (fused_optim._C) each op.Add<fn>(schema) defines the schema in the
// fused_optim library and registers fn, boxed by torch's stable ABI, as its kernel.
// In the ATen build (fused_optim._eager) the same function becomes the op's unboxed eager call
// fused_optim._eager.<op> (eager_call.h). Its C++ argument types must be ones both convert
// (TensorListArg, const OptionalTensorList&, const std::optional<Tensor>&, double, bool, int64_t).
#ifdef FUSED_OPTIM_STABLE_ABI
class OpRegistrar {
 public:
  enum class Kind { kDefine, kImplement };
  OpRegistrar(torch::stable::detail::StableLibrary& library, Kind kind) : library_(library), kind_(kind) {}
  template <auto Fn>
  void Add(const char* schema) {
    const std::string name(schema, std::string(schema).find('('));
    if (kind_ == Kind::kDefine) {
      library_.def(schema);
      Names().push_back(name);
    } else {
      library_.impl(name.c_str(), TORCH_BOX(Fn));
    }
    if constexpr (kept::Keep<Fn>::kKeepable) {
      if (kept::IsStepOp(name)) AddKeep<Fn>(name, schema);
    }
  }
  // Every op defined, in registration order (fused_optim._C.OPS).
  static std::vector<std::string>& Names() {
    static std::vector<std::string> names;
    return names;
  }

 private:
  // An in-place step op's <name>keep (kept_step.h), which fused_optim.optim's step reuse calls.
  template <auto Fn>
  void AddKeep(const std::string& name, const char* schema) {
    kept::Keep<Fn>::SlotsRef() = kept::SlotsOf(schema);
    if (kind_ == Kind::kDefine) {
      library_.def(Hold(kept::KeepSchema(schema)));
    } else {
      library_.impl(Hold(name + "keep"), TORCH_BOX(&kept::Keep<Fn>::Make));
    }
  }
  // torch reads the strings during the call; held for the library's lifetime all the same.
  static const char* Hold(std::string text) {
    static std::deque<std::string> held;
    return held.emplace_back(std::move(text)).c_str();
  }
  torch::stable::detail::StableLibrary& library_;
  Kind kind_;
};

// One kernel for every backend (CompositeExplicitAutograd): the glue takes CPU and CUDA tensors
// (and sparse ones, to reject them clearly) and refuses any other device itself, and a call whose
// lists are all empty, which has no device to dispatch on, still runs its argument checks.
#define FUSED_OPTIM_OPS(algo, op)                                                  \
  void Register_##algo(::fused_optim::OpRegistrar& op);                            \
  STABLE_TORCH_LIBRARY_FRAGMENT(fused_optim, m) {                                  \
    ::fused_optim::OpRegistrar r(m, ::fused_optim::OpRegistrar::Kind::kDefine);    \
    Register_##algo(r);                                                            \
  }                                                                                \
  STABLE_TORCH_LIBRARY_IMPL(fused_optim, CompositeExplicitAutograd, m) {           \
    ::fused_optim::OpRegistrar r(m, ::fused_optim::OpRegistrar::Kind::kImplement); \
    Register_##algo(r);                                                            \
  }                                                                                \
  void Register_##algo(::fused_optim::OpRegistrar& op)
#else
class OpRegistrar {
 public:
  template <auto Fn>
  void Add(const char* schema) {
    eager::Register(schema, Fn);
    if constexpr (kept::Keep<Fn>::kKeepable) {  // the fast path's <name>keep (the stable build defines it)
      const std::string name(schema, std::string(schema).find('('));
      if (kept::IsStepOp(name)) {
        kept::Keep<Fn>::SlotsRef() = kept::SlotsOf(schema);
        eager::Register((name + "keep").c_str(), &kept::Keep<Fn>::Make);
      }
    }
  }
};

// Registered when the module loads (a static initializer per op file), before PyInit__eager
// reads the registry.
#define FUSED_OPTIM_OPS(algo, op)                             \
  void Register_##algo(::fused_optim::OpRegistrar& op);       \
  [[maybe_unused]] static const bool registered_##algo = [] { \
    ::fused_optim::OpRegistrar r;                             \
    Register_##algo(r);                                       \
    return true;                                              \
  }();                                                        \
  void Register_##algo(::fused_optim::OpRegistrar& op)
#endif

}  // namespace fused_optim
