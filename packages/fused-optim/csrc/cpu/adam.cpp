// CPU loops for Adam/AdamW and the Adam direction: the element functions are the bindings in csrc/kernels/adam.h,
// run by cpu/run_kernel.h (one build per ISA, see isa.h).
#include "cpu/for_each_chunk.h"
#include "cpu/isa.h"
#include "kernels.h"

FUSED_OPTIM_CPU_ISA_TARGET
namespace fused_optim::FUSED_OPTIM_CPU_NS {
using namespace ::fused_optim::cpu;  // the chunk driver in for_each_chunk.h (no-op in cpu itself)
#include "cpu/run_kernel.h"

FUSED_OPTIM_DEFINE_CPU_KERNEL(AdamStep)
FUSED_OPTIM_DEFINE_CPU_KERNEL(AdamBackward)
FUSED_OPTIM_DEFINE_CPU_KERNEL(AdamDirection)
FUSED_OPTIM_DEFINE_CPU_KERNEL(AdamDirectionBackward)

}  // namespace fused_optim::FUSED_OPTIM_CPU_NS
