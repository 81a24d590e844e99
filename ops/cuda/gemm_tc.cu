// Batch-invariant persistent matmul for bfloat16 and float16 on tensor cores (sm_80+ mma.sync).
//
// Design. A persistent grid of CTAS_PER_SM = 2 co-resident CTAs per SM (the launcher gets the SM
// count; two CTAs of 8 warps hide the mma/ldmatrix latency that one left exposed: Nsight Compute
// showed 5.1 cycles per issued instruction at 8 warps per SM) walks the output tiles of all
// batches in a fixed grouped order (GROUP_M = 8 tile rows per group, batch outermost): tile t goes
// to CTA t mod gridDim. A tile is 128 x 128 outputs, computed whole by one CTA of 8 warps (2 x 4,
// each warp 64 x 32) over the entire K loop: BK = 64 per step, 3 cp.async stages (96 KiB of
// shared memory, rows swizzled in 16-byte chunks by chunk ^ (row & 7) so ldmatrix is conflict-free),
// ldmatrix(.trans) fragments and mma.sync.m16n8k16 with float32 accumulators. No split-K, no
// atomics, no reduction across CTAs. The arithmetic of one output element is therefore: for
// k-step 0, 1, ..., ceil(K/16)-1 in order, D = mma(A[m, k16], B[k16, n], D), starting from +0;
// the order inside one mma is fixed by the hardware. Nothing of this depends on M, the batch,
// the number of CTAs or which layout B has (both B layouts feed identical fragments), so a row's
// bits are the same alone or in any batch. Which CTA computes a tile never enters its arithmetic,
// so the CTA count is free (tests run it with 1 and 7). Out-of-range rows, columns and K are zero-filled by
// cp.async's src-size operand, and an m16 sub-tile whose rows all lie past M skips its mma
// (other rows never enter a row's result), which keeps small-M tiles streaming B at low cost.
// Epilogue: v = alpha * acc, then v = v + beta * bias (when a bias is given), rounded once to
// the output type; stores are masked. Offsets are 64-bit throughout.
#include "ops/cuda/cuda_check.h"
#include "ops/cuda/gemm.cuh"
#include "ops/cuda/gemm_common.cuh"
#include "ops/cuda/mma_sm80.cuh"

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <atomic>
#include <cstdint>
#include <stdexcept>

namespace detfuzz::cuda_kernels {
namespace {

constexpr int BM = 128, BN = 128, BK = 64, STAGES = 3, THREADS = 256, GROUP_M = 8;
constexpr int CTAS_PER_SM = 2;    // co-resident persistent CTAs (registers <= 128, 96 KiB of shared memory each)
constexpr int A_STAGE = BM * BK;  // elements
constexpr int B_STAGE = BK * BN;
constexpr int SMEM_BYTES = STAGES * (A_STAGE + B_STAGE) * 2;

using TcArgs = GemmArgs<uint16_t>;

template <typename T, bool B_KN>
__global__ void __launch_bounds__(THREADS, CTAS_PER_SM) gemm_tc_kernel(const TcArgs p) {
  extern __shared__ __align__(128) uint8_t smem[];
  const uint32_t sA = static_cast<uint32_t>(__cvta_generic_to_shared(smem));
  const uint32_t sB = sA + STAGES * A_STAGE * 2;

  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
  const int wm = warp >> 2, wn = warp & 3;  // warp tile: rows wm*64.., cols wn*32..

  const int64_t tiles_m = (p.M + BM - 1) / BM, tiles_n = (p.N + BN - 1) / BN;
  const int64_t tiles_per_batch = tiles_m * tiles_n;
  const int64_t total = tiles_per_batch * p.batch;
  const int ktiles = static_cast<int>((p.K + BK - 1) / BK);

  for (int64_t tile = blockIdx.x; tile < total; tile += gridDim.x) {
    const TileCoord tc = persistent_tile<GROUP_M>(tile, tiles_m, tiles_n);
    const int64_t bidx = tc.batch;
    const int64_t m0 = tc.pid_m * BM, n0 = tc.pid_n * BN;
    const int valid_m = static_cast<int>(min(static_cast<int64_t>(BM), p.M - m0));

    const uint16_t *A = p.a + bidx * p.sa;
    const uint16_t *B = p.b + bidx * p.sb;

    auto load_stage = [&](int stage, int kt) {
      const int64_t k0 = static_cast<int64_t>(kt) * BK;
      const uint32_t dA = sA + stage * A_STAGE * 2;
#pragma unroll
      for (int i = 0; i < 4; ++i) {
        const int id = tid + i * THREADS;
        const int row = id >> 3, ch = id & 7;
        const int64_t gm = m0 + row, gk = k0 + ch * 8;
        const bool ok = row < valid_m && gk < p.K;
        const uint16_t *src = ok ? A + gm * p.lda + gk : A;
        cp_async16(dA + (row * BK + ((ch ^ (row & 7)) << 3)) * 2, src, ok);
      }
      const uint32_t dB = sB + stage * B_STAGE * 2;
#pragma unroll
      for (int i = 0; i < 4; ++i) {
        const int id = tid + i * THREADS;
        if (B_KN) {  // smem [BK][BN], 16 chunks per row
          const int kr = id >> 4, ch = id & 15;
          const int64_t gk = k0 + kr, gn = n0 + ch * 8;
          const bool ok = gk < p.K && gn < p.N;
          const uint16_t *src = ok ? B + gk * p.ldb + gn : B;
          cp_async16(dB + (kr * BN + ((ch ^ (kr & 7)) << 3)) * 2, src, ok);
        } else {  // smem [BN][BK], 8 chunks per row
          const int nr = id >> 3, ch = id & 7;
          const int64_t gn = n0 + nr, gk = k0 + ch * 8;
          const bool ok = gn < p.N && gk < p.K;
          const uint16_t *src = ok ? B + gn * p.ldb + gk : B;
          cp_async16(dB + (nr * BK + ((ch ^ (nr & 7)) << 3)) * 2, src, ok);
        }
      }
    };

    float acc[4][4][4];
#pragma unroll
    for (int i = 0; i < 4; ++i)
#pragma unroll
      for (int j = 0; j < 4; ++j)
#pragma unroll
        for (int e = 0; e < 4; ++e) acc[i][j][e] = 0.f;

    const int warp_row0 = wm * 64;
    const bool warp_active = warp_row0 < valid_m;

    auto load_b_frags = [&](uint32_t(&bf)[4][2], uint32_t bS, int kk) {
#pragma unroll
      for (int np = 0; np < 2; ++np) {
        uint32_t r[4];
        const int mi = lane >> 3;
        if (B_KN) {
          const int kr = kk * 16 + (mi & 1) * 8 + (lane & 7);
          const int nch = ((wn * 32 + np * 16) >> 3) + (mi >> 1);
          ldmatrix_x4_trans(r, bS + (kr * BN + ((nch ^ (kr & 7)) << 3)) * 2);
        } else {
          const int nr = wn * 32 + np * 16 + (mi >> 1) * 8 + (lane & 7);
          const int kch = kk * 2 + (mi & 1);
          ldmatrix_x4(r, bS + (nr * BK + ((kch ^ (nr & 7)) << 3)) * 2);
        }
        bf[2 * np][0] = r[0];
        bf[2 * np][1] = r[1];
        bf[2 * np + 1][0] = r[2];
        bf[2 * np + 1][1] = r[3];
      }
    };

#pragma unroll
    for (int s = 0; s < STAGES - 1; ++s) {
      if (s < ktiles) load_stage(s, s);
      cp_async_commit();
    }

    for (int kt = 0; kt < ktiles; ++kt) {
      cp_async_wait<STAGES - 2>();
      __syncthreads();
      {
        const int nk = kt + STAGES - 1;
        if (nk < ktiles) load_stage(nk % STAGES, nk);
        cp_async_commit();
      }
      const int stage = kt % STAGES;
      const uint32_t aS = sA + stage * A_STAGE * 2;
      const uint32_t bS = sB + stage * B_STAGE * 2;
      if (valid_m == BM) {
        // Full tile: no per-sub-tile tests, so the unrolled kk loop lets the compiler issue the
        // next fragments' ldmatrix ahead of the current MMAs.
#pragma unroll
        for (int kk = 0; kk < BK / 16; ++kk) {
          uint32_t bf[4][2], af[4][4];
          load_b_frags(bf, bS, kk);
#pragma unroll
          for (int mt = 0; mt < 4; ++mt) {
            const int row = warp_row0 + mt * 16 + (lane & 15);
            const int kch = kk * 2 + (lane >> 4);
            ldmatrix_x4(af[mt], aS + (row * BK + ((kch ^ (row & 7)) << 3)) * 2);
          }
#pragma unroll
          for (int mt = 0; mt < 4; ++mt)
#pragma unroll
            for (int nt = 0; nt < 4; ++nt) mma16816<T>(acc[mt][nt], af[mt], bf[nt]);
        }
      } else if (warp_active) {
#pragma unroll
        for (int kk = 0; kk < BK / 16; ++kk) {
          uint32_t bf[4][2];
          load_b_frags(bf, bS, kk);
#pragma unroll
          for (int mt = 0; mt < 4; ++mt) {
            if (warp_row0 + mt * 16 < valid_m) {  // warp-uniform: skip sub-tiles wholly past M
              uint32_t af[4];
              const int row = warp_row0 + mt * 16 + (lane & 15);
              const int kch = kk * 2 + (lane >> 4);
              ldmatrix_x4(af, aS + (row * BK + ((kch ^ (row & 7)) << 3)) * 2);
#pragma unroll
              for (int nt = 0; nt < 4; ++nt) mma16816<T>(acc[mt][nt], af, bf[nt]);
            }
          }
        }
      }
    }
    cp_async_wait<0>();
    __syncthreads();  // every warp is done with the stages before the next tile's prologue

    // Epilogue.
    uint16_t *C = p.c + bidx * p.sc;
    const uint16_t *bias = p.bias ? p.bias + bidx * p.sbias : nullptr;
    const bool vec2 = ((p.ldc & 1) == 0) && ((reinterpret_cast<uintptr_t>(C) & 3) == 0);
#pragma unroll
    for (int mt = 0; mt < 4; ++mt) {
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        const int lr = warp_row0 + mt * 16 + (lane >> 2) + h * 8;
        if (lr >= valid_m) continue;
        const int64_t gm = m0 + lr;
#pragma unroll
        for (int nt = 0; nt < 4; ++nt) {
          const int64_t gn = n0 + wn * 32 + nt * 8 + (lane & 3) * 2;
          float v[2];
#pragma unroll
          for (int e = 0; e < 2; ++e) {
            v[e] = p.alpha * acc[mt][nt][h * 2 + e];
            if (bias && gn + e < p.N) v[e] = v[e] + p.beta * to_f<T>(bias[gm * p.bsm + (gn + e) * p.bsn]);
          }
          uint16_t *dst = C + gm * p.ldc + gn;
          if (vec2 && gn + 1 < p.N) {
            const uint32_t packed =
                static_cast<uint32_t>(from_f<T>(v[0])) | (static_cast<uint32_t>(from_f<T>(v[1])) << 16);
            *reinterpret_cast<uint32_t *>(dst) = packed;
          } else {
            if (gn < p.N) dst[0] = from_f<T>(v[0]);
            if (gn + 1 < p.N) dst[1] = from_f<T>(v[1]);
          }
        }
      }
    }
  }
}

template <typename T, bool B_KN>
void launch_one(const TcArgs &args, int ctas, cudaStream_t stream) {
  auto kernel = gemm_tc_kernel<T, B_KN>;
  // The shared-memory opt-in is per device: done once per device and instantiation.
  static std::atomic<uint64_t> opted_in{0};
  int dev = 0;
  DETFUZZ_CUDA_CHECK(cudaGetDevice(&dev));
  configure_once_per_device(opted_in, dev, [&] {
    DETFUZZ_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, SMEM_BYTES));
    DETFUZZ_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributePreferredSharedMemoryCarveout,
                                            static_cast<int>(cudaSharedmemCarveoutMaxShared)));
  });
  kernel<<<ctas * CTAS_PER_SM, THREADS, SMEM_BYTES, stream>>>(args);
  DETFUZZ_LAUNCH_CHECK();
}

}  // namespace

void launch_gemm_tc(const GemmParams &p, cudaStream_t stream) {
  const TcArgs args = gemm_args<uint16_t>(p);
  if (p.dtype == DType::bf16) {
    if (p.b_kn)
      launch_one<__nv_bfloat16, true>(args, p.num_ctas, stream);
    else
      launch_one<__nv_bfloat16, false>(args, p.num_ctas, stream);
  } else if (p.dtype == DType::f16) {
    if (p.b_kn)
      launch_one<__half, true>(args, p.num_ctas, stream);
    else
      launch_one<__half, false>(args, p.num_ctas, stream);
  } else {
    throw std::invalid_argument("launch_gemm_tc: dtype must be f16 or bf16");
  }
}

}  // namespace detfuzz::cuda_kernels
