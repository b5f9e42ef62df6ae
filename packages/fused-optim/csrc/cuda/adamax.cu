// CUDA launches for Adamax: the element functions are the bindings in
// csrc/kernels/adamax.h, launched by cuda/multi_tensor.cuh.
#include "cuda/multi_tensor.cuh"
#include "kernels.h"

namespace fused_optim::cuda {

FUSED_OPTIM_DEFINE_CUDA_KERNEL(AdamaxStep)
FUSED_OPTIM_DEFINE_CUDA_KERNEL(AdamaxBackward)

}  // namespace fused_optim::cuda
