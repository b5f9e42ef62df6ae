// The one place where fused-optim's two builds of its op glue (csrc/ops/*.cpp, multi_tensor.cpp)
// differ. The glue is compiled twice from the same sources:
//   - FUSED_OPTIM_STABLE_ABI defined: against torch's stable C ABI (torch/csrc/stable, targeting
//     torch 2.10), into fused_optim._C, which registers the ops and loads into every torch from
//     2.10 on;
//   - otherwise: against ATen, into the optional module fused_optim._eager (eager_call.h), the
//     unboxed fast path, loaded only into the torch release it was compiled against.
// Everything the glue needs from torch goes through the names below, so the glue reads the same in
// both builds. What the stable ABI cannot do (bump a version counter, read requires_grad or
// is_inference) the stable build leaves to its Python caller (fused_optim._native.boxed).
#pragma once

#include <algorithm>
#include <array>
#include <cstdint>
#include <optional>
#include <ostream>
#include <span>
#include <sstream>
#include <stdexcept>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#ifdef FUSED_OPTIM_STABLE_ABI
#include <torch/csrc/inductor/aoti_torch/c/shim.h>
#include <torch/csrc/stable/accelerator.h>
#include <torch/csrc/stable/library.h>
#include <torch/csrc/stable/ops.h>
#include <torch/csrc/stable/tensor.h>
#include <torch/headeronly/core/Layout.h>
#include <torch/headeronly/core/MemoryFormat.h>
#include <torch/headeronly/core/ScalarType.h>
#include <torch/headeronly/util/HeaderOnlyArrayRef.h>
#else
#include <ATen/core/Tensor.h>
#include <ATen/core/dispatch/Dispatcher.h>
#include <ATen/core/grad_mode.h>
#include <ATen/ops/empty.h>
#include <ATen/ops/full.h>
#include <ATen/ops/sub.h>
#include <c10/core/DefaultDtype.h>
#include <c10/core/DeviceGuard.h>
#include <c10/core/InferenceMode.h>
#include <c10/util/Exception.h>
#endif

namespace fused_optim {

#ifdef FUSED_OPTIM_STABLE_ABI
using Tensor = torch::stable::Tensor;
using ScalarType = torch::headeronly::ScalarType;
using Layout = torch::headeronly::Layout;
using Device = torch::stable::Device;
using IntArrayRef = torch::headeronly::IntHeaderOnlyArrayRef;
#else
using Tensor = at::Tensor;
using ScalarType = at::ScalarType;
using Layout = at::Layout;
using Device = at::Device;
using IntArrayRef = at::IntArrayRef;
#endif

// Tensor lists: an op's own argument (what the stable ABI's boxing and the eager path hand over)
// and the view the glue passes around.
using TensorVector = std::vector<Tensor>;
using TensorListArg = const TensorVector&;
using TensorList = std::span<const Tensor>;
using OptionalTensorList = std::vector<std::optional<Tensor>>;

namespace api {

inline constexpr ScalarType kFloat = ScalarType::Float;
inline constexpr ScalarType kDouble = ScalarType::Double;
inline constexpr ScalarType kHalf = ScalarType::Half;
inline constexpr ScalarType kBFloat16 = ScalarType::BFloat16;
inline constexpr ScalarType kLong = ScalarType::Long;
inline constexpr ScalarType kInt = ScalarType::Int;
inline constexpr Layout kStrided = Layout::Strided;

inline bool IsComplex(ScalarType t) {
  return t == ScalarType::ComplexHalf || t == ScalarType::ComplexFloat || t == ScalarType::ComplexDouble;
}

// A tensor's dtype: what the glue asks for instead of scalar_type(). The stable Tensor's
// scalar_type() maps the C shim's dtype code through a chain of exported-function calls, one per
// dtype it might be (about 20, each behind an ABI-version check); the glue asks several times per
// tensor per step (a kept Adam step on 200 tensors went from 169 to 130 us without it, measured),
// so the codes of the dtypes it meets are read once.
#ifdef FUSED_OPTIM_STABLE_ABI
inline ScalarType Dtype(const Tensor& t) {
  static const std::array<std::pair<int32_t, ScalarType>, 8> kCodes = {{
      {aoti_torch_dtype_float32(), ScalarType::Float},
      {aoti_torch_dtype_bfloat16(), ScalarType::BFloat16},
      {aoti_torch_dtype_float16(), ScalarType::Half},
      {aoti_torch_dtype_float64(), ScalarType::Double},
      {aoti_torch_dtype_int64(), ScalarType::Long},
      {aoti_torch_dtype_int32(), ScalarType::Int},
      {aoti_torch_dtype_bool(), ScalarType::Bool},
      {aoti_torch_dtype_uint8(), ScalarType::Byte},
  }};
  int32_t code = 0;
  STABLE_TORCH_ERROR_CODE_CHECK(aoti_torch_get_dtype(t.get(), &code));
  for (const auto& [known, type] : kCodes)
    if (code == known) return type;
  return t.scalar_type();  // any other dtype, which the checks then name
}
#else
inline ScalarType Dtype(const Tensor& t) { return t.scalar_type(); }
#endif

#ifdef FUSED_OPTIM_STABLE_ABI
// Messages print what c10 prints, so both builds raise the same text.
inline std::ostream& operator<<(std::ostream& s, const Device& d) {
  s << (d.is_cuda() ? "cuda" : d.is_cpu() ? "cpu" : "device");
  if (!d.is_cpu() && d.has_index()) s << ':' << static_cast<int>(d.index());
  return s;
}
inline std::ostream& operator<<(std::ostream& s, Layout l) {
  switch (l) {
    case Layout::Strided:
      return s << "Strided";
    case Layout::Sparse:
      return s << "Sparse";
    case Layout::SparseCsr:
      return s << "SparseCsr";
    case Layout::Mkldnn:
      return s << "Mkldnn";
    case Layout::SparseCsc:
      return s << "SparseCsc";
    case Layout::SparseBsr:
      return s << "SparseBsr";
    case Layout::SparseBsc:
      return s << "SparseBsc";
    case Layout::Jagged:
      return s << "Jagged";
    default:
      return s << "Layout(" << static_cast<int>(l) << ")";
  }
}
inline std::ostream& operator<<(std::ostream& s, IntArrayRef sizes) {
  s << '[';
  for (size_t i = 0; i < sizes.size(); ++i) s << (i ? ", " : "") << sizes[i];
  return s << ']';
}
using c10::operator<<;  // ScalarType
#endif

template <typename... A>
std::string Str(const A&... a) {
  std::ostringstream s;
  (s << ... << a);
  return s.str();
}

// The stable build's errors cross torch's C boundary as C++ standard exceptions, which torch's
// Python binding turns into RuntimeError, or ValueError for std::invalid_argument. Python has no
// standard C++ counterpart of TypeError: its message starts with "TypeError: ", which
// fused_optim._native turns back into a TypeError (_TYPE_ERROR there).
[[noreturn]] inline void FailRuntime(const std::string& msg) { throw std::runtime_error(msg); }
[[noreturn]] inline void FailValue(const std::string& msg) { throw std::invalid_argument(msg); }
[[noreturn]] inline void FailType(const std::string& msg) { throw std::runtime_error("TypeError: " + msg); }

}  // namespace api

#ifdef FUSED_OPTIM_STABLE_ABI
#define FUSED_OPTIM_CHECK(cond, ...) \
  if (!(cond)) ::fused_optim::api::FailRuntime(::fused_optim::api::Str(__VA_ARGS__))
#define FUSED_OPTIM_CHECK_VALUE(cond, ...) \
  if (!(cond)) ::fused_optim::api::FailValue(::fused_optim::api::Str(__VA_ARGS__))
#define FUSED_OPTIM_CHECK_TYPE(cond, ...) \
  if (!(cond)) ::fused_optim::api::FailType(::fused_optim::api::Str(__VA_ARGS__))
#else
#define FUSED_OPTIM_CHECK(cond, ...) TORCH_CHECK(cond, __VA_ARGS__)
#define FUSED_OPTIM_CHECK_VALUE(cond, ...) TORCH_CHECK_VALUE(cond, __VA_ARGS__)
#define FUSED_OPTIM_CHECK_TYPE(cond, ...) TORCH_CHECK_TYPE(cond, __VA_ARGS__)
#endif

namespace api {

inline bool SameShape(const Tensor& a, const Tensor& b) { return a.sizes() == b.sizes(); }
inline std::vector<int64_t> Shape(const Tensor& x) { return {x.sizes().begin(), x.sizes().end()}; }

// The strides of a contiguous tensor of `sizes`, as empty() makes them.
inline std::vector<int64_t> ContiguousStrides(IntArrayRef sizes) {
  std::vector<int64_t> strides(sizes.size());
  for (int64_t d = static_cast<int64_t>(sizes.size()) - 1, stride = 1; d >= 0; --d) {
    strides[d] = stride;
    stride *= std::max<int64_t>(sizes[d], 1);
  }
  return strides;
}

// A fresh contiguous tensor of `like`'s shape, dtype and device.
inline Tensor EmptyLike(const Tensor& like) {
#ifdef FUSED_OPTIM_STABLE_ABI
  // Through the C shim's allocator, which calls at::empty_strided: torch::stable::empty goes
  // through the boxed dispatcher, looking aten::empty up by name and boxing its six arguments on
  // every call, and a functional op allocates three or four outputs per tensor.
  const auto sizes = like.sizes();
  const std::vector<int64_t> strides = ContiguousStrides(sizes);
  int32_t dtype = 0, device_type = 0, device_index = 0;
  STABLE_TORCH_ERROR_CODE_CHECK(aoti_torch_get_dtype(like.get(), &dtype));
  STABLE_TORCH_ERROR_CODE_CHECK(aoti_torch_get_device_type(like.get(), &device_type));
  STABLE_TORCH_ERROR_CODE_CHECK(aoti_torch_get_device_index(like.get(), &device_index));
  AtenTensorHandle out = nullptr;
  STABLE_TORCH_ERROR_CODE_CHECK(aoti_torch_empty_strided(static_cast<int64_t>(sizes.size()), sizes.data(),
                                                         strides.data(), dtype, device_type, device_index, &out));
  return Tensor(out);
#else
  return at::empty(like.sizes(), like.options().memory_format(at::MemoryFormat::Contiguous));
#endif
}

// A contiguous tensor of `sizes` over `base`'s memory from element `offset` of its storage (a
// view: nothing allocated, nothing copied; base's dtype and device).
inline Tensor ContiguousViewOf(const Tensor& base, IntArrayRef sizes, int64_t offset) {
  const std::vector<int64_t> strides = ContiguousStrides(sizes);
#ifdef FUSED_OPTIM_STABLE_ABI
  AtenTensorHandle out = nullptr;
  STABLE_TORCH_ERROR_CODE_CHECK(aoti_torch__reinterpret_tensor(base.get(), static_cast<int64_t>(sizes.size()),
                                                               sizes.data(), strides.data(), offset, &out));
  return Tensor(out);
#else
  return base.as_strided(sizes, strides, offset);
#endif
}

// A fresh vector of n elements of `dtype` on `device`.
inline Tensor EmptyVector(int64_t n, ScalarType dtype, const Device& device) {
#ifdef FUSED_OPTIM_STABLE_ABI
  // Through the C shim's allocator, as EmptyLike (a step makes several: its scratch and the
  // device passes' sums). The shim's codes of the dtypes fused-optim makes tensors of.
  int32_t code = 0;
  switch (dtype) {
    case kFloat:
      code = aoti_torch_dtype_float32();
      break;
    case kDouble:
      code = aoti_torch_dtype_float64();
      break;
    case kHalf:
      code = aoti_torch_dtype_float16();
      break;
    case kBFloat16:
      code = aoti_torch_dtype_bfloat16();
      break;
    default:
      return torch::stable::empty({n}, dtype, kStrided, device);
  }
  const int64_t stride = 1;
  const int32_t device_type = device.is_cuda() ? aoti_torch_device_type_cuda() : aoti_torch_device_type_cpu();
  AtenTensorHandle out = nullptr;
  STABLE_TORCH_ERROR_CODE_CHECK(aoti_torch_empty_strided(1, &n, &stride, code, device_type, device.index(), &out));
  return Tensor(out);
#else
  return at::empty({n}, at::TensorOptions().dtype(dtype).device(device));
#endif
}
inline Tensor EmptyDoubles(int64_t n, const Device& device) { return EmptyVector(n, kDouble, device); }

inline Tensor Contiguous(const Tensor& x) {
#ifdef FUSED_OPTIM_STABLE_ABI
  return torch::stable::contiguous(x);
#else
  return x.contiguous();
#endif
}

inline void CopyInto(const Tensor& dst, const Tensor& src) {
#ifdef FUSED_OPTIM_STABLE_ABI
  Tensor d = dst;
  torch::stable::copy_(d, src);
#else
  const_cast<Tensor&>(dst).copy_(src);
#endif
}

inline void Fill(const Tensor& x, double value) {
#ifdef FUSED_OPTIM_STABLE_ABI
  torch::stable::fill_(x, value);
#else
  const_cast<Tensor&>(x).fill_(value);
#endif
}

// A 0-d tensor of `value` in `like`'s dtype, on its device: the stable ABI's dispatcher calls take
// no Scalar argument, so ATen ops are called with such a tensor where torch takes a number.
inline Tensor Full0d(double value, const Tensor& like) {
#ifdef FUSED_OPTIM_STABLE_ABI
  return torch::stable::full({}, value, Dtype(like), kStrided, like.device());
#else
  return at::full({}, value, like.options());
#endif
}

// self - alpha * other (ATen's sub, which the stable ABI offers with its Scalar).
inline Tensor Subtract(const Tensor& self, const Tensor& other, double alpha) {
#ifdef FUSED_OPTIM_STABLE_ABI
  return torch::stable::subtract(self, other, alpha);
#else
  return at::sub(self, other, alpha);
#endif
}

// A one-element tensor's value wherever it lives (a device tensor is copied: this waits for it).
inline double Item(const Tensor& x) {
#ifdef FUSED_OPTIM_STABLE_ABI
  const Tensor host = torch::stable::to(x, kDouble, kStrided, Device(torch::headeronly::DeviceType::CPU), std::nullopt,
                                        false, false, std::nullopt);
  return *static_cast<const double*>(host.data_ptr());
#else
  return x.item<double>();
#endif
}

inline void BumpVersion(const Tensor& x) {
#ifdef FUSED_OPTIM_STABLE_ABI
  (void)x;  // the stable ABI has no version counters: fused_optim._native.boxed bumps them
#else
  x.unsafeGetTensorImpl()->bump_version();
#endif
}

// Asks the processor for a tensor's metadata ahead of its reads: its TensorImpl (PrefetchImpl),
// then, once that is in, the StorageImpl behind its data pointer (PrefetchStorage). A step of many
// small tensors reads these scattered heap objects one tensor at a time, and when it starts with
// cold caches (after a forward and backward pass) each is a chain of cache misses that the
// processor serves one after the other; asked for together, memory serves them together. No-ops
// in the stable build, whose tensors are opaque handles.
inline void PrefetchImpl(const Tensor& x) {
#if !defined(FUSED_OPTIM_STABLE_ABI) && defined(__GNUC__)
  const char* impl = reinterpret_cast<const char*>(x.unsafeGetTensorImpl());
  for (size_t b = 0; b < sizeof(c10::TensorImpl); b += 64) __builtin_prefetch(impl + b);
#else
  (void)x;
#endif
}
inline void PrefetchStorage(const Tensor& x) {
#if !defined(FUSED_OPTIM_STABLE_ABI) && defined(__GNUC__)
  __builtin_prefetch(x.unsafeGetTensorImpl()->unsafe_storage().unsafeGetStorageImpl());
#else
  (void)x;
#endif
}

// Autograd's rules for a tensor updated in place: a reason it may not be, or null. The stable
// build cannot read these attributes: fused_optim._native.boxed checks them.
inline const char* InPlaceRefusal(const Tensor& x) {
#ifdef FUSED_OPTIM_STABLE_ABI
  (void)x;
#else
  // Grad mode first: a thread-local flag, off in every optimizer step, where the tensor's autograd
  // metadata (one more heap object per parameter) is then never read.
  if (at::GradMode::is_enabled() && x.requires_grad())
    return "requires grad and grad mode is enabled; an in-place step is not differentiable: call it under "
           "torch.no_grad(), or use fused_optim.functional for a differentiable update";
  if (x.is_inference() && !c10::InferenceMode::is_enabled())
    return "is an inference tensor; an in-place update to an inference tensor outside InferenceMode is not "
           "allowed (clone() it first)";
#endif
  return nullptr;
}

// Whether this build bumps version counters (BumpVersion is not a no-op).
#ifdef FUSED_OPTIM_STABLE_ABI
inline constexpr bool kVersionCounters = false;
#else
inline constexpr bool kVersionCounters = true;
#endif
// The thread's modes that InPlaceRefusal reads (kGradMode | kInferenceMode), which a kept table
// compares with those it was kept under; always 0 in the stable build, which cannot read them.
inline constexpr int kGradMode = 1, kInferenceMode = 2;
inline int InPlaceMode() {
#ifdef FUSED_OPTIM_STABLE_ABI
  return 0;
#else
  return (at::GradMode::is_enabled() ? kGradMode : 0) | (c10::InferenceMode::is_enabled() ? kInferenceMode : 0);
#endif
}
// torch's default floating dtype (torch.get_default_dtype()).
inline ScalarType DefaultDtype() {
#ifdef FUSED_OPTIM_STABLE_ABI
  return torch::stable::empty({0}).scalar_type();
#else
  return c10::get_default_dtype_as_scalartype();
#endif
}

// An ATen op called through torch's dispatcher by its name and overload, with every argument of its
// schema in order, defaults included (int ones as int64_t, None as std::nullopt); R is what it
// returns (void for none). No Scalar arguments: the stable ABI cannot pass them (take an overload
// with a Tensor instead, see Full0d). The glue's few ATen computations (Adafactor's
// reductions) are written once on it.
template <typename R = Tensor, typename... A>
R CallAten(const char* name, const char* overload, const A&... args) {
#ifdef FUSED_OPTIM_STABLE_ABI
  std::array<StableIValue, std::max<size_t>(sizeof...(A), 1)> stack{torch::stable::detail::from(args)...};
  if (torch_call_dispatcher(name, overload, stack.data(), TORCH_ABI_VERSION) != AOTI_TORCH_SUCCESS)
    FailRuntime(Str("fused_optim: the call of ", name, " failed"));
  if constexpr (!std::is_void_v<R>) return torch::stable::detail::to<R>(stack[0]);
#else
  const c10::OperatorHandle op = c10::Dispatcher::singleton().findSchemaOrThrow(name, overload);
  std::vector<c10::IValue> stack{c10::IValue(args)...};
  op.callBoxed(stack);
  if constexpr (!std::is_void_v<R>) return stack[0].to<R>();
#endif
}

// The current CUDA stream of a device (as a cudaStream_t), from torch; defined in multi_tensor.cpp.
void* CurrentCudaStream(int device_index);

// Makes `device` current for the guard's lifetime.
#ifdef FUSED_OPTIM_STABLE_ABI
class DeviceGuard {
 public:
  explicit DeviceGuard(const Device& device) : guard_(device.index()) {}

 private:
  torch::stable::accelerator::DeviceGuard guard_;
};
#else
using DeviceGuard = c10::DeviceGuard;
#endif

}  // namespace api
}  // namespace fused_optim
