// The switches declared in modes.h, in the shared library both builds of the op glue link.
#include "modes.h"

#include <atomic>
#include <cstdint>
#include <cstdlib>
#include <string>

namespace fused_optim {

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
const std::string emulation_env = [] {
  const char* env = std::getenv("FUSED_OPTIM_EMULATE_CUDA");
  return std::string(env != nullptr ? env : "");
}();
std::atomic<bool> emulate_cuda{emulation_env == "1" || emulation_env == "plan"};
}  // namespace

bool SetCudaEmulation(bool enable) { return emulate_cuda.exchange(enable); }

bool CudaEmulation() { return emulate_cuda.load(std::memory_order_relaxed); }

bool CudaEmulationRunsBlocks() { return emulation_env != "plan"; }

bool SetValidateOnly(bool enable) {
  const bool previous = validate_only;
  validate_only = enable;
  return previous;
}

bool ValidateOnly() { return validate_only; }

namespace {
thread_local int64_t state_scalars_on_host = 0;  // a bit mask of state columns
}  // namespace

int64_t SetStateScalarsOnHost(int64_t columns) {
  const int64_t previous = state_scalars_on_host;
  state_scalars_on_host = columns;
  return previous;
}

int64_t StateScalarsOnHost() { return state_scalars_on_host; }

namespace {
std::atomic<bool> asgd_foreach_eta_on_cpu{false};
}  // namespace

bool SetAsgdForeachEtaOnCpu(bool enable) { return asgd_foreach_eta_on_cpu.exchange(enable); }

bool AsgdForeachEtaOnCpu() { return asgd_foreach_eta_on_cpu.load(std::memory_order_relaxed); }

namespace {
std::atomic<int64_t> kept_table_steps{0};
std::atomic<int64_t> kept_table_keeps{0};
}  // namespace

int64_t KeptTableSteps() { return kept_table_steps.load(); }

void CountKeptTableStep() { kept_table_steps.fetch_add(1, std::memory_order_relaxed); }

int64_t KeptTableKeeps() { return kept_table_keeps.load(); }

void CountKeptTableKeep() { kept_table_keeps.fetch_add(1, std::memory_order_relaxed); }

}  // namespace fused_optim
