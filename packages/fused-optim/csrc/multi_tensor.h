// Validation and marshalling of a multi-tensor op's arguments into a KernelTable.
// Everything is checked before the caller modifies any tensor, so a rejected call leaves the
// user's tensors untouched.
#pragma once

#include <ATen/core/List.h>
#include <ATen/core/Tensor.h>

#include <deque>
#include <optional>
#include <string>
#include <vector>

#include "kernel_table.h"

namespace fused_optim {

class MultiTensorCall {
 public:
  // `reference` (the params, or the grads where an op has no params) is validated here and every
  // list added later must match it tensor by tensor. The constructor adds no list itself.
  MultiTensorCall(const char* op, at::TensorList reference);

  // A list that is only read.
  void AddInput(const char* name, at::TensorList list);
  // A list updated in place (non-contiguous tensors are staged and copied back by Finish()).
  void AddMutable(const char* name, at::TensorList list);
  // Read-only gradient inputs where None means zeros; an empty list means all zeros.
  void AddOptionalInput(const char* name, const c10::List<std::optional<at::Tensor>>& list);
  // A column the kernel skips (an unused optional state, e.g. max_exp_avg_sqs without amsgrad).
  void AddAbsent();
  // A functional op's result computed from `source` (the matching input list): returns fresh
  // contiguous tensors and records `source` as where the kernel reads the starting values.
  std::vector<at::Tensor> AddOutputFrom(const char* name, at::TensorList source);
  // A fresh output with no starting values (gradients of a backward op).
  std::vector<at::Tensor> AddOutput();

  int64_t size() const { return num_tensors_; }
  bool on_cuda() const { return device_.is_cuda(); }
  at::Device device() const { return device_; }

  KernelTable Table() const;
  // The table checks aliasing, the last check before a tensor may be modified.
  // Copies staged (non-contiguous) in-place lists back into the caller's tensors and bumps the
  // version counters of every tensor updated in place (so autograd sees the modification).
  void Finish();

 private:
  void CheckLike(const char* name, int64_t t, const at::Tensor& x) const;
  void CheckNoAliasing() const;
  void Record(const char* name, int64_t t, const at::Tensor& x, bool writes);

  const char* op_;
  int64_t num_tensors_;
  at::ScalarType dtype_;
  at::Device device_;
  // Views of the op's own arguments, which outlive this object. No at::Tensor copies here: with
  // torch's PyObject preservation every copy of a Python-owned tensor takes the GIL twice.
  at::TensorList reference_;
  // Column-major: one entry per list, each of length num_tensors_.
  std::vector<std::vector<const void*>> src_;
  std::vector<std::vector<void*>> dst_;
  // (staged copy, caller's tensor) pairs to copy back.
  std::vector<std::pair<at::Tensor, at::Tensor>> staged_;
  // Keeps contiguous copies of read-only inputs alive for the kernel.
  std::vector<at::Tensor> keep_alive_;
  // Every caller tensor the kernel reads or writes, as passed (before staging), for the memory
  // overlap check; the written ones also get their version counters bumped by Finish().
  struct Argument {
    const char* list;
    int64_t index;
    const at::Tensor* tensor;  // an op argument, or an entry of owned_
    bool writes;
  };
  std::vector<Argument> arguments_;
  // Optional inputs arrive as copies; a deque keeps the addresses arguments_ points at stable.
  std::deque<at::Tensor> owned_;
};

// Checks and increments torch.optim's per-parameter step counters (scalar float tensors on the
// CPU) and returns the new step values. `Check` runs before any tensor is touched: each counter
// must be a distinct, dense one-element tensor holding a finite count >= 0 that can be incremented.
void CheckStepTensors(const char* op, at::TensorList steps, int64_t n);
std::vector<double> IncrementSteps(at::TensorList steps);

// Validate-only mode, per thread, switched by the op fused_optim::_validate_only(enable) (which
// returns the previous setting): an in-place <algo>_step_ op then returns after its last check,
// before its first write. A drop-in optimizer's step makes one call per group; it runs every call
// so first, and only then for real, so a bad later group leaves every tensor untouched.
bool SetValidateOnly(bool enable);
bool ValidateOnly();

// Python exception types via TORCH_CHECK_VALUE/TORCH_CHECK_TYPE, naming the op.
void CheckNonNegative(const char* op, const char* what, double value);
void CheckUnitInterval(const char* op, const char* what, double value);  // 0 <= value < 1

}  // namespace fused_optim
