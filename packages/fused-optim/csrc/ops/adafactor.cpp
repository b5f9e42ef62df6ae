// Adafactor ops: argument checks and the step's passes. Between its element-wise passes
// (math/adafactor.h) Adafactor reduces per tensor: the RMS of each parameter and of each update,
// and for matrices the row and column means of g^2, from which the factored second-moment
// estimate is built. Where the CPU loops run the passes, the norms are reduced into numbers on the
// host (PerTensor and FactorNorms; SumsOfProducts and SquaresAlongRowsAndColumns in
// csrc/kernels.h; a 2-D matrix's sum of row averages, SumOnHost), and the products r c of the
// averages are host loops too (ProductsOfRowsAndColumns): no dispatcher call per tensor. On CUDA
// each of these is a few passes on the device for the whole list, nothing read on the host: the
// norms of p and u, the backward's sums and the sums of row averages (MultiTensorCall::DeviceSums),
// the row and column norms of g (NormsAlongRowsAndColumns) and r c (ProductsOfRowsAndColumns).
// ATen ops per matrix remain where a pass cannot take the tensors (non-contiguous g or averages),
// for the division of a batch of matrices' estimates and in the backward through the estimate, on
// the call's device, called by name through the dispatcher (api::CallAten, in both builds of
// torch_api.h).
//   1. checks, every list's, once: the passes after them skip repeating them
//      (MultiTensorCall::Checks::kDone; then, in place, the step counters: incremented on
//      the host, or with capturable read by every pass on the params' device and advanced by the
//      last, OnDevice);
//   2. the direction pass: vectors update their second moment and write the update; matrices
//      update their row/column averages (from the norms of g's rows and columns, one factors
//      kernel over every matrix's row averages and then their column averages), then the product
//      of the new averages, which the direction kernel divides by their floored mean and turns
//      into the update;
//   3. the norms of the parameters (before the weight decay) and of the updates (on the device,
//      both from one pair of sums passes), then the apply pass (weight decay and the scaled
//      update), which reads both norms where they are and computes the step size itself: nothing
//      waits for the device.
// The in-place step and the functional update share these passes (in place they write the
// caller's tensors, functional they return new ones). The functional backward recomputes 2-3 and
// runs them in reverse: the apply pass's backward kernel, then the direction's (through the
// floor of the estimate), then for matrices the row/column sums of the estimate's gradient.
#include <algorithm>
#include <array>
#include <cmath>
#include <optional>
#include <span>

#include "multi_tensor.h"

namespace fused_optim {
namespace {

// The ATen ops used here, by schema (every argument given; numbers as 0-d tensors of the
// operand's dtype, as ATen converts a Scalar operand, since the stable ABI passes no Scalar).
namespace aten {
using api::CallAten;
using Ints = std::vector<int64_t>;
constexpr std::nullopt_t None = std::nullopt;
Tensor Num(double v, const Tensor& like) { return api::Full0d(v, like); }
Tensor Norm(const Tensor& x, int64_t dim) {  // the L2 norm along dim, kept (linalg_norm's default)
  return CallAten("aten::linalg_norm", "", x, None, std::optional<Ints>(Ints{dim}), true, None);
}
Tensor Div_(const Tensor& x, const Tensor& y) { return CallAten("aten::div_", "Tensor", x, y); }
Tensor Div_(const Tensor& x, double v) { return Div_(x, Num(v, x)); }
Tensor Matmul(const Tensor& a, const Tensor& b) { return CallAten("aten::matmul", "", a, b); }
Tensor Mean(const Tensor& x, int64_t dim) {  // kept
  return CallAten("aten::mean", "dim", x, std::optional<Ints>(Ints{dim}), true, None);
}
Tensor ClampMin(const Tensor& x, double v) { return CallAten("aten::clamp_min", "Tensor", x, Num(v, x)); }
Tensor ClampMin_(const Tensor& x, const Tensor& v) { return CallAten("aten::clamp_min_", "Tensor", x, v); }
Tensor Mul(const Tensor& a, const Tensor& b) { return CallAten("aten::mul", "Tensor", a, b); }
Tensor Mul(const Tensor& a, double v) { return Mul(a, Num(v, a)); }
Tensor Mul_(const Tensor& a, double v) { return CallAten("aten::mul_", "Tensor", a, Num(v, a)); }
Tensor Add(const Tensor& a, const Tensor& b) { return api::Subtract(a, b, -1.0); }  // exact: -1 * b
Tensor Add_(const Tensor& a, const Tensor& b) {
  api::CopyInto(a, Add(a, b));
  return a;
}
Tensor Neg_(const Tensor& x) { return CallAten("aten::neg_", "", x); }
Tensor Sum(const Tensor& x, Ints dims) {  // kept
  return CallAten("aten::sum", "dim_IntList", x, std::optional<Ints>(std::move(dims)), true, None);
}
Tensor Transpose(const Tensor& x) { return CallAten("aten::transpose", "int", x, int64_t{-1}, int64_t{-2}); }
Tensor Where(const Tensor& cond, const Tensor& a, const Tensor& b) {
  return CallAten("aten::where", "self", cond, a, b);
}
Tensor Ge(const Tensor& x, double v) { return CallAten("aten::ge", "Tensor", x, Num(v, x)); }
Tensor ZerosLike(const Tensor& x) { return CallAten("aten::zeros_like", "", x, None, None, None, None, None); }
Tensor Reciprocal(const Tensor& x) { return CallAten("aten::reciprocal", "", x); }
void ForeachMul_(TensorListArg xs, const Tensor& v) { CallAten<void>("aten::_foreach_mul_", "Tensor", xs, v); }
}  // namespace aten

// Per-tensor values an apply pass reads as a state input column (its norms, its backward's dcoef):
// where the CPU loops run the pass, numbers the host reduced from the pass's own table (no tensor
// made, no dispatcher call); where the CUDA kernels (or their emulation) run it, sum `index` of a
// tensor of them that two multi-tensor passes reduced on the call's device (DeviceSums), read there.
struct PerTensor {
  std::vector<double> values;
  std::optional<Tensor> sums;
  int64_t index = 0;
  MultiTensorCall::StateInput Column() const { return {values, sums ? &*sums : nullptr, index}; }
};

DeviceSumOf NormOf(int column) { return {column, column, DeviceSum::kNorm}; }
DeviceSumOf ProductsOf(int a, int b) { return {a, b, DeviceSum::kProducts}; }

// Each tensor's sums of lists of `pass` (as the pass reads them; an absent list reads as zeros) that
// `of` names, in its order: sums of products, or (NormOf) L2 norms. On the device all of them come
// from the same two passes (one launch each for a few hundred tensors, not two per sum).
template <size_t N>
std::array<PerTensor, N> SumsOf(MultiTensorCall& pass, const std::array<DeviceSumOf, N>& of) {
  std::array<PerTensor, N> out;
  if (pass.on_cpu_loops()) {
    for (size_t k = 0; k < N; ++k) {
      FUSED_OPTIM_CHECK(of[k].kind != DeviceSum::kValues, "SumsOf: no host sum of values (a fused-optim bug)");
      out[k].values = of[k].kind == DeviceSum::kNorm ? pass.Norms(of[k].a) : pass.SumsOfProducts(of[k].a, of[k].b);
    }
    return out;
  }
  const Tensor sums = pass.DeviceSums(of);
  for (size_t k = 0; k < N; ++k) out[k] = {{}, sums, static_cast<int64_t>(k)};
  return out;
}

struct AdafactorArgs {
  double lr, beta2_decay, eps1, eps2, d;
};

void CheckArgs(const char* op, const AdafactorArgs& a, double weight_decay) {
  CheckNonNegative(op, "learning rate", a.lr);
  FUSED_OPTIM_CHECK_VALUE(a.beta2_decay <= 0.0, op, ": beta2_decay must be <= 0, got ", a.beta2_decay);
  CheckNonNegative(op, "eps1", a.eps1);
  CheckNonNegative(op, "eps2", a.eps2);
  FUSED_OPTIM_CHECK_VALUE(a.d >= 1.0, op, ": the clipping threshold d must be >= 1, got ", a.d);
  CheckNonNegative(op, "weight_decay", weight_decay);
}

// A matrix's (or batch of matrices') row or column statistics, shaped like the state torch keeps.
// `in_place`: the state is updated in place (torch's in-place rules apply to it).
void CheckFactoredState(const char* op, const char* name, TensorListArg list, TensorListArg params, int64_t dim,
                        bool in_place) {
  FUSED_OPTIM_CHECK_VALUE(list.size() == params.size(), op, ": ", name, " has ", list.size(),
                          " tensors but params has ", params.size());
  std::vector<const void*> seen;
  for (size_t t = 0; t < params.size(); ++t) {
    const Tensor& p = params[t];
    const Tensor& s = list[t];
    const IntArrayRef sizes = p.sizes();
    const int64_t dims = static_cast<int64_t>(sizes.size());
    FUSED_OPTIM_CHECK_VALUE(dims >= 2, op, ": params[", t, "] has ", dims,
                            " dimensions; factored=True needs two or more (vectors keep a full variance)");
    // p's shape with 1 along the reduced dim (compared in place: a step checks every matrix's two)
    const auto expected = [&] {
      std::vector<int64_t> shape(sizes.begin(), sizes.end());
      shape[dims + dim] = 1;
      return shape;
    };
    const auto shaped = [&] {
      const IntArrayRef got = s.sizes();
      if (static_cast<int64_t>(got.size()) != dims) return false;
      for (int64_t d = 0; d < dims; ++d) {
        if (got[d] != (d == dims + dim ? 1 : sizes[d])) return false;
      }
      return true;
    };
    FUSED_OPTIM_CHECK_VALUE(s.defined() && s.layout() == api::kStrided && shaped(), op, ": ", name, "[", t,
                            "] has shape ", s.defined() ? s.sizes() : IntArrayRef{}, ", expected ",
                            IntArrayRef(expected()));
    FUSED_OPTIM_CHECK_TYPE(api::Dtype(s) == api::Dtype(p), op, ": ", name, "[", t, "] has dtype ", api::Dtype(s),
                           " but params[", t, "] has ", api::Dtype(p));
    FUSED_OPTIM_CHECK_VALUE(s.device() == p.device(), op, ": ", name, "[", t, "] is on ", s.device(), " but params[", t,
                            "] is on ", p.device());
    if (!in_place) continue;
    CheckWritable(op, name, t, s);
    if (s.numel() == 0 || p.numel() == 0) continue;  // no memory to share (both data pointers may be null)
    FUSED_OPTIM_CHECK_VALUE(s.const_data_ptr() != p.const_data_ptr(), op, ": ", name, "[", t,
                            "] shares memory with params[", t, "]");
    seen.push_back(s.const_data_ptr());
  }
  std::sort(seen.begin(), seen.end());
  FUSED_OPTIM_CHECK_VALUE(std::adjacent_find(seen.begin(), seen.end()) == seen.end(), op,
                          ": the same tensor appears twice in ", name, " (is a parameter listed twice?)");
}

// A capturable step's inputs on the params' device, which every pass reads there: the step
// counters (the kernels compute each row's step entries from them, bind::Adafactor::StepRow, and
// the last pass advances them) and torch.amp's found_inf (each pass writes nothing where it is
// non-zero). With counters the host incremented (and found_inf it read), `counters` is null.
struct OnDevice {
  const TensorVector* counters = nullptr;
  const std::optional<Tensor>* found_inf = nullptr;
};

// Gives a pass the capturable step's device inputs; `last`: the pass that advances the counters.
// Before the pass's table is built (its rows set).
void UseOnDevice(MultiTensorCall& pass, const OnDevice& device, bool last) {
  if (device.counters == nullptr) return;
  static const std::optional<Tensor> kNoScale;
  pass.SetAmp({kNoScale, *device.found_inf});
  pass.UseDeviceSteps(*device.counters, adafactor_cols::kNumScalars, /*advance=*/last);
}

// The sum of a contiguous CPU tensor's elements, in double, rounded to its dtype (as ATen's sum of
// that dtype is rounded once).
double SumOnHost(const Tensor& x) {
  const ScalarType dtype = api::Dtype(x);
  const char* data = static_cast<const char*>(x.const_data_ptr());
  double sum = 0.0;
  for (int64_t i = 0; i < x.numel(); ++i) sum += *ReadHostScalarAt(dtype, data + i * x.element_size());
  double stored = 0.0;  // 8 bytes: room for any dtype
  return *WriteHostScalarAt(dtype, &stored, sum);
}

// The norms of every g along its rows (dim -1), then of every g along its columns (dim -2): the
// values the factors pass reads for its row averages, then its column averages. Where every g is
// contiguous: where the CPU loops run, numbers from one host pass over each g (no tensor made, no
// dispatcher call); elsewhere one flat vector made by the device passes for the whole list.
// Otherwise one ATen norm per matrix and dim, on the call's device.
struct FactorNorms {
  enum class From { kHost, kDevice, kAten };
  From from = From::kAten;
  std::vector<double> values;  // kHost: not yet rounded to the dtype
  Tensor flat;                 // kDevice
  TensorVector tensors;        // kAten
  std::vector<int64_t> dims;   // the gradients' MatrixDimsOf (the products read them too)
};

FactorNorms FactorNormsOf(TensorListArg grads) {
  FactorNorms norms;
  if (grads.empty()) return norms;
  if (!std::all_of(grads.begin(), grads.end(), [](const Tensor& g) { return g.is_contiguous(); })) {
    for (const int64_t dim : {-1, -2}) {
      for (const Tensor& g : grads) norms.tensors.push_back(aten::Norm(g, dim));
    }
    norms.dims = MatrixDimsOf(grads);
  } else if (MultiTensorCall::RunsOnCpuLoops(grads[0].device())) {
    norms.from = FactorNorms::From::kHost;
    RowAndColumnSums sums = SquaresAlongRowsAndColumns(grads);
    norms.values = std::move(sums.rows);
    norms.values.insert(norms.values.end(), sums.cols.begin(), sums.cols.end());
    for (double& x : norms.values) x = std::sqrt(x);
    norms.dims = std::move(sums.dims);
  } else {
    norms.from = FactorNorms::From::kDevice;
    RowAndColumnNorms device = NormsAlongRowsAndColumns(grads);
    norms.flat = std::move(device.norms);
    norms.dims = std::move(device.dims);
  }
  return norms;
}

// bind::Adafactor::StepEntries of each tensor's count, into a pass's row, computed once per run of
// equal counts (RowOfCount: a step's tensors share one): pow and sqrt for every tensor of every
// pass were ~5% of a kept step's host time on 200 small matrices.
class StepEntriesOfCount {
 public:
  explicit StepEntriesOfCount(const math::AdafactorHyper<double>& hyper)
      : entries_(adafactor_cols::kNumScalars, Entries{hyper}) {}
  void Fill(double step, double* row) {
    const double* entries = entries_.Of(step);
    for (int k : bind::Adafactor::kStepEntries) row[k] = entries[k];
  }

 private:
  struct Entries {
    const math::AdafactorHyper<double>& hyper;
    void operator()(double step, double* row) const { bind::Adafactor::StepEntries(hyper, step, row); }
  };
  RowOfCount<Entries> entries_;
};

// The factors pass, over the row averages (dim -1 reduced) of every matrix, then its column
// averages (-2), as one list: each average lerps toward its norm of g squared over the reduced
// length. In place, the averages are updated; functional, the new ones are returned.
struct Factors {
  TensorVector rows, cols;
};
Factors UpdateFactors(const char* op, TensorListArg row_vars, TensorListArg col_vars, TensorListArg grads,
                      const FactorNorms& norms, const std::vector<double>& steps,
                      const math::AdafactorHyper<double>& hyper, bool in_place, const OnDevice& device) {
  // (every list here: the op's checks, or made by the op)
  const size_t n = grads.size();
  const auto twice = [](TensorListArg a, TensorListArg b) {
    TensorVector both(a.begin(), a.end());
    both.insert(both.end(), b.begin(), b.end());
    return both;
  };
  const TensorVector factors = twice(row_vars, col_vars);
  TensorVector counters;  // capturable: each matrix's counter, read for its rows and for its columns
  OnDevice on_device = device;
  if (device.counters != nullptr) {
    counters = twice(*device.counters, *device.counters);
    on_device.counters = &counters;
  }
  MultiTensorCall call(op, factors, in_place, MultiTensorCall::Checks::kDone);
  UseOnDevice(call, on_device, /*last=*/false);
  TensorVector out = call.AddState("row_vars and col_vars", factors);
  switch (norms.from) {
    case FactorNorms::From::kHost:
      call.AddHostValues(norms.values);
      break;
    case FactorNorms::From::kDevice:
      call.AddDeviceValues(norms.flat);
      break;
    case FactorNorms::From::kAten:
      call.AddInput("norms", norms.tensors);
  }
  StepEntriesOfCount entries(hyper);
  call.SetTensorScalars(adafactor_cols::kNumScalars, [&](int64_t f, double* row) {
    const size_t t = static_cast<size_t>(f) % n;
    entries.Fill(steps[t], row);
    row[adafactor_cols::kMeanOver] = static_cast<double>(grads[t].size(static_cast<size_t>(f) < n ? -1 : -2));
  });
  call.Launch(FUSED_OPTIM_KERNEL(AdafactorFactors), hyper);
  if (out.empty()) return {};
  const auto half = out.begin() + static_cast<std::ptrdiff_t>(n);
  return {TensorVector(out.begin(), half), TensorVector(half, out.end())};
}

// The apply passes': per tensor t, everything of its step size but the norms (the kernel
// computes it from them where they are, AdafactorStepSizeOf). `steps`: each tensor's count.
void SetApplyRows(MultiTensorCall& apply, TensorListArg params, const std::vector<double>& steps,
                  const AdafactorArgs& a, const math::AdafactorHyper<double>& hyper) {
  StepEntriesOfCount entries(hyper);
  apply.SetTensorScalars(adafactor_cols::kNumScalars, [&](int64_t t, double* row) {
    using namespace adafactor_cols;
    entries.Fill(steps[t], row);
    row[kRootNumel] = std::sqrt(static_cast<double>(params[t].numel()));
    row[kEps2] = a.eps2;
    row[kClip] = a.d;
  });
}

math::AdafactorHyper<double> MakeAdafactorHyper(const AdafactorArgs& a, double weight_decay, bool maximize) {
  return {a.eps1 * a.eps1, 1.0 - a.lr * weight_decay, a.lr, a.beta2_decay, maximize, weight_decay != 0.0};
}

// Checks the factored state's lists (shaped unlike the params, so no kernel table checks them)
// before anything is written or allocated. In place, they are updated (torch's in-place rules
// apply); functional, they are only read.
void CheckLists(const char* op, TensorListArg params, TensorListArg row_vars, TensorListArg col_vars, bool factored,
                bool in_place) {
  if (factored) {
    CheckFactoredState(op, "row_vars", row_vars, params, -1, in_place);
    CheckFactoredState(op, "col_vars", col_vars, params, -2, in_place);
  } else {
    FUSED_OPTIM_CHECK_VALUE(row_vars.empty() && col_vars.empty(), op,
                            ": row_vars and col_vars must be empty when factored=False");
  }
}

// The direction kernel's state input: each 2-D matrix's sum of its row averages `rows`, rounded to
// their dtype as ATen's sum of that dtype rounds it, or 0 where the op `divided` the estimate
// itself. Where the CPU loops run, numbers from the host; elsewhere one sums pass on the device.
PerTensor RowSums(const char* op, TensorListArg rows, const std::vector<bool>& divided) {
  const size_t n = rows.size();
  std::vector<double> host(n, 0.0);
  if (n == 0) return {};
  if (MultiTensorCall::RunsOnCpuLoops(rows[0].device())) {
    for (size_t t = 0; t < n; ++t) {
      if (!divided[t]) host[t] = SumOnHost(rows[t].is_contiguous() ? rows[t] : api::Contiguous(rows[t]));
    }
    return {std::move(host), std::nullopt};
  }
  if (std::all_of(divided.begin(), divided.end(), [](bool d) { return d; })) return {std::move(host), std::nullopt};
  OptionalTensorList summed(n);
  for (size_t t = 0; t < n; ++t) {
    if (!divided[t]) summed[t] = rows[t];
  }
  MultiTensorCall sums(op, rows, /*in_place=*/false, MultiTensorCall::Checks::kDone);
  sums.AddOptionalInput("row averages", summed);
  return {{}, sums.DeviceSums(std::array{DeviceSumOf{0, 0, DeviceSum::kValues}})};
}

// The direction pass (3.): the new second moments and the updates u, for every tensor.
struct Direction {
  TensorVector row_vars, col_vars, variances;  // the new second moments (functional calls)
  TensorVector estimates;                      // matrices, with keep_estimates: the estimate before the floor
  Scratch updates;                             // read by the apply pass alone
};

Direction RunDirection(const char* op, TensorListArg grads, TensorListArg row_vars, TensorListArg col_vars,
                       TensorListArg variances, const std::vector<double>& steps, double eps1,
                       const math::AdafactorHyper<double>& hyper, bool factored, bool in_place, bool keep_estimates,
                       const OnDevice& device = {}) {
  Direction out;
  std::vector<int64_t> dims;  // the gradients' matrices (batch, rows, columns), factored
  if (factored) {
    FactorNorms norms = FactorNormsOf(grads);
    Factors factors = UpdateFactors(op, row_vars, col_vars, grads, norms, steps, hyper, in_place, device);
    out.row_vars = std::move(factors.rows);
    out.col_vars = std::move(factors.cols);
    dims = std::move(norms.dims);
  }
  MultiTensorCall direction(op, grads, in_place, MultiTensorCall::Checks::kDone);
  UseOnDevice(direction, device, /*last=*/false);
  direction.AddInput("grads", grads);
  if (factored) {
    // The estimate r c / max(mean(r), eps1): the kernel divides a 2-D matrix's product, from the
    // sum of its row averages (a single value, read where it is); for a batch of matrices, or
    // where the backward keeps the estimates, the division is ATen's here.
    const TensorVector& rows = in_place ? row_vars : out.row_vars;
    const TensorVector& cols = in_place ? col_vars : out.col_vars;
    // The products in one pass over every matrix where every average is contiguous (the CPU
    // loops', or the device's), else ATen's matmul per matrix. Kept (for the backward), the
    // estimates are tensors of their own; otherwise each product is made in the updates' scratch,
    // which the kernel turns into the update in place (a matrix divided here: a view of it).
    if (!keep_estimates) out.updates = direction.AddScratch();
    const auto contiguous = [](const Tensor& x) { return x.is_contiguous(); };
    const size_t n = grads.size();
    if (std::all_of(rows.begin(), rows.end(), contiguous) && std::all_of(cols.begin(), cols.end(), contiguous)) {
      if (keep_estimates) {
        for (const Tensor& g : grads) out.estimates.push_back(api::EmptyLike(g));
      }
      std::vector<void*> places(n);
      for (size_t t = 0; t < n; ++t) {
        places[t] = keep_estimates ? out.estimates[t].mutable_data_ptr() : out.updates.data[t];
      }
      ProductsOfRowsAndColumns(rows, cols, grads, dims, places);
    } else {
      for (size_t t = 0; t < n; ++t) {
        Tensor product = aten::Matmul(rows[t], cols[t]);
        if (keep_estimates) {
          out.estimates.push_back(std::move(product));
        } else {
          api::CopyInto(out.updates.View(t, grads[t].sizes()), product);
        }
      }
    }
    std::vector<bool> divided(n);
    Tensor floor;  // (made once, for every matrix that needs it)
    for (size_t t = 0; t < n; ++t) {
      divided[t] = keep_estimates || rows[t].dim() > 2;
      if (!divided[t]) continue;
      if (!floor.defined()) floor = aten::Num(eps1, rows[t]);
      const Tensor estimate = keep_estimates ? out.estimates[t] : out.updates.View(t, grads[t].sizes());
      aten::Div_(estimate, aten::ClampMin_(aten::Mean(rows[t], -2), floor));
    }
    const PerTensor row_sums = RowSums(op, rows, divided);
    if (keep_estimates) out.updates = direction.AddScratchFrom("estimates", out.estimates);
    direction.SetTensorScalars(adafactor_cols::kNumScalars, [&](int64_t t, double* row) {
      using namespace adafactor_cols;
      row[kMeanOver] = divided[t] ? 1.0 : static_cast<double>(grads[t].size(-2));
      row[kFloor] = divided[t] ? 1.0 : eps1;  // a divided matrix's sum of 0 makes a divisor of 1
    });
    direction.SetStateInputs({row_sums.Column()});
    direction.Launch(FUSED_OPTIM_KERNEL(AdafactorFactoredDirection), hyper);
  } else {
    out.variances = direction.AddState("variances", variances);
    out.updates = direction.AddScratch();
    StepEntriesOfCount entries(hyper);
    direction.SetTensorScalars(adafactor_cols::kNumScalars,
                               [&](int64_t t, double* row) { entries.Fill(steps[t], row); });
    direction.Launch(FUSED_OPTIM_KERNEL(AdafactorVectorDirection), hyper);
  }
  return out;
}

// Passes 2-3 of one step; returns the new params, row_vars, col_vars and variances (in place: empty).
// `steps`: each tensor's count, where the host has it (with `device` counters, the kernels read
// them instead).
Lists<4> RunStep(const char* op, TensorListArg params, TensorListArg grads, TensorListArg row_vars,
                 TensorListArg col_vars, TensorListArg variances, const std::vector<double>& steps,
                 const AdafactorArgs& args, const math::AdafactorHyper<double>& hyper, bool factored, bool in_place,
                 const OnDevice& device = {}) {
  // 2. The direction pass.
  Direction dir = RunDirection(op, grads, row_vars, col_vars, variances, steps, args.eps1, hyper, factored, in_place,
                               /*keep_estimates=*/false, device);
  // 3. The norms of the parameters (which only the apply pass changes) and of the updates,
  // then the apply pass, the step's last (it advances device counters).
  MultiTensorCall apply(op, params, in_place, MultiTensorCall::Checks::kDone);
  UseOnDevice(apply, device, /*last=*/true);
  TensorVector new_params = apply.AddState("params", params);
  apply.AddScratch(dir.updates);
  SetApplyRows(apply, params, steps, args, hyper);
  const auto [param_norms, update_norms] =
      SumsOf(apply, std::array{NormOf(adafactor_cols::kParam), NormOf(adafactor_cols::kApplyUpdate)});
  apply.SetStateInputs({param_norms.Column(), update_norms.Column()});  // adafactor_cols' state order
  apply.Launch(FUSED_OPTIM_KERNEL(AdafactorApply), hyper);
  return {std::move(new_params), std::move(dir.row_vars), std::move(dir.col_vars), std::move(dir.variances)};
}

void AdafactorStepInPlace(TensorListArg params, TensorListArg grads, TensorListArg row_vars, TensorListArg col_vars,
                          TensorListArg variances, TensorListArg state_steps, double lr, double beta2_decay,
                          double eps1, double eps2, double d, double weight_decay, bool maximize, bool factored,
                          const std::optional<Tensor>& grad_scale, const std::optional<Tensor>& found_inf,
                          bool capturable) {
  constexpr const char* op = "fused_optim::adafactor_step_";
  const AdafactorArgs args{lr, beta2_decay, eps1, eps2, d};
  CheckArgs(op, args, weight_decay);
  // 1. Every check, before the first write. Replayed by a kept step (kept_step.h) whose tensors
  // are unchanged and whose gradients fit, the step's kept table stands for them, as for
  // StepInPlace's: the lists were checked when it was kept (every one of them written, so the
  // gradients are checked against them all), and the counters are read through it. Its kernel
  // table is not run: Adafactor's passes build their own.
  const std::array<TensorList, 5> lists{params, variances, row_vars, col_vars, state_steps};
  const KeptFit fit = FitKept(op, lists, params, grads, {grad_scale, found_inf}, capturable);
  kept::KeptTable* kept = fit.table;
  const bool fits = fit.fits;
  std::optional<MultiTensorCall> checks;
  if (fits) {
    if (ValidateOnly() || (!capturable && SkipsStep(fit.found_inf, /*host_needs_answer=*/true))) return;
  } else {
    checks.emplace(op, params, kInPlace);
    checks->SetAmp({grad_scale, found_inf});
    checks->AddStep(params, grads, {{"variances", variances, !factored, "when factored=True"}});
    CheckLists(op, params, row_vars, col_vars, factored, kInPlace);
    checks->CheckOverlapOf("row_vars", row_vars, /*writes=*/true);  // (shaped unlike the params)
    checks->CheckOverlapOf("col_vars", col_vars, /*writes=*/true);
    CheckStepTensors(op, state_steps, checks->size());
    if (capturable) checks->UseDeviceSteps(state_steps, adafactor_cols::kNumScalars);  // on the params' device
    // The gradients are unscaled by one pass of their own, since ATen ops as well as the kernels
    // read them. Without capturable, found_inf is read on the host (a wait for the device under AMP
    // alone): the step counters are the host's. A capturable step reads nothing on the host: each
    // pass skips itself where found_inf is set (the gradients are unscaled all the same, as
    // GradScaler.unscale_ leaves them), and the last advances the counters where it is not.
    if (checks->ChecksOnly() || checks->size() == 0 || (!capturable && checks->SkipStep(/*host_needs_answer=*/true))) {
      return;
    }
  }
  if (grad_scale.has_value() && grad_scale->defined()) {  // first modification, as the kernels unscale
    aten::ForeachMul_(grads, aten::Reciprocal(*grad_scale));
  }
  const auto hyper = MakeAdafactorHyper(args, weight_decay, maximize);
  if (capturable) {
    const std::vector<double> unknown(params.size(), 1.0);  // the kernels' rows replace their step entries
    RunStep(op, params, grads, row_vars, col_vars, variances, unknown, args, hyper, factored, kInPlace,
            OnDevice{&state_steps, &found_inf});
  } else {
    RunStep(op, params, grads, row_vars, col_vars, variances,
            fits ? kept->IncrementSteps() : IncrementSteps(state_steps), args, hyper, factored, kInPlace);
  }
  if (fits) {
    CountKeptTableStep();  // (the passes bumped what they wrote, as on the full path)
  } else if (kept != nullptr && !fit.unchanged) {
    const kept::KeptTable::Checked device_counters{state_steps, true};  // read on every kept step
    kept->Keep(checks->Table(), lists, capturable ? TensorList() : state_steps,
               std::span<const kept::KeptTable::Checked>(&device_counters, capturable ? 1 : 0), {}, capturable);
  }
}

// The functional ops' checks: the hyper-parameters, the step and the lists (only read).
AdafactorArgs CheckFunctional(const char* op, TensorListArg params, TensorListArg grads, TensorListArg row_vars,
                              TensorListArg col_vars, TensorListArg variances, int64_t step, double lr,
                              double beta2_decay, double eps1, double eps2, double d, double weight_decay,
                              bool factored) {
  const AdafactorArgs args{lr, beta2_decay, eps1, eps2, d};
  CheckArgs(op, args, weight_decay);
  CheckStep(op, step);
  MultiTensorCall checks(op, params);
  checks.AddInput("grads", grads);
  checks.AddInputIf(!factored, "variances", variances, "when factored=True");
  CheckLists(op, params, row_vars, col_vars, factored, /*in_place=*/false);
  return args;
}

Lists<4> AdafactorUpdate(TensorListArg params, TensorListArg grads, TensorListArg row_vars, TensorListArg col_vars,
                         TensorListArg variances, int64_t step, double lr, double beta2_decay, double eps1, double eps2,
                         double d, double weight_decay, bool maximize, bool factored) {
  constexpr const char* op = "fused_optim::adafactor_update";
  const AdafactorArgs args = CheckFunctional(op, params, grads, row_vars, col_vars, variances, step, lr, beta2_decay,
                                             eps1, eps2, d, weight_decay, factored);
  if (params.empty()) return {};
  const std::vector<double> steps(params.size(), static_cast<double>(step));
  return RunStep(op, params, grads, row_vars, col_vars, variances, steps, args,
                 MakeAdafactorHyper(args, weight_decay, maximize), factored, /*in_place=*/false);
}

// An optional incoming gradient as a tensor, or an undefined one for None (or an empty list).
Tensor Incoming(const OptionalTensorList& list, size_t t) {
  if (t >= list.size()) return {};
  const std::optional<Tensor> x = list[t];
  return x.has_value() ? *x : Tensor();
}

// The incoming gradients of the new row/column averages, which ATen ops (not a kernel table) read:
// shaped, typed and placed like the averages themselves.
void CheckIncoming(const char* op, const char* name, const OptionalTensorList& list, TensorListArg like) {
  for (size_t t = 0; t < list.size(); ++t) {
    const Tensor x = Incoming(list, t);
    if (!x.defined()) continue;
    FUSED_OPTIM_CHECK_VALUE(x.layout() == api::kStrided && api::SameShape(x, like[t]), op, ": ", name, "[", t,
                            "] has shape ", x.sizes(), ", expected ", like[t].sizes());
    FUSED_OPTIM_CHECK_TYPE(api::Dtype(x) == api::Dtype(like[t]), op, ": ", name, "[", t, "] has dtype ", api::Dtype(x),
                           ", expected ", api::Dtype(like[t]));
    FUSED_OPTIM_CHECK_VALUE(x.device() == like[t].device(), op, ": ", name, "[", t, "] is on ", x.device(),
                            ", expected ", like[t].device());
  }
}

Lists<5> AdafactorUpdateBackward(const OptionalTensorList& grad_new_params, const OptionalTensorList& grad_new_row_vars,
                                 const OptionalTensorList& grad_new_col_vars,
                                 const OptionalTensorList& grad_new_variances, TensorListArg params,
                                 TensorListArg grads, TensorListArg row_vars, TensorListArg col_vars,
                                 TensorListArg variances, int64_t step, double lr, double beta2_decay, double eps1,
                                 double eps2, double d, double weight_decay, bool maximize, bool factored) {
  constexpr const char* op = "fused_optim::adafactor_update_backward";
  const AdafactorArgs args = CheckFunctional(op, params, grads, row_vars, col_vars, variances, step, lr, beta2_decay,
                                             eps1, eps2, d, weight_decay, factored);
  const int64_t n = static_cast<int64_t>(params.size());
  for (const auto* list : {&grad_new_params, &grad_new_row_vars, &grad_new_col_vars, &grad_new_variances}) {
    FUSED_OPTIM_CHECK_VALUE(list->empty() || static_cast<int64_t>(list->size()) == n, op,
                            ": an incoming gradient list has ", list->size(), " entries but params has ", n,
                            " (pass an empty list for all zeros)");
  }
  if (factored) {
    CheckIncoming(op, "grad_new_row_vars", grad_new_row_vars, row_vars);
    CheckIncoming(op, "grad_new_col_vars", grad_new_col_vars, col_vars);
  }
  if (n == 0) return {};
  const auto hyper = MakeAdafactorHyper(args, weight_decay, maximize);
  const std::vector<double> steps(n, static_cast<double>(step));
  double step_row[adafactor_cols::kNumScalars];
  bind::Adafactor::StepEntries(hyper, steps[0], step_row);
  const double weight = step_row[adafactor_cols::kWeight];
  // The forward passes again, keeping the matrices' estimates.
  Direction dir = RunDirection(op, grads, row_vars, col_vars, variances, steps, eps1, hyper, factored,
                               /*in_place=*/false, /*keep_estimates=*/true);
  // The apply pass's backward: dp and du.
  using C = bind::AdafactorApplyBackward::C;
  MultiTensorCall apply(op, params);
  apply.AddOptionalInputs({{"grad_new_params", grad_new_params}});
  apply.AddInput("params", params);
  apply.AddScratch(dir.updates);
  auto [grad_params, grad_updates] = apply.AddOutputs<2>();
  SetApplyRows(apply, params, steps, args, hyper);
  // coef = -alpha / denom is a function of p (through RMS(p), unless eps2 holds alpha) and of u
  // (through RMS(u), unless 1 holds denom): given dcoef = sum(gp' u), its gradient is
  // update_coef u + param_coef p, which the kernel computes from the norms and dcoef.
  const auto [param_norms, update_norms, dcoefs] =
      SumsOf(apply, std::array{NormOf(C::In(adafactor_cols::kParam)), NormOf(C::In(adafactor_cols::kApplyUpdate)),
                               ProductsOf(C::GradNew(adafactor_cols::kParam), C::In(adafactor_cols::kApplyUpdate))});
  apply.SetStateInputs({param_norms.Column(), update_norms.Column(), dcoefs.Column()});  // adafactor_cols' order
  apply.Launch(FUSED_OPTIM_KERNEL(AdafactorApplyBackward), hyper);
  // The direction's backward, at every tensor's second-moment weight.
  const auto weight_rows = ScalarRows{adafactor_cols::kNumScalars, [&hyper](double count, double* row) {
                                        bind::Adafactor::StepEntries(hyper, count, row);
                                      }};
  if (!factored) {
    auto [grad_grads, grad_variances] = UpdateBackward<2>(
        op, FUSED_OPTIM_KERNEL(AdafactorVectorDirectionBackward), hyper, params,
        {{"grad_new_variances", grad_new_variances}},
        {{"update gradients", grad_updates}, {"grads", grads}, {"variances", variances}}, step, weight_rows);
    return {std::move(grad_params), std::move(grad_grads), {}, {}, std::move(grad_variances)};
  }
  auto [grad_grads, grad_estimates] = UpdateBackward<2>(
      op, FUSED_OPTIM_KERNEL(AdafactorFactoredDirectionBackward), hyper, params, {},
      {{"update gradients", grad_updates}, {"grads", grads}, {"estimates", dir.estimates}}, step, weight_rows);
  // Through the estimate e = r c / max(mean(r), eps1) to the new row and column averages, then
  // through their lerps to the old ones and to the row/column means of g^2.
  TensorVector grad_rows, grad_cols;
  for (int64_t t = 0; t < n; ++t) {
    const Tensor& row = dir.row_vars[t];
    const Tensor& col = dir.col_vars[t];
    const Tensor& de = grad_estimates[t];
    const Tensor row_mean = aten::Mean(row, -2);
    const Tensor scale = aten::ClampMin(row_mean, eps1);
    Tensor drow = aten::Div_(aten::Matmul(de, aten::Transpose(col)), scale);
    Tensor dcol = aten::Div_(aten::Matmul(aten::Transpose(row), de), scale);
    const Tensor dscale = aten::Neg_(aten::Div_(aten::Sum(aten::Mul(de, dir.estimates[t]), {-2, -1}), scale));
    aten::Add_(drow, aten::Div_(aten::Where(aten::Ge(row_mean, eps1), dscale, aten::ZerosLike(dscale)),
                                static_cast<double>(row.size(-2))));
    const Tensor grow = Incoming(grad_new_row_vars, t), gcol = Incoming(grad_new_col_vars, t);
    if (grow.defined()) aten::Add_(drow, grow);
    if (gcol.defined()) aten::Add_(dcol, gcol);
    const Tensor& g = grads[t];
    aten::Add_(grad_grads[t], aten::Mul(g, aten::Add(aten::Mul(drow, 2.0 * weight / static_cast<double>(g.size(-1))),
                                                     aten::Mul(dcol, 2.0 * weight / static_cast<double>(g.size(-2))))));
    grad_rows.push_back(aten::Mul_(drow, 1.0 - weight));
    grad_cols.push_back(aten::Mul_(dcol, 1.0 - weight));
  }
  return {std::move(grad_params), std::move(grad_grads), std::move(grad_rows), std::move(grad_cols), {}};
}

}  // namespace

// clang-format off
FUSED_OPTIM_OPS(adafactor, op) {
  op.Add<&AdafactorStepInPlace>("adafactor_step_(Tensor(a!)[] params, Tensor(g!)[] grads, Tensor(b!)[] row_vars, Tensor(c!)[] col_vars, "
     "Tensor(d!)[] variances, Tensor(e!)[] state_steps, *, float lr, float beta2_decay, float eps1, float eps2, "
     "float d, float weight_decay, bool maximize, bool factored, " FUSED_OPTIM_STEP_ARGS ") -> ()");
  op.Add<&AdafactorUpdate>("adafactor_update(Tensor[] params, Tensor[] grads, Tensor[] row_vars, Tensor[] col_vars, Tensor[] variances, *, "
     "SymInt step, float lr, float beta2_decay, float eps1, float eps2, float d, float weight_decay, bool maximize, "
     "bool factored) -> (Tensor[], Tensor[], Tensor[], Tensor[])");
  op.Add<&AdafactorUpdateBackward>("adafactor_update_backward(Tensor?[] grad_new_params, Tensor?[] grad_new_row_vars, Tensor?[] grad_new_col_vars, "
     "Tensor?[] grad_new_variances, Tensor[] params, Tensor[] grads, Tensor[] row_vars, Tensor[] col_vars, "
     "Tensor[] variances, *, SymInt step, float lr, float beta2_decay, float eps1, float eps2, float d, "
     "float weight_decay, bool maximize, bool factored) -> (Tensor[], Tensor[], Tensor[], Tensor[], Tensor[])");
}
// clang-format on

}  // namespace fused_optim
