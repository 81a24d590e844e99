// The fp8 scaled matmul on CUDA tensors (host dispatch: checks, then the launcher of
// scaled_mm.cu). Same signature and semantics as cpu_ops::scaled_mm (ops/cpu/moe.h), in the same
// fixed order of K blocks; the block partials come from tensor cores, so the bits are the
// kernel's own (docs/moe.md).
#pragma once

#include "ops/cpu/moe.h"

#include <ATen/ATen.h>

namespace detfuzz::cuda_ops {

// a [M, K], b [K, N] float8_e4m3fn; scales float32 of cpu_ops::scale_a_sizes / scale_b_sizes;
// bias [N] of out_dtype or undefined; out_dtype float32, float16 or bfloat16.
at::Tensor scaled_mm(const at::Tensor &a, const at::Tensor &b, const at::Tensor &scale_a, const at::Tensor &scale_b,
                     const at::Tensor &bias, cpu_ops::ScaleMode mode, at::ScalarType out_dtype);

}  // namespace detfuzz::cuda_ops
