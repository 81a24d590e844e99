// Paged attention over a block-table KV cache (see kv_cache.h for the layout and metadata).
//
// Inputs (the OpArgs order of op "paged_attention"):
//   q [T_q, H_q, D], k_pool, v_pool [NB, BS, H_kv, D] (q's dtype), cu_seqlens_q [S+1],
//   seq_lens_kv [S], block_table [S, max_blocks] (all int32); alpha = softmax scale, 0 = 1/sqrt(D).
// Output [T_q, H_q, D] in q's dtype. Query head h reads KV head h / (H_q / H_kv) (GQA).
// Mask: bottom-right causal, row q of sequence s sees keys 0 .. kv_len[s] - q_len[s] + q.
// Since q_len <= kv_len is enforced, every row sees at least one key: no row is fully masked, and
// kv_len = 0 is only legal with q_len = 0 (no rows).
//
// Implementations:
//   Path A (paged_attention_reference): per-sequence gather of the used pages into contiguous
//     K, V, then textbook two-pass softmax attention in float32 (scores, max, exp, sum, P@V / l).
//     Per-row by construction. The executable spec of the metadata semantics.
//   Fixed split (paged_attention_split_cpu, and the CUDA kernel in paged_attention.cu): the
//     keys a row sees are cut at absolute positions into splits of kKvSplit tokens and each split
//     into tiles of kKvTile tokens. Within a split: online softmax tile by tile (the tile's scores,
//     its max, m_new = max(m, tile max), a = exp(m - m_new), p = exp(s - m_new), l = l*a + sum p,
//     acc = acc*a + sum round(p)*v, sums over a tile's keys in key order, round() = to the input
//     dtype, as a tensor-core kernel rounds P for its MMA). Across splits: M = max m_j,
//     then in split order j = 0, 1, ...: w = exp(m_j - M), L += w*l_j, O += w*acc_j; out = O / L.
//     Every boundary is a function of the key position alone, so a row's bits depend on its own
//     q vector and visible keys only: never on the batch, its padding, q_len or the page layout.
#pragma once

#include "ops/attention/kv_cache.h"

#include <ATen/ATen.h>

#include <functional>

namespace detfuzz::attention {

constexpr int64_t kKvTile = 64;    // keys per online-softmax step
constexpr int64_t kKvSplit = 256;  // keys per split; a multiple of kKvTile

// The softmax scale used for `alpha` (OpArgs::alpha): alpha itself, or 1/sqrt(D) when alpha == 0;
// rounded to float32 once, the same way by every implementation.
float softmax_scale(double alpha, int64_t head_dim);

// Path A. Accepts tensors on any device; computes on the CPU, returns on q's device.
at::Tensor paged_attention_reference(const at::Tensor &q, const at::Tensor &k_pool, const at::Tensor &v_pool,
                                     const at::Tensor &cu_seqlens_q, const at::Tensor &seq_lens_kv,
                                     const at::Tensor &block_table, double alpha);

// Tile and split sizes (tokens) the fixed-split algorithm uses for one sequence. The invariant
// plan is {kKvTile, kKvSplit} for every sequence; the mutants compute it from the batch.
struct SplitPlan {
  int64_t tile = kKvTile;
  int64_t split = kKvSplit;  // a multiple of tile
};
using PlanFn = std::function<SplitPlan(const MetadataHost &, int64_t seq)>;

// The fixed-split algorithm on the CPU in float32 (the CUDA kernel's algorithm, same split size,
// same merge order; exp from the C library). An empty `plan` means the invariant plan.
at::Tensor paged_attention_split_cpu(const at::Tensor &q, const at::Tensor &k_pool, const at::Tensor &v_pool,
                                     const at::Tensor &cu_seqlens_q, const at::Tensor &seq_lens_kv,
                                     const at::Tensor &block_table, double alpha, const PlanFn &plan = {});

// Planted bugs (see register.cpp for what each imitates).
enum class Mutant { splits_from_maxlen, qtile_from_avg, padded_grid };
PlanFn mutant_plan(Mutant m);

#ifdef DETFUZZ_WITH_CUDA
// The fused kernel (paged_attention.cu): CUDA tensors, q of dtype float16 or bfloat16, D in
// {64, 128, 256}, H_q / H_kv in 1..8. can_implement says why not, or "" when it can.
std::string paged_attention_cuda_can_implement(const at::Tensor &q, const at::Tensor &k_pool);
at::Tensor paged_attention_cuda(const at::Tensor &q, const at::Tensor &k_pool, const at::Tensor &v_pool,
                                const at::Tensor &cu_seqlens_q, const at::Tensor &seq_lens_kv,
                                const at::Tensor &block_table, double alpha, int64_t split_tokens = kKvSplit);
#endif

}  // namespace detfuzz::attention
