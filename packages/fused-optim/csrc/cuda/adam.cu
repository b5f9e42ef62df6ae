// CUDA launches for Adam/AdamW and the Adam direction: the element functions are the bindings in
// csrc/kernels/adam.h, launched by cuda/multi_tensor.cuh.
#include "cuda/multi_tensor.cuh"
#include "kernels.h"

namespace fused_optim::cuda {

FUSED_OPTIM_DEFINE_CUDA_KERNEL(AdamStep)
FUSED_OPTIM_DEFINE_CUDA_KERNEL(AdamBackward)
FUSED_OPTIM_DEFINE_CUDA_KERNEL(AdamDirection)
FUSED_OPTIM_DEFINE_CUDA_KERNEL(AdamDirectionBackward)

}  // namespace fused_optim::cuda
