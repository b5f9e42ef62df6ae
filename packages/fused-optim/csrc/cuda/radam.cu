// CUDA launches for RAdam: the element functions are the bindings in
// csrc/kernels/radam.h, launched by cuda/multi_tensor.cuh.
#include "cuda/multi_tensor.cuh"
#include "kernels.h"

namespace fused_optim::cuda {

FUSED_OPTIM_DEFINE_CUDA_KERNEL(RadamStep)
FUSED_OPTIM_DEFINE_CUDA_KERNEL(RadamBackward)

}  // namespace fused_optim::cuda
