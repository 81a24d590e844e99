// The last step of every CPU op: float32 results to the output dtype, with NaN canonicalised.
// x86 arithmetic propagates a NaN operand's sign and payload and which operand wins depends on
// the instruction's operand order, which the compiler may pick differently in vectorised and
// scalar code; so NaN bits are not part of the fixed order unless we fix them here. Every NaN
// result becomes the dtype's positive quiet NaN (float32 0x7fc00000, bfloat16 0x7fc0, float16
// 0x7e00; ATen's own vectorised bfloat16 conversion would give 0xffff or 0x7fc0 depending on its
// vector path). Other values round to nearest even, as ATen's conversion does.
#pragma once

#include <ATen/ATen.h>

#include <vector>

namespace detfuzz::cpu_ops {

// One pass over a float32 result (float32 outputs are canonicalised in place and returned); the
// result keeps `f32`'s strides where it is dense (a view with gaps comes back contiguous).
at::Tensor to_output(at::Tensor f32, at::ScalarType dtype);

// The same from a row-major float32 buffer of `sizes`, into a fresh contiguous tensor (no float32
// tensor in between).
at::Tensor to_output(const float *src, at::IntArrayRef sizes, at::ScalarType dtype);

// The first step of the row and element-wise ops: a float32, bfloat16 or float16 CPU tensor's
// values as float32, row-major. A contiguous float32 tensor gives its own data; anything else is
// converted into `buffer` (exactly; float16 through F16C where the CPU has it, where a signalling
// NaN comes out quiet, as from ATen's conversion: no op's output can tell, every NaN being
// canonicalised on the way out). No ATen call, no allocation once `buffer` has grown.
const float *float_values(const at::Tensor &t, std::vector<float> &buffer);

}  // namespace detfuzz::cpu_ops
