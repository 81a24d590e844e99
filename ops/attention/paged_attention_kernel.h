// Launcher of the fused paged attention kernel (paged_attention.cu). Knows nothing of torch: raw
// device pointers, sizes and a stream. Host dispatch (metadata validation, the schedule,
// workspace) is in paged_attention_cuda.cpp.
#pragma once

#include "ops/attention/attention_policy.h"

#include <cuda_runtime_api.h>

#include <cstdint>

namespace detfuzz::attention {

// KvSchedule, KvLoads, AttnKernel, attention_rows_per_tile and the rules that choose among them:
// attention_policy.h.

struct PagedAttnLaunch {
  bool bf16 = true;                                               // else float16
  const void *q = nullptr, *k_pool = nullptr, *v_pool = nullptr;  // [T_q,H_q,D], [NB,BS,H_kv,D] x2
  const int *cu_seqlens_q = nullptr, *seq_lens_kv = nullptr, *block_table = nullptr;
  void *out = nullptr;        // [T_q, H_q, D], q's dtype
  float *part_acc = nullptr;  // split_per_cta, split_groups: [T_q, H_q, max_splits, D] unnormalised split accumulators
  float *part_ml = nullptr;   // split_per_cta, split_groups: [T_q, H_q, max_splits, 2] split (max, sum), log2 domain
  int num_rows = 0, num_seqs = 0, max_blocks = 0, block_size = 0;
  int64_t pool_blocks = 0;  // NB: pages in each pool (the extent of the Hopper kernel's TMA maps)
  int h_q = 0, h_kv = 0, head_dim = 0;
  int split_tokens = 256;  // keys per split: a positive multiple of 64
  int softmax_keys = 64;   // keys per online-softmax step: 64, or 32 (the planted qtile bug)
  int q_tiles = 0;         // grid x: ceil(longest q_len / query rows per tile)
  int max_splits = 0;      // ceil(longest kv_len / split_tokens): workspace stride
  int splits_per_cta =
      1;  // split_per_cta: consecutive splits one CTA walks (fewer CTA prologues); split_groups: one consumer
  int group_consumers = 2;  // split_groups: consumers with a split group each (2, or 1 for grids under half the SMs)
  KvSchedule schedule = KvSchedule::split_per_cta;
  AttnKernel kernel = AttnKernel::mma_sync;
  KvLoads kv_loads = KvLoads::automatic;
  bool pingpong = false;     // the Hopper prefill kernel's consumers take turns issuing their MMAs
  bool early_merge = false;  // split_groups: the merge's CTAs launched at the kernel's start (early_merge_pays)
  bool cta_merge = false;    // split_groups: the CTAs fold their rows' splits, no merge kernel (fold_ctas)
  // cta_merge: the CTAs that hold a row's splits and fold them together, as a thread-block cluster
  // (1, or 2: attention_policy::fold_ctas); the grid then puts a row's CTAs next to each other.
  int fold_ctas = 1;
  float scale_log2 = 1.f;  // softmax scale times log2(e): scores are kept in the log2 domain
};

// split_per_cta, split_groups: groups of splits_per_cta consecutive splits, ceil(max_splits / splits_per_cta).
__host__ __device__ inline int split_group_count(int max_splits, int splits_per_cta) {
  return (max_splits + splits_per_cta - 1) / splits_per_cta;
}

// split_groups: the CTAs per (query tile, KV head), each with `consumers` split groups (one per
// consumer warpgroup), rounded up.
__host__ __device__ inline int split_group_ctas(int max_splits, int splits_per_cta, int consumers) {
  return (split_group_count(max_splits, splits_per_cta) + consumers - 1) / consumers;
}

// whole_rows on the warp-specialised kernel: the CTAs per (sequence, KV head), one per pair of
// query tiles (its two consumer warpgroups take adjacent tiles).
__host__ __device__ inline int whole_rows_ws_ctas(int q_tiles) { return (q_tiles + 1) / 2; }

// One or two launches on `stream`: the attention kernel over the whole mixed batch, then (split
// per CTA, when some row has more than one split) the merge, launched as a programmatic dependent
// so that its launch overlaps the attention kernel's tail. Throws std::runtime_error naming
// file:line on any CUDA error.
void launch_paged_attention(const PagedAttnLaunch &p, cudaStream_t stream);

// The whole_rows schedule of AttnKernel::wgmma (paged_attention_sm90.cu): a producer warpgroup
// and two consumer warpgroups per CTA, two query tiles sharing the K/V stream. Called by
// launch_paged_attention.
void launch_whole_rows_sm90(const PagedAttnLaunch &p, cudaStream_t stream);

// The split_groups schedule (paged_attention_sm90.cu): the same producer and consumers, a CTA per
// (query tile, KV head, two groups of splits_per_cta splits), a consumer per group. The caller
// launches the merge after it. Called by launch_paged_attention.
void launch_split_groups_sm90(const PagedAttnLaunch &p, cudaStream_t stream);

// Whether `device` can run AttnKernel::wgmma (an sm_90 GPU, and sm_90a code in this binary).
bool paged_attention_wgmma_available(int device);

// How many CTAs of the split_per_cta kernel for (head_dim, dtype, kernel) fit on one SM of
// `device` at once (its shared memory and registers decide), for the plan's choice of splits
// per CTA.
int paged_attention_split_ctas_per_sm(int head_dim, bool bf16, AttnKernel kernel, int device);

}  // namespace detfuzz::attention
