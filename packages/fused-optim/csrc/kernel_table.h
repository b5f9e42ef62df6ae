// The plain-C++ description of one multi-tensor call that the CPU and CUDA kernels consume.
// It holds no torch types so the .cu files compile with nvcc against the CUDA runtime alone.
#pragma once

#include <cstdint>
#include <vector>

namespace fused_optim {

enum class DType : int { kFloat, kDouble, kHalf, kBFloat16 };

// Rows are tensor indices, columns are the op's lists (params, grads, states...).
// `dst` is where a list's result goes; `src` is where its input values come from. They are the
// same pointer for in-place lists and read-only inputs; a functional op points `dst` at a fresh
// output and `src` at the caller's tensor. An absent optional input has both null (read as 0).
struct KernelTable {
  DType dtype = DType::kFloat;
  int num_lists = 0;
  int num_scalars = 0;  // per-tensor scalars, e.g. bias corrections that depend on each step count
  int64_t num_tensors = 0;
  std::vector<void*> dst;
  std::vector<const void*> src;
  std::vector<int64_t> numel;
  std::vector<double> scalars;
  void* stream = nullptr;  // cudaStream_t for CUDA tables

  template <typename S>
  S* Dst(int64_t t, int list) const {
    return static_cast<S*>(dst[t * num_lists + list]);
  }
  template <typename S>
  const S* Src(int64_t t, int list) const {
    return static_cast<const S*>(src[t * num_lists + list]);
  }
  double Scalar(int64_t t, int k) const { return scalars[t * num_scalars + k]; }
};

}  // namespace fused_optim
