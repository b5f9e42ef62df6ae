// Per-parameter scalar state other than the step counter (NAdam's mu_product, ASGD's eta and
// mu): checked with the op's other arguments; the kernels then read and advance them in their own
// dtype where they live (MultiTensorCall::SetStateScalars), as torch.optim's in-place updates of
// those 0-d tensors round them.
#pragma once

#include <algorithm>
#include <cmath>
#include <optional>
#include <vector>

#include "multi_tensor.h"

namespace fused_optim {

// Each of `n` tensors must be a distinct, dense, writable one-element floating tensor holding a
// finite value (on any device: torch.optim keeps ASGD's on the parameter's device; a value on a
// device is not read, see below).
inline void CheckStateScalars(const char* op, const char* name, TensorListArg scalars, int64_t n) {
  FUSED_OPTIM_CHECK_VALUE(static_cast<int64_t>(scalars.size()) == n, op, ": ", name, " has ", scalars.size(),
                          " tensors but params has ", n);
  std::vector<const void*> seen;
  seen.reserve(n);
  for (int64_t t = 0; t < n; ++t) {
    const Tensor& s = scalars[t];
    FUSED_OPTIM_CHECK_VALUE(s.defined() && s.layout() == api::kStrided && s.numel() == 1, op, ": ", name, "[", t,
                            "] must be a dense one-element tensor");
    const ScalarType dtype = s.scalar_type();
    FUSED_OPTIM_CHECK_TYPE(
        dtype == api::kFloat || dtype == api::kDouble || dtype == api::kHalf || dtype == api::kBFloat16, op, ": ", name,
        "[", t, "] has dtype ", dtype, "; it must be float32, float64, float16 or bfloat16");
    CheckWritable(op, name, t, s);
    // Read through the data pointer on the CPU. A device value is not read here: that would wait
    // for the device on every step, and a non-finite one reaches the parameters as NaN, as it
    // does in torch.optim, which does not check it either.
    const std::optional<double> value = ReadHostScalar(s);
    FUSED_OPTIM_CHECK_VALUE(!value || std::isfinite(*value), op, ": ", name, "[", t, "] is ", *value,
                            "; it must be finite");
    seen.push_back(s.const_data_ptr());
  }
  std::sort(seen.begin(), seen.end());
  FUSED_OPTIM_CHECK_VALUE(std::adjacent_find(seen.begin(), seen.end()) == seen.end(), op,
                          ": the same tensor appears twice in ", name,
                          " (each parameter needs its own; is a parameter listed twice?)");
}

// capturable=True: every one of these state scalars must be on the params' device, where the
// kernel reads and advances it (one elsewhere would be read and written by the host at launch,
// which a captured step would replay with the value of its capture).
inline void CheckStateScalarsOn(const char* op, const char* name, TensorListArg scalars, const Device& device) {
  for (size_t t = 0; t < scalars.size(); ++t) {
    FUSED_OPTIM_CHECK_VALUE(scalars[t].device() == device, op, ": capturable=True needs every one of ", name,
                            " on the params' device, but ", name, "[", t, "] is on ", scalars[t].device(),
                            " and params on ", device,
                            " (a state loaded or made with capturable=False: move it with .to(param.device))");
  }
}

}  // namespace fused_optim
