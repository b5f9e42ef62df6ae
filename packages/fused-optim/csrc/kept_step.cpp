// Kept steps' registry and their two ops, kept_step_ and kept_free (see kept_step.h).
#include "kept_step.h"

#include <mutex>
#include <unordered_map>
#include <vector>

#include "multi_tensor.h"

namespace fused_optim::kept {
namespace {

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

STABLE_TORCH_LIBRARY_FRAGMENT(fused_optim, m) {
  // One step of a kept call (<algo>_step_keep): its gradients, learning rate and AMP arguments.
  m.def("kept_step_(int kept, Tensor(a!)[] grads, *, float lr, " FUSED_OPTIM_AMP_ARGS ") -> ()");
  m.def("kept_free(int kept) -> ()");
}

STABLE_TORCH_LIBRARY_IMPL(fused_optim, CompositeExplicitAutograd, m) {
  m.impl("kept_step_", TORCH_BOX(&fused_optim::kept::KeptStep));
  m.impl("kept_free", TORCH_BOX(&fused_optim::kept::KeptFree));
}
