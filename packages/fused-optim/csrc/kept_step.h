// Kept steps: an in-place <algo>_step_ call whose lists stay on the C++ side between steps, so that
// a drop-in optimizer's step passes torch.ops (or the fast path's unboxed call, in the ATen build)
// its gradients and learning rate, not every parameter and state list again.
//
// Through torch.ops (the stable ABI's path) each tensor of a call is boxed and unboxed on every
// step: with Adam on 200 tensors that is 1,200 tensors and ~300 us of host time per step, while
// the kernels and checks take a fraction of it. fused_optim.optim's step reuse (_Gathered) already
// proves that the parameters and state are the same objects from one step to the next, so it keeps
// the call once, `<algo>_step_keep(<the op's arguments>) -> int`, and then runs each step as
// `kept_step_(kept, grads, lr, grad_scale, found_inf)`: the op's own function with those four
// replaced, its checks included (a tensor kept by identity may still have changed in place, e.g.
// by `param.data = ...`). `kept_free(kept)` drops the lists (Python frees it with its owner).
//
// A kept step built on StepInPlace (multi_tensor.h: most algorithms) also keeps the KernelTable its
// first step built (KeptTable): later steps then check each kept tensor's fingerprint (where its
// elements are, how many, their dtype, dense or not: four C-shim calls instead of the ~30 of the
// full checks) and the new gradients, and run the kept table with the gradients' pointers put in.
// Anything else than an unchanged call with well-formed gradients takes the full path, which
// raises what it raises, or builds and keeps the table afresh. Adafactor's step (ops/adafactor.cpp),
// whose passes build their own tables, keeps one too and takes its checks in place of its own.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <span>
#include <string>
#include <tuple>
#include <type_traits>
#include <utility>
#include <vector>

#include "kernels.h"
#include "torch_api.h"

namespace fused_optim::kept {

// What a kept step takes afresh on every step.
using Run = std::function<void(TensorListArg grads, double lr, const std::optional<Tensor>& grad_scale,
                               const std::optional<Tensor>& found_inf)>;

// The registry (kept_step.cpp, one per build): an id for each kept call, until kept_free.
int64_t Add(Run run);
// The two ops on it: one step of a kept call, and its release.
void KeptStep(int64_t id, TensorListArg grads, double lr, const std::optional<Tensor>& grad_scale,
              const std::optional<Tensor>& found_inf);
void KeptFree(int64_t id);

// Whether op `name` is an in-place step (<algo>_step_), which the registrars also make keepable.
inline bool IsStepOp(const std::string& name) {
  return name.size() > 6 && name.compare(name.size() - 6, 6, "_step_") == 0;
}

// The positions, among an op's arguments, of what each step replaces (from its schema).
struct Slots {
  int grads = -1, lr = -1, grad_scale = -1, found_inf = -1;
};
Slots SlotsOf(const std::string& schema);

// "<op>(Tensor(a!)[] params, ...) -> ()" becomes "<op>keep(Tensor[] params, ...) -> int": the
// same arguments, none written (the keep op only holds them).
std::string KeepSchema(const std::string& schema);

// One tensor as a kept table relies on it. The table holds the tensor (so the memory stays), but
// the Python object may since point elsewhere (`param.data = ...`, `resize_`, `set_`): a changed
// fingerprint sends the step down the full path.
struct Fingerprint {
  const void* data = nullptr;
  int64_t numel = 0;
  ScalarType dtype = ScalarType::Undefined;
  bool contiguous = false;
  static Fingerprint Of(const Tensor& x);
  bool operator==(const Fingerprint&) const = default;
};

// The KernelTable of a kept StepInPlace call and what its reuse checks; used by one replay at a time.
class KeptTable {
 public:
  std::mutex mutex;

  // Whether a table is kept for this call and the kept tensors (`lists`: the params, each state
  // list, then the step counters, as the call passes them) still have their fingerprints (and the
  // modes and, with state scalars, torch's default dtype are the same). False: take the full path
  // (a changed tensor also drops the table).
  bool Unchanged(std::span<const TensorList> lists, bool capturable);
  // The params' device, once Unchanged (where the AMP arguments must be).
  const Device& device() const { return device_; }
  // After Unchanged: whether this step's gradients and AMP arguments (checked by the caller) fit the
  // params (dense, the params' dtype, device and shapes, no memory shared with a tensor written;
  // with a grad_scale, which writes them, none with each other) and the step counters hold valid
  // counts, and each checked state scalar (Keep) a valid value. Puts them into the table and reads
  // the counters. False: take the full path, which names what is wrong (nothing is written here).
  bool Fits(TensorList params, TensorList grads, const Tensor* grad_scale, const Tensor* found_inf);
  // The table to launch, after Fits.
  KernelTable& Table() { return table_; }
  // A state scalar the host reads before and advances after each kept step (one off the params'
  // device, kept on the CPU: NAdam's mu_product beside CUDA parameters): tensor t's column k,
  // through its data pointer. In order of t, every column of a tensor that has one (Keep keeps no
  // table for a tensor whose state is split between the host and the device).
  struct HostState {
    int64_t t;
    int k;
    void* data;
    ScalarType dtype;
  };
  const std::vector<HostState>& host_state() const { return host_state_; }
  // The new step counts, after Fits (capturable=False): each counter Fits read, incremented through
  // its data pointer as IncrementSteps (multi_tensor.h) does it.
  std::vector<double> IncrementSteps();
  // One-element tensors that the kernel reads and advances in place, whose values the full path
  // checks on every step where they are on the CPU: step counters (`count`) or state scalars
  // (finite); a kept step checks them again (Fits), through kept pointers.
  struct Checked {
    TensorList list;
    bool count = false;
  };
  // After a successful full-path call: keeps its table (`built`) with the fingerprints of `lists`
  // (as for Unchanged); `host_counters`: the step counters the host reads and increments (none
  // where the kernel advances them, capturable); `checked`: see Checked; `state_lists`: the state
  // scalars' lists, by column (the table's state). A table is kept only where every kept tensor is
  // dense, every host counter on the CPU, each tensor's state scalars all on the call's device or
  // all off it on the CPU (see HostState), and grad mode is off (where the in-place refusals, which
  // the full path checks, could start to apply to a kept tensor); otherwise the next step takes
  // the full path again.
  void Keep(const KernelTable& built, std::span<const TensorList> lists, TensorList host_counters,
            std::span<const Checked> checked, std::span<const TensorList> state_lists, bool capturable);
  // After a step on the table: the version counters of what it wrote (api::BumpVersion: the ATen
  // build's; the stable build's Python caller bumps them), as the full path's Finish does.
  void BumpVersions(TensorList grads, bool grads_written) const;

 private:
  struct Counter {
    void* data;
    ScalarType dtype;
    double value;       // read by Fits
    bool count = true;  // (checks_: a step count, or else a state scalar, finite)
  };
  bool valid_ = false;
  bool capturable_ = false;
  KernelTable table_;
  ScalarType dtype_ = ScalarType::Float;
  Device device_{torch::headeronly::DeviceType::CPU};
  int64_t element_size_ = 4;                      // the params'
  int mode_ = 0;                                  // api::InPlaceMode() at Keep
  ScalarType default_dtype_ = ScalarType::Float;  // torch's, at Keep
  std::vector<Fingerprint> kept_;
  std::vector<const Tensor*> unchanged_order_;  // Unchanged's scratch: the tensors it compares, in order
  std::vector<Tensor> written_tensors_;         // (the ATen build bumps their versions)
  std::vector<std::pair<std::uintptr_t, std::uintptr_t>> written_;  // byte ranges, sorted
  std::vector<std::pair<std::uintptr_t, std::uintptr_t>> grads_;    // this step's (written ones)
  std::vector<Counter> counters_;
  std::vector<Counter> checks_;  // the CPU tensors of Keep's `checked`
  std::vector<HostState> host_state_;
};

// The kept table of the call replaying on this thread (Keep<Fn>'s), or null.
KeptTable* Current();
// Makes `table` the current one for its lifetime (null: none).
class CurrentScope {
 public:
  explicit CurrentScope(KeptTable* table);
  ~CurrentScope();
  CurrentScope(const CurrentScope&) = delete;
  CurrentScope& operator=(const CurrentScope&) = delete;

 private:
  KeptTable* previous_;
};

// Only an op function returning nothing can be kept (the in-place steps); the others are not.
template <auto Fn>
struct Keep {
  static constexpr bool kKeepable = false;
};

// `Fn`'s arguments held by value (a list as a vector of tensor handles, which keep the tensors
// alive), replayed with the step's four.
template <typename... A, void (*Fn)(A...)>
struct Keep<Fn> {
  static constexpr bool kKeepable = true;
  using Held = std::tuple<std::decay_t<A>...>;

  static Slots& SlotsRef() {
    static Slots slots;
    return slots;
  }

  static int64_t Make(A... args) {
    auto held = std::make_shared<Held>(args...);
    auto table = std::make_shared<KeptTable>();
    const Slots slots = SlotsRef();
    return Add([held, table, slots](TensorListArg grads, double lr, const std::optional<Tensor>& grad_scale,
                                    const std::optional<Tensor>& found_inf) {
      // (Another thread replaying the same call meanwhile: this one takes the full path.)
      std::unique_lock<std::mutex> lock(table->mutex, std::try_to_lock);
      const CurrentScope scope(lock.owns_lock() ? table.get() : nullptr);
      Replay(*held, slots, grads, lr, grad_scale, found_inf, std::index_sequence_for<A...>{});
    });
  }

 private:
  template <std::size_t... I>
  static void Replay(const Held& held, const Slots& s, TensorListArg grads, double lr,
                     const std::optional<Tensor>& grad_scale, const std::optional<Tensor>& found_inf,
                     std::index_sequence<I...>) {
    Fn(Pick<I>(std::get<I>(held), s, grads, lr, grad_scale, found_inf)...);
  }

  // Argument I: the held value, or the step's own where I is one of the replaced slots (chosen by
  // type first, so each branch returns what Fn takes there).
  template <std::size_t I, typename T>
  static const T& Pick(const T& held, const Slots& s, TensorListArg grads, const double& lr,
                       const std::optional<Tensor>& grad_scale, const std::optional<Tensor>& found_inf) {
    constexpr int i = static_cast<int>(I);
    if constexpr (std::is_same_v<T, TensorVector>) {
      return i == s.grads ? grads : held;
    } else if constexpr (std::is_same_v<T, double>) {
      return i == s.lr ? lr : held;
    } else if constexpr (std::is_same_v<T, std::optional<Tensor>>) {
      return i == s.grad_scale ? grad_scale : i == s.found_inf ? found_inf : held;
    } else {
      return held;
    }
  }
};

}  // namespace fused_optim::kept
