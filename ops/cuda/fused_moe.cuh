// Raw-pointer launchers of the batch-invariant fused MoE layer (no torch here; host C++ may
// include this header): the routing, the two grouped GEMMs over all experts and the combine, in
// the fixed order of ops/cpu/moe.h. Every tensor is contiguous and row-major.
#pragma once

#include "ops/cuda/gemm.cuh"  // DType

#include <cuda_runtime_api.h>

#include <cstdint>

namespace detfuzz::cuda_kernels {

// logits [t, e] float32 -> ids [t, k] int32 and weights [t, k] float32: the top k (larger logit
// first, ties to the lower index, NaN after every number) and the softmax of the chosen logits.
void launch_moe_route(const float *logits, int64_t t, int64_t e, int64_t k, int32_t *ids, float *weights,
                      cudaStream_t stream);

// The (token, slot) pairs p = token * k + slot, grouped by expert: `order` lists them expert by
// expert; tile i covers order[tiles[3i + 1] .. + tiles[3i + 2]) (at most kMoeTileRows pairs), all
// routed to expert tiles[3i].
constexpr int64_t kMoeTileRows = 32;
struct MoeTiles {
  const int32_t *order = nullptr;
  const int32_t *tiles = nullptr;
  int64_t count = 0;
};

// The grouping on the device (moe_group.cu), so that no host round trip stands between the
// routing and the GEMMs (a CUDA graph can hold the whole layer): from ids [pairs] (each in
// [0, experts)), order [pairs] (stable: in p order within an expert) and tiles
// [3 * moe_max_tiles(...) + 1]: the tiles of at most tile_rows pairs, expert by expert, then empty
// tiles (count 0) up to the bound, which the GEMMs skip, then the count of non-empty tiles. The
// tile list is the host's, so the GEMMs' work and bits are too. Batches of more than a block's
// pairs take a workspace of moe_group_workspace(...) int32 (0: none needed). The per-expert counts
// live in shared memory: at most kMoeGroupMaxExperts experts.
constexpr int64_t kMoeGroupMaxExperts = 4000;
int64_t moe_max_tiles(int64_t pairs, int64_t experts, int64_t tile_rows);
int64_t moe_group_workspace(int64_t pairs, int64_t experts);
void launch_moe_group(const int32_t *ids, int64_t pairs, int64_t experts, int64_t tile_rows, int32_t *workspace,
                      int32_t *order, int32_t *tiles, cudaStream_t stream);

// One grouped GEMM over all experts. Row p of A is x[p / k] (gate_up) or act[p] (down); the
// weights w [E, rows, cols] of `w_dtype`, or float8 e4m3fn bytes with float32 128 x 128 block
// scales [E, ceil(rows/128), ceil(cols/128)] when w_scale is given; K = cols.
//   gate_up: act[p, i] = silu(w[e, i] . x) * (w[e, I + i] . x), i < I = rows / 2 (float32
//            storage, the value rounded to x's dtype)
//   down:    y[p, j] = w[e, j] . act[p], j < rows (float32)
// Each dot product: float32 partials over 128-wide K blocks summed sequentially from zero, each
// times its block scale (fp8), added in K order: the CPU kernel's order, so its bits.
struct MoeGemmParams {
  bool gate_up = true;
  const void *a = nullptr;
  DType a_dtype = DType::f32;
  int64_t top_k = 1;
  const void *w = nullptr;
  DType w_dtype = DType::f32;  // ignored for fp8 weights
  const float *w_scale = nullptr;
  int64_t rows = 0, cols = 0;
  float *out = nullptr;
  // The planted mutants' schedules (0: the invariant one), from expert_tokens[e], the pairs
  // routed to expert e: experts with >= small_k_block_from pairs sum K blocks of 32 (each inside
  // one 128-wide scale block); experts with <= split_k_up_to pairs split K in two at the multiple
  // of 32 at or below the middle, the two parts' totals added (ops/cpu/moe.h's MoePlan).
  const int32_t *expert_tokens = nullptr;
  int64_t small_k_block_from = 0, split_k_up_to = 0;
};
void launch_moe_gemm(const MoeGemmParams &p, const MoeTiles &tiles, cudaStream_t stream);

// The Hopper grouped GEMMs (fused_moe_sm90.cu): x and weights of one 16-bit dtype, wgmma with
// float32 accumulators, one launch per GEMM over every row tile of every expert. Rows of `a` are
// in expert order (row r holds pair order[r]); tile i covers rows tiles[3i + 1] .. + tiles[3i + 2]
// (at most tile_m, all of expert tiles[3i]).
//   gate_up: act[r, i] = silu(w[e, i] . a[r]) * (w[e, I + i] . a[r]) rounded to dtype, act [pairs, I]
//   down:    y[order[r], j] = w[e, j] . a[r] (float32), y [pairs, rows]
// K = the weights' cols, a multiple of 8 (TMA's 16-byte rows), as are rows; a, w 16-byte aligned.
struct MoeSm90Gemm {
  bool gate_up = true;
  DType dtype = DType::bf16;  // f16 or bf16
  const void *a = nullptr;
  int64_t pairs = 0;
  const void *w = nullptr;
  int64_t experts = 0, rows = 0, cols = 0;
  const int32_t *tiles = nullptr;
  int64_t row_tiles = 0;
  // The non-empty row tiles, a count on the device (the grouping's, past its list; required): each
  // CTA reads it at its start, so that the CTAs share those tiles alone and never meet the padding.
  const int32_t *live_row_tiles = nullptr;
  const float *w_scale = nullptr;  // fp8 weights (float8 e4m3fn) with 128 x 128 block scales
                                   // [E, rows / 128, cols / 128]: launch_moe_gemm_fp8_sm90
  int tile_m = 64;                 // 64 or 128
  int down_cols = 128;             // down: output columns per tile, 128 or 64 (more CTAs where tiles are few)
  const int32_t *order = nullptr;  // down
  void *out = nullptr;
};
// Whether the Hopper grouped GEMMs can run a layer of hidden h and expert width i with x in
// `dtype` on the current device: an sm_90 GPU, a 16-bit dtype, h and i multiples of 8 (of 128 for
// fp8 weights: a tile's columns lie in one scale block). A function of these alone, never of the
// tokens.
bool moe_sm90_fits(DType dtype, int64_t h, int64_t i, bool fp8_weights = false);
void launch_moe_gemm_sm90(const MoeSm90Gemm &p, cudaStream_t stream);
// The same GEMMs with fp8 weights (fused_moe_fp8_sm90.cu): each 128 x 128 weight block widened to
// x's dtype in shared memory, its wgmma partial from zero times the block's scale, added into a
// float32 total in K order (the CPU kernel's blocking and order).
void launch_moe_gemm_fp8_sm90(const MoeSm90Gemm &p, cudaStream_t stream);

// out[t, j] = sum over slots s in order of weights[t, s] * y[t * k + s, j], float32 from zero,
// rounded once to out_dtype. slot_order [t, k] (the planted mutant's: busiest expert first), when
// given, replaces slot order.
void launch_moe_combine(const float *y, const float *weights, int64_t t, int64_t k, int64_t h, void *out,
                        DType out_dtype, cudaStream_t stream, const int32_t *slot_order = nullptr);

}  // namespace detfuzz::cuda_kernels
