// CPU loops for Adadelta: the element functions are the bindings in csrc/kernels/adadelta.h,
// run by cpu/run_kernel.h (one build per ISA, see isa.h).
#include "cpu/for_each_chunk.h"
#include "cpu/isa.h"
#include "kernels.h"

FUSED_OPTIM_CPU_ISA_TARGET
namespace fused_optim::FUSED_OPTIM_CPU_NS {
using namespace ::fused_optim::cpu;  // the chunk driver in for_each_chunk.h (no-op in cpu itself)
#include "cpu/run_kernel.h"

FUSED_OPTIM_DEFINE_CPU_KERNEL(AdadeltaStep)
FUSED_OPTIM_DEFINE_CPU_KERNEL(AdadeltaBackward)

}  // namespace fused_optim::FUSED_OPTIM_CPU_NS
