// CPU loops for RAdam: the element functions are the bindings in csrc/kernels/radam.h,
// run by cpu/run_kernel.h (one build per ISA, see isa.h).
#include "cpu/for_each_chunk.h"
#include "cpu/isa.h"
#include "kernels.h"

FUSED_OPTIM_CPU_ISA_TARGET
namespace fused_optim::FUSED_OPTIM_CPU_NS {
using namespace ::fused_optim::cpu;  // the chunk driver in for_each_chunk.h (no-op in cpu itself)
#include "cpu/run_kernel.h"

FUSED_OPTIM_DEFINE_CPU_KERNEL(RadamStep)
FUSED_OPTIM_DEFINE_CPU_KERNEL(RadamBackward)

}  // namespace fused_optim::FUSED_OPTIM_CPU_NS
