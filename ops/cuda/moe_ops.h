// The fp8 scaled matmul and the fused MoE layer on CUDA tensors (host dispatch: checks, then the
// launchers of scaled_mm.cu and fused_moe.cu). Same signatures and semantics as cpu_ops
// (ops/cpu/moe.h), in the same fixed orders. scaled_mm's block partials come from tensor cores,
// so its bits are the kernel's own; fused_moe's are the CPU kernel's but for the last bit of exp
// (docs/moe.md).
#pragma once

#include "ops/cpu/moe.h"
#include "ops/cuda/scaled_mm.cuh"

#include <ATen/ATen.h>

namespace detfuzz::cuda_ops {

// a [M, K], b [K, N] float8_e4m3fn; scales float32 of cpu_ops::scale_a_sizes / scale_b_sizes;
// bias [N] of out_dtype or undefined; out_dtype float32, float16 or bfloat16. b may have any
// strides; column-major (a weight's transpose) is what the Hopper kernel reads without a copy.
// path forces a kernel or tile shape (tests); automatic is the impl's choice.
// promote_blocks > 1 (the planted mutant's interval; path mma_sync only): see ScaledMmParams.
at::Tensor scaled_mm(const at::Tensor &a, const at::Tensor &b, const at::Tensor &scale_a, const at::Tensor &scale_b,
                     const at::Tensor &bias, cpu_ops::ScaleMode mode, at::ScalarType out_dtype,
                     cuda_kernels::ScaledMmPath path = cuda_kernels::ScaledMmPath::automatic, int promote_blocks = 1);

// A token's top-k experts (ids int64) and weights (float32), [T, k] each, on logits' device.
cpu_ops::Routing moe_route(const at::Tensor &logits, int64_t top_k);

// x [T, H] (float32, float16, bfloat16), logits [T, E] float32, w13 [E, 2I, H], w2 [E, H, I] of
// x's dtype (w13_scale, w2_scale undefined) or float8_e4m3fn with their 128 x 128 block scales.
// The planted mutants' schedules (ops/cuda/register.cpp), the CPU's MoePlan on the CUDA-core
// kernels: each makes a token's bits depend on how many tokens reach an expert. The default is
// the invariant layer.
struct MoeMutation {
  int64_t small_k_block_from = 0;       // experts with >= this many tokens sum K blocks of 32 (0: never)
  int64_t split_k_up_to = 0;            // experts with <= this many tokens split K in two (0: never)
  bool combine_by_expert_load = false;  // a token's slots added busiest expert first
  bool any() const { return small_k_block_from > 0 || split_k_up_to > 0 || combine_by_expert_load; }
};

at::Tensor fused_moe(const at::Tensor &x, const at::Tensor &logits, const at::Tensor &w13, const at::Tensor &w2,
                     const at::Tensor &w13_scale, const at::Tensor &w2_scale, int64_t top_k,
                     const MoeMutation &mutation = {});

}  // namespace detfuzz::cuda_ops
