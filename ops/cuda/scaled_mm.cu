// The batch-invariant fp8 scaled matmul on any GPU: mma.sync tensor cores with the K promotion of
// ops/cpu/moe.h. On an sm_90 GPU the Hopper kernel (scaled_mm_sm90.cu) runs instead where it can;
// launch_scaled_mm, at the end of this file, picks.
//
// Design. A CTA of 4 warps owns a fixed 64 x 64 output tile (never chosen from M); a warp owns
// 32 x 32, eight m16n8 accumulator fragments. K is walked in 128-wide blocks, the fp8 scale
// blocks: the CTA stages the block's 64 x 128 slice of a and 128 x 64 slice of b in shared memory
// (zero beyond M, N and K), each e4m3 value converted to float16 on the way (exact: e4m3's 4-bit
// significand and exponent range fit float16 with room to spare). Each warp then sums the block
// from zero with ceil(len/16) mma.sync.m16n8k16 (f16 inputs, f32 accumulate) in K order, and
// promotes: acc = acc + partial * (sa * sb), two float32 roundings on the CUDA cores. After the
// last block, acc + bias is rounded once to the output dtype. No split-K, no atomics, one launch.
//
// Why float16 and not the e4m3 mma (m16n8k32.e4m3): Hopper's fp8 tensor-core accumulation keeps
// about 14 bits (DeepSeek-V3, section 3.3.2), far from the float32 rounding per addition that
// the accuracy bound of properties/defs/scaled_mm.cpp allows. The float16 mma sums its exact
// products (two 4-bit significands: 8 bits) in a float32-wide accumulator, so a block partial is
// within that bound (docs/moe.md). Its bits differ from the CPU kernel's sequential sum, and
// equal themselves for any M: every output element is summed by the same instructions in the
// same order whatever tile row or CTA holds it.
#include "ops/cuda/cuda_check.h"
#include "ops/cuda/mma_sm80.cuh"
#include "ops/cuda/scaled_mm.cuh"

#include <cuda_fp8.h>

#include <stdexcept>
#include <string>

namespace detfuzz::cuda_kernels {
namespace {

constexpr int kTileM = 64, kTileN = 64, kThreads = 128;
constexpr int kBlockK = static_cast<int>(kScaledMmBlockK);
// Shared-memory row of one tile row's 128 K values as float16, padded so that the eight rows a
// fragment load touches fall in distinct banks.
constexpr int kRow = kBlockK + 8;

__device__ __forceinline__ uint16_t e4m3_to_half_bits(uint8_t v) {
  return __nv_cvt_fp8_to_halfraw(static_cast<__nv_fp8_storage_t>(v), __NV_E4M3).x;
}

// sa(m, kb) * sb(kb, n): one float32 product, as the CPU kernel forms it.
__device__ __forceinline__ float block_scale(const ScaledMmParams &p, int64_t m, int64_t n, int64_t kb) {
  switch (p.mode) {
    case Fp8Scale::tensor: return __fmul_rn(p.scale_a[0], p.scale_b[0]);
    case Fp8Scale::channel: return __fmul_rn(p.scale_a[m], p.scale_b[n]);
    default: {
      const int64_t kblocks = (p.K + kBlockK - 1) / kBlockK, nblocks = (p.N + kBlockK - 1) / kBlockK;
      return __fmul_rn(p.scale_a[m * kblocks + kb], p.scale_b[kb * nblocks + n / kBlockK]);
    }
  }
}

// GROUPED: the planted mutant's promotion (p.promote_blocks > 1): the scaled partials of
// promote_blocks blocks summed from zero before they join the total (ops/cpu/scaled_mm.cpp's rule).
template <typename Out, bool GROUPED>
__global__ void __launch_bounds__(kThreads) scaled_mm_kernel(const ScaledMmParams p) {
  __shared__ __align__(16) uint16_t a_tile[kTileM * kRow];  // [m][k]
  __shared__ __align__(16) uint16_t b_tile[kTileN * kRow];  // [n][k]: b transposed
  const int tid = threadIdx.x, warp = tid / 32, lane = tid % 32, g = lane / 4, t = lane % 4;
  const int64_t m0 = static_cast<int64_t>(blockIdx.y) * kTileM, n0 = static_cast<int64_t>(blockIdx.x) * kTileN;
  const int wm = (warp / 2) * 32, wn = (warp % 2) * 32;
  // Element (mi, ni, r) of a warp's fragments: row wm + mi*16 + g + 8*(r/2), column wn + ni*8 + 2t + r%2.
  float acc[2][4][4], grouped[GROUPED ? 2 : 1][4][4];
#pragma unroll
  for (int mi = 0; mi < 2; ++mi)
#pragma unroll
    for (int ni = 0; ni < 4; ++ni)
#pragma unroll
      for (int r = 0; r < 4; ++r) {
        acc[mi][ni][r] = 0.f;
        if constexpr (GROUPED) grouped[mi][ni][r] = 0.f;
      }

  const int64_t kblocks = (p.K + kBlockK - 1) / kBlockK;
  for (int64_t kb = 0; kb < kblocks; ++kb) {
    const int64_t k0 = kb * kBlockK;
    const int len = static_cast<int>(p.K - k0 < kBlockK ? p.K - k0 : kBlockK);
    __syncthreads();  // the previous block's fragments are read
    for (int i = tid; i < kTileM * kBlockK; i += kThreads) {
      const int r = i / kBlockK, k = i % kBlockK;
      const int64_t m = m0 + r;
      const uint8_t v = m < p.M && k < len ? p.a[m * p.lda + k0 + k] : uint8_t{0};
      a_tile[r * kRow + k] = e4m3_to_half_bits(v);
    }
    for (int i = tid; i < kTileN * kBlockK; i += kThreads) {
      const int k = i / kTileN, c = i % kTileN;  // consecutive threads read consecutive columns of b
      const int64_t n = n0 + c;
      const uint8_t v =
          n < p.N && k < len ? p.b[p.b_col_major ? n * p.ldb + k0 + k : (k0 + k) * p.ldb + n] : uint8_t{0};
      b_tile[c * kRow + k] = e4m3_to_half_bits(v);
    }
    __syncthreads();

    float part[2][4][4];
#pragma unroll
    for (int mi = 0; mi < 2; ++mi)
#pragma unroll
      for (int ni = 0; ni < 4; ++ni)
#pragma unroll
        for (int r = 0; r < 4; ++r) part[mi][ni][r] = 0.f;
    const int steps = (len + 15) / 16;
    for (int s = 0; s < steps; ++s) {
      const int c0 = s * 16 + 2 * t;
      uint32_t af[2][4], bf[4][2];
#pragma unroll
      for (int mi = 0; mi < 2; ++mi) {
        const uint16_t *row = a_tile + (wm + mi * 16 + g) * kRow + c0;
        af[mi][0] = *reinterpret_cast<const uint32_t *>(row);
        af[mi][1] = *reinterpret_cast<const uint32_t *>(row + 8 * kRow);
        af[mi][2] = *reinterpret_cast<const uint32_t *>(row + 8);
        af[mi][3] = *reinterpret_cast<const uint32_t *>(row + 8 * kRow + 8);
      }
#pragma unroll
      for (int ni = 0; ni < 4; ++ni) {
        const uint16_t *col = b_tile + (wn + ni * 8 + g) * kRow + c0;
        bf[ni][0] = *reinterpret_cast<const uint32_t *>(col);
        bf[ni][1] = *reinterpret_cast<const uint32_t *>(col + 8);
      }
#pragma unroll
      for (int mi = 0; mi < 2; ++mi)
#pragma unroll
        for (int ni = 0; ni < 4; ++ni) mma16816<__half>(part[mi][ni], af[mi], bf[ni]);
    }

#pragma unroll
    for (int mi = 0; mi < 2; ++mi)
#pragma unroll
      for (int ni = 0; ni < 4; ++ni)
#pragma unroll
        for (int r = 0; r < 4; ++r) {
          const int64_t m = m0 + wm + mi * 16 + g + 8 * (r / 2), n = n0 + wn + ni * 8 + 2 * t + r % 2;
          if (m >= p.M || n >= p.N) continue;
          const float scaled = __fmul_rn(part[mi][ni][r], block_scale(p, m, n, kb));
          if constexpr (GROUPED) {
            grouped[mi][ni][r] = __fadd_rn(grouped[mi][ni][r], scaled);
            if ((kb + 1) % p.promote_blocks == 0 || kb + 1 == kblocks) {
              acc[mi][ni][r] = __fadd_rn(acc[mi][ni][r], grouped[mi][ni][r]);
              grouped[mi][ni][r] = 0.f;
            }
          } else {
            acc[mi][ni][r] = __fadd_rn(acc[mi][ni][r], scaled);
          }
        }
  }

#pragma unroll
  for (int mi = 0; mi < 2; ++mi)
#pragma unroll
    for (int ni = 0; ni < 4; ++ni)
#pragma unroll
      for (int r = 0; r < 4; ++r) {
        const int64_t m = m0 + wm + mi * 16 + g + 8 * (r / 2), n = n0 + wn + ni * 8 + 2 * t + r % 2;
        if (m >= p.M || n >= p.N) continue;
        const float v = p.bias ? __fadd_rn(acc[mi][ni][r], load_out<Out>(p.bias, n)) : acc[mi][ni][r];
        store_out<Out>(p.out, m * p.N + n, v);
      }
}

template <typename Out>
void launch(const ScaledMmParams &p, cudaStream_t stream) {
  const dim3 grid(static_cast<unsigned>((p.N + kTileN - 1) / kTileN),
                  static_cast<unsigned>((p.M + kTileM - 1) / kTileM));
  if (p.promote_blocks > 1)
    scaled_mm_kernel<Out, true><<<grid, kThreads, 0, stream>>>(p);
  else
    scaled_mm_kernel<Out, false><<<grid, kThreads, 0, stream>>>(p);
  DETFUZZ_LAUNCH_CHECK();
}

}  // namespace

void launch_scaled_mm(const ScaledMmParams &p, cudaStream_t stream) {
  if (p.M < 0 || p.N < 0 || p.K < 0) throw std::invalid_argument("scaled_mm: negative size");
  if ((p.M + kTileM - 1) / kTileM > 65535)
    throw std::invalid_argument("scaled_mm: M = " + std::to_string(p.M) + " exceeds the grid's 65535 row tiles");
  if (p.M == 0 || p.N == 0) return;
  if (p.promote_blocks > 1 && p.path != ScaledMmPath::mma_sync)
    throw std::invalid_argument("scaled_mm: promote_blocks > 1 runs on the mma_sync path only");
  if (p.path != ScaledMmPath::mma_sync) {
    const std::string unfit = scaled_mm_sm90_unfit(p);
    if (unfit.empty()) return launch_scaled_mm_sm90(p, stream);
    if (p.path != ScaledMmPath::automatic)
      throw std::invalid_argument("scaled_mm: a wgmma path was forced, but the Hopper kernel cannot run: " + unfit);
  }
  switch (p.out_dtype) {
    case DType::f32: launch<float>(p, stream); break;
    case DType::f16: launch<__half>(p, stream); break;
    case DType::bf16: launch<__nv_bfloat16>(p, stream); break;
    default: throw std::invalid_argument(std::string("scaled_mm: output dtype ") + dtype_name(p.out_dtype));
  }
}

}  // namespace detfuzz::cuda_kernels
