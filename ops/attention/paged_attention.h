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
//     K, V, then textbook two-pass softmax attention in float32 (scores, max, exp, sum, P@V / l;
//     each q . k in eight interleaved partial sums).
//     Per-row by construction. The executable spec of the metadata semantics.
//   The float64 reference (paged_attention_reference_f64): the same gather and mask in float64
//     with ATen ops (batched matmuls, softmax) on the inputs' device; what the `accuracy` property
//     measures every implementation, Path A included, against. Not an impl: a BLAS call's
//     reduction order may depend on the row count, so its bits are not checked for invariance.
//   Fixed split (paged_attention_split_cpu, and the CUDA kernel in paged_attention.cu): the
//     keys a row sees are cut at absolute positions into splits of kKvSplit tokens and each split
//     into online-softmax steps of kKvTile tokens. With s = q . k and c = scale * log2(e), the
//     maxima live in the log2 domain. Within a split, from (m, l, acc) = (-inf, 0, 0), step by
//     step: with x = (step max of s) * c, m_new = x where x > m + 8 and m otherwise (the reference
//     moves only when the step's maximum passes it by more than 2^8, so most steps rescale by
//     a = 1 and p stays <= 2^8), a = exp2(m - m_new), p = exp2(fma(s, c, -m_new)), l = l*a + sum p,
//     acc = acc*a + sum round(p)*v (round() = to the input dtype, as a tensor-core kernel rounds P
//     for its MMA). Across splits, sequentially in split order:
//     (M, L, O) = split 0's state, then M' = max(M, m_j), L = L*a + l_j*b, O = O*a + acc_j*b with
//     a = exp2(M - M'), b = exp2(m_j - M'); out = O * (1 / L). Every boundary is a function of the key
//     position alone, so a row's bits depend on its own q vector and visible keys only: never on
//     the batch, its padding, q_len or the page layout. The CPU and CUDA versions run the same
//     algorithm but not the same bits (tensor cores sum a dot product in their own order; CUDA's
//     ex2.approx is not glibc's exp2).
#pragma once

#include "ops/attention/kv_cache.h"
#include "ops/attention/split_contract.h"

#include <ATen/ATen.h>

#include <functional>
#include <string>

namespace detfuzz::attention {

// The softmax scale used for `alpha` (OpArgs::alpha): alpha itself, or 1/sqrt(D) when alpha == 0;
// rounded to float32 once, the same way by every implementation.
float softmax_scale(double alpha, int64_t head_dim);
// softmax_scale(alpha, head_dim) * log2(e), rounded to float32: the fixed-split algorithm's score scale.
float softmax_scale_log2(double alpha, int64_t head_dim);

// Path A. Accepts tensors on any device; computes on the CPU, returns on q's device.
at::Tensor paged_attention_reference(const at::Tensor &q, const at::Tensor &k_pool, const at::Tensor &v_pool,
                                     const at::Tensor &cu_seqlens_q, const at::Tensor &seq_lens_kv,
                                     const at::Tensor &block_table, double alpha);

// The float64 reference: output [T_q, H_q, D] in float64 on q's device.
at::Tensor paged_attention_reference_f64(const at::Tensor &q, const at::Tensor &k_pool, const at::Tensor &v_pool,
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
// allow_rows_without_keys: q_len may exceed kv_len (the right-aligned slots of a graph bucket,
// ops/graph); the first q_len - kv_len rows of such a sequence see no key and come out as zeros.
// (The CUDA kernel leaves those rows unspecified: they are padding, never read.)
at::Tensor paged_attention_split_cpu(const at::Tensor &q, const at::Tensor &k_pool, const at::Tensor &v_pool,
                                     const at::Tensor &cu_seqlens_q, const at::Tensor &seq_lens_kv,
                                     const at::Tensor &block_table, double alpha, const PlanFn &plan = {},
                                     bool allow_rows_without_keys = false);

// Planted bugs (see register.cpp for what each imitates).
enum class Mutant { splits_from_maxlen, qtile_from_avg, padded_grid };
PlanFn mutant_plan(Mutant m);

#ifdef DETFUZZ_WITH_CUDA
// The fused kernel (paged_attention.cu) on CUDA tensors: q of dtype float16 or bfloat16, D in
// {64, 128, 256}, H_q / H_kv in 1..8.
struct CudaAttentionOptions {
  int64_t split_tokens = kKvSplit;  // a positive multiple of 64
  int64_t softmax_keys =
      kKvTile;  // keys per online-softmax step: 64, or 32 (the planted qtile bug; split_per_cta only)
  // How CTAs share out a row's splits; "automatic" picks from the batch's size. Every choice
  // gives the same bits. split_groups (the wgmma kernel only: a warp-specialised CTA whose two
  // consumer warpgroups each walk splits_per_cta splits of one query tile) is automatic's choice
  // where the wgmma kernel runs and whole_rows is not taken; split_per_cta is the one-warpgroup
  // CTA, the mma.sync kernel's choice.
  enum class Schedule { automatic, split_per_cta, whole_rows, split_groups } schedule = Schedule::automatic;
  int64_t splits_per_cta =
      0;  // split_per_cta, split_groups: consecutive splits per CTA (per consumer), 0 = from the batch's size
  // split_groups: consumer warpgroups with a split group each, 1 or 2; 0 = from the grid's size
  // (attention_policy::split_group_consumers). The same bits either way.
  int64_t group_consumers = 0;
  // Which kernel computes the tiles: automatic is wgmma wherever it runs (an sm_90 GPU, head dim
  // 64 or 128), else mma_sync. The two differ in bits; each is invariant on its own, so the
  // choice depends on the device and the head dim only, never on the batch.
  enum class Kernel { automatic, mma_sync, wgmma } kernel = Kernel::automatic;
  // How the Hopper kernels (wgmma, whole_rows and split_groups) load K/V tiles: automatic is TMA
  // for pages of 64 tokens or a multiple (a box per 64-key tile) and, for smaller pages that divide
  // 64, for each tile whose pages follow each other in the pool (one 64-row box per column block:
  // attention_policy::tma_run_boxes); and as tma for split_groups in
  // one wave of CTAs whose consumers walk 2 splits or more, on a device where a CTA pulls more than
  // its SM's share of the bandwidth (an H100, not an H200: attention_policy::small_box_tma_pays)
  // and for whole_rows decode in 1-4 nearly full waves of rows of 4 splits or more
  // (whole_rows_small_box_tma_pays), cp.async otherwise; tma takes TMA wherever a box fits a page
  // run (pages of 8-64 dividing 64, or multiples of 64), and runs of consecutive pages as one box;
  // cp_async never does.
  // The bytes in shared memory, and so every bit, are the same.
  enum class KvLoads { automatic, tma, cp_async } kv_loads = KvLoads::automatic;
  // Whether the Hopper prefill kernel's two consumer warpgroups take turns issuing their MMAs
  // (ping-pong, as FlashAttention-3 schedules them) or issue freely. automatic: ping-pong (see
  // paged_attention_sm90.cu for the measurement). The bits are the same.
  enum class ConsumerTurns { automatic, free, pingpong } turns = ConsumerTurns::automatic;
  // Where split_groups folds a row's splits: automatic is in the CTAs that computed them wherever
  // one CTA, or a cluster of two, holds every split of its rows (attention_policy::fold_ctas), else
  // the merge kernel; kernel is the merge kernel always. The bits are the same.
  enum class Merge { automatic, kernel } merge = Merge::automatic;
};

// can_implement says why the kernel cannot take these tensors, or "" when it can.
std::string paged_attention_cuda_can_implement(const at::Tensor &q, const at::Tensor &k_pool);

// Plan once per batch, run once per layer (as serving engines do): the plan validates the
// metadata on the host (a device-to-host copy and a sync), picks the schedule and the grid; run
// only checks shapes and launches on the current stream.
class PagedAttentionCudaPlan {
 public:
  PagedAttentionCudaPlan(const at::Tensor &q, const at::Tensor &k_pool, const at::Tensor &v_pool,
                         const at::Tensor &cu_seqlens_q, const at::Tensor &seq_lens_kv, const at::Tensor &block_table,
                         const CudaAttentionOptions &options = {});
  at::Tensor run(const at::Tensor &q, const at::Tensor &k_pool, const at::Tensor &v_pool, double alpha) const;
  bool whole_rows() const { return whole_rows_; }
  bool split_groups() const { return split_groups_; }
  bool wgmma() const { return wgmma_; }
  bool cta_merge() const { return cta_merge_; }
  // cta_merge: the CTAs that fold a row's splits together (1, or 2 as a cluster).
  int64_t fold_ctas() const { return fold_ctas_; }

 private:
  at::Tensor cu_seqlens_q_, seq_lens_kv_, block_table_;
  int64_t num_q_ = 0, num_seqs_ = 0, max_blocks_ = 0, block_size_ = 0, h_q_ = 0, h_kv_ = 0, head_dim_ = 0;
  int64_t num_blocks_ = 0, q_tiles_ = 0, max_splits_ = 0, splits_per_cta_ = 1, group_consumers_ = 2, fold_ctas_ = 0;
  CudaAttentionOptions options_;
  bool whole_rows_ = false;
  bool split_groups_ = false;
  bool wgmma_ = false;
  bool small_box_tma_ = false;  // automatic K/V loads run as KvLoads::tma (small_box_tma_pays)
  bool early_merge_ = false;    // split_groups' merge launched at the split kernel's start (early_merge_pays)
  bool cta_merge_ = false;      // split_groups' CTAs fold their rows' splits, no merge kernel (fold_ctas)
};

// Plan and run in one call.
at::Tensor paged_attention_cuda(const at::Tensor &q, const at::Tensor &k_pool, const at::Tensor &v_pool,
                                const at::Tensor &cu_seqlens_q, const at::Tensor &seq_lens_kv,
                                const at::Tensor &block_table, double alpha, const CudaAttentionOptions &options = {});
#endif

}  // namespace detfuzz::attention
