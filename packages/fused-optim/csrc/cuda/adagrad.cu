// CUDA launches for Adagrad: the element functions are the bindings in
// csrc/kernels/adagrad.h, launched by cuda/multi_tensor.cuh.
#include "cuda/multi_tensor.cuh"
#include "kernels.h"

namespace fused_optim::cuda {

FUSED_OPTIM_DEFINE_CUDA_KERNEL(AdagradStep)
FUSED_OPTIM_DEFINE_CUDA_KERNEL(AdagradBackward)

}  // namespace fused_optim::cuda
