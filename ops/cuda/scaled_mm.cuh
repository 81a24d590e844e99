// Raw-pointer launcher of the batch-invariant fp8 scaled matmul (no torch here; host C++ may
// include this header). out[M, N] = (a * sa) @ (b * sb) + bias, in the fixed order of
// ops/cpu/moe.h: float32 partials over 128-wide K blocks, each times sa * sb, added into a float32
// accumulator in K order, the bias last, one rounding to the output dtype.
//
// Layouts: a row-major [M, K] (element (m, k) at a[m * lda + k]), b row-major [K, N] (element
// (k, n) at b[k * ldb + n]) or, with b_col_major, column-major (at b[n * ldb + k]: a [N, K]
// weight, as nn.Linear stores it and cuBLASLt's fp8 GEMM wants it), both float8 e4m3fn bytes; out
// row-major [M, N], contiguous; bias [N] of the output dtype, contiguous, or nullptr. Scales,
// float32, contiguous, by mode:
//   tensor  sa [1],            sb [1]
//   channel sa [M] (per row),  sb [N] (per column)
//   block   sa [M, ceil(K/128)], sb [ceil(K/128), ceil(N/128)]
//
// Two kernels, with bits of their own: on an sm_90 GPU the Hopper kernel (scaled_mm_sm90.cu,
// wgmma e4m3; it needs b column-major, lda and ldb multiples of 16, a and b 16-byte aligned, K >= 1),
// elsewhere the mma.sync one (scaled_mm.cu, any layout). Which runs depends on the device, K and
// `path`, never on M. Within a kernel, the bits of out[m, n] depend only on K, the mode, row m of
// a (and its scales), column n of b (and its scales) and bias[n]: never on M, N or the grid.
#pragma once

#include "ops/cuda/gemm.cuh"  // DType

#include <cuda_runtime_api.h>

#include <cstdint>
#include <string>

namespace detfuzz::cuda_kernels {

enum class Fp8Scale { tensor, channel, block };

// automatic: the Hopper kernel where it can run (an sm_90 GPU, K >= 1, its layout), else mma.sync.
// The wgmma_* paths force one tile shape of the Hopper kernel (tests check that all give the
// same bits); automatic picks among them by M, N and the SM count.
enum class ScaledMmPath {
  automatic,
  mma_sync,
  wgmma_128x128,
  wgmma_64x128,
  wgmma_64x64,
  wgmma_64x32,
  wgmma_64x16,
  wgmma_64x8
};

struct ScaledMmParams {
  const uint8_t *a = nullptr;
  int64_t lda = 0;
  const uint8_t *b = nullptr;
  int64_t ldb = 0;
  bool b_col_major = false;
  const float *scale_a = nullptr, *scale_b = nullptr;
  Fp8Scale mode = Fp8Scale::tensor;
  const void *bias = nullptr;
  void *out = nullptr;
  DType out_dtype = DType::bf16;  // f32, f16 or bf16 (the bias has it too)
  int64_t M = 0, N = 0, K = 0;
  ScaledMmPath path = ScaledMmPath::automatic;
  // Blocks per promotion: 1. The planted mutant mutant-fp8-promote sets 2 from M (path mma_sync).
  int promote_blocks = 1;
};

// The promotion interval along K (and the fp8 scale block).
constexpr int64_t kScaledMmBlockK = 128;

// Whether the Hopper kernel can run p on the current device ("" if so, else why not).
std::string scaled_mm_sm90_unfit(const ScaledMmParams &p);

// Throws std::invalid_argument (one line) for a bad size, a forced path that cannot run p, or an
// output dtype other than f32, f16, bf16.
void launch_scaled_mm(const ScaledMmParams &p, cudaStream_t stream);
// The Hopper kernel alone (scaled_mm_sm90.cu); p.path is automatic or a wgmma_* one.
void launch_scaled_mm_sm90(const ScaledMmParams &p, cudaStream_t stream);

}  // namespace detfuzz::cuda_kernels
