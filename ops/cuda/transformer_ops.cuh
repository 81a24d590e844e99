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
// rope over the Q and K heads of qkv's rows (row r at qkv + r * ld: q_heads, then kv_heads K, then
// kv_heads V heads of d) into q [t, q_heads, d], and K (rotated) and V into row slots[r] of k_pool
// and v_pool ([slots, kv_heads, d]); positions, slots int64 [t].
void launch_rope_store_kv(DType dtype, const void *qkv, int64_t ld, const int64_t *positions, const int64_t *slots,
                          void *q, void *k_pool, void *v_pool, int64_t t, int64_t q_heads, int64_t kv_heads, int64_t d,
                          double theta, cudaStream_t stream);

// The largest row rms_norm takes (its block partials live in shared memory).
constexpr int64_t kRmsNormMaxH = 64 * 12288;

}  // namespace detfuzz::cuda_kernels
