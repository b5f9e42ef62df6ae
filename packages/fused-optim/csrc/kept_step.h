// Kept steps (stable build only): an in-place <algo>_step_ call whose lists stay on the C++ side
// between steps, so that a drop-in optimizer's step passes torch.ops its gradients and learning
// rate, not every parameter and state list again.
//
// Through torch.ops (the stable ABI's path) each tensor of a call is boxed and unboxed on every
// step: with Adam on 200 tensors that is 1,200 tensors and ~300 us of host time per step, while
// the kernels and checks take a fraction of it. fused_optim.optim's step reuse (_Gathered) already
// proves that the parameters and state are the same objects from one step to the next, so it keeps
// the call once, `<algo>_step_keep(<the op's arguments>) -> int`, and then runs each step as
// `kept_step_(kept, grads, lr, grad_scale, found_inf)`: the op's own function with those four
// replaced, its checks included (a tensor kept by identity may still have changed in place, e.g.
// by `param.data = ...`). `kept_free(kept)` drops the lists (Python frees it with its owner).
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <tuple>
#include <type_traits>
#include <utility>

#include "torch_api.h"

namespace fused_optim::kept {

// What a kept step takes afresh on every step.
using Run = std::function<void(TensorListArg grads, double lr, const std::optional<Tensor>& grad_scale,
                               const std::optional<Tensor>& found_inf)>;

// The registry (kept_step.cpp): an id for each kept call, until kept_free.
int64_t Add(Run run);

// The positions, among an op's arguments, of what each step replaces (from its schema).
struct Slots {
  int grads = -1, lr = -1, grad_scale = -1, found_inf = -1;
};
Slots SlotsOf(const std::string& schema);

// "<op>(Tensor(a!)[] params, ...) -> ()" becomes "<op>keep(Tensor[] params, ...) -> int": the
// same arguments, none written (the keep op only holds them).
std::string KeepSchema(const std::string& schema);

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
    const Slots slots = SlotsRef();
    return Add([held, slots](TensorListArg grads, double lr, const std::optional<Tensor>& grad_scale,
                             const std::optional<Tensor>& found_inf) {
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
