// Kept steps' registry, their two ops kept_step_ and kept_free, and the kept tables' checks (see
// kept_step.h).
#include "kept_step.h"

#include <algorithm>
#include <cmath>
#include <mutex>
#include <unordered_map>
#include <vector>

#include "multi_tensor.h"

namespace fused_optim::kept {
namespace {

thread_local KeptTable* current = nullptr;

using Bytes = std::pair<std::uintptr_t, std::uintptr_t>;  // [lo, hi)

Bytes BytesOf(const void* data, int64_t numel, int64_t element_size) {
  const auto lo = reinterpret_cast<std::uintptr_t>(data);
  return {lo, lo + static_cast<std::uintptr_t>(numel * element_size)};
}

// Whether `b` meets one of `sorted`, disjoint ranges in address order (the kept tensors written,
// which the full path found disjoint).
bool Meets(const std::vector<Bytes>& sorted, const Bytes& b) {
  const auto after = std::upper_bound(sorted.begin(), sorted.end(), b.first,
                                      [](std::uintptr_t lo, const Bytes& r) { return lo < r.second; });
  return after != sorted.end() && after->first < b.second;
}

struct Registry {
  std::mutex mutex;
  std::unordered_map<int64_t, std::shared_ptr<const Run>> runs;
  int64_t next = 1;
};

// Never destroyed: a kept step still held at interpreter exit must not release its tensors after
// torch has gone.
Registry& TheRegistry() {
  static auto* registry = new Registry;
  return *registry;
}

std::shared_ptr<const Run> Find(const char* op, int64_t id) {
  Registry& r = TheRegistry();
  std::lock_guard<std::mutex> lock(r.mutex);
  const auto it = r.runs.find(id);
  FUSED_OPTIM_CHECK_VALUE(it != r.runs.end(), op, ": no kept step has id ", id, " (freed already, or never kept)");
  return it->second;
}

// The arguments of "name(args) -> ret", split at the top-level commas (no type has one).
std::vector<std::string> Arguments(const std::string& schema) {
  const size_t open = schema.find('('), close = schema.rfind(") ->");
  std::vector<std::string> out;
  std::string current;
  int depth = 0;
  for (size_t i = open + 1; i < close; ++i) {
    const char c = schema[i];
    if (c == '(' || c == '[') ++depth;
    if (c == ')' || c == ']') --depth;
    if (c == ',' && depth == 0) {
      out.push_back(current);
      current.clear();
    } else {
      current += c;
    }
  }
  out.push_back(current);
  return out;
}

}  // namespace

void KeptStep(int64_t id, TensorListArg grads, double lr, const std::optional<Tensor>& grad_scale,
              const std::optional<Tensor>& found_inf) {
  // Run outside the lock: the step may raise, and another thread may keep or free meanwhile.
  const std::shared_ptr<const Run> run = Find("fused_optim::kept_step_", id);
  (*run)(grads, lr, grad_scale, found_inf);
}

void KeptFree(int64_t id) {
  Registry& r = TheRegistry();
  std::shared_ptr<const Run> run;  // released after the lock
  std::lock_guard<std::mutex> lock(r.mutex);
  const auto it = r.runs.find(id);
  FUSED_OPTIM_CHECK_VALUE(it != r.runs.end(), "fused_optim::kept_free: no kept step has id ", id);
  run = std::move(it->second);
  r.runs.erase(it);
}

Fingerprint Fingerprint::Of(const Tensor& x) {
  return {x.const_data_ptr(), x.numel(), api::Dtype(x), x.is_contiguous()};
}

KeptTable* Current() { return current; }

CurrentScope::CurrentScope(KeptTable* table) : previous_(current) { current = table; }
CurrentScope::~CurrentScope() { current = previous_; }

bool KeptTable::Unchanged(std::span<const TensorList> lists, bool capturable) {
  if (!valid_ || capturable != capturable_ || api::InPlaceMode() != mode_) return false;
  // (State scalars are stored in torch's default dtype, which the table holds: ASGD's eta and mu.)
  if (table_.num_state > 0 && api::DefaultDtype() != default_dtype_) return valid_ = false;
  std::vector<const Tensor*>& order = unchanged_order_;
  order.clear();
  for (const TensorList list : lists)
    for (const Tensor& x : list) order.push_back(&x);
  if (order.size() != kept_.size()) return valid_ = false;
  // Each fingerprint reads a TensorImpl, then the storage it points to; after a forward and
  // backward pass both are out of cache. So as the loop goes it asks for the TensorImpl 2 kAhead
  // tensors on and the storage kAhead on (whose TensorImpl has arrived): the misses overlap. (The
  // stable build's prefetches are no-ops: its handles are opaque.)
  constexpr size_t kAhead = 8;
  const size_t n = order.size();
  for (size_t j = 0; j < std::min(n, 2 * kAhead); ++j) api::PrefetchImpl(*order[j]);
  for (size_t j = 0; j < std::min(n, kAhead); ++j) api::PrefetchStorage(*order[j]);
  for (size_t i = 0; i < n; ++i) {
    if (i + 2 * kAhead < n) api::PrefetchImpl(*order[i + 2 * kAhead]);
    if (i + kAhead < n) api::PrefetchStorage(*order[i + kAhead]);
    if (!(Fingerprint::Of(*order[i]) == kept_[i])) return valid_ = false;
  }
  return valid_ = true;
}

bool KeptTable::Fits(TensorList params, TensorList grads, const Tensor* grad_scale, const Tensor* found_inf) {
  const int64_t n = table_.num_tensors;
  if (static_cast<int64_t>(grads.size()) != n) return false;
  grads_.clear();
  for (int64_t t = 0; t < n; ++t) {
    const Tensor& g = grads[t];
    if (!g.defined() || g.layout() != api::kStrided || api::Dtype(g) != dtype_ || !(g.device() == device_) ||
        !g.is_contiguous() || !api::SameShape(g, params[t])) {
      return false;
    }
    if (grad_scale != nullptr && api::InPlaceRefusal(g) != nullptr) return false;  // written: the full path names it
    const void* data = g.const_data_ptr();
    if (table_.numel[t] > 0) {
      const Bytes bytes = BytesOf(data, table_.numel[t], element_size_);
      if (Meets(written_, bytes)) return false;
      if (grad_scale != nullptr) grads_.push_back(bytes);  // written: the unscaled values are stored
    }
    const int64_t cell = t * table_.num_lists + table_.grad_col;
    table_.src[cell] = data;
    table_.dst[cell] = const_cast<void*>(data);
  }
  std::sort(grads_.begin(), grads_.end());
  for (size_t k = 1; k < grads_.size(); ++k)
    if (grads_[k - 1].second > grads_[k].first) return false;
  for (const Tensor* amp : {grad_scale, found_inf}) {  // read only: no written tensor may overlap them
    if (amp == nullptr) continue;
    const Bytes bytes = BytesOf(amp->const_data_ptr(), 1, 4);
    if (Meets(written_, bytes) || Meets(grads_, bytes)) return false;
  }
  for (Counter& c : counters_) {
    c.value = *ReadHostScalarAt(c.dtype, c.data);
    if (StepCountProblem(c.dtype, c.value) != nullptr) return false;
  }
  for (const Counter& c : checks_) {
    const double value = *ReadHostScalarAt(c.dtype, c.data);
    if (c.count ? StepCountProblem(c.dtype, value) != nullptr : !std::isfinite(value)) return false;
  }
  for (const HostState& h : host_state_)
    table_.state[h.t * table_.num_state + h.k].value = *ReadHostScalarAt(h.dtype, h.data);
  table_.grad_scale = grad_scale != nullptr ? grad_scale->const_data_ptr<float>() : nullptr;
  table_.found_inf = found_inf != nullptr ? found_inf->const_data_ptr<float>() : nullptr;
  return true;
}

std::vector<double> KeptTable::IncrementSteps() {
  std::vector<double> steps(counters_.size());
  for (size_t t = 0; t < counters_.size(); ++t)
    steps[t] = *WriteHostScalarAt(counters_[t].dtype, counters_[t].data, counters_[t].value + 1.0);
  return steps;
}

void KeptTable::Keep(const KernelTable& built, std::span<const TensorList> lists, TensorList host_counters,
                     std::span<const Checked> checked, std::span<const TensorList> state_lists, bool capturable) {
  valid_ = false;
  kept_.clear();
  written_.clear();
  written_tensors_.clear();
  counters_.clear();
  checks_.clear();
  host_state_.clear();
  mode_ = api::InPlaceMode();
  if (mode_ & api::kGradMode) return;
  for (int64_t t = 0; t < built.num_tensors && built.num_state > 0; ++t) {
    const StateScalar* state = built.State(t);
    const int on_host = static_cast<int>(
        std::count_if(state, state + built.num_state, [](const StateScalar& s) { return s.ptr == nullptr; }));
    if (on_host == 0) continue;
    if (on_host != built.num_state) return;  // split: the host's share reads the device's values too
    for (int k = 0; k < built.num_state; ++k) {
      const Tensor& s = state_lists[k][t];
      HostState h{t, k, s.is_cpu() ? s.mutable_data_ptr() : nullptr, api::Dtype(s)};
      if (h.data == nullptr || !ReadHostScalarAt(h.dtype, h.data)) return;  // read through the dispatcher
      host_state_.push_back(h);
    }
  }
  for (const TensorList list : lists) {
    for (const Tensor& x : list) {
      const Fingerprint& f = kept_.emplace_back(Fingerprint::Of(x));
      if (!f.contiguous) return;  // the full path stages it, a copy per step
      if (f.numel > 0) written_.push_back(BytesOf(f.data, f.numel, x.element_size()));
      if (api::kVersionCounters) written_tensors_.push_back(x);
    }
  }
  std::sort(written_.begin(), written_.end());
  for (const Tensor& s : host_counters) {
    if (!s.is_cpu()) return;  // read and filled through the dispatcher, which waits for the device
    counters_.push_back({s.mutable_data_ptr(), api::Dtype(s), 0.0});
  }
  for (const Checked& c : checked) {
    for (const Tensor& s : c.list) {  // (one on a device is not read by the full path either)
      if (s.is_cpu()) checks_.push_back({s.mutable_data_ptr(), api::Dtype(s), 0.0, c.count});
    }
  }
  const TensorList params = lists.front();
  if (!params.empty()) {
    dtype_ = api::Dtype(params[0]);
    device_ = params[0].device();
    element_size_ = params[0].element_size();
  }
  table_ = built;
  default_dtype_ = api::DefaultDtype();
  capturable_ = capturable;
  valid_ = true;
  CountKeptTableKeep();
}

void KeptTable::BumpVersions(TensorList grads, bool grads_written) const {
  for (const Tensor& x : written_tensors_) api::BumpVersion(x);
  if (grads_written)
    for (const Tensor& g : grads) api::BumpVersion(g);
}

int64_t Add(Run run) {
  Registry& r = TheRegistry();
  std::lock_guard<std::mutex> lock(r.mutex);
  const int64_t id = r.next++;
  r.runs.emplace(id, std::make_shared<const Run>(std::move(run)));
  return id;
}

Slots SlotsOf(const std::string& schema) {
  Slots slots;
  int position = 0;
  for (const std::string& raw : Arguments(schema)) {
    const size_t first = raw.find_first_not_of(' ');
    if (first == std::string::npos || raw.compare(first, std::string::npos, "*") == 0) continue;  // keyword marker
    std::string arg = raw.substr(first);
    arg = arg.substr(0, arg.find('='));  // the default, if any
    const std::string name = arg.substr(arg.rfind(' ') + 1);
    if (name == "grads") slots.grads = position;
    if (name == "lr") slots.lr = position;
    if (name == "grad_scale") slots.grad_scale = position;
    if (name == "found_inf") slots.found_inf = position;
    ++position;
  }
  FUSED_OPTIM_CHECK(slots.grads >= 0 && slots.lr >= 0 && slots.grad_scale >= 0 && slots.found_inf >= 0,
                    "fused_optim: an in-place step op's schema lacks grads, lr, grad_scale or found_inf: ", schema);
  return slots;
}

std::string KeepSchema(const std::string& schema) {
  const size_t open = schema.find('('), arrow = schema.rfind(") ->");
  std::string out = schema.substr(0, open) + "keep(";
  for (size_t i = open + 1; i < arrow; ++i) {  // drop every alias annotation "(a!)"
    if (schema[i] == '(' && schema.find('!', i) < schema.find(')', i)) {
      i = schema.find(')', i);
      continue;
    }
    out += schema[i];
  }
  return out + ") -> int";
}

}  // namespace fused_optim::kept

#ifdef FUSED_OPTIM_STABLE_ABI
STABLE_TORCH_LIBRARY_FRAGMENT(fused_optim, m) {
  // One step of a kept call (<algo>_step_keep): its gradients, learning rate and AMP arguments.
  m.def("kept_step_(int kept, Tensor(a!)[] grads, *, float lr, " FUSED_OPTIM_AMP_ARGS ") -> ()");
  m.def("kept_free(int kept) -> ()");
}

STABLE_TORCH_LIBRARY_IMPL(fused_optim, CompositeExplicitAutograd, m) {
  m.impl("kept_step_", TORCH_BOX(&fused_optim::kept::KeptStep));
  m.impl("kept_free", TORCH_BOX(&fused_optim::kept::KeptFree));
}
#else
// The fast path's unboxed calls of the same two ops (eager_call.h), on this build's registry.
[[maybe_unused]] static const bool registered_kept = [] {
  fused_optim::eager::Register("kept_step_", &fused_optim::kept::KeptStep);
  fused_optim::eager::Register("kept_free", &fused_optim::kept::KeptFree);
  return true;
}();
#endif
