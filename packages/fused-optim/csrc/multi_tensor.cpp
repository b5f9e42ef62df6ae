// The op skeleton declared in multi_tensor.h: argument checks, staging, the aliasing check and the
// step counters.
#include "multi_tensor.h"

#include <dlfcn.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <numeric>
#include <optional>
#include <ranges>
#include <string>
#include <type_traits>
#include <utility>

namespace fused_optim {
namespace {

DType ToDType(ScalarType t) {
  switch (t) {
    case api::kFloat:
      return DType::kFloat;
    case api::kDouble:
      return DType::kDouble;
    case api::kHalf:
      return DType::kHalf;
    case api::kBFloat16:
      return DType::kBFloat16;
    default:
      FUSED_OPTIM_CHECK_TYPE(false, "unsupported dtype ", t);
  }
}

DType ToStateDType(ScalarType t) {
  if (t == api::kLong) return DType::kLong;
  if (t == api::kInt) return DType::kInt;
  return ToDType(t);
}

bool IsSupportedFloating(ScalarType t) {
  return t == api::kFloat || t == api::kDouble || t == api::kHalf || t == api::kBFloat16;
}

// Whether two dimensions' elements ever share memory: an expanded (stride-0) dimension of more than
// one element. (The sweep in CheckNoAliasing finds the cross-tensor overlaps.)
bool HasInternalOverlap(const Tensor& x) {
  for (int64_t d = 0; d < x.dim(); ++d)
    if (x.size(d) > 1 && x.stride(d) == 0) return true;
  return false;
}

// The byte range [lo, hi) a non-empty strided tensor spans.
std::pair<std::uintptr_t, std::uintptr_t> ByteRange(const Tensor& x) {
  int64_t last = 0;
  for (int64_t d = 0; d < x.dim(); ++d) last += (x.size(d) - 1) * x.stride(d);
  const auto lo = reinterpret_cast<std::uintptr_t>(x.const_data_ptr());
  return {lo, lo + static_cast<std::uintptr_t>((last + 1) * static_cast<int64_t>(x.element_size()))};
}

// Whether two tensors whose byte ranges intersect have an element in common. Two contiguous
// tensors then do; strided views (interleaved views of one buffer) are settled exactly by marking
// the elements of one on a scratch mask over the shared range; views at a misaligned offset or of
// different element sizes count as overlapping. Only addresses are computed: nothing is read.
bool ElementsOverlap(const Tensor& a, const Tensor& b) {
  if (a.is_contiguous() && b.is_contiguous()) return true;
  const auto [a_lo, a_hi] = ByteRange(a);
  const auto [b_lo, b_hi] = ByteRange(b);
  const auto item = static_cast<std::uintptr_t>(a.element_size());
  const std::uintptr_t lo = std::min(a_lo, b_lo);
  if (b.element_size() != a.element_size() || (a_lo - lo) % item != 0 || (b_lo - lo) % item != 0) return true;
  std::vector<bool> mask((std::max(a_hi, b_hi) - lo + item - 1) / item, false);
  // Visits the element offsets (in items, from lo) of x, stopping where visit returns true.
  const auto visit = [&](const Tensor& x, std::uintptr_t x_lo, auto&& f) {
    const int64_t dims = x.dim();
    std::vector<int64_t> index(dims, 0);
    int64_t offset = static_cast<int64_t>((x_lo - lo) / item);
    for (int64_t n = 0; n < x.numel(); ++n) {
      if (f(offset)) return true;
      for (int64_t d = dims - 1; d >= 0; --d) {  // odometer step
        if (++index[d] < x.size(d)) {
          offset += x.stride(d);
          break;
        }
        offset -= (x.size(d) - 1) * x.stride(d);
        index[d] = 0;
      }
    }
    return false;
  };
  visit(a, a_lo, [&](int64_t i) { return mask[i] = true, false; });
  return visit(b, b_lo, [&](int64_t i) { return static_cast<bool>(mask[i]); });
}

}  // namespace

void CheckWritable(const char* op, const char* name, int64_t t, const Tensor& x) {
  const char* refusal = api::InPlaceRefusal(x);
  FUSED_OPTIM_CHECK(refusal == nullptr, op, ": ", name, "[", t, "] ", refusal);
  FUSED_OPTIM_CHECK_VALUE(!HasInternalOverlap(x), op, ": ", name, "[", t,
                          "] has elements that share memory (an expanded or stride-0 view); an updated tensor "
                          "needs one memory location per element: clone() it first");
}

MultiTensorCall::MultiTensorCall(const char* op, TensorList params, bool in_place, Checks checks)
    : op_(op),
      num_tensors_(static_cast<int64_t>(params.size())),
      dtype_(api::kFloat),
      device_(torch::headeronly::DeviceType::CPU),
      checked_(checks == Checks::kDone),
      reference_(params),
      in_place_(in_place) {
  if (checked_ && num_tensors_ > 0) {
    dtype_ = api::Dtype(params[0]);
    device_ = params[0].device();
  }
  for (int64_t t = 0; t < (checked_ ? 0 : num_tensors_); ++t) {
    const Tensor& p = params[t];
    FUSED_OPTIM_CHECK_VALUE(p.defined(), op_, ": params[", t, "] is None");
    FUSED_OPTIM_CHECK_VALUE(p.layout() == api::kStrided, op_, ": params[", t, "] has layout ", p.layout(),
                            "; only dense (strided) tensors are supported");
    FUSED_OPTIM_CHECK_TYPE(!api::IsComplex(api::Dtype(p)), op_, ": params[", t, "] is complex (", api::Dtype(p),
                           "); pass torch.view_as_real(...) of it and of its gradient and state");
    FUSED_OPTIM_CHECK_TYPE(IsSupportedFloating(api::Dtype(p)), op_, ": params[", t, "] has dtype ", api::Dtype(p),
                           "; expected float32, float64, float16 or bfloat16");
    if (t == 0) {
      dtype_ = api::Dtype(p);
      device_ = p.device();
    }
    FUSED_OPTIM_CHECK_TYPE(api::Dtype(p) == dtype_, op_, ": mixed dtypes in one call: params[0] is ", dtype_,
                           " but params[", t, "] is ", api::Dtype(p), "; group tensors by dtype");
    FUSED_OPTIM_CHECK_VALUE(p.device() == device_, op_, ": mixed devices in one call: params[0] is on ", device_,
                            " but params[", t, "] is on ", p.device());
  }
  FUSED_OPTIM_CHECK(device_.is_cpu() || device_.is_cuda(), op_, ": params are on ", device_,
                    "; fused_optim has CPU and CUDA kernels only");
#ifndef FUSED_OPTIM_WITH_CUDA
  FUSED_OPTIM_CHECK(!device_.is_cuda(), op_,
                    ": params are on CUDA, but this build of fused_optim has no CUDA kernels (it was built with "
                    "FUSED_OPTIM_CUDA=OFF, or without nvcc; fused_optim.BUILD_INFO['cuda'])");
#endif
}

void MultiTensorCall::CheckLike(const char* name, int64_t t, const Tensor& x) const {
  if (checked_) return;  // (Checks::kDone)
  FUSED_OPTIM_CHECK_VALUE(x.defined(), op_, ": ", name, "[", t, "] is None");
  FUSED_OPTIM_CHECK_VALUE(x.layout() == api::kStrided, op_, ": ", name, "[", t, "] has layout ", x.layout(),
                          "; sparse gradients and states are not supported");
  FUSED_OPTIM_CHECK_TYPE(!api::IsComplex(api::Dtype(x)) || api::IsComplex(api::Dtype(reference_[t])), op_, ": ", name,
                         "[", t, "] is complex but params[", t, "] is not");
  FUSED_OPTIM_CHECK_TYPE(api::Dtype(x) == dtype_, op_, ": ", name, "[", t, "] has dtype ", api::Dtype(x),
                         " but params are ", dtype_);
  FUSED_OPTIM_CHECK_VALUE(x.device() == device_, op_, ": ", name, "[", t, "] is on ", x.device(), " but params are on ",
                          device_);
  FUSED_OPTIM_CHECK_VALUE(api::SameShape(x, reference_[t]), op_, ": ", name, "[", t, "] has shape ", x.sizes(),
                          " but params[", t, "] has shape ", reference_[t].sizes());
}

namespace {
// A read-only column (AddInput, AddOptionalInput, AddHostValues): the kernel reads `src`, and its
// dst is the same pointer, as KernelTable says of read-only inputs.
void PushReadOnly(std::vector<std::vector<const void*>>& src_columns, std::vector<std::vector<void*>>& dst_columns,
                  std::vector<const void*> src) {
  std::vector<void*>& dst = dst_columns.emplace_back(src.size(), nullptr);
  for (size_t t = 0; t < src.size(); ++t) dst[t] = const_cast<void*>(src[t]);
  src_columns.push_back(std::move(src));
}

// Consecutive places in a flat buffer: place t holds counts[t] elements and starts at a multiple of
// `align` elements (1: packed). Each place's element offset, and the buffer's length in elements.
struct Places {
  std::vector<int64_t> offsets;
  int64_t total = 0;
};
template <typename Counts>
Places PlacesOf(const Counts& counts, int64_t align = 1) {
  Places places;
  for (const int64_t count : counts) {
    places.offsets.push_back(places.total);
    places.total += (count + align - 1) / align * align;
  }
  return places;
}

// Pointers to `places` in a buffer at `base` of `element_size`-byte elements (P: void* or const
// void*; all null for an empty buffer). An empty place's pointer is where the next would start.
template <typename P>
std::vector<P> PointersTo(P base, int64_t element_size, const Places& places) {
  using Byte = std::conditional_t<std::is_const_v<std::remove_pointer_t<P>>, const char, char>;
  std::vector<P> pointers;
  pointers.reserve(places.offsets.size());
  for (const int64_t offset : places.offsets) {
    pointers.push_back(base == nullptr ? nullptr : static_cast<Byte*>(base) + offset * element_size);
  }
  return pointers;
}

// Each tensor's element count.
auto NumelsOf(TensorList list) {
  return list | std::views::transform([](const Tensor& x) { return x.numel(); });
}
}  // namespace

void MultiTensorCall::AddInput(const char* name, TensorList list) {
  FUSED_OPTIM_CHECK_VALUE(static_cast<int64_t>(list.size()) == num_tensors_, op_, ": ", name, " has ", list.size(),
                          " tensors but params has ", num_tensors_);
  std::vector<const void*> src(num_tensors_);
  for (int64_t t = 0; t < num_tensors_; ++t) {
    const Tensor& x = list[t];
    CheckLike(name, t, x);
    Record(name, t, x, /*writes=*/false);
    src[t] = ReadPointer(x);
  }
  PushReadOnly(src_, dst_, std::move(src));
}

const void* MultiTensorCall::ReadPointer(const Tensor& x) {
  if (x.is_contiguous()) return x.const_data_ptr();
  keep_alive_.push_back(api::Contiguous(x));
  return keep_alive_.back().const_data_ptr();
}

void MultiTensorCall::AddMutable(const char* name, TensorList list) {
  FUSED_OPTIM_CHECK_VALUE(static_cast<int64_t>(list.size()) == num_tensors_, op_, ": ", name, " has ", list.size(),
                          " tensors but params has ", num_tensors_);
  std::vector<void*> dst(num_tensors_);
  for (int64_t t = 0; t < num_tensors_; ++t) {
    const Tensor& x = list[t];
    CheckLike(name, t, x);
    if (!checked_) CheckWritable(op_, name, t, x);
    Record(name, t, x, /*writes=*/true);
    if (x.is_contiguous()) {
      dst[t] = x.numel() ? x.mutable_data_ptr() : nullptr;
    } else {
      Tensor staged = api::Contiguous(x);
      dst[t] = staged.mutable_data_ptr();
      staged_.emplace_back(std::move(staged), x);
    }
  }
  src_.emplace_back(dst.begin(), dst.end());
  dst_.push_back(std::move(dst));
}

void MultiTensorCall::AddOptionalInput(const char* name, const OptionalTensorList& list) {
  const int64_t n = static_cast<int64_t>(list.size());
  FUSED_OPTIM_CHECK_VALUE(n == 0 || n == num_tensors_, op_, ": ", name, " has ", n, " entries but params has ",
                          num_tensors_, " (pass an empty list for all zeros)");
  std::vector<const void*> src(num_tensors_, nullptr);
  for (int64_t t = 0; t < n; ++t) {
    std::optional<Tensor> x = list[t];
    if (!x.has_value() || !x->defined()) continue;
    CheckLike(name, t, *x);
    owned_.push_back(std::move(*x));
    const Tensor& kept = owned_.back();
    Record(name, t, kept, /*writes=*/false);
    src[t] = ReadPointer(kept);
  }
  PushReadOnly(src_, dst_, std::move(src));
}

void MultiTensorCall::AddAbsent() {
  src_.emplace_back(num_tensors_, nullptr);
  dst_.emplace_back(num_tensors_, nullptr);
}

void MultiTensorCall::AddHostValues(std::span<const double> values) {
  FUSED_OPTIM_CHECK(on_cpu_loops(), op_, ": host values for a call the CPU loops do not run (a fused-optim bug)");
  const Places places = PlacesOf(NumelsOf(reference_));
  FUSED_OPTIM_CHECK(static_cast<int64_t>(values.size()) == places.total, op_, ": ", values.size(), " host values for ",
                    places.total, " elements (a fused-optim bug)");
  std::vector<double>& buffer = host_values_.emplace_back(values.size());  // 8 bytes a value: room for any dtype
  const int64_t size = num_tensors_ > 0 ? reference_[0].element_size() : 0;
  char* out = reinterpret_cast<char*>(buffer.data());
  for (size_t i = 0; i < values.size(); ++i) WriteHostScalarAt(dtype_, out + i * size, values[i]);
  PushReadOnly(src_, dst_, PointersTo<const void*>(buffer.data(), size, places));
}

void MultiTensorCall::AddDeviceValues(const Tensor& values) {
  const Places places = PlacesOf(NumelsOf(reference_));
  FUSED_OPTIM_CHECK(values.is_contiguous() && values.numel() == places.total && values.device() == device_ &&
                        api::Dtype(values) == dtype_,
                    op_, ": device values are not ", places.total, " contiguous values of the call's dtype on ",
                    device_, " (a fused-optim bug)");
  PushReadOnly(src_, dst_, PointersTo(values.const_data_ptr(), values.element_size(), places));
}

namespace {
// A contiguous tensor of 2+ dimensions on `device` (the list's, one dtype), as a batch of
// matrices: appends (batch, rows, columns) to `dims` (the matrix passes' layout, csrc/kernels.h).
// `contiguous`: x's own data is read (not only its shape).
void AppendMatrixDims(const char* what, const Tensor& x, const Tensor& first, std::vector<int64_t>& dims,
                      bool contiguous = true) {
  FUSED_OPTIM_CHECK(x.dim() >= 2 && (!contiguous || x.is_contiguous()) && x.device() == first.device() &&
                        api::Dtype(x) == api::Dtype(first),
                    what, " takes contiguous matrices of one dtype on one device (a fused-optim bug)");
  int64_t batch = 1;  // (not numel / (r c): a matrix may be empty)
  for (int64_t d = 0; d + 2 < x.dim(); ++d) batch *= x.size(d);
  dims.insert(dims.end(), {batch, x.size(-2), x.size(-1)});
}

// A list of contiguous batches of matrices of one dtype on one device, as the matrix passes take
// it (csrc/kernels.h): each tensor's data and (batch, rows, columns), and how many rows and
// columns its matrices have in all.
struct Matrices {
  std::vector<const void*> data;
  std::vector<int64_t> dims, rows, cols;
};
Matrices MatricesOf(const char* what, TensorList list) {
  Matrices m;
  for (const Tensor& x : list) {
    AppendMatrixDims(what, x, list[0], m.dims);
    const int64_t* d = m.dims.data() + m.dims.size() - 3;
    m.data.push_back(x.const_data_ptr());
    m.rows.push_back(d[0] * d[1]);
    m.cols.push_back(d[0] * d[2]);
  }
  return m;
}
}  // namespace

std::vector<int64_t> MatrixDimsOf(TensorList list) {
  std::vector<int64_t> dims;
  for (const Tensor& x : list) AppendMatrixDims("MatrixDimsOf", x, list[0], dims, /*contiguous=*/false);
  return dims;
}

RowAndColumnSums SquaresAlongRowsAndColumns(TensorList list) {
  RowAndColumnSums sums;
  if (list.empty()) return sums;
  FUSED_OPTIM_CHECK(MultiTensorCall::RunsOnCpuLoops(list[0].device()),
                    "SquaresAlongRowsAndColumns reads matrices the CPU loops read (a fused-optim bug)");
  Matrices m = MatricesOf("SquaresAlongRowsAndColumns", list);
  sums.rows.resize(std::reduce(m.rows.begin(), m.rows.end(), int64_t{0}));  // (packed: no offsets needed)
  sums.cols.resize(std::reduce(m.cols.begin(), m.cols.end(), int64_t{0}));
  WidestCpuBuild(&cpu::SquaresAlongRowsAndColumns, FUSED_OPTIM_CPU_WIDE_KERNELS(SquaresAlongRowsAndColumns))(
      ToDType(api::Dtype(list[0])), static_cast<int64_t>(list.size()), m.data.data(), m.dims.data(), sums.rows.data(),
      sums.cols.data());
  sums.dims = std::move(m.dims);
  return sums;
}

RowAndColumnNorms NormsAlongRowsAndColumns(TensorList list) {
  FUSED_OPTIM_CHECK(!list.empty() && !MultiTensorCall::RunsOnCpuLoops(list[0].device()),
                    "NormsAlongRowsAndColumns reads matrices the CUDA kernels read (a fused-optim bug)");
  const Device device = list[0].device();
  Matrices m = MatricesOf("NormsAlongRowsAndColumns", list);
  const ScalarType dtype = api::Dtype(list[0]);
  const Places rows = PlacesOf(m.rows), cols = PlacesOf(m.cols);
  RowAndColumnNorms norms{api::EmptyVector(rows.total + cols.total, dtype, device), {}};
  const int64_t size = norms.norms.element_size();
  char* first_row = static_cast<char*>(norms.norms.mutable_data_ptr());
  const std::vector<void*> row_out = PointersTo<void*>(first_row, size, rows);
  const std::vector<void*> col_out = PointersTo<void*>(first_row + rows.total * size, size, cols);
  const int64_t n = static_cast<int64_t>(list.size());
  const Tensor partials =
      api::EmptyDoubles(std::max<int64_t>(cuda_emulation::ColumnPartials(n, m.dims.data()), 1), device);
  double* scratch = static_cast<double*>(partials.mutable_data_ptr());
  const auto run = [&](auto reduction, void* stream) {
    reduction(ToDType(dtype), n, m.data.data(), m.dims.data(), row_out.data(), col_out.data(), scratch, stream);
  };
  RunOnDevice(
      device, [&](void* stream) { run(&cuda::NormsAlongRowsAndColumns, stream); },
      [&] { run(&cuda_emulation::NormsAlongRowsAndColumns, nullptr); });
  norms.dims = std::move(m.dims);
  return norms;  // (partials freed on the host now; the caching allocator reuses them in stream order)
}

void ProductsOfRowsAndColumns(TensorList rows, TensorList cols, TensorList like, std::span<const int64_t> dims,
                              std::span<void* const> out) {
  if (like.empty()) return;
  FUSED_OPTIM_CHECK(rows.size() == like.size() && cols.size() == like.size() && out.size() == like.size() &&
                        dims.size() == 3 * like.size(),
                    "ProductsOfRowsAndColumns takes one row and column average, output and (batch, rows, columns) "
                    "per matrix (a fused-optim bug)");
  std::vector<const void*> row_data, col_data;
  const Device device = like[0].device();
  for (size_t t = 0; t < like.size(); ++t) {
    FUSED_OPTIM_CHECK(rows[t].is_contiguous() && cols[t].is_contiguous() && rows[t].device() == device &&
                          cols[t].device() == device && rows[t].numel() == dims[3 * t] * dims[3 * t + 1] &&
                          cols[t].numel() == dims[3 * t] * dims[3 * t + 2],
                      "ProductsOfRowsAndColumns takes contiguous row and column averages of out's matrices (a "
                      "fused-optim bug)");
    row_data.push_back(rows[t].const_data_ptr());
    col_data.push_back(cols[t].const_data_ptr());
  }
  const DType dtype = ToDType(api::Dtype(like[0]));
  const int64_t n = static_cast<int64_t>(like.size());
  if (MultiTensorCall::RunsOnCpuLoops(device)) {
    WidestCpuBuild(&cpu::ProductsOfRowsAndColumns, FUSED_OPTIM_CPU_WIDE_KERNELS(ProductsOfRowsAndColumns))(
        dtype, n, row_data.data(), col_data.data(), out.data(), dims.data());
    return;
  }
  const auto run = [&](auto products, void* stream) {
    products(dtype, n, row_data.data(), col_data.data(), out.data(), dims.data(), stream);
  };
  RunOnDevice(
      device, [&](void* stream) { run(&cuda::ProductsOfRowsAndColumns, stream); },
      [&] { run(&cuda_emulation::ProductsOfRowsAndColumns, nullptr); });
}

Scratch MultiTensorCall::AddScratch() {
  constexpr int64_t kAlignBytes = 64;
  const int64_t size = num_tensors_ > 0 ? reference_[0].element_size() : 1;
  Places places = PlacesOf(NumelsOf(reference_), kAlignBytes / size);
  Scratch scratch;
  scratch.buffer = api::EmptyVector(std::max<int64_t>(places.total, 1), dtype_, device_);
  scratch.data = PointersTo(scratch.buffer.mutable_data_ptr(), size, places);
  scratch.offsets = std::move(places.offsets);
  AddScratch(scratch);
  return scratch;
}

void MultiTensorCall::AddScratch(const Scratch& scratch) {
  FUSED_OPTIM_CHECK(static_cast<int64_t>(scratch.data.size()) == num_tensors_ && api::Dtype(scratch.buffer) == dtype_ &&
                        scratch.buffer.device() == device_,
                    op_, ": scratch made for another call's tensors (a fused-optim bug)");
  src_.emplace_back(scratch.data.begin(), scratch.data.end());
  dst_.push_back(scratch.data);
}

Scratch MultiTensorCall::AddScratchFrom(const char* name, TensorList source) {
  AddInput(name, source);
  std::vector<const void*> from = std::move(src_.back());
  src_.pop_back();
  dst_.pop_back();
  Scratch scratch = AddScratch();
  src_.back() = std::move(from);  // read from source, written to the scratch
  return scratch;
}

std::vector<Tensor> MultiTensorCall::AddOutputFrom(const char* name, TensorList source) {
  AddInput(name, source);
  std::vector<Tensor> out;
  out.reserve(num_tensors_);
  for (int64_t t = 0; t < num_tensors_; ++t) {
    out.push_back(api::EmptyLike(reference_[t]));
    dst_.back()[t] = out.back().mutable_data_ptr();
  }
  return out;
}

void MultiTensorCall::CheckEmpty(const char* name, TensorList list, const char* when_absent) const {
  FUSED_OPTIM_CHECK_VALUE(list.empty(), op_, ": ", name, " must be empty ", when_absent);
}

void MultiTensorCall::AddInputIf(bool present, const char* name, TensorList list, const char* when_absent) {
  if (present) return AddInput(name, list);
  CheckEmpty(name, list, when_absent);
  AddAbsent();
}

std::vector<Tensor> MultiTensorCall::AddOutputIf(bool present) {
  if (present) return AddOutput();
  AddAbsent();
  return {};
}

std::vector<Tensor> MultiTensorCall::AddState(const char* name, TensorList list) {
  if (!in_place_) return AddOutputFrom(name, list);
  AddMutable(name, list);
  return {};
}

std::vector<Tensor> MultiTensorCall::AddStateIf(bool present, const char* name, TensorList list,
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

std::vector<Tensor> MultiTensorCall::AddOutput() {
  std::vector<Tensor> out;
  out.reserve(num_tensors_);
  std::vector<void*> dst(num_tensors_);
  for (int64_t t = 0; t < num_tensors_; ++t) {
    out.push_back(api::EmptyLike(reference_[t]));
    dst[t] = out.back().mutable_data_ptr();
  }
  src_.emplace_back(num_tensors_, nullptr);
  dst_.push_back(std::move(dst));
  return out;
}

void MultiTensorCall::AddGrads(TensorList grads) {
  grad_col_ = static_cast<int>(dst_.size());
  if (grad_scale_ != nullptr) {
    AddMutable("grads", grads);
  } else {
    AddInput("grads", grads);
  }
}

const Tensor* CheckAmpArgument(const char* op, const char* name, const std::optional<Tensor>& x, const Device& device,
                               int64_t num_tensors) {
  if (!x.has_value() || !x->defined()) return nullptr;
  FUSED_OPTIM_CHECK_VALUE(x->layout() == api::kStrided && x->numel() == 1, op, ": ", name,
                          " must be a dense one-element tensor (torch.amp.GradScaler's), got shape ", x->sizes());
  FUSED_OPTIM_CHECK_TYPE(api::Dtype(*x) == api::kFloat, op, ": ", name, " has dtype ", api::Dtype(*x),
                         "; expected float32");
  FUSED_OPTIM_CHECK_VALUE(num_tensors == 0 || x->device() == device, op, ": ", name, " is on ", x->device(),
                          " but params are on ", device, " (move it with .to(params[0].device))");
  return &*x;
}

KeptFit FitKept(const char* op, std::span<const TensorList> lists, TensorList params, TensorList grads, const Amp& amp,
                bool capturable) {
  KeptFit fit{kept::Current()};
  fit.unchanged = fit.table != nullptr && fit.table->Unchanged(lists, capturable);
  if (!fit.unchanged) return fit;
  const int64_t n = static_cast<int64_t>(params.size());
  fit.grad_scale = CheckAmpArgument(op, "grad_scale", amp.grad_scale, fit.table->device(), n);
  fit.found_inf = CheckAmpArgument(op, "found_inf", amp.found_inf, fit.table->device(), n);
  fit.fits = fit.table->Fits(params, grads, fit.grad_scale, fit.found_inf);
  return fit;
}

void MultiTensorCall::SetAmp(const Amp& amp) {
  grad_scale_ = CheckAmpArgument(op_, "grad_scale", amp.grad_scale, device_, num_tensors_);
  found_inf_ = CheckAmpArgument(op_, "found_inf", amp.found_inf, device_, num_tensors_);
  // no list written in place may overlap them
  if (grad_scale_ != nullptr) Record("grad_scale", 0, *grad_scale_, /*writes=*/false);
  if (found_inf_ != nullptr) Record("found_inf", 0, *found_inf_, /*writes=*/false);
}

bool SkipsStep(const Tensor* found_inf, bool host_needs_answer) {
  if (found_inf == nullptr) return false;
  if (found_inf->is_cpu()) return *found_inf->const_data_ptr<float>() != 0.0f;
  return host_needs_answer && api::Item(*found_inf) != 0.0;
}

void MultiTensorCall::Record(const char* name, int64_t t, const Tensor& x, bool writes) {
  if (x.numel() > 0) arguments_.push_back({name, t, &x, writes});
}

void MultiTensorCall::CheckOverlapOf(const char* name, TensorList list, bool writes) {
  for (size_t t = 0; t < list.size(); ++t) {
    if (list[t].defined()) Record(name, static_cast<int64_t>(t), list[t], writes);
  }
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
      FUSED_OPTIM_CHECK_VALUE(
          !(first.list == second.list && first.tensor->const_data_ptr() == second.tensor->const_data_ptr()), op_,
          ": the same tensor appears twice in ", first.list, " (at ", first.index, " and ", second.index,
          "), a list that is updated in place");
      FUSED_OPTIM_CHECK_VALUE(false, op_, ": ", first.list, "[", first.index, "] shares memory with ", second.list, "[",
                              second.index,
                              "]; a tensor updated in place must not overlap any other argument (clone() "
                              "one of them)");
    }
    open.push_back(s);
  }
}

KernelTable& MultiTensorCall::Table() {
  if (table_) return *table_;
  if (!checked_) CheckNoAliasing();
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
    table.advance_steps = advance_device_steps_;
    for (int64_t t = 0; t < num_tensors_; ++t) {
      const Tensor& s = (*device_steps_)[t];
      table.steps[t] = {s.mutable_data_ptr(), ToStateDType(api::Dtype(s))};
    }
  }
  return table;
}

void MultiTensorCall::UseDeviceSteps(TensorList steps, int num_scalars, bool advance) {
  FUSED_OPTIM_CHECK(!table_, op_, ": UseDeviceSteps after the table was built (a fused-optim bug)");
  for (int64_t t = 0; t < num_tensors_; ++t) {
    const Tensor& s = steps[t];
    FUSED_OPTIM_CHECK_VALUE(s.device() == device_, op_,
                            ": capturable=True needs every step counter on the params' device, but ", "state_steps[", t,
                            "] is on ", s.device(), " and params on ", device_,
                            " (a state loaded or made with capturable=False: move it with .to(param.device))");
    Record("state_steps", t, s, /*writes=*/advance);
  }
  device_steps_ = steps;
  device_step_scalars_ = num_scalars;
  advance_device_steps_ = advance;
}

namespace {
// A one-element state tensor's value on the host: through its data pointer on the CPU, else item().
double ReadStateScalar(const Tensor& s) {
  const std::optional<double> value = ReadHostScalar(s);
  return value ? *value : api::Item(s);
}
}  // namespace

void MultiTensorCall::SetStateScalars(std::span<const TensorList> lists) {
  KernelTable& table = Table();
  state_lists_.assign(lists.begin(), lists.end());
  table.num_state = static_cast<int>(lists.size());
  table.state.resize(num_tensors_ * table.num_state);
  table.advance_state = true;
  table.default_dtype = ToDType(api::DefaultDtype());
  for (int64_t t = 0; t < num_tensors_; ++t) {
    StateScalar* state = table.state.data() + t * table.num_state;
    bool off_device = false;
    for (int k = 0; k < table.num_state; ++k) {
      const Tensor& s = state_lists_[k][t];
      state[k].dtype = ToStateDType(api::Dtype(s));
      if (s.device() == device_ && (StateScalarsOnHost() >> k & 1) == 0) {
        state[k].ptr = s.mutable_data_ptr();
      } else {  // on another device than the parameters': read now
        state[k].value = ReadStateScalar(s);
        off_device = true;
      }
    }
    // The host's share of Advance (FinishStateScalars) starts from the same values as the
    // kernel's, which may have advanced those on the device by then: read them now too (a state
    // split across devices; a read of one on a GPU waits for it).
    for (int k = 0; off_device && k < table.num_state; ++k) {
      if (state[k].ptr != nullptr) state[k].value = ReadStateScalar(state_lists_[k][t]);
    }
  }
}

void MultiTensorCall::SetStateInputs(std::initializer_list<StateInput> columns) {
  KernelTable& table = Table();
  table.num_state = static_cast<int>(columns.size());
  table.state.assign(num_tensors_ * table.num_state, StateScalar{});
  table.advance_state = false;
  table.default_dtype = ToDType(api::DefaultDtype());
  int k = 0;
  for (const StateInput& column : columns) {
    if (column.sums != nullptr) {  // DeviceSums' doubles, read where they are
      const Tensor& sums = *column.sums;
      FUSED_OPTIM_CHECK(column.index >= 0 && sums.numel() >= (column.index + 1) * num_tensors_ &&
                            sums.device() == device_ && api::Dtype(sums) == api::kDouble && sums.is_contiguous(),
                        op_, ": a state input column of sums is not one double per tensor on ", device_);
      double* data = static_cast<double*>(sums.mutable_data_ptr()) + column.index * num_tensors_;
      for (int64_t t = 0; t < num_tensors_; ++t) table.state[t * table.num_state + k].ptr = data + t;
      ++k;
      continue;
    }
    FUSED_OPTIM_CHECK(static_cast<int64_t>(column.values.size()) == num_tensors_, op_,
                      ": a state input column has the wrong length (a fused-optim bug)");
    for (int64_t t = 0; t < num_tensors_; ++t) table.state[t * table.num_state + k].value = column.values[t];
    ++k;
  }
}

std::vector<double> MultiTensorCall::SumsOfProducts(int a, int b) {
  FUSED_OPTIM_CHECK(on_cpu_loops(), op_, ": a host reduction of a call the CPU loops do not run (a fused-optim bug)");
  const KernelTable& table = Table();
  std::vector<double> sums(static_cast<size_t>(num_tensors_));
  if (num_tensors_ > 0) {
    WidestCpuBuild(&cpu::SumsOfProducts, FUSED_OPTIM_CPU_WIDE_KERNELS(SumsOfProducts))(table, a, b, sums.data());
  }
  return sums;
}

std::vector<double> MultiTensorCall::Norms(int column) {
  std::vector<double> norms = SumsOfProducts(column, column);
  const DType dtype = Table().dtype;
  for (double& norm : norms) norm = RoundTo<c10::Half, c10::BFloat16>(dtype, std::sqrt(norm));
  return norms;
}

Tensor MultiTensorCall::DeviceSums(std::span<const DeviceSumOf> of) {
  FUSED_OPTIM_CHECK(!on_cpu_loops(), op_, ": a device reduction of a call the CPU loops run (a fused-optim bug)");
  KernelTable& table = Table();
  const int num_sums = static_cast<int>(of.size());
  Tensor sums = api::EmptyDoubles(num_tensors_ * num_sums, device_);
  if (num_tensors_ == 0 || num_sums == 0) return sums;
  const Tensor partials =
      api::EmptyDoubles(std::max<int64_t>(cuda_emulation::NumPartials(table, num_sums), 1), device_);
  double* partial_data = static_cast<double*>(partials.mutable_data_ptr());
  double* sum_data = static_cast<double*>(sums.mutable_data_ptr());
  RunOnDevice(
      device_,
      [&](void* stream) {
        table.stream = stream;
        cuda::SumsOfProducts(table, of.data(), num_sums, partial_data, sum_data);
      },
      [&] { cuda_emulation::SumsOfProducts(table, of.data(), num_sums, partial_data, sum_data); });
  return sums;  // (partials freed on the host now; the caching allocator reuses them in stream order)
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
  for (auto& [staged, original] : staged_) api::CopyInto(original, staged);
  staged_.clear();
  // Writes through data pointers bypass the dispatcher, so tell autograd about them as torch's
  // in-place ops do: a graph that saved one of these tensors then refuses to run backward.
  for (const Argument& a : arguments_)
    if (a.writes) api::BumpVersion(*a.tensor);
}

namespace {

// f(p) with p the data pointer `data` typed by `dtype`, for the dtypes of ReadHostScalar; false
// for any other dtype (f not called).
template <typename F>
bool VisitHostScalar(ScalarType dtype, void* data, F&& f) {
  switch (dtype) {
    case api::kFloat:
      return f(static_cast<float*>(data)), true;
    case api::kDouble:
      return f(static_cast<double*>(data)), true;
    case api::kHalf:
      return f(static_cast<c10::Half*>(data)), true;
    case api::kBFloat16:
      return f(static_cast<c10::BFloat16*>(data)), true;
    case api::kLong:
      return f(static_cast<int64_t*>(data)), true;
    case api::kInt:
      return f(static_cast<int32_t*>(data)), true;
    default:
      return false;
  }
}

// float16 and bfloat16 convert through float (c10's own conversions), the others directly.
template <typename S>
constexpr bool kViaFloat = !std::is_floating_point_v<S> && !std::is_integral_v<S>;

}  // namespace

std::optional<double> ReadHostScalar(const Tensor& s) {
  if (!s.is_cpu()) return std::nullopt;
  return ReadHostScalarAt(api::Dtype(s), s.const_data_ptr());
}

std::optional<double> WriteHostScalar(const Tensor& s, double value) {
  if (!s.is_cpu()) return std::nullopt;
  const std::optional<double> stored = WriteHostScalarAt(api::Dtype(s), s.mutable_data_ptr(), value);
  if (stored) api::BumpVersion(s);
  return stored;
}

std::optional<double> ReadHostScalarAt(ScalarType dtype, const void* data) {
  double value = 0.0;
  const bool read = VisitHostScalar(dtype, const_cast<void*>(data), [&](const auto* p) {
    using S = std::remove_cv_t<std::remove_pointer_t<decltype(p)>>;
    if constexpr (kViaFloat<S>) {
      value = static_cast<double>(static_cast<float>(*p));
    } else {
      value = static_cast<double>(*p);
    }
  });
  return read ? std::optional<double>(value) : std::nullopt;
}

std::optional<double> WriteHostScalarAt(ScalarType dtype, void* data, double value) {
  double stored = 0.0;
  const bool written = VisitHostScalar(dtype, data, [&](auto* p) {
    using S = std::remove_pointer_t<decltype(p)>;
    if constexpr (kViaFloat<S>) {
      *p = static_cast<S>(static_cast<float>(value));
      stored = static_cast<double>(static_cast<float>(*p));
    } else {
      *p = static_cast<S>(value);
      stored = static_cast<double>(*p);
    }
  });
  return written ? std::optional<double>(stored) : std::nullopt;
}

void CheckStepTensors(const char* op, TensorList steps, int64_t n) {
  FUSED_OPTIM_CHECK_VALUE(static_cast<int64_t>(steps.size()) == n, op, ": state_steps has ", steps.size(),
                          " tensors but params has ", n);
  std::vector<const void*> seen;
  seen.reserve(n);
  for (int64_t t = 0; t < n; ++t) {
    const Tensor& s = steps[t];
    FUSED_OPTIM_CHECK_VALUE(s.defined() && s.layout() == api::kStrided && s.numel() == 1, op, ": state_steps[", t,
                            "] must be a dense one-element tensor");
    FUSED_OPTIM_CHECK_TYPE(
        IsSupportedFloating(api::Dtype(s)) || api::Dtype(s) == api::kLong || api::Dtype(s) == api::kInt, op,
        ": state_steps[", t, "] has dtype ", api::Dtype(s),
        "; a step counter must be float32, float64, float16, bfloat16, int64 or int32");
    CheckWritable(op, "state_steps", t, s);
    // Read through the data pointer on the CPU. A counter on a device is not read here: that
    // would wait for the device on every step.
    if (const std::optional<double> value = ReadHostScalar(s)) {
      const char* problem = StepCountProblem(api::Dtype(s), *value);
      FUSED_OPTIM_CHECK_VALUE(problem == nullptr, op, ": state_steps[", t, "] is ", *value, problem);
    }
    seen.push_back(s.const_data_ptr());
  }
  std::sort(seen.begin(), seen.end());
  FUSED_OPTIM_CHECK_VALUE(
      std::adjacent_find(seen.begin(), seen.end()) == seen.end(), op,
      ": the same step counter appears twice in state_steps (each parameter needs its own; is a parameter "
      "listed twice?)");
}

void CheckStateScalars(const char* op, const char* name, TensorList scalars, int64_t n) {
  FUSED_OPTIM_CHECK_VALUE(static_cast<int64_t>(scalars.size()) == n, op, ": ", name, " has ", scalars.size(),
                          " tensors but params has ", n);
  std::vector<const void*> seen;
  seen.reserve(n);
  for (int64_t t = 0; t < n; ++t) {
    const Tensor& s = scalars[t];
    FUSED_OPTIM_CHECK_VALUE(s.defined() && s.layout() == api::kStrided && s.numel() == 1, op, ": ", name, "[", t,
                            "] must be a dense one-element tensor");
    const ScalarType dtype = s.scalar_type();
    FUSED_OPTIM_CHECK_TYPE(
        dtype == api::kFloat || dtype == api::kDouble || dtype == api::kHalf || dtype == api::kBFloat16, op, ": ", name,
        "[", t, "] has dtype ", dtype, "; it must be float32, float64, float16 or bfloat16");
    CheckWritable(op, name, t, s);
    // Read through the data pointer on the CPU. A device value is not read here: that would wait
    // for the device on every step, and a non-finite one reaches the parameters as NaN, as it
    // does in torch.optim, which does not check it either.
    const std::optional<double> value = ReadHostScalar(s);
    FUSED_OPTIM_CHECK_VALUE(!value || std::isfinite(*value), op, ": ", name, "[", t, "] is ", *value,
                            "; it must be finite");
    seen.push_back(s.const_data_ptr());
  }
  std::sort(seen.begin(), seen.end());
  FUSED_OPTIM_CHECK_VALUE(std::adjacent_find(seen.begin(), seen.end()) == seen.end(), op,
                          ": the same tensor appears twice in ", name,
                          " (each parameter needs its own; is a parameter listed twice?)");
}

void CheckStateScalarsOn(const char* op, const char* name, TensorList scalars, const Device& device) {
  for (size_t t = 0; t < scalars.size(); ++t) {
    FUSED_OPTIM_CHECK_VALUE(scalars[t].device() == device, op, ": capturable=True needs every one of ", name,
                            " on the params' device, but ", name, "[", t, "] is on ", scalars[t].device(),
                            " and params on ", device,
                            " (a state loaded or made with capturable=False: move it with .to(param.device))");
  }
}

const char* StepCountProblem(ScalarType dtype, double value) {
  if (!std::isfinite(value) || value < 0.0) return "; a step counter must be a finite count >= 0";
  if (dtype == api::kInt && value >= std::numeric_limits<int32_t>::max()) {
    return " and would overflow int32 when incremented";
  }
  return nullptr;
}

std::vector<double> IncrementSteps(TensorList steps) {
  std::vector<double> out(steps.size());
  for (size_t t = 0; t < steps.size(); ++t) {
    const Tensor& s = steps[t];
    // torch.optim keeps steps as CPU scalars: update them without a dispatcher round trip.
    if (const std::optional<double> value = ReadHostScalar(s)) {
      out[t] = *WriteHostScalar(s, *value + 1.0);  // the count as stored (rounded to its dtype)
    } else {
      api::Fill(s, api::Item(s) + 1.0);
      out[t] = api::Item(s);
    }
  }
  return out;
}

void CheckNonNegative(const char* op, const char* what, double value) {
  FUSED_OPTIM_CHECK_VALUE(value >= 0.0, op, ": invalid ", what, " value: ", value, " (must be >= 0)");
}

void CheckStep(const char* op, int64_t step) {
  FUSED_OPTIM_CHECK_VALUE(step >= 1, op, ": step must be >= 1 (the count after this update), got ", step);
}

void CheckUnitInterval(const char* op, const char* what, double value) {
  FUSED_OPTIM_CHECK_VALUE(value >= 0.0 && value < 1.0, op, ": invalid ", what, " value: ", value,
                          " (must be in [0, 1))");
}

void CheckNonNegative(const char* op, NamedValues values) {
  for (const auto& [what, value] : values) CheckNonNegative(op, what, value);
}

void CheckUnitInterval(const char* op, NamedValues values) {
  for (const auto& [what, value] : values) CheckUnitInterval(op, what, value);
}

}  // namespace fused_optim

namespace fused_optim::api {

// From torch's C shim, looked up where torch loaded it: a CUDA build of torch has
// libtorch_cuda.so loaded; a CPU build has none, and no CUDA tensor reaches here.
void* CurrentCudaStream(int device_index) {
  using GetStream = int32_t (*)(int32_t, void**);  // AOTITorchError (0: success)
  static const GetStream get_stream = [] {
    void* lib = dlopen("libtorch_cuda.so", RTLD_NOLOAD | RTLD_LAZY);
    return lib == nullptr ? nullptr : reinterpret_cast<GetStream>(dlsym(lib, "aoti_torch_get_current_cuda_stream"));
  }();
  FUSED_OPTIM_CHECK(get_stream != nullptr,
                    "fused_optim: a CUDA tensor, but torch's CUDA library (libtorch_cuda.so) is not loaded");
  void* stream = nullptr;
  FUSED_OPTIM_CHECK(get_stream(device_index, &stream) == 0,
                    "fused_optim: torch could not give the current CUDA stream");
  return stream;
}

}  // namespace fused_optim::api
