// The last step of every CPU op: float32 results to the output dtype, with NaN canonicalised.
// x86 arithmetic propagates a NaN operand's sign and payload and which operand wins depends on
// the instruction's operand order, which the compiler may pick differently in vectorised and
// scalar code; so NaN bits are not part of the fixed order unless we fix them here. Every NaN
// result becomes the dtype's positive quiet NaN (float32 0x7fc00000, bfloat16 0x7fc0, float16
// 0x7e00; ATen's own vectorised bfloat16 conversion would give 0xffff or 0x7fc0 depending on its
// vector path). Other values round to nearest even, as ATen's conversion does.
#pragma once

#include <ATen/ATen.h>

namespace detfuzz::cpu_ops {

// One pass over a float32 result (float32 outputs are canonicalised in place and returned); the
// result keeps `f32`'s strides where it is dense (a view with gaps comes back contiguous).
at::Tensor to_output(at::Tensor f32, at::ScalarType dtype);

}  // namespace detfuzz::cpu_ops
