// Raw-pointer launchers of the transformer's row and element-wise ops (no torch here). Inputs and
// outputs are contiguous; formulas and orders as ops/cpu/transformer_ops.cpp, the spec.
#pragma once

#include "ops/cuda/gemm.cuh"  // DType

#include <cuda_runtime_api.h>

#include <cstdint>

namespace detfuzz::cuda_kernels {

// x, y [rows, h], w [h], all of `dtype` (f32/f16/bf16).
void launch_rms_norm(DType dtype, const void *x, const void *w, void *y, int64_t rows, int64_t h, float eps,
                     cudaStream_t stream);
// x [rows, 2i] -> y [rows, i].
void launch_silu_and_mul(DType dtype, const void *x, void *y, int64_t rows, int64_t i, cudaStream_t stream);
// x, y [t, heads, d]; positions int64 [t].
void launch_rope(DType dtype, const void *x, const int64_t *positions, void *y, int64_t t, int64_t heads, int64_t d,
                 double theta, cudaStream_t stream);

// The largest row rms_norm takes (its block partials live in shared memory).
constexpr int64_t kRmsNormMaxH = 64 * 12288;

}  // namespace detfuzz::cuda_kernels
