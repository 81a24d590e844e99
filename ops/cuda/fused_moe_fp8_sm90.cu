// The fused MoE layer's two grouped GEMMs on Hopper (sm_90a) with float8 e4m3 weights in 128 x 128
// blocks, each with its float32 scale, and 16-bit activations: TMA loads, the weights widened to
// the activations' dtype in shared memory, wgmma with float32 accumulators promoted every block.
//
// Design. As fused_moe_sm90.cu (the pairs sorted by expert, tiles of 64 or 128 rows of one expert,
// one persistent launch per GEMM over every (row tile, column tile)), with one pipeline stage per
// 128-wide K block, the weights' scale block: the producer TMA-loads the tile's activations (two
// 64-wide 16-bit boxes) and its expert's fp8 weight rows (128 bytes a row) into 128-byte-swizzled
// stages. The consumers (one or two warpgroups, 64 rows each) then, per block:
//  1. widen its weights, 16 bytes per thread at a time, into one of two 16-bit buffers laid out
//     as wgmma reads a K-major operand (e4m3 -> float16 is exact, and so is the step to bfloat16:
//     three mantissa bits), and publish them to the async proxy;
//  2. run eight k16 wgmma over the block from zero (gate_up: a gate chain and an up chain of 64
//     columns; down: 128 or 64 columns); while they run, widen the next block into the other
//     buffer; wait, release the stage, and promote on the CUDA cores:
//        total = total + partial * scale       (float32, __fmul_rn / __fadd_rn, total from +0)
//     the blocks in K order: the CPU kernel's blocking and order (ops/cpu/moe.h), with the
//     tensor core's sum inside a block; then meet at a named barrier (the next block is widened
//     by all, and this block's buffer, the next to be widened into, is read by none);
//  3. after the last block: gate_up stores silu(g) * u rounded to x's dtype, down stores float32
//     into each pair's row of y, which the combine kernel (fused_moe.cu) adds in slot order.
//
// Invariance: every output element is the same eight wgmma per block over its own row of
// activations and its expert's weight row, the same scale and promotion, block after block,
// whatever the tile's height, its other rows, the number of tiles or the grid. A tile's 64 (or
// 128) columns lie in one 128-row scale block: H and I are multiples of 128 here.
#include "ops/cuda/cuda_check.h"
#include "ops/cuda/fused_moe.cuh"
#include "ops/cuda/gemm_common.cuh"  // configure_once_per_device
#include "ops/cuda/moe_sm90_common.cuh"
#include "ops/cuda/ptx_sm90.cuh"
#include "ops/cuda/tensor_map.h"

#include <cuda.h>
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_fp8.h>

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <stdexcept>
#include <type_traits>

namespace detfuzz::cuda_kernels {
namespace {

constexpr int BK = 128;  // K per stage: one scale block, 128 bytes of an fp8 weight row
constexpr int W_ROWS = 128;

template <int CONSUMERS>
struct Geometry {
  static constexpr int tile_m = 64 * CONSUMERS;
  static constexpr int a_half = tile_m * 128;                                 // one 64-wide K half of the activations
  static constexpr int a_bytes = 2 * a_half;                                  // 16 or 32 KiB
  static constexpr int w_bytes = W_ROWS * BK;                                 // 16 KiB of fp8
  static constexpr int stage_bytes = a_bytes + w_bytes;                       // 32 or 48 KiB
  static constexpr int wide_half = W_ROWS * 128;                              // 128 rows of 64 16-bit values
  static constexpr int wide_bytes = 2 * wide_half;                            // one widened block: 32 KiB
  static constexpr int stages = (220 * 1024 - 2 * wide_bytes) / stage_bytes;  // 4 or 3
  static constexpr int smem_bytes = 1024 + 2 * wide_bytes + stages * stage_bytes + 2 * stages * 8;
  static_assert(smem_bytes <= 227 * 1024, "fits an SM");
};

struct Args {
  MoeSm90Gemm p;
  int64_t col_tiles;
  int kblocks;         // cols / 128
  int64_t row_blocks;  // rows / 128: the scales' second dim
  int w_rank3;
};

// Widens 16 e4m3 bytes into 16 values of T (two 16-byte chunks).
template <typename T>
__device__ __forceinline__ void widen16(const uint4 in, uint4 &lo, uint4 &hi) {
  const uint32_t words[4] = {in.x, in.y, in.z, in.w};
  uint32_t out[8];
#pragma unroll
  for (int w = 0; w < 4; ++w)
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      const __half2_raw pair =
          __nv_cvt_fp8x2_to_halfraw2(static_cast<__nv_fp8x2_storage_t>((words[w] >> (16 * h)) & 0xffffu), __NV_E4M3);
      if constexpr (std::is_same_v<T, __half>) {
        out[2 * w + h] = static_cast<uint32_t>(pair.x) | (static_cast<uint32_t>(pair.y) << 16);
      } else {
        const float2 f = __half22float2(__half2(pair));
        const __nv_bfloat162 b = __float22bfloat162_rn(f);  // exact: the value has 4 significant bits
        out[2 * w + h] = *reinterpret_cast<const uint32_t *>(&b);
      }
    }
  lo = make_uint4(out[0], out[1], out[2], out[3]);
  hi = make_uint4(out[4], out[5], out[6], out[7]);
}

// COLS: output columns per tile (gate_up: 64, each with its gate and up rows; down: 128 or 64).
template <typename T, int CONSUMERS, bool GATE_UP, int COLS>
__global__ void __launch_bounds__(moe_sm90::kThreads<CONSUMERS>, 1)
    moe_gemm_fp8_sm90_kernel(const __grid_constant__ CUtensorMap tmap_a, const __grid_constant__ CUtensorMap tmap_w,
                             const Args args) {
#if DETFUZZ_SM90A
  using namespace sm90;
  using G = Geometry<CONSUMERS>;
  constexpr int STAGES = G::stages, STAGE_BYTES = G::stage_bytes;
  static_assert(COLS == 64 || (!GATE_UP && COLS == 128), "gate_up tiles are 64 columns wide");
  constexpr int ROWS_USED = GATE_UP ? 128 : COLS;  // weight rows per stage: boxes of 64
  const MoeSm90Gemm &p = args.p;
  extern __shared__ uint8_t smem_raw[];
  const uint32_t raw = static_cast<uint32_t>(__cvta_generic_to_shared(smem_raw));
  const uint32_t base = (raw + 1023) & ~1023u;  // the 128-byte swizzle wants 1024-byte alignment
  const uint32_t wide = base;                   // two widened blocks
  const uint32_t stages = base + 2 * G::wide_bytes;
  const uint32_t full_bar = stages + STAGES * STAGE_BYTES;
  const uint32_t empty_bar = full_bar + STAGES * 8;
  auto stage_a = [&](int s) { return stages + s * STAGE_BYTES; };
  auto stage_w = [&](int s) { return stages + s * STAGE_BYTES + G::a_bytes; };
  auto generic = [&](uint32_t addr) { return smem_raw + (addr - raw); };  // a shared address, for C++ loads

  const int tid = threadIdx.x;
  const int wg = __shfl_sync(0xffffffffu, tid / 128, 0);
  if (tid == 0) moe_sm90::init_pipeline(full_bar, empty_bar, STAGES, CONSUMERS, &tmap_a, &tmap_w);
  // The row tiles the CTAs share: the grouping's non-empty ones, which come before its padding.
  const int64_t row_tiles = *p.live_row_tiles, tiles = args.col_tiles * row_tiles;
  __syncthreads();

  const int64_t inter = p.rows / 2;
  if (wg == 0) {
    if constexpr (CONSUMERS == 2) release_registers<40>();
    if (tid == 0) {
      int it = 0;
      for (int64_t tile = blockIdx.x; tile < tiles; tile += gridDim.x) {
        const moe_sm90::Tile tl = moe_sm90::tile_at<GATE_UP, COLS>(p, tile, row_tiles);
        const int e = tl.expert, first = tl.first, w0 = tl.w0, w1 = tl.w1;
        for (int kb = 0; kb < args.kblocks; ++kb, ++it) {
          const int s = it % STAGES;
          mbar_wait(empty_bar + 8 * s, ((it / STAGES) & 1) ^ 1);
          const uint32_t fb = full_bar + 8 * s;
          mbar_expect_tx(fb, G::a_bytes + ROWS_USED * BK);
          tma_load_2d(stage_a(s), &tmap_a, fb, kb * BK, first);
          tma_load_2d(stage_a(s) + G::a_half, &tmap_a, fb, kb * BK + 64, first);
          tma_load_matrix(stage_w(s), &tmap_w, args.w_rank3, fb, kb * BK, w0, e);
          if (ROWS_USED == 128) tma_load_matrix(stage_w(s) + 64 * BK, &tmap_w, args.w_rank3, fb, kb * BK, w1, e);
        }
      }
    }
    return;
  }

  if constexpr (CONSUMERS == 2) claim_registers<232>();
  const int cw = wg - 1;
  const int ct_id = tid - 128;  // 0 .. 128 CONSUMERS - 1
  const int t = tid % 128, warp = t / 32, lane = t % 32;
  float acc[COLS / 2], up[GATE_UP ? 32 : 1], total[COLS / 2], total_up[GATE_UP ? 32 : 1];
  // 1. Waits for the stage of pipeline step `step` and widens its weights into buffer step % 2: row
  // r's logical 16-byte chunk q (K 16q .. 16q + 15) sits at chunk q ^ (r % 8); its 32 widened bytes
  // are chunks 2 (q % 4) and + 1 of K half q / 4, swizzled the same way. Then publishes them to the
  // async proxy (the caller's barrier orders them before any warpgroup's MMAs).
  auto widen_block = [&](int step) {
    const int s = step % STAGES;
    const uint32_t buf = wide + (step & 1) * G::wide_bytes;
    mbar_wait(full_bar + 8 * s, (step / STAGES) & 1);
    for (int c = ct_id; c < ROWS_USED * 8; c += 128 * CONSUMERS) {
      const int r = c / 8, q = c % 8, sw = r % 8;
      const uint4 in = *reinterpret_cast<const uint4 *>(generic(stage_w(s) + r * 128 + ((q ^ sw) * 16)));
      uint4 lo, hi;
      widen16<T>(in, lo, hi);
      const uint32_t row = buf + (q / 4) * G::wide_half + r * 128;
      *reinterpret_cast<uint4 *>(generic(row + (((2 * (q % 4)) ^ sw) * 16))) = lo;
      *reinterpret_cast<uint4 *>(generic(row + (((2 * (q % 4) + 1) ^ sw) * 16))) = hi;
    }
    fence_proxy_async_shared();
  };
  int it = 0;
  for (int64_t tile = blockIdx.x; tile < tiles; tile += gridDim.x) {
    const moe_sm90::Tile tl = moe_sm90::tile_at<GATE_UP, COLS>(p, tile, row_tiles);
    const int e = tl.expert, count = tl.count;
    const int64_t first = tl.first, c0 = tl.c0;
    // The scale rows of the tile's weights: [E, rows / 128, cols / 128].
    const float *scale0 = p.w_scale + (e * args.row_blocks + c0 / 128) * args.kblocks;
    const float *scale1 = p.w_scale + (e * args.row_blocks + (GATE_UP ? inter + c0 : c0) / 128) * args.kblocks;
#pragma unroll
    for (int i = 0; i < COLS / 2; ++i) total[i] = 0.f;
    if constexpr (GATE_UP)
#pragma unroll
      for (int i = 0; i < 32; ++i) total_up[i] = 0.f;

    // Block 0 widened before the loop; block kb + 1 is widened while block kb's MMAs run.
    widen_block(it);
    named_barrier_sync(1, 128 * CONSUMERS);
    for (int kb = 0; kb < args.kblocks; ++kb, ++it) {
      const int s = it % STAGES;
      const uint32_t buf = wide + (it & 1) * G::wide_bytes;
      // 2. The block's MMAs, from zero.
      wgmma_fence();
#pragma unroll
      for (int kk = 0; kk < BK / 16; ++kk) {
        const int half = kk / 4, off = (kk % 4) * 32;
        const uint64_t da = desc_advance(desc_k_major(stage_a(s) + half * G::a_half + cw * (64 * 128)), off);
        const uint64_t db = desc_advance(desc_k_major(buf + half * G::wide_half), off);
        const int accumulate = kk > 0 ? 1 : 0;
        if constexpr (GATE_UP) {
          wgmma_m64n64k16_ss<T, 0>(acc, da, db, accumulate);
          wgmma_m64n64k16_ss<T, 0>(up, da, desc_advance(db, 64 * 128), accumulate);
        } else if constexpr (COLS == 128) {
          wgmma_m64n128k16<T, 0>(acc, da, db, accumulate);
        } else {
          wgmma_m64n64k16_ss<T, 0>(acc, da, db, accumulate);
        }
      }
      wgmma_commit();
      if (kb + 1 < args.kblocks) widen_block(it + 1);  // into the other buffer, while the MMAs run
      const float s0 = scale0[kb], s1 = GATE_UP ? scale1[kb] : 0.f;
      wgmma_wait<0>();
      fence_registers(acc);
      if constexpr (GATE_UP) fence_registers(up);
      if (lane == 0) mbar_arrive(empty_bar + 8 * s);
#pragma unroll
      for (int i = 0; i < COLS / 2; ++i) total[i] = __fadd_rn(total[i], __fmul_rn(acc[i], s0));
      if constexpr (GATE_UP)
#pragma unroll
        for (int i = 0; i < 32; ++i) total_up[i] = __fadd_rn(total_up[i], __fmul_rn(up[i], s1));
      // Block kb + 1 widened by every consumer, and block kb's MMAs done in every warpgroup (its
      // buffer is the next one widened into).
      named_barrier_sync(1, 128 * CONSUMERS);
    }

    // 3. The epilogue.
    moe_sm90::store_tile<T, GATE_UP, COLS>(p, total, total_up, cw, warp, lane, first, count, c0);
  }
#endif
}

template <typename T, int CONSUMERS, bool GATE_UP, int COLS>
struct LaunchShape {
  static void run(const MoeSm90Gemm &p, int dev, int sms, cudaStream_t stream);
};
template <typename T, int CONSUMERS, bool GATE_UP, int COLS>
void LaunchShape<T, CONSUMERS, GATE_UP, COLS>::run(const MoeSm90Gemm &p, int dev, int sms, cudaStream_t stream) {
  using G = Geometry<CONSUMERS>;
  auto kernel = moe_gemm_fp8_sm90_kernel<T, CONSUMERS, GATE_UP, COLS>;
  static std::atomic<uint64_t> opted_in{0};
  configure_once_per_device(opted_in, dev, [&] {
    DETFUZZ_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, G::smem_bytes));
  });
  Args args{};
  args.p = p;
  const int64_t n_out = GATE_UP ? p.rows / 2 : p.rows;
  args.col_tiles = n_out / COLS;
  args.kblocks = static_cast<int>(p.cols / BK);
  args.row_blocks = p.rows / 128;
  // L2 fills of 256 bytes, as the 16-bit MoE kernel asks (fused_moe_sm90.cu).
  const MatrixMap ma = matrix_map("fused_moe_fp8_sm90", CU_TENSOR_MAP_DATA_TYPE_UINT16, p.a, p.cols, p.pairs, p.cols, 1,
                                  0, 64, G::tile_m, CU_TENSOR_MAP_SWIZZLE_128B, CU_TENSOR_MAP_L2_PROMOTION_L2_256B);
  const MatrixMap mw =
      matrix_map("fused_moe_fp8_sm90", CU_TENSOR_MAP_DATA_TYPE_UINT8, p.w, p.cols, p.rows, p.cols, p.experts,
                 p.rows * p.cols, BK, 64, CU_TENSOR_MAP_SWIZZLE_128B, CU_TENSOR_MAP_L2_PROMOTION_L2_256B);
  args.w_rank3 = mw.rank3;
  // Padded row tiles included: the CTAs share the live ones among them.
  const int grid = static_cast<int>(std::min<int64_t>(args.col_tiles * p.row_tiles, sms));
  kernel<<<grid, moe_sm90::kThreads<CONSUMERS>, G::smem_bytes, stream>>>(ma.map, mw.map, args);
  DETFUZZ_LAUNCH_CHECK();
}

}  // namespace

void launch_moe_gemm_fp8_sm90(const MoeSm90Gemm &p, cudaStream_t stream) {
  if (p.row_tiles == 0 || p.rows == 0) return;
  if (!p.w_scale || !p.live_row_tiles ||
      !moe_sm90_fits(p.dtype, p.gate_up ? p.cols : p.rows, p.gate_up ? p.rows / 2 : p.cols, true) ||
      (p.tile_m != 64 && p.tile_m != 128) || (p.down_cols != 64 && p.down_cols != 128) ||
      reinterpret_cast<uintptr_t>(p.a) % 16 || reinterpret_cast<uintptr_t>(p.w) % 16)
    throw std::invalid_argument(
        "launch_moe_gemm_fp8_sm90: the layer does not fit the Hopper fp8 kernel (sm_90, 16-bit x, block scales, "
        "widths multiples of 128, 16-byte aligned, tiles of 64 or 128 rows, the live tile count)");
  int dev = 0, sms = 0;
  DETFUZZ_CUDA_CHECK(cudaGetDevice(&dev));
  DETFUZZ_CUDA_CHECK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev));
  moe_sm90::dispatch<LaunchShape>(p, dev, sms, stream);
}

}  // namespace detfuzz::cuda_kernels
