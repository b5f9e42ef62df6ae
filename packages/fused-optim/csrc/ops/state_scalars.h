// Per-parameter scalar state other than the step counter (NAdam's mu_product, ASGD's eta and
// mu): checked with the op's other arguments, then read and written in place in their own dtype,
// exactly as torch.optim's in-place updates of those 0-d tensors round them.
#pragma once

#include <ATen/core/Tensor.h>
#include <ATen/core/grad_mode.h>
#include <c10/core/DefaultDtype.h>
#include <c10/core/InferenceMode.h>
#include <c10/util/BFloat16.h>
#include <c10/util/Exception.h>
#include <c10/util/Half.h>

#include <algorithm>
#include <cmath>
#include <optional>
#include <vector>

#include "multi_tensor.h"

namespace fused_optim {

// Each of `n` tensors must be a distinct, dense, writable one-element floating tensor holding a
// finite value (on any device: torch.optim keeps ASGD's on the parameter's device).
inline void CheckStateScalars(const char* op, const char* name, at::TensorList scalars, int64_t n) {
  TORCH_CHECK_VALUE(static_cast<int64_t>(scalars.size()) == n, op, ": ", name, " has ", scalars.size(),
                    " tensors but params has ", n);
  std::vector<const void*> seen;
  seen.reserve(n);
  for (int64_t t = 0; t < n; ++t) {
    const at::Tensor& s = scalars[t];
    TORCH_CHECK_VALUE(s.defined() && s.layout() == at::kStrided && s.numel() == 1, op, ": ", name, "[", t,
                      "] must be a dense one-element tensor");
    TORCH_CHECK_TYPE(s.is_floating_point(), op, ": ", name, "[", t, "] has dtype ", s.scalar_type(),
                     "; it must be a floating point tensor");
    TORCH_CHECK(!(at::GradMode::is_enabled() && s.requires_grad()), op, ": ", name, "[", t,
                "] requires grad and grad mode is enabled; an in-place step is not differentiable");
    TORCH_CHECK_VALUE(!s.is_inference() || c10::InferenceMode::is_enabled(), op, ": ", name, "[", t,
                      "] is an inference tensor and cannot be updated in place outside inference mode");
    // Read through the data pointer on the CPU. A device value is not read here: that would wait
    // for the device on every step, and a non-finite one reaches the parameters as NaN, as it
    // does in torch.optim, which does not check it either.
    const std::optional<double> value = ReadHostScalar(s);
    TORCH_CHECK_VALUE(!value || std::isfinite(*value), op, ": ", name, "[", t, "] is ", *value, "; it must be finite");
    seen.push_back(s.const_data_ptr());
  }
  std::sort(seen.begin(), seen.end());
  TORCH_CHECK_VALUE(std::adjacent_find(seen.begin(), seen.end()) == seen.end(), op,
                    ": the same tensor appears twice in ", name,
                    " (each parameter needs its own; is a parameter listed twice?)");
}

inline double ReadStateScalar(const at::Tensor& s) {
  if (const std::optional<double> value = ReadHostScalar(s)) return *value;
  return s.item<double>();
}

// Writes `value` rounded to the tensor's dtype (torch's copy_ of a Python number) and bumps its
// version counter.
inline void WriteStateScalar(const at::Tensor& s, double value) {
  if (!WriteHostScalar(s, value)) const_cast<at::Tensor&>(s).fill_(value);
}

// `value` as torch.as_tensor(value) holds it: rounded to the default dtype. torch.optim.ASGD
// builds its next eta and mu that way before copying them into the state tensors.
inline double RoundToDefaultDtype(double value) {
  switch (c10::get_default_dtype_as_scalartype()) {
    case at::kFloat:
      return static_cast<double>(static_cast<float>(value));
    case at::kHalf:
      return static_cast<double>(static_cast<float>(c10::Half(static_cast<float>(value))));
    case at::kBFloat16:
      return static_cast<double>(static_cast<float>(c10::BFloat16(static_cast<float>(value))));
    default:
      return value;
  }
}

// s *= factor in the tensor's dtype (torch's in-place multiplication by a Python number, which
// rounds the factor to that dtype first); returns the new value.
inline double ScaleStateScalar(const at::Tensor& s, double factor) {
  if (const std::optional<double> value = ReadHostScalar(s)) {
    // The product of two floats is exact in double, so one rounding to the dtype follows, as in
    // torch's float arithmetic (float16 and bfloat16 compute in float too).
    const double rounded = s.scalar_type() == at::kDouble ? factor : static_cast<double>(static_cast<float>(factor));
    WriteHostScalar(s, *value * rounded);
    return *ReadHostScalar(s);
  }
  const_cast<at::Tensor&>(s).mul_(factor);
  return s.item<double>();
}

}  // namespace fused_optim
