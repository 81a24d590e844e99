// What the Hopper grouped MoE GEMMs share (fused_moe_sm90.cu: 16-bit weights;
// fused_moe_fp8_sm90.cu: fp8 weights): the persistent walk over (row tile, column tile) pairs, the
// pipeline's barriers, the epilogue, and the host's choice of a kernel instance for a layer.
#pragma once

#include "ops/cuda/activation.cuh"  // silu_mul
#include "ops/cuda/fused_moe.cuh"
#include "ops/cuda/mma_sm80.cuh"  // from_f
#include "ops/cuda/ptx_sm90.cuh"

#include <cuda.h>
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cstdint>

namespace detfuzz::cuda_kernels::moe_sm90 {

// A producer warpgroup and CONSUMERS consumer warpgroups of 64 rows each.
template <int CONSUMERS>
constexpr int kThreads = 128 * (CONSUMERS + 1);

#if DETFUZZ_SM90A
// Persistent tile `tile` of a launch over row_tiles row tiles: row tile tile % row_tiles (its
// expert, its first row in expert order, its row count) by column tile tile / row_tiles (its first
// output column c0), and the first rows of its two 64-row weight boxes: gate_up, the gate rows
// c0.. and the up rows I + c0..; down, the rows c0.. and c0 + 64...
struct Tile {
  int expert, first, count, c0, w0, w1;
};
template <bool GATE_UP, int COLS>
__device__ __forceinline__ Tile tile_at(const MoeSm90Gemm &p, int64_t tile, int64_t row_tiles) {
  const int64_t rt = tile % row_tiles, ct = tile / row_tiles;
  Tile t;
  t.expert = p.tiles[3 * rt];
  t.first = p.tiles[3 * rt + 1];
  t.count = p.tiles[3 * rt + 2];
  t.c0 = static_cast<int>(ct * COLS);
  t.w0 = t.c0;
  t.w1 = GATE_UP ? static_cast<int>(p.rows / 2) + t.c0 : t.c0 + 64;
  return t;
}

// Run by thread 0 before the block's first barrier: each stage's full barrier (one arrival, the
// producer's expect-tx) and empty barrier (one arrival per consumer warp), and both maps prefetched.
__device__ __forceinline__ void init_pipeline(uint32_t full_bar, uint32_t empty_bar, int stages, int consumers,
                                              const CUtensorMap *map_a, const CUtensorMap *map_w) {
  for (int s = 0; s < stages; ++s) {
    sm90::mbar_init(full_bar + 8 * s, 1);
    sm90::mbar_init(empty_bar + 8 * s, consumers * 4);
  }
  sm90::fence_mbar_init();
  sm90::prefetch_tensor_map(map_a);
  sm90::prefetch_tensor_map(map_w);
}

// The epilogue of a consumer thread (warpgroup cw, warp, lane) of a tile with `count` rows from
// `first` (in expert order) and columns from c0: its values of rows 64 cw + 16 warp + lane / 4
// (+ 8) and columns c0 + 8 j + 2 (lane % 4) (+ 1), in wgmma's accumulator layout. gate_up stores
// silu(g) * u rounded to T into act [pairs, I]; down stores g (float32) into the row of y of each
// row's pair, order[row]. Columns past the matrix are skipped.
template <typename T, bool GATE_UP, int COLS>
__device__ __forceinline__ void store_tile(const MoeSm90Gemm &p, const float (&g)[COLS / 2],
                                           const float (&u)[GATE_UP ? 32 : 1], int cw, int warp, int lane,
                                           int64_t first, int count, int64_t c0) {
  const int64_t n_out = GATE_UP ? p.rows / 2 : p.rows;
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    const int r = cw * 64 + warp * 16 + lane / 4 + 8 * h;
    if (r >= count) continue;
    const int64_t row = first + r;
#pragma unroll
    for (int j = 0; j < COLS / 8; ++j) {
      const int64_t col = c0 + 8 * j + 2 * (lane % 4);  // even; the widths are multiples of 8
      const int i = 4 * j + 2 * h;
      if (col >= n_out) continue;
      if constexpr (GATE_UP) {
        const uint32_t lo = from_f<T>(silu_mul(g[i], u[i])), hi = from_f<T>(silu_mul(g[i + 1], u[i + 1]));
        *reinterpret_cast<uint32_t *>(static_cast<uint16_t *>(p.out) + row * n_out + col) = lo | (hi << 16);
      } else {
        *reinterpret_cast<float2 *>(static_cast<float *>(p.out) + p.order[row] * n_out + col) =
            make_float2(g[i], g[i + 1]);
      }
    }
  }
}
#endif  // DETFUZZ_SM90A

// The kernel instance for a layer: T from x's dtype, CONSUMERS from the tile height, and GATE_UP
// and COLS from the GEMM (gate_up: 64 columns; down: down_cols). Launch<T, CONSUMERS, GATE_UP,
// COLS>::run(p, dev, sms, stream) launches it.
template <template <typename, int, bool, int> class Launch, typename T, int CONSUMERS>
void dispatch_gemm(const MoeSm90Gemm &p, int dev, int sms, cudaStream_t stream) {
  if (p.gate_up) return Launch<T, CONSUMERS, true, 64>::run(p, dev, sms, stream);
  if (p.down_cols == 64) return Launch<T, CONSUMERS, false, 64>::run(p, dev, sms, stream);
  return Launch<T, CONSUMERS, false, 128>::run(p, dev, sms, stream);
}
template <template <typename, int, bool, int> class Launch>
void dispatch(const MoeSm90Gemm &p, int dev, int sms, cudaStream_t stream) {
  const bool bf16 = p.dtype == DType::bf16;
  if (p.tile_m == 128)
    bf16 ? dispatch_gemm<Launch, __nv_bfloat16, 2>(p, dev, sms, stream)
         : dispatch_gemm<Launch, __half, 2>(p, dev, sms, stream);
  else
    bf16 ? dispatch_gemm<Launch, __nv_bfloat16, 1>(p, dev, sms, stream)
         : dispatch_gemm<Launch, __half, 1>(p, dev, sms, stream);
}

}  // namespace detfuzz::cuda_kernels::moe_sm90
