// CUDA launches for SGD: the element functions are the bindings in
// csrc/kernels/sgd.h, launched by cuda/multi_tensor.cuh.
#include "cuda/multi_tensor.cuh"
#include "kernels.h"

namespace fused_optim::cuda {

FUSED_OPTIM_DEFINE_CUDA_KERNEL(SgdStep)
FUSED_OPTIM_DEFINE_CUDA_KERNEL(SgdBackward)

}  // namespace fused_optim::cuda
