// The bitwise comparison behind every invariance verdict. Two CUDA tensors are compared on the
// device (properties/cuda/device_diff.cu): only the counts, the first differing index and its two
// bit patterns come back to the host, never the tensors. Anything else goes to the host diff
// engine (harness/diff.h). Both return the same DiffStats for the same tensors.
#pragma once

#include "harness/diff.h"

namespace detfuzz {

DiffStats compare_bits(const at::Tensor &expected, const at::Tensor &actual);

// The device path itself, for its test: throws std::invalid_argument when the tensors are not
// both on a CUDA device with a dtype it handles (float32/16, bfloat16, float64, int32/64).
DiffStats device_bitwise_diff(const at::Tensor &expected, const at::Tensor &actual);

}  // namespace detfuzz
