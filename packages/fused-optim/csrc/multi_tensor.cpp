#include "multi_tensor.h"

#include "ops/launch.h"

#include <ATen/ops/empty.h>
#include <c10/util/Exception.h>

#include <algorithm>
#include <cstdlib>
#include <string>
#include <utility>

namespace fused_optim {
namespace {

DType ToDType(at::ScalarType t) {
  switch (t) {
    case at::kFloat:
      return DType::kFloat;
    case at::kDouble:
      return DType::kDouble;
    case at::kHalf:
      return DType::kHalf;
    case at::kBFloat16:
      return DType::kBFloat16;
    default:
      TORCH_CHECK_TYPE(false, "unsupported dtype ", t);
  }
}

bool IsSupportedFloating(at::ScalarType t) {
  return t == at::kFloat || t == at::kDouble || t == at::kHalf || t == at::kBFloat16;
}

}  // namespace

MultiTensorCall::MultiTensorCall(const char* op, at::TensorList params)
    : op_(op),
      num_tensors_(static_cast<int64_t>(params.size())),
      dtype_(at::kFloat),
      device_(at::kCPU),
      reference_(params.begin(), params.end()) {
  for (int64_t t = 0; t < num_tensors_; ++t) {
    const at::Tensor& p = params[t];
    TORCH_CHECK_VALUE(p.defined(), op_, ": params[", t, "] is None");
    TORCH_CHECK_VALUE(p.layout() == at::kStrided, op_, ": params[", t, "] has layout ", p.layout(),
                      "; only dense (strided) tensors are supported");
    TORCH_CHECK_TYPE(!p.is_complex(), op_, ": params[", t, "] is complex (", p.scalar_type(),
                     "); pass torch.view_as_real(...) of it and of its gradient and state");
    TORCH_CHECK_TYPE(IsSupportedFloating(p.scalar_type()), op_, ": params[", t, "] has dtype ", p.scalar_type(),
                     "; expected float32, float64, float16 or bfloat16");
    if (t == 0) {
      dtype_ = p.scalar_type();
      device_ = p.device();
    }
    TORCH_CHECK_TYPE(p.scalar_type() == dtype_, op_, ": mixed dtypes in one call: params[0] is ", dtype_,
                     " but params[", t, "] is ", p.scalar_type(), "; group tensors by dtype");
    TORCH_CHECK_VALUE(p.device() == device_, op_, ": mixed devices in one call: params[0] is on ", device_,
                      " but params[", t, "] is on ", p.device());
  }
}

void MultiTensorCall::CheckLike(const char* name, int64_t t, const at::Tensor& x) const {
  TORCH_CHECK_VALUE(x.defined(), op_, ": ", name, "[", t, "] is None");
  TORCH_CHECK_VALUE(x.layout() == at::kStrided, op_, ": ", name, "[", t, "] has layout ", x.layout(),
                    "; sparse gradients and states are not supported");
  TORCH_CHECK_TYPE(!x.is_complex() || reference_[t].is_complex(), op_, ": ", name, "[", t,
                   "] is complex but params[", t, "] is not");
  TORCH_CHECK_TYPE(x.scalar_type() == dtype_, op_, ": ", name, "[", t, "] has dtype ", x.scalar_type(),
                   " but params are ", dtype_);
  TORCH_CHECK_VALUE(x.device() == device_, op_, ": ", name, "[", t, "] is on ", x.device(), " but params are on ",
                    device_);
  TORCH_CHECK_VALUE(x.sizes() == reference_[t].sizes(), op_, ": ", name, "[", t, "] has shape ", x.sizes(),
                    " but params[", t, "] has shape ", reference_[t].sizes());
}

void MultiTensorCall::AddInput(const char* name, at::TensorList list) {
  TORCH_CHECK_VALUE(static_cast<int64_t>(list.size()) == num_tensors_, op_, ": ", name, " has ", list.size(),
                    " tensors but params has ", num_tensors_);
  std::vector<const void*> src(num_tensors_);
  for (int64_t t = 0; t < num_tensors_; ++t) {
    CheckLike(name, t, list[t]);
    at::Tensor c = list[t].contiguous();
    src[t] = c.const_data_ptr();
    if (!c.is_same(list[t])) keep_alive_.push_back(std::move(c));
  }
  dst_.emplace_back(src.size(), nullptr);
  for (int64_t t = 0; t < num_tensors_; ++t) dst_.back()[t] = const_cast<void*>(src[t]);
  src_.push_back(std::move(src));
  mutable_.push_back(false);
}

void MultiTensorCall::AddMutable(const char* name, at::TensorList list) {
  TORCH_CHECK_VALUE(static_cast<int64_t>(list.size()) == num_tensors_, op_, ": ", name, " has ", list.size(),
                    " tensors but params has ", num_tensors_);
  std::vector<void*> dst(num_tensors_);
  for (int64_t t = 0; t < num_tensors_; ++t) {
    const at::Tensor& x = list[t];
    CheckLike(name, t, x);
    if (x.is_contiguous()) {
      dst[t] = x.numel() ? x.mutable_data_ptr() : nullptr;
    } else {
      at::Tensor staged = x.contiguous();
      dst[t] = staged.mutable_data_ptr();
      staged_.emplace_back(std::move(staged), x);
    }
  }
  src_.emplace_back(dst.begin(), dst.end());
  dst_.push_back(std::move(dst));
  mutable_.push_back(true);
}

void MultiTensorCall::AddOptionalInput(const char* name, const c10::List<std::optional<at::Tensor>>& list) {
  const int64_t n = static_cast<int64_t>(list.size());
  TORCH_CHECK_VALUE(n == 0 || n == num_tensors_, op_, ": ", name, " has ", n, " entries but params has ",
                    num_tensors_, " (pass an empty list for all zeros)");
  std::vector<const void*> src(num_tensors_, nullptr);
  for (int64_t t = 0; t < n; ++t) {
    std::optional<at::Tensor> x = list.get(t);
    if (!x.has_value() || !x->defined()) continue;
    CheckLike(name, t, *x);
    at::Tensor c = x->contiguous();
    src[t] = c.const_data_ptr();
    keep_alive_.push_back(std::move(c));
  }
  dst_.emplace_back(num_tensors_, nullptr);
  for (int64_t t = 0; t < num_tensors_; ++t) dst_.back()[t] = const_cast<void*>(src[t]);
  src_.push_back(std::move(src));
  mutable_.push_back(false);
}

void MultiTensorCall::AddAbsent() {
  src_.emplace_back(num_tensors_, nullptr);
  dst_.emplace_back(num_tensors_, nullptr);
  mutable_.push_back(false);
}

std::vector<at::Tensor> MultiTensorCall::AddOutputFrom(const char* name, at::TensorList source) {
  AddInput(name, source);
  std::vector<at::Tensor> out;
  out.reserve(num_tensors_);
  for (int64_t t = 0; t < num_tensors_; ++t) {
    out.push_back(at::empty(reference_[t].sizes(), reference_[t].options().memory_format(at::MemoryFormat::Contiguous)));
    dst_.back()[t] = out.back().mutable_data_ptr();
  }
  mutable_.back() = true;
  return out;
}

std::vector<at::Tensor> MultiTensorCall::AddOutput() {
  std::vector<at::Tensor> out;
  out.reserve(num_tensors_);
  std::vector<void*> dst(num_tensors_);
  for (int64_t t = 0; t < num_tensors_; ++t) {
    out.push_back(at::empty(reference_[t].sizes(), reference_[t].options().memory_format(at::MemoryFormat::Contiguous)));
    dst[t] = out.back().mutable_data_ptr();
  }
  src_.emplace_back(num_tensors_, nullptr);
  dst_.push_back(std::move(dst));
  mutable_.push_back(true);
  return out;
}

void MultiTensorCall::CheckNoAliasing() const {
  // A list written in place must not share memory with another list (the kernels read and
  // write each element once) nor appear twice in one list (two threads would race on it).
  const size_t lists = dst_.size();
  for (size_t l = 0; l < lists; ++l) {
    if (!mutable_[l]) continue;
    for (int64_t t = 0; t < num_tensors_; ++t) {
      void* p = dst_[l][t];
      if (p == nullptr) continue;
      for (size_t k = 0; k < lists; ++k) {
        if (k == l) continue;
        TORCH_CHECK_VALUE(src_[k][t] != p && dst_[k][t] != p, op_, ": tensor ", t,
                          " of an updated list shares memory with the same index of another list");
      }
    }
    std::vector<void*> sorted;
    sorted.reserve(num_tensors_);
    for (int64_t t = 0; t < num_tensors_; ++t)
      if (dst_[l][t] != nullptr) sorted.push_back(dst_[l][t]);
    std::sort(sorted.begin(), sorted.end());
    TORCH_CHECK_VALUE(std::adjacent_find(sorted.begin(), sorted.end()) == sorted.end(), op_,
                      ": the same tensor appears twice in a list that is updated in place");
  }
}

KernelTable MultiTensorCall::Table() const {
  CheckNoAliasing();
  KernelTable table;
  table.dtype = num_tensors_ ? ToDType(dtype_) : DType::kFloat;
  table.num_lists = static_cast<int>(dst_.size());
  table.num_tensors = num_tensors_;
  table.dst.resize(num_tensors_ * table.num_lists);
  table.src.resize(num_tensors_ * table.num_lists);
  table.numel.resize(num_tensors_);
  for (int64_t t = 0; t < num_tensors_; ++t) {
    table.numel[t] = reference_[t].numel();
    for (int l = 0; l < table.num_lists; ++l) {
      table.dst[t * table.num_lists + l] = dst_[l][t];
      table.src[t * table.num_lists + l] = src_[l][t];
    }
  }
  return table;
}

void MultiTensorCall::Finish() {
  for (auto& [staged, original] : staged_) original.copy_(staged);
  staged_.clear();
}

void CheckStepTensors(const char* op, at::TensorList steps, int64_t n) {
  TORCH_CHECK_VALUE(static_cast<int64_t>(steps.size()) == n, op, ": state_steps has ", steps.size(),
                    " tensors but params has ", n);
  for (int64_t t = 0; t < n; ++t) {
    const at::Tensor& s = steps[t];
    TORCH_CHECK_VALUE(s.defined() && s.numel() == 1, op, ": state_steps[", t, "] must be a one-element tensor");
    TORCH_CHECK_TYPE(s.is_floating_point() || s.scalar_type() == at::kLong || s.scalar_type() == at::kInt, op,
                     ": state_steps[", t, "] has dtype ", s.scalar_type());
  }
}

std::vector<double> IncrementSteps(at::TensorList steps) {
  std::vector<double> out(steps.size());
  for (size_t t = 0; t < steps.size(); ++t) {
    const at::Tensor& s = steps[t];
    // torch.optim keeps steps as CPU float32 scalars: update them without a dispatcher round trip.
    if (s.is_cpu() && s.scalar_type() == at::kFloat) {
      float* p = s.mutable_data_ptr<float>();
      *p += 1.0f;
      out[t] = static_cast<double>(*p);
    } else if (s.is_cpu() && s.scalar_type() == at::kDouble) {
      double* p = s.mutable_data_ptr<double>();
      *p += 1.0;
      out[t] = *p;
    } else {
      const_cast<at::Tensor&>(s).add_(1);
      out[t] = s.item<double>();
    }
  }
  return out;
}

CpuIsa SelectedCpuIsa() {
#if defined(__x86_64__) && defined(__GNUC__)
  static const CpuIsa isa = [] {
    CpuIsa best = CpuIsa::kBaseline;
    if (__builtin_cpu_supports("avx2")) best = CpuIsa::kAvx2;
    if (__builtin_cpu_supports("avx512f")) best = CpuIsa::kAvx512;
    const char* cap = std::getenv("FUSED_OPTIM_CPU_ISA");
    if (cap != nullptr) {
      const std::string want(cap);
      const CpuIsa limit = want == "baseline" ? CpuIsa::kBaseline : want == "avx2" ? CpuIsa::kAvx2 : CpuIsa::kAvx512;
      if (limit < best) best = limit;
    }
    return best;
  }();
  return isa;
#else
  return CpuIsa::kBaseline;
#endif
}

void CheckNonNegative(const char* op, const char* what, double value) {
  TORCH_CHECK_VALUE(value >= 0.0, op, ": invalid ", what, " value: ", value, " (must be >= 0)");
}

void CheckUnitInterval(const char* op, const char* what, double value) {
  TORCH_CHECK_VALUE(value >= 0.0 && value < 1.0, op, ": invalid ", what, " value: ", value,
                    " (must be in [0, 1))");
}

}  // namespace fused_optim
