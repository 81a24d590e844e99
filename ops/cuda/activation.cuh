// silu(g) * u as every CUDA kernel of the project computes it (silu_and_mul, the fused MoE
// layers): the sigmoid from expf of a non-positive argument, IEEE float32 operations in a fixed
// order. Device code only.
#pragma once

__device__ __forceinline__ float silu_mul(float g, float u) {
  float sig;
  if (g >= 0.0f) {
    sig = __fdiv_rn(1.0f, __fadd_rn(1.0f, expf(-g)));
  } else {
    const float ex = expf(g);
    sig = __fdiv_rn(ex, __fadd_rn(1.0f, ex));
  }
  return __fmul_rn(__fmul_rn(g, sig), u);
}
