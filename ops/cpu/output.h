// The last step of every CPU op: float32 results to the output dtype, with NaN canonicalised.
// x86 arithmetic propagates a NaN operand's sign and payload and which operand wins depends on
// the instruction's operand order, which the compiler may pick differently in vectorised and
// scalar code; so NaN bits are not part of the fixed order unless we fix them here. Every NaN
// result becomes the positive quiet NaN (GPUs produce a canonical NaN in hardware too).
#pragma once

#include <ATen/ATen.h>

#include <limits>

namespace detfuzz::cpu_ops {

inline at::Tensor to_output(at::Tensor f32, at::ScalarType dtype) {
  f32.masked_fill_(f32.isnan(), std::numeric_limits<float>::quiet_NaN());
  return f32.to(dtype);
}

}  // namespace detfuzz::cpu_ops
