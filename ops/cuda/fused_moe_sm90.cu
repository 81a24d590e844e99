// The fused MoE layer's two grouped GEMMs on Hopper (sm_90a): TMA loads, wgmma with float32
// accumulators, a producer warpgroup and one or two consumer warpgroups, one launch per GEMM over
// every row tile of every expert.
//
// Design. The host sorts the (token, slot) pairs by expert and cuts each expert's rows into tiles
// of at most tile_m (64 or 128) rows; the activations are gathered in that order. A CTA walks
// (row tile, column tile) pairs persistently. Per 64-wide K step the producer TMA-loads tile_m rows
// of the sorted activations (rows past the tile belong to the next expert or lie past the end,
// and are never stored) and 128 weight rows of the tile's expert from a [E, rows, K] map, into
// 128-byte-swizzled stages. Each consumer warpgroup owns 64 rows:
//  - gate_up: 64 output columns c0..c0+63, whose gate rows (c0..) and up rows (I + c0..) are the
//    stage's two 64-row weight boxes; two wgmma.m64n64k16 chains, then act = silu(g) * u (the
//    project's silu_mul) rounded to x's dtype: the activation the down GEMM reads;
//  - down: 128 output columns, one wgmma.m64n128k16 chain (or 64 columns and m64n64k16, where
//    128-column tiles would leave SMs idle: decode); each row's float32 result goes to its pair's
//    row of y, which the combine kernel (fused_moe.cu) adds in slot order.
//
// Invariance: every output element is the same wgmma chain over the same K steps on its own row
// of activations and its expert's weights, whatever the tile height, the tile's other rows (other
// tokens of its expert, or another expert's), the number of tiles or the grid: the experts' loads
// decide which rows share a tile, never what a row computes. (A row of the MMA reads no other
// row; m64n64 and m64n128 compute an element the same way.)
#include "ops/cuda/cuda_check.h"
#include "ops/cuda/fused_moe.cuh"
#include "ops/cuda/gemm_common.cuh"  // configure_once_per_device
#include "ops/cuda/moe_sm90_common.cuh"
#include "ops/cuda/ptx_sm90.cuh"
#include "ops/cuda/tensor_map.h"

#include <cuda.h>
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <stdexcept>
#include <string>

namespace detfuzz::cuda_kernels {
namespace {

constexpr int BK = 64;   // K per stage: 128 bytes of a 16-bit row
constexpr int BW = 128;  // weight rows per stage: two boxes of 64

template <int CONSUMERS>
struct Geometry {
  static constexpr int tile_m = 64 * CONSUMERS;
  static constexpr int a_bytes = tile_m * BK * 2, b_bytes = BW * BK * 2;
  static constexpr int stage_bytes = a_bytes + b_bytes;  // 32 or 24 KiB
  static constexpr int stages = 196 * 1024 / stage_bytes;
  static constexpr int smem_bytes = 1024 + stages * stage_bytes + 2 * stages * 8;
  static_assert(smem_bytes <= 227 * 1024, "fits an SM");
};

struct Args {
  MoeSm90Gemm p;
  int64_t col_tiles;
  int kblocks;
  int w_rank3;
};

// COLS: output columns per tile (gate_up: 64, each with its gate and up rows; down: 128 or 64).
template <typename T, int CONSUMERS, bool GATE_UP, int COLS>
__global__ void __launch_bounds__(moe_sm90::kThreads<CONSUMERS>, 1)
    moe_gemm_sm90_kernel(const __grid_constant__ CUtensorMap tmap_a, const __grid_constant__ CUtensorMap tmap_w,
                         const Args args) {
#if DETFUZZ_SM90A
  using namespace sm90;
  using G = Geometry<CONSUMERS>;
  constexpr int STAGES = G::stages, STAGE_BYTES = G::stage_bytes, A_BYTES = G::a_bytes;
  static_assert(COLS == 64 || (!GATE_UP && COLS == 128), "gate_up tiles are 64 columns wide");
  constexpr int W_BOXES = GATE_UP ? 2 : COLS / 64;  // 64-row weight boxes per stage
  const MoeSm90Gemm &p = args.p;
  extern __shared__ uint8_t smem_raw[];
  const uint32_t raw = static_cast<uint32_t>(__cvta_generic_to_shared(smem_raw));
  const uint32_t stages = (raw + 1023) & ~1023u;
  const uint32_t full_bar = stages + STAGES * STAGE_BYTES;
  const uint32_t empty_bar = full_bar + STAGES * 8;
  auto stage_a = [&](int s) { return stages + s * STAGE_BYTES; };
  auto stage_b = [&](int s) { return stages + s * STAGE_BYTES + A_BYTES; };

  const int tid = threadIdx.x;
  const int wg = __shfl_sync(0xffffffffu, tid / 128, 0);
  if (tid == 0) moe_sm90::init_pipeline(full_bar, empty_bar, STAGES, CONSUMERS, &tmap_a, &tmap_w);
  // The row tiles the CTAs share: the grouping's non-empty ones, which come before its padding.
  const int64_t row_tiles = *p.live_row_tiles, tiles = args.col_tiles * row_tiles;
  __syncthreads();

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
          mbar_expect_tx(fb, A_BYTES + W_BOXES * 64 * BK * 2);
          tma_load_2d(stage_a(s), &tmap_a, fb, kb * BK, first);
          tma_load_matrix(stage_b(s), &tmap_w, args.w_rank3, fb, kb * BK, w0, e);
          if (W_BOXES == 2) tma_load_matrix(stage_b(s) + 64 * BK * 2, &tmap_w, args.w_rank3, fb, kb * BK, w1, e);
        }
      }
    }
    return;
  }

  if constexpr (CONSUMERS == 2) claim_registers<232>();
  const int cw = wg - 1;
  const int t = tid % 128, warp = t / 32, lane = t % 32;
  float acc[COLS / 2], up[GATE_UP ? 32 : 1];
  int it = 0;
  for (int64_t tile = blockIdx.x; tile < tiles; tile += gridDim.x) {
    const moe_sm90::Tile tl = moe_sm90::tile_at<GATE_UP, COLS>(p, tile, row_tiles);
    const int count = tl.count;
    const int64_t first = tl.first, c0 = tl.c0;
    int prev = -1;
    for (int kb = 0; kb < args.kblocks; ++kb, ++it) {
      const int s = it % STAGES;
      mbar_wait(full_bar + 8 * s, (it / STAGES) & 1);
      wgmma_fence();
      const uint64_t da0 = desc_k_major(stage_a(s) + cw * (64 * BK * 2)), db0 = desc_k_major(stage_b(s));
#pragma unroll
      for (int kk = 0; kk < BK / 16; ++kk) {
        const uint64_t da = desc_advance(da0, kk * 32), db = desc_advance(db0, kk * 32);
        const int accumulate = (kb > 0 || kk > 0) ? 1 : 0;
        if constexpr (GATE_UP) {
          wgmma_m64n64k16_ss<T, 0>(acc, da, db, accumulate);
          wgmma_m64n64k16_ss<T, 0>(up, da, desc_advance(db, 64 * BK * 2), accumulate);
        } else if constexpr (COLS == 128) {
          wgmma_m64n128k16<T, 0>(acc, da, db, accumulate);
        } else {
          wgmma_m64n64k16_ss<T, 0>(acc, da, db, accumulate);
        }
      }
      wgmma_commit();
      wgmma_wait<1>();  // the previous stage's MMAs are done: release it
      if (prev >= 0 && lane == 0) mbar_arrive(empty_bar + 8 * prev);
      prev = s;
    }
    wgmma_wait<0>();
    fence_registers(acc);
    if constexpr (GATE_UP) fence_registers(up);
    if (prev >= 0 && lane == 0) mbar_arrive(empty_bar + 8 * prev);

    moe_sm90::store_tile<T, GATE_UP, COLS>(p, acc, up, cw, warp, lane, first, count, c0);
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
  auto kernel = moe_gemm_sm90_kernel<T, CONSUMERS, GATE_UP, COLS>;
  static std::atomic<uint64_t> opted_in{0};
  configure_once_per_device(opted_in, dev, [&] {
    DETFUZZ_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, G::smem_bytes));
  });
  Args args{};
  args.p = p;
  const int64_t n_out = GATE_UP ? p.rows / 2 : p.rows;
  args.col_tiles = (n_out + COLS - 1) / COLS;
  args.kblocks = static_cast<int>((p.cols + BK - 1) / BK);
  // L2 fills of 256 bytes: 128 moved bf16 fused_moe by nothing measurable on an H200 (docs/perf/matmul.md).
  const MatrixMap ma = matrix_map("fused_moe_sm90", CU_TENSOR_MAP_DATA_TYPE_UINT16, p.a, p.cols, p.pairs, p.cols, 1, 0,
                                  BK, G::tile_m, CU_TENSOR_MAP_SWIZZLE_128B, CU_TENSOR_MAP_L2_PROMOTION_L2_256B);
  const MatrixMap mw =
      matrix_map("fused_moe_sm90", CU_TENSOR_MAP_DATA_TYPE_UINT16, p.w, p.cols, p.rows, p.cols, p.experts,
                 p.rows * p.cols, BK, 64, CU_TENSOR_MAP_SWIZZLE_128B, CU_TENSOR_MAP_L2_PROMOTION_L2_256B);
  args.w_rank3 = mw.rank3;
  // Padded row tiles included: the CTAs share the live ones among them.
  const int grid = static_cast<int>(std::min<int64_t>(args.col_tiles * p.row_tiles, sms));
  kernel<<<grid, moe_sm90::kThreads<CONSUMERS>, G::smem_bytes, stream>>>(ma.map, mw.map, args);
  DETFUZZ_LAUNCH_CHECK();
}

bool aligned16(const void *ptr) { return (reinterpret_cast<uintptr_t>(ptr) & 15) == 0; }

}  // namespace

bool moe_sm90_fits(DType dtype, int64_t h, int64_t i, bool fp8_weights) {
  int dev = 0;
  DETFUZZ_CUDA_CHECK(cudaGetDevice(&dev));
  const int64_t unit = fp8_weights ? 128 : 8;
  return (dtype == DType::bf16 || dtype == DType::f16) && h >= unit && i >= unit && h % unit == 0 && i % unit == 0 &&
         gemm_path_available(GemmPath::sm90_persistent, dev);
}

void launch_moe_gemm_sm90(const MoeSm90Gemm &p, cudaStream_t stream) {
  if (p.row_tiles == 0 || p.rows == 0) return;
  if (!p.live_row_tiles || !moe_sm90_fits(p.dtype, p.gate_up ? p.cols : p.rows, p.gate_up ? p.rows / 2 : p.cols) ||
      (p.tile_m != 64 && p.tile_m != 128) || (p.down_cols != 64 && p.down_cols != 128) || !aligned16(p.a) ||
      !aligned16(p.w) || (p.gate_up && p.rows % 2))
    throw std::invalid_argument(
        "launch_moe_gemm_sm90: the layer does not fit the Hopper kernel (sm_90, 16-bit, "
        "widths multiples of 8, 16-byte aligned, tiles of 64 or 128 rows, the live tile count)");
  int dev = 0, sms = 0;
  DETFUZZ_CUDA_CHECK(cudaGetDevice(&dev));
  DETFUZZ_CUDA_CHECK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev));
  moe_sm90::dispatch<LaunchShape>(p, dev, sms, stream);
}

}  // namespace detfuzz::cuda_kernels
