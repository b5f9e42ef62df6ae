// Process- and thread-wide switches of fused-optim, kept in one place (the shared library
// libfused_optim_kernels, csrc/modes.cpp) so that both builds of the op glue (torch_api.h) and the
// kernels see the same settings.
#pragma once

#include <cstdint>

namespace fused_optim {

// Which build of the CPU loops runs: the widest the CPU supports, capped by the environment
// variable FUSED_OPTIM_CPU_ISA=baseline|avx2|avx512 (tests use it to check that every build gives
// identical results).
enum class CpuIsa { kBaseline, kAvx2, kAvx512 };
CpuIsa SelectedCpuIsa();

// Test mode: every CPU call runs its kernel's CUDA launch emulated on the host (the launch plan and
// kernel body of csrc/cuda/launch_plan.h, block by block) instead of the CPU loops, so that CPU
// tests reach what only the CUDA path does. Process-wide, off unless FUSED_OPTIM_EMULATE_CUDA=1 is
// set when the library loads; switched by fused_optim._C._emulate_cuda. Returns the previous setting.
bool SetCudaEmulation(bool enable);
bool CudaEmulation();
// With FUSED_OPTIM_EMULATE_CUDA=plan the emulation plans every launch and fills its argument but
// runs none of its blocks (false here): the results are garbage, and a call costs what the CUDA
// path costs the host, less the driver's launches, so a machine with no GPU can time that path
// (benchmarks/optim/bench_host.py --device plan).
bool CudaEmulationRunsBlocks();

// Validate-only mode, per thread, switched by the op fused_optim::_validate_only(enable) (which
// returns the previous setting): an in-place <algo>_step_ op then returns after its last check,
// before its first write. A drop-in optimizer's step makes one call per group; it runs every call
// so first, and only then for real, so a bad later group leaves every tensor untouched.
bool SetValidateOnly(bool enable);
bool ValidateOnly();

// Host-state mode, per thread, for tests (the op fused_optim::_state_scalars_on_host(columns),
// returning the previous setting): SetStateScalars then treats the state columns set in the bit
// mask `columns` as off the call's device, read at launch and advanced by the host
// (FinishStateScalars), the path a CUDA call takes for state kept on the CPU (NAdam's mu_product,
// ASGD's step after load_state_dict), so that CPU tests reach it. 0 (the default): none.
int64_t SetStateScalarsOnHost(int64_t columns);
int64_t StateScalarsOnHost();

// Tests only (the op fused_optim::_asgd_foreach_eta): CPU calls of ASGD compute the next eta as
// CUDA calls do (torch's foreach formula), so that CPU tests reach that branch; returns the
// previous setting.
bool SetAsgdForeachEtaOnCpu(bool enable);
bool AsgdForeachEtaOnCpu();

// Steps that ran a kept table (kept_step.h) so far, and tables kept, in either build: tests check
// that the reuse took effect (fused_optim._C._kept_table_steps, _kept_table_keeps). StepInPlace
// and KeptTable::Keep count.
int64_t KeptTableSteps();
void CountKeptTableStep();
int64_t KeptTableKeeps();
void CountKeptTableKeep();

}  // namespace fused_optim
