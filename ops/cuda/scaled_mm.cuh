// Raw-pointer launcher of the batch-invariant fp8 scaled matmul (no torch here; host C++ may
// include this header). out[M, N] = (a * sa) @ (b * sb) + bias, in the fixed order of
// ops/cpu/moe.h: float32 partials over 128-wide K blocks, each times sa * sb, added into a float32
// accumulator in K order, the bias last, one rounding to the output dtype.
//
// Layouts: a row-major [M, K] (element (m, k) at a[m * lda + k]), b row-major [K, N] (element
// (k, n) at b[k * ldb + n]), both float8 e4m3fn bytes; out row-major [M, N], contiguous; bias [N]
// of the output dtype, contiguous, or nullptr. Scales, float32, contiguous, by mode:
//   tensor  sa [1],            sb [1]
//   channel sa [M] (per row),  sb [N] (per column)
//   block   sa [M, ceil(K/128)], sb [ceil(K/128), ceil(N/128)]
//
// The bits of out[m, n] depend only on K, the mode, row m of a (and its scales), column n of b
// (and its scales) and bias[n]: never on M, N or the grid.
#pragma once

#include "ops/cuda/gemm.cuh"  // DType

#include <cuda_runtime_api.h>

#include <cstdint>

namespace detfuzz::cuda_kernels {

enum class Fp8Scale { tensor, channel, block };

struct ScaledMmParams {
  const uint8_t *a = nullptr;
  int64_t lda = 0;
  const uint8_t *b = nullptr;
  int64_t ldb = 0;
  const float *scale_a = nullptr, *scale_b = nullptr;
  Fp8Scale mode = Fp8Scale::tensor;
  const void *bias = nullptr;
  void *out = nullptr;
  DType out_dtype = DType::bf16;  // f32, f16 or bf16 (the bias has it too)
  int64_t M = 0, N = 0, K = 0;
};

// The promotion interval along K (and the fp8 scale block).
constexpr int64_t kScaledMmBlockK = 128;

void launch_scaled_mm(const ScaledMmParams &p, cudaStream_t stream);

}  // namespace detfuzz::cuda_kernels
