// What a kernel binding is: the one place that maps a KernelTable's columns to an algorithm's
// math (include/fused_optim/math/<algo>.h), read by the CPU loop (cpu/run_kernel.h) and the CUDA
// launch (cuda/multi_tensor.cuh) alike. A binding K (csrc/kernels/<algo>.h) has
//
//   K::Hyper<T>                the hyper-parameter struct (kernels receive it in double);
//   K::Scalars<T>, MakeScalars  the per-tensor scalars (e.g. bias corrections) from a table row;
//   K::Flags(h, s)             the boolean options, as std::tie of references: the CPU loops
//                              compile one loop per combination of them;
//   K::kLists, K::Apply(io, h, s)  the column count and the element function (FUSED_OPTIM_ELEMENT),
//                              which reads a column with io.Load(col) and writes one with
//                              io.Store(col, value).
//
// An absent optional column loads as zero and a store to it is dropped.
#pragma once

#include <tuple>

#include "fused_optim/math/common.h"
#include "kernel_table.h"

// Element functions are always inlined into the loop that runs them: a call left in a CPU loop
// stops it from vectorizing (and the loops are built for wider ISAs than this header, which
// gcc's own inlining heuristics would not cross).
#if defined(__CUDACC__)
#define FUSED_OPTIM_ELEMENT __host__ __device__ __forceinline__
#else
#define FUSED_OPTIM_ELEMENT __attribute__((always_inline, flatten)) inline
#endif

namespace fused_optim::bind {

// For algorithms without per-tensor scalars.
struct NoScalars {
  template <typename T>
  struct Scalars {};
  template <typename T>
  FUSED_OPTIM_HOST_DEVICE static Scalars<T> MakeScalars(const double* /*row*/) {
    return {};
  }
};

}  // namespace fused_optim::bind
