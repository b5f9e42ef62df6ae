// The op skeleton declared in multi_tensor.h: argument checks, staging, the aliasing check and the
// step counters.
#include "multi_tensor.h"

#include <ATen/MemoryOverlap.h>
#include <ATen/core/grad_mode.h>
#include <ATen/ops/empty.h>
#include <ATen/ops/zeros.h>
#include <c10/core/DefaultDtype.h>
#include <c10/core/InferenceMode.h>
#include <c10/util/BFloat16.h>
#include <c10/util/Exception.h>
#include <c10/util/Half.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <limits>
#include <optional>
#include <string>
#include <type_traits>
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

DType ToStateDType(at::ScalarType t) {
  if (t == at::kLong) return DType::kLong;
  if (t == at::kInt) return DType::kInt;
  return ToDType(t);
}

bool IsSupportedFloating(at::ScalarType t) {
  return t == at::kFloat || t == at::kDouble || t == at::kHalf || t == at::kBFloat16;
}

// What a tensor updated in place must satisfy, checked before anything is modified: torch's own
// in-place rules (autograd, inference tensors) and no element stored twice (an expanded view),
// which the kernel would update once per alias and the copy-back of a staged view would reject.
void CheckWritable(const char* op, const char* name, int64_t t, const at::Tensor& x) {
  // Grad mode first: a thread-local flag, off in every optimizer step, where the tensor's autograd
  // metadata (one more heap object per parameter) is then never read.
  TORCH_CHECK(!(at::GradMode::is_enabled() && x.requires_grad()), op, ": ", name, "[", t,
              "] requires grad and grad mode is enabled; an in-place step is not differentiable: call it "
              "under torch.no_grad(), or use fused_optim.functional for a differentiable update");
  TORCH_CHECK(!x.is_inference() || c10::InferenceMode::is_enabled(), op, ": ", name, "[", t,
              "] is an inference tensor; an in-place update to an inference tensor outside InferenceMode is not "
              "allowed (clone() it first)");
  TORCH_CHECK_VALUE(at::has_internal_overlap(x) != at::MemOverlap::Yes, op, ": ", name, "[", t,
                    "] has elements that share memory (an expanded or stride-0 view); an updated tensor needs "
                    "one memory location per element: clone() it first");
}

// The byte range [lo, hi) a non-empty strided tensor spans.
std::pair<std::uintptr_t, std::uintptr_t> ByteRange(const at::Tensor& x) {
  int64_t last = 0;
  for (int64_t d = 0; d < x.dim(); ++d) last += (x.size(d) - 1) * x.stride(d);
  const auto lo = reinterpret_cast<std::uintptr_t>(x.const_data_ptr());
  return {lo, lo + static_cast<std::uintptr_t>((last + 1) * static_cast<int64_t>(x.element_size()))};
}

// Whether two tensors whose byte ranges intersect have an element in common. Views torch cannot
// decide cheaply (interleaved strided views of one buffer) are settled exactly by marking the
// elements of one on a scratch mask over the shared range; views at a misaligned offset or of
// different element sizes count as overlapping.
bool ElementsOverlap(const at::Tensor& a, const at::Tensor& b) {
  switch (at::get_overlap_status(a, b)) {
    case at::MemOverlapStatus::Full:
    case at::MemOverlapStatus::Partial:
      return true;
    case at::MemOverlapStatus::No:
      return false;
    case at::MemOverlapStatus::TooHard:
      break;
  }
  const auto [a_lo, a_hi] = ByteRange(a);
  const auto [b_lo, b_hi] = ByteRange(b);
  const auto item = static_cast<std::uintptr_t>(a.element_size());
  const std::uintptr_t lo = std::min(a_lo, b_lo);
  if (b.element_size() != a.element_size() || (a_lo - lo) % item != 0 || (b_lo - lo) % item != 0) return true;
  const auto elements = static_cast<int64_t>((std::max(a_hi, b_hi) - lo + item - 1) / item);
  const at::Tensor mask = at::zeros({elements}, at::TensorOptions().dtype(at::kBool));
  mask.as_strided(a.sizes(), a.strides(), static_cast<int64_t>((a_lo - lo) / item)).fill_(true);
  return mask.as_strided(b.sizes(), b.strides(), static_cast<int64_t>((b_lo - lo) / item)).any().item<bool>();
}

}  // namespace

MultiTensorCall::MultiTensorCall(const char* op, at::TensorList params, bool in_place)
    : op_(op),
      num_tensors_(static_cast<int64_t>(params.size())),
      dtype_(at::kFloat),
      device_(at::kCPU),
      reference_(params),
      in_place_(in_place) {
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
  TORCH_CHECK_TYPE(!x.is_complex() || reference_[t].is_complex(), op_, ": ", name, "[", t, "] is complex but params[",
                   t, "] is not");
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
    const at::Tensor& x = list[t];
    CheckLike(name, t, x);
    Record(name, t, x, /*writes=*/false);
    src[t] = ReadPointer(x);
  }
  dst_.emplace_back(src.size(), nullptr);
  for (int64_t t = 0; t < num_tensors_; ++t) dst_.back()[t] = const_cast<void*>(src[t]);
  src_.push_back(std::move(src));
}

const void* MultiTensorCall::ReadPointer(const at::Tensor& x) {
  if (x.is_contiguous()) return x.const_data_ptr();
  keep_alive_.push_back(x.contiguous());
  return keep_alive_.back().const_data_ptr();
}

void MultiTensorCall::AddMutable(const char* name, at::TensorList list) {
  TORCH_CHECK_VALUE(static_cast<int64_t>(list.size()) == num_tensors_, op_, ": ", name, " has ", list.size(),
                    " tensors but params has ", num_tensors_);
  std::vector<void*> dst(num_tensors_);
  for (int64_t t = 0; t < num_tensors_; ++t) {
    const at::Tensor& x = list[t];
    CheckLike(name, t, x);
    CheckWritable(op_, name, t, x);
    Record(name, t, x, /*writes=*/true);
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
}

void MultiTensorCall::AddOptionalInput(const char* name, const c10::List<std::optional<at::Tensor>>& list) {
  const int64_t n = static_cast<int64_t>(list.size());
  TORCH_CHECK_VALUE(n == 0 || n == num_tensors_, op_, ": ", name, " has ", n, " entries but params has ", num_tensors_,
                    " (pass an empty list for all zeros)");
  std::vector<const void*> src(num_tensors_, nullptr);
  for (int64_t t = 0; t < n; ++t) {
    std::optional<at::Tensor> x = list.get(t);
    if (!x.has_value() || !x->defined()) continue;
    CheckLike(name, t, *x);
    owned_.push_back(std::move(*x));
    const at::Tensor& kept = owned_.back();
    Record(name, t, kept, /*writes=*/false);
    src[t] = ReadPointer(kept);
  }
  dst_.emplace_back(num_tensors_, nullptr);
  for (int64_t t = 0; t < num_tensors_; ++t) dst_.back()[t] = const_cast<void*>(src[t]);
  src_.push_back(std::move(src));
}

void MultiTensorCall::AddAbsent() {
  src_.emplace_back(num_tensors_, nullptr);
  dst_.emplace_back(num_tensors_, nullptr);
}

std::vector<at::Tensor> MultiTensorCall::AddOutputFrom(const char* name, at::TensorList source) {
  AddInput(name, source);
  std::vector<at::Tensor> out;
  out.reserve(num_tensors_);
  for (int64_t t = 0; t < num_tensors_; ++t) {
    out.push_back(
        at::empty(reference_[t].sizes(), reference_[t].options().memory_format(at::MemoryFormat::Contiguous)));
    dst_.back()[t] = out.back().mutable_data_ptr();
  }
  return out;
}

void MultiTensorCall::CheckEmpty(const char* name, at::TensorList list, const char* when_absent) const {
  TORCH_CHECK_VALUE(list.empty(), op_, ": ", name, " must be empty ", when_absent);
}

void MultiTensorCall::AddInputIf(bool present, const char* name, at::TensorList list, const char* when_absent) {
  if (present) return AddInput(name, list);
  CheckEmpty(name, list, when_absent);
  AddAbsent();
}

std::vector<at::Tensor> MultiTensorCall::AddOutputIf(bool present) {
  if (present) return AddOutput();
  AddAbsent();
  return {};
}

std::vector<at::Tensor> MultiTensorCall::AddState(const char* name, at::TensorList list) {
  if (!in_place_) return AddOutputFrom(name, list);
  AddMutable(name, list);
  return {};
}

std::vector<at::Tensor> MultiTensorCall::AddStateIf(bool present, const char* name, at::TensorList list,
                                                    const char* when_absent) {
  if (present) return AddState(name, list);
  CheckEmpty(name, list, when_absent);
  AddAbsent();
  return {};
}

void MultiTensorCall::AddInputs(std::initializer_list<NamedList> lists) {
  for (const NamedList& l : lists) AddInputIf(l.present, l.name, l.list, l.when_absent);
}

void MultiTensorCall::AddOptionalInputs(std::initializer_list<OptionalList> lists) {
  for (const OptionalList& l : lists) AddOptionalInput(l.name, l.present ? l.list : OptionalTensorList());
}

std::vector<at::Tensor> MultiTensorCall::AddOutput() {
  std::vector<at::Tensor> out;
  out.reserve(num_tensors_);
  std::vector<void*> dst(num_tensors_);
  for (int64_t t = 0; t < num_tensors_; ++t) {
    out.push_back(
        at::empty(reference_[t].sizes(), reference_[t].options().memory_format(at::MemoryFormat::Contiguous)));
    dst[t] = out.back().mutable_data_ptr();
  }
  src_.emplace_back(num_tensors_, nullptr);
  dst_.push_back(std::move(dst));
  return out;
}

void MultiTensorCall::AddGrads(at::TensorList grads) {
  grad_col_ = static_cast<int>(dst_.size());
  if (grad_scale_ != nullptr) {
    AddMutable("grads", grads);
  } else {
    AddInput("grads", grads);
  }
}

void MultiTensorCall::SetAmp(const Amp& amp) {
  const auto check = [&](const char* name, const std::optional<at::Tensor>& x) -> const at::Tensor* {
    if (!x.has_value() || !x->defined()) return nullptr;
    TORCH_CHECK_VALUE(x->layout() == at::kStrided && x->numel() == 1, op_, ": ", name,
                      " must be a dense one-element tensor (torch.amp.GradScaler's), got shape ", x->sizes());
    TORCH_CHECK_TYPE(x->scalar_type() == at::kFloat, op_, ": ", name, " has dtype ", x->scalar_type(),
                     "; expected float32");
    TORCH_CHECK_VALUE(num_tensors_ == 0 || x->device() == device_, op_, ": ", name, " is on ", x->device(),
                      " but params are on ", device_, " (move it with .to(params[0].device))");
    Record(name, 0, *x, /*writes=*/false);  // no list written in place may overlap it
    return &*x;
  };
  grad_scale_ = check("grad_scale", amp.grad_scale);
  found_inf_ = check("found_inf", amp.found_inf);
}

bool MultiTensorCall::SkipStep(bool host_needs_answer) const {
  if (found_inf_ == nullptr || num_tensors_ == 0) return false;
  if (found_inf_->is_cpu()) return *found_inf_->const_data_ptr<float>() != 0.0f;
  return host_needs_answer && found_inf_->item<float>() != 0.0f;
}

void MultiTensorCall::Record(const char* name, int64_t t, const at::Tensor& x, bool writes) {
  if (x.numel() > 0) arguments_.push_back({name, t, &x, writes});
}

void MultiTensorCall::CheckNoAliasing() const {
  // A tensor written in place must not share any element with another argument, in any list and
  // at any index, nor appear twice: the kernels read and write each element once, and staged
  // (non-contiguous) tensors are copied back one after the other. Read-only arguments may alias
  // each other. A sweep over the arguments sorted by address compares only those whose memory
  // ranges intersect.
  struct Span {
    std::uintptr_t lo, hi;
    size_t arg;
  };
  std::vector<Span> spans;
  spans.reserve(arguments_.size());
  for (size_t i = 0; i < arguments_.size(); ++i) {
    const auto [lo, hi] = ByteRange(*arguments_[i].tensor);
    spans.push_back({lo, hi, i});
  }
  std::sort(spans.begin(), spans.end(), [](const Span& a, const Span& b) { return a.lo < b.lo; });
  std::vector<Span> open;  // spans that may still intersect the next one
  for (const Span& s : spans) {
    open.erase(std::remove_if(open.begin(), open.end(), [&](const Span& o) { return o.hi <= s.lo; }), open.end());
    const Argument& a = arguments_[s.arg];
    for (const Span& o : open) {
      const Argument& b = arguments_[o.arg];
      if (!a.writes && !b.writes) continue;
      if (!ElementsOverlap(*a.tensor, *b.tensor)) continue;
      const Argument& first = o.arg < s.arg ? b : a;
      const Argument& second = o.arg < s.arg ? a : b;
      TORCH_CHECK_VALUE(!(first.list == second.list && first.tensor->is_same(*second.tensor)), op_,
                        ": the same tensor appears twice in ", first.list, " (at ", first.index, " and ", second.index,
                        "), a list that is updated in place");
      TORCH_CHECK_VALUE(false, op_, ": ", first.list, "[", first.index, "] shares memory with ", second.list, "[",
                        second.index,
                        "]; a tensor updated in place must not overlap any other argument (clone() "
                        "one of them)");
    }
    open.push_back(s);
  }
}

KernelTable& MultiTensorCall::Table() {
  if (table_) return *table_;
  CheckNoAliasing();
  KernelTable& table = table_.emplace();
  table.dtype = num_tensors_ ? ToDType(dtype_) : DType::kFloat;
  table.num_lists = static_cast<int>(dst_.size());
  table.num_tensors = num_tensors_;
  table.dst.resize(num_tensors_ * table.num_lists);
  table.src.resize(num_tensors_ * table.num_lists);
  table.numel.resize(num_tensors_);
  table.grad_scale = grad_scale_ != nullptr ? grad_scale_->const_data_ptr<float>() : nullptr;
  table.found_inf = found_inf_ != nullptr ? found_inf_->const_data_ptr<float>() : nullptr;
  table.grad_col = grad_col_;
  for (int64_t t = 0; t < num_tensors_; ++t) {
    table.numel[t] = reference_[t].numel();
    for (int l = 0; l < table.num_lists; ++l) {
      table.dst[t * table.num_lists + l] = dst_[l][t];
      table.src[t * table.num_lists + l] = src_[l][t];
    }
  }
  if (device_steps_) {  // the kernel computes the rows: `scalars` only keeps the table's shape
    table.num_scalars = device_step_scalars_;
    table.scalars.assign(num_tensors_ * device_step_scalars_, 0.0);
    table.steps.resize(num_tensors_);
    for (int64_t t = 0; t < num_tensors_; ++t) {
      const at::Tensor& s = (*device_steps_)[t];
      table.steps[t] = {s.mutable_data_ptr(), ToStateDType(s.scalar_type())};
    }
  }
  return table;
}

void MultiTensorCall::UseDeviceSteps(at::TensorList steps, int num_scalars) {
  TORCH_CHECK(!table_, op_, ": UseDeviceSteps after the table was built (a fused-optim bug)");
  for (int64_t t = 0; t < num_tensors_; ++t) {
    const at::Tensor& s = steps[t];
    TORCH_CHECK_VALUE(s.device() == device_, op_,
                      ": capturable=True needs every step counter on the params' device, but ", "state_steps[", t,
                      "] is on ", s.device(), " and params on ", device_,
                      " (a state loaded or made with capturable=False: move it with .to(param.device))");
    Record("state_steps", t, s, /*writes=*/true);
  }
  device_steps_ = steps;
  device_step_scalars_ = num_scalars;
}

namespace {

thread_local int64_t state_scalars_on_host = 0;  // a bit mask of state columns

}  // namespace

int64_t SetStateScalarsOnHost(int64_t columns) {
  const int64_t previous = state_scalars_on_host;
  state_scalars_on_host = columns;
  return previous;
}

void MultiTensorCall::SetStateScalars(std::initializer_list<at::TensorList> lists) {
  KernelTable& table = Table();
  state_lists_.assign(lists.begin(), lists.end());
  table.num_state = static_cast<int>(lists.size());
  table.state.resize(num_tensors_ * table.num_state);
  table.advance_state = true;
  table.default_dtype = ToDType(c10::get_default_dtype_as_scalartype());
  const auto read = [](const at::Tensor& s) {  // through the data pointer on the CPU
    const std::optional<double> value = ReadHostScalar(s);
    return value ? *value : s.item<double>();
  };
  for (int64_t t = 0; t < num_tensors_; ++t) {
    StateScalar* state = table.state.data() + t * table.num_state;
    bool off_device = false;
    for (int k = 0; k < table.num_state; ++k) {
      const at::Tensor& s = state_lists_[k][t];
      state[k].dtype = ToStateDType(s.scalar_type());
      if (s.device() == device_ && (state_scalars_on_host >> k & 1) == 0) {
        state[k].ptr = s.mutable_data_ptr();
      } else {  // on another device than the parameters': read now
        state[k].value = read(s);
        off_device = true;
      }
    }
    // The host's share of Advance (FinishStateScalars) starts from the same values as the
    // kernel's, which may have advanced those on the device by then: read them now too (a state
    // split across devices; a read of one on a GPU waits for it).
    for (int k = 0; off_device && k < table.num_state; ++k) {
      if (state[k].ptr != nullptr) state[k].value = read(state_lists_[k][t]);
    }
  }
}

void MultiTensorCall::SetStateValues(const std::vector<double>& values) {
  KernelTable& table = Table();
  table.num_state = static_cast<int>(values.size());
  table.state.resize(num_tensors_ * table.num_state);
  for (int64_t t = 0; t < num_tensors_; ++t) {
    for (int k = 0; k < table.num_state; ++k)
      table.state[t * table.num_state + k] = {nullptr, DType::kDouble, values[k]};
  }
}

bool MultiTensorCall::ChecksOnly() {
  Table();
  return ValidateOnly();
}

void MultiTensorCall::Finish() {
  for (auto& [staged, original] : staged_) original.copy_(staged);
  staged_.clear();
  // Writes through data pointers bypass the dispatcher, so tell autograd about them as torch's
  // in-place ops do: a graph that saved one of these tensors then refuses to run backward.
  for (const Argument& a : arguments_)
    if (a.writes) a.tensor->unsafeGetTensorImpl()->bump_version();
}

namespace {

// f(p) with p the tensor's data pointer `data` typed by its dtype, for the dtypes of
// ReadHostScalar; false for any other tensor (f not called).
template <typename F>
bool VisitHostScalar(const at::Tensor& s, void* data, F&& f) {
  switch (s.scalar_type()) {
    case at::kFloat:
      return f(static_cast<float*>(data)), true;
    case at::kDouble:
      return f(static_cast<double*>(data)), true;
    case at::kHalf:
      return f(static_cast<c10::Half*>(data)), true;
    case at::kBFloat16:
      return f(static_cast<c10::BFloat16*>(data)), true;
    case at::kLong:
      return f(static_cast<int64_t*>(data)), true;
    case at::kInt:
      return f(static_cast<int32_t*>(data)), true;
    default:
      return false;
  }
}

// float16 and bfloat16 convert through float (c10's own conversions), the others directly.
template <typename S>
constexpr bool kViaFloat = !std::is_floating_point_v<S> && !std::is_integral_v<S>;

}  // namespace

std::optional<double> ReadHostScalar(const at::Tensor& s) {
  if (!s.is_cpu()) return std::nullopt;
  double value = 0.0;
  const bool read = VisitHostScalar(s, const_cast<void*>(s.const_data_ptr()), [&](const auto* p) {
    using S = std::remove_cv_t<std::remove_pointer_t<decltype(p)>>;
    if constexpr (kViaFloat<S>) {
      value = static_cast<double>(static_cast<float>(*p));
    } else {
      value = static_cast<double>(*p);
    }
  });
  return read ? std::optional<double>(value) : std::nullopt;
}

std::optional<double> WriteHostScalar(const at::Tensor& s, double value) {
  if (!s.is_cpu()) return std::nullopt;
  double stored = 0.0;
  const bool written = VisitHostScalar(s, s.mutable_data_ptr(), [&](auto* p) {
    using S = std::remove_pointer_t<decltype(p)>;
    if constexpr (kViaFloat<S>) {
      *p = static_cast<S>(static_cast<float>(value));
      stored = static_cast<double>(static_cast<float>(*p));
    } else {
      *p = static_cast<S>(value);
      stored = static_cast<double>(*p);
    }
  });
  if (!written) return std::nullopt;
  s.unsafeGetTensorImpl()->bump_version();
  return stored;
}

void CheckStepTensors(const char* op, at::TensorList steps, int64_t n) {
  TORCH_CHECK_VALUE(static_cast<int64_t>(steps.size()) == n, op, ": state_steps has ", steps.size(),
                    " tensors but params has ", n);
  std::vector<const void*> seen;
  seen.reserve(n);
  for (int64_t t = 0; t < n; ++t) {
    const at::Tensor& s = steps[t];
    TORCH_CHECK_VALUE(s.defined() && s.layout() == at::kStrided && s.numel() == 1, op, ": state_steps[", t,
                      "] must be a dense one-element tensor");
    TORCH_CHECK_TYPE(
        IsSupportedFloating(s.scalar_type()) || s.scalar_type() == at::kLong || s.scalar_type() == at::kInt, op,
        ": state_steps[", t, "] has dtype ", s.scalar_type(),
        "; a step counter must be float32, float64, float16, bfloat16, int64 or int32");
    CheckWritable(op, "state_steps", t, s);
    // Read through the data pointer on the CPU. A counter on a device is not read here: that
    // would wait for the device on every step.
    if (const std::optional<double> value = ReadHostScalar(s)) {
      TORCH_CHECK_VALUE(std::isfinite(*value) && *value >= 0.0, op, ": state_steps[", t, "] is ", *value,
                        "; a step counter must be a finite count >= 0");
      TORCH_CHECK_VALUE(s.scalar_type() != at::kInt || *value < std::numeric_limits<int32_t>::max(), op,
                        ": state_steps[", t, "] is ", *value, " and would overflow int32 when incremented");
    }
    seen.push_back(s.const_data_ptr());
  }
  std::sort(seen.begin(), seen.end());
  TORCH_CHECK_VALUE(
      std::adjacent_find(seen.begin(), seen.end()) == seen.end(), op,
      ": the same step counter appears twice in state_steps (each parameter needs its own; is a parameter "
      "listed twice?)");
}

std::vector<double> IncrementSteps(at::TensorList steps) {
  std::vector<double> out(steps.size());
  for (size_t t = 0; t < steps.size(); ++t) {
    const at::Tensor& s = steps[t];
    // torch.optim keeps steps as CPU scalars: update them without a dispatcher round trip.
    if (const std::optional<double> value = ReadHostScalar(s)) {
      out[t] = *WriteHostScalar(s, *value + 1.0);  // the count as stored (rounded to its dtype)
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
    if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("f16c")) best = CpuIsa::kAvx2;
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

namespace {
thread_local bool validate_only = false;
std::atomic<bool> emulate_cuda{[] {
  const char* env = std::getenv("FUSED_OPTIM_EMULATE_CUDA");
  return env != nullptr && std::string(env) == "1";
}()};
}  // namespace

bool SetCudaEmulation(bool enable) { return emulate_cuda.exchange(enable); }

bool CudaEmulation() { return emulate_cuda.load(std::memory_order_relaxed); }

bool SetValidateOnly(bool enable) {
  const bool previous = validate_only;
  validate_only = enable;
  return previous;
}

bool ValidateOnly() { return validate_only; }

void CheckNonNegative(const char* op, const char* what, double value) {
  TORCH_CHECK_VALUE(value >= 0.0, op, ": invalid ", what, " value: ", value, " (must be >= 0)");
}

void CheckStep(const char* op, int64_t step) {
  TORCH_CHECK_VALUE(step >= 1, op, ": step must be >= 1 (the count after this update), got ", step);
}

void CheckUnitInterval(const char* op, const char* what, double value) {
  TORCH_CHECK_VALUE(value >= 0.0 && value < 1.0, op, ": invalid ", what, " value: ", value, " (must be in [0, 1))");
}

void CheckNonNegative(const char* op, NamedValues values) {
  for (const auto& [what, value] : values) CheckNonNegative(op, what, value);
}

void CheckUnitInterval(const char* op, NamedValues values) {
  for (const auto& [what, value] : values) CheckUnitInterval(op, what, value);
}

}  // namespace fused_optim
