// CUDA launches for Adadelta: the element functions are the bindings in
// csrc/kernels/adadelta.h, launched by cuda/multi_tensor.cuh.
#include "cuda/multi_tensor.cuh"
#include "kernels.h"

namespace fused_optim::cuda {

FUSED_OPTIM_DEFINE_CUDA_KERNEL(AdadeltaStep)
FUSED_OPTIM_DEFINE_CUDA_KERNEL(AdadeltaBackward)

}  // namespace fused_optim::cuda
