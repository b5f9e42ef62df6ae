// CUDA launches for RMSprop: the element functions are the bindings in
// csrc/kernels/rmsprop.h, launched by cuda/multi_tensor.cuh.
#include "cuda/multi_tensor.cuh"
#include "kernels.h"

namespace fused_optim::cuda {

FUSED_OPTIM_DEFINE_CUDA_KERNEL(RmspropStep)
FUSED_OPTIM_DEFINE_CUDA_KERNEL(RmspropBackward)

}  // namespace fused_optim::cuda
