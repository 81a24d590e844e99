// Launch policy of the fused paged attention kernel: the grid, the schedule and the splits per
// CTA of a batch, and how the Hopper kernel loads K/V tiles, as pure host functions of the batch's
// sizes, the SM count and a few facts asked of the device (as flash-attention's
// hopper/heuristics.h keeps its rules). No CUDA and no torch here, so tests/ops/policy checks
// every rule on the CPU. paged_attention_cuda.cpp's plan calls these; paged_attention_sm90.cu's
// launcher calls tma_box_rows.
//
// None of these choices reaches a row's bits (see paged_attention.cu): a rule decides speed only.
// Measurements behind the constants: docs/perf/attention.md.
#pragma once

#include "ops/attention/split_contract.h"

#include <cstddef>
#include <cstdint>
#include <vector>

namespace detfuzz::attention {

// How the CTAs share out a row's KV splits. Both give every row the same bits (the merge is the
// same sequence of float operations); they differ in speed only.
enum class KvSchedule {
  split_per_cta,  // one CTA per (query tile, KV head, splits_per_cta splits), writing each split's
                  // state; a second kernel merges the splits
  whole_rows,     // one CTA per (query tile, KV head) walks every split and merges in registers
  split_groups,   // AttnKernel::wgmma only: the warp-specialised kernel, each consumer warpgroup on
                  // its own splits_per_cta splits of a query tile, writing each split's state; the
                  // merge kernel as for split_per_cta
};

// How the Hopper kernel loads K/V tiles (see CudaAttentionOptions::KvLoads).
enum class KvLoads { automatic, tma, cp_async };

// Which kernel computes the tiles. They differ in bits (tensor cores order a dot product their own
// way per instruction), and each is batch invariant on its own.
enum class AttnKernel {
  mma_sync,  // mma.sync.m16n8k16 per warp, ldmatrix: any GPU from sm_80
  wgmma,     // Hopper's warpgroup MMA (sm_90a code on an sm_90 GPU), head dims 64 and 128
};

// Query rows (of one sequence) per CTA for a GQA group of `group` query heads per KV head: a CTA
// holds 64 (query row, head) pairs.
constexpr int attention_rows_per_tile(int group) { return 64 / group; }

namespace attention_policy {

// The grid of a batch: query tiles of the longest q_len, splits of the longest kv_len.
struct KvGrid {
  int64_t q_tiles = 1;               // grid x: ceil(longest q_len / query rows per tile), at least 1
  int64_t max_splits = 1;            // ceil(longest kv_len / split_tokens), at least 1
  int64_t full_tiles = 0;            // query tiles with more than 16 live (row, head) pairs: prefill work
  int64_t longest_q = 0;             // the longest q_len
  std::vector<int64_t> tile_splits;  // per query tile of every sequence: the splits its last row sees
};

// cu_q: the batch's query offsets (num_seqs + 1), kv_len: each sequence's keys (cached and new),
// as the kernel reads them; group: query heads per KV head; split_tokens: keys per split.
inline KvGrid kv_grid(const std::vector<int32_t> &cu_q, const std::vector<int32_t> &kv_len, int64_t group,
                      int64_t split_tokens) {
  const int64_t rows_per_tile = attention_rows_per_tile(static_cast<int>(group));
  KvGrid g;
  int64_t max_q = 0, max_kv = 0;
  for (std::size_t s = 0; s < kv_len.size(); ++s) {
    const int64_t q_len = cu_q[s + 1] - cu_q[s];
    max_q = q_len > max_q ? q_len : max_q;
    max_kv = kv_len[s] > max_kv ? kv_len[s] : max_kv;
    for (int64_t q0 = 0; q0 < q_len; q0 += rows_per_tile) {
      const int64_t rows = rows_per_tile < q_len - q0 ? rows_per_tile : q_len - q0;
      // Query tiles with more than 16 live (row, head) pairs: the ones worth a CTA of their own.
      g.full_tiles += rows * group > 16;
      const int64_t last_visible = kv_len[s] - q_len + q0 + rows;
      g.tile_splits.push_back((last_visible + split_tokens - 1) / split_tokens);
    }
  }
  const int64_t q_tiles = (max_q + rows_per_tile - 1) / rows_per_tile,
                max_splits = (max_kv + split_tokens - 1) / split_tokens;
  g.longest_q = max_q;
  g.q_tiles = q_tiles > 1 ? q_tiles : 1;
  g.max_splits = max_splits > 1 ? max_splits : 1;
  return g;
}

// whole_rows once the full query tiles (prefill work) alone give every SM two CTAs; splits
// otherwise (decode: the splits supply the parallelism, and a CTA per split streams KV faster than
// a CTA walking all of them, unless the batch gives every SM a row: decode_whole_rows_pays), and
// always for D = 256 (whole_rows' merged state would not fit).
inline bool whole_rows_pays(int64_t head_dim, int64_t full_tiles, int64_t h_kv, int64_t sms) {
  return head_dim <= 128 && full_tiles * h_kv >= 2 * sms;
}

// How many times an SM's share of the device's DRAM bandwidth one CTA of the Hopper kernel pulls:
// a CTA takes K/V in at about 32 KiB a microsecond with pages of 16 (docs/perf/attention.md), 1.3
// times an H100 SM's share of 3.35 TB/s over 132 SMs and 0.9 times an H200 SM's share of 4.8 TB/s.
// dram_gb_per_s: the device's peak (memory clock and bus width); 0 where unknown (1.3 then).
inline double cta_pull_over_sm_share(double dram_gb_per_s, int64_t sms) {
  constexpr double kCtaPullGbPerS = 32.8;
  return dram_gb_per_s > 0 && sms > 0 ? kCtaPullGbPerS * static_cast<double>(sms) / dram_gb_per_s : 1.3;
}

// whole_rows for a decode batch (no full query tile) on the wgmma kernel with 64-key softmax steps,
// where its CTAs, one per (sequence, KV head), stream the batch about as fast as the split
// schedules: decode is bound by the bytes the SMs stream, and whole_rows then saves the splits'
// states and the merge kernel. Costs in split-times at the device's K/V rate shared over every SM
// (one split per SM per unit): the split schedules spread every split over the SMs; whole_rows runs
// its CTAs in waves, each CTA streaming the longest row's splits at its wave's share of the rate,
// but at most cta_pull times an SM's share (cta_pull_over_sm_share). whole_rows is taken within a
// tenth, and never where a CTA cannot pull an SM's share (cta_pull < 1: the H200, whose two
// consumers per CTA of split_groups are needed to reach its bandwidth). Measured on an H100, FA2's
// decode against ours: batch 16 at 512-32k (128 CTAs on 132 SMs) 0.98-1.07x against 0.88-1.02x
// with split_groups; batch 12 at 4k 0.99x against 0.95x; batch 32 1.08x against 0.99x; batch 24 (a
// second wave of 60 CTAs) 0.85x against 0.93x, and batch 8 0.71x against 0.98x, where the split
// schedules stay. On an H200 whole_rows was 8-16% slower than split_groups at batch 16-256 and
// 4k-32k (docs/perf/attention.md).
inline bool decode_whole_rows_pays(bool wgmma_64_key_steps, int64_t head_dim, const KvGrid &g, int64_t h_kv,
                                   int64_t sms, double cta_pull) {
  if (!wgmma_64_key_steps || head_dim > 128 || g.full_tiles > 0 || g.tile_splits.empty() || sms <= 0) return false;
  if (cta_pull < 1.0) return false;
  int64_t total = 0, longest = 0;
  for (int64_t n : g.tile_splits) {
    total += n;
    longest = n > longest ? n : longest;
  }
  double whole_rows = 0;
  for (int64_t left = static_cast<int64_t>(g.tile_splits.size()) * h_kv; left > 0; left -= sms) {
    const double share = static_cast<double>(sms) / static_cast<double>(left < sms ? left : sms);
    whole_rows += static_cast<double>(longest) / (share < cta_pull ? share : cta_pull);
  }
  return whole_rows <= 1.1 * static_cast<double>(total * h_kv) / static_cast<double>(sms);
}

// split_groups (the warp-specialised kernel's decode schedule) wherever the wgmma kernel runs and
// whole_rows is not taken; its softmax steps are 64 keys (the 32-key steps of the planted qtile
// bug exist in split_per_cta only).
inline bool split_groups_pays(bool wgmma, int64_t softmax_keys) { return wgmma && softmax_keys == 64; }

// split_groups takes TMA boxes for pages smaller than a 64-key tile (KvLoads::tma's boxes: one per
// page run) where its grid is one wave (ctas <= sms), each consumer walks 2 splits or more, and a
// CTA pulls more than its SM's share of the DRAM bandwidth (cta_pull >= 1, cta_pull_over_sm_share):
// on an H100 an SM then streams a long run of tiles on its own, and the boxes keep it fed better
// than the producer's cp.async (+2-5% at batch 1 and 16k-32k, batch 16 and 4k). On an H200 (cta_pull
// 0.9) the producer's thread issues a tile's 16 boxes in about 1900 cycles against 1000 for the
// warpgroup's cp.async, and the boxes lose 4-9% at the same rows; with more waves or a split per
// consumer they do not pay on either (docs/perf/attention.md).
inline bool small_box_tma_pays(bool split_groups, int64_t splits_per_cta, int64_t ctas, int64_t sms, double cta_pull) {
  return split_groups && splits_per_cta >= 2 && ctas <= sms && cta_pull >= 1.0;
}

// whole_rows decode (decode_whole_rows_pays, or whole_rows forced on a decode batch) takes the
// small TMA boxes too in 1 to 4 waves of CTAs, each holding at least nine tenths of the SMs, where
// the longest row walks 4 splits or more. Forced boxes against cp.async, same binary, two runs
// (bf16 and fp16): batch 16 at 1k-16k +2.0 to +4.9%, batch 32 and 64 at 4k +2 / +1%; batch 256
// at 4k (16 waves) -1%, batch 12 at 4k (96 CTAs on 132 SMs) -8.5% and batch 16 at 512 (2 splits)
// -8%.
inline bool whole_rows_small_box_tma_pays(bool decode_whole_rows, int64_t longest_splits, int64_t ctas, int64_t sms) {
  if (!decode_whole_rows || longest_splits < 4 || ctas <= 0 || sms <= 0) return false;
  const int64_t waves = (ctas + sms - 1) / sms;
  return waves <= 4 && 10 * ctas >= 9 * waves * sms;
}

// split_groups: consumers per CTA, each on its own split group. Two, unless the CTAs of two would
// fill under half the SMs: then one, and twice the CTAs, so that twice the SMs pull K/V. A CTA
// takes K/V in at about 32 KiB a microsecond with pages of 16, however it loads them, so a short
// decode on a few SMs waits on its loads (the measurement: docs/perf/attention.md).
inline int64_t split_group_consumers(bool split_groups, int64_t two_consumer_ctas, int64_t sms) {
  return split_groups && 2 * two_consumer_ctas <= sms ? 1 : 2;
}

// split_groups: the merge kernel's CTAs launched at the split kernel's start (they wait there for
// it to finish) instead of when it ends, wherever a row has more than one split: the merge then
// starts as soon as the last split is written, without its launch latency. Its CTAs ask for shared
// memory sized to spread them (merge_spread_smem), so that those placed on the SMs a one-wave split
// grid leaves free, or as the split kernel's CTAs finish, spread over the SMs: packed onto the few
// free SMs, they folded long rows on those SMs' load bandwidth (batch 1 at 32k: 53.9 against 50.1
// us on an H200). On an H200, against launching early only where both grids fit at once (three
// interleaved rounds, bf16): batch 16 at 1k / 2k / 4k 26.5 / 43.0 / 78.7 against 27.5 / 44.1 /
// 79.5 us, batch 8 at 4k 44.1 against 44.9, batch 1 at 16k / 32k 28.8 / 49.4 against 29.4 / 50.1;
// batch 1 at 512 and 4k, batch 16 at 16k and batch 32 and 64 at 4k within the rounds' spread.
inline bool early_merge_pays(bool split_groups, int64_t max_splits) { return split_groups && max_splits > 1; }

// split_groups: the (live pair, split) states of D floats a consumer's Q slot holds once its Q is in
// registers (a slot is 64 rows of D 16-bit values): where its CTA folds its rows' splits, each
// consumer keeps its splits' states there.
constexpr int64_t kCtaFoldStates = 32;

// split_groups folds a row's splits in the CTAs that computed them, instead of in the merge kernel,
// where each consumer's splits of the tile's live (query row, head) pairs fit its Q slot
// (splits_per_cta * tile_pairs <= kCtaFoldStates) and a row has more than one: in one CTA where it
// holds every split of its rows (max_splits <= consumers * splits_per_cta: decode batches of 16 at
// 512-4k keys with GQA groups of 4), and in a cluster of two CTAs where two do, each consumer walks
// 2 splits or more, and the device launches clusters (sm_90, where the kernel runs): batch 8 at
// 2k-4k, batch 16 at 8k. Where a consumer walks one split (batch 1 and 2 at 512 keys, batch 8 at
// 1k) the pair did not pay on an H200: batch 1 at 512 keys took 12.9-13.3 against 11.3-11.7 us with
// the merge kernel launched early (docs/perf/attention.md). The consumers keep their splits' states
// in shared memory instead of writing them for the merge kernel, then fold each row in split order
// there, a pair's CTAs reading each other's through distributed shared memory: the merge kernel's
// arithmetic, so its bits. No merge kernel then waits for the grid, and no state goes through
// memory. Returns the CTAs that fold a row together (1 or 2), or 0 where the merge kernel folds.
// tile_pairs: the live pairs of the fullest query tile (min(64, longest q_len * GQA group)).
inline int64_t fold_ctas(bool split_groups, int64_t max_splits, int64_t consumers, int64_t splits_per_cta,
                         int64_t tile_pairs, bool clusters) {
  if (!split_groups || max_splits <= 1 || splits_per_cta * tile_pairs > kCtaFoldStates) return 0;
  if (max_splits <= consumers * splits_per_cta) return 1;
  return clusters && splits_per_cta >= 2 && max_splits <= 2 * consumers * splits_per_cta ? 2 : 0;
}

// The dynamic shared memory an early merge's CTA asks for (where a row's splits fit in it, the merge
// copies them there; paged_attention.cu): enough that an SM holds
// ceil(merge_ctas / sms) of them and no more. smem_per_sm, per_cta_max, reserved_per_cta: the
// device's; static_smem: the merge kernel's own. 0 where a CTA per SM would not fit in
// shared memory anyway.
inline int64_t merge_spread_smem(int64_t merge_ctas, int64_t sms, int64_t smem_per_sm, int64_t per_cta_max,
                                 int64_t reserved_per_cta, int64_t static_smem) {
  if (merge_ctas <= 0 || sms <= 0) return 0;
  const int64_t per_sm = (merge_ctas + sms - 1) / sms;
  int64_t bytes = smem_per_sm / per_sm - reserved_per_cta - static_smem;
  if (bytes > per_cta_max - static_smem) bytes = per_cta_max - static_smem;
  bytes = bytes / 128 * 128;
  return bytes > 0 ? bytes : 0;
}

// CTA slots of a split schedule: split_groups runs one CTA of two consumers per SM, a consumer
// being a slot; split_per_cta runs ctas_per_sm() CTAs per SM (its shared memory and registers
// decide; asked of the device only here).
template <class CtasPerSm>
int64_t split_slots(bool split_groups, int64_t sms, CtasPerSm &&ctas_per_sm) {
  return split_groups ? 2 * sms : sms * ctas_per_sm();
}

// Splits per CTA (per consumer for split_groups): 1, 2, 4 or 8 consecutive splits. In
// split-times per CTA slot a choice costs ceil(CTAs / slots) * splits per CTA; the most splits per
// CTA whose cost is within a tenth of the cheapest is taken (each CTA pays a prologue, its
// partials and a merge step, about that much of a split).
inline int64_t splits_per_cta(const std::vector<int64_t> &tile_splits, int64_t h_kv, int64_t slots) {
  int64_t cost[4], cheapest = 0, chosen = 0;
  for (int i = 0; i < 4; ++i) {
    const int64_t spc = int64_t{1} << i;
    int64_t ctas = 0;
    for (int64_t n : tile_splits) ctas += (n + spc - 1) / spc;
    cost[i] = (ctas * h_kv + slots - 1) / slots * spc;
    if (i == 0 || cost[i] < cheapest) cheapest = cost[i];
  }
  for (int i = 0; i < 4; ++i)
    if (10 * cost[i] <= 11 * cheapest) chosen = int64_t{1} << i;
  return chosen;
}

// Rows one step of the Hopper kernel's producer copies (128 threads, a 16-byte chunk each, of K
// rows of D elements): a TMA box must hold at least these, so that it starts at a key whose page the
// producer's threads track.
inline int producer_step_rows(int head_dim) { return 128 / (head_dim / 8); }
// Whether TMA can address every slot of a pool of pool_blocks pages of block_size slots: the
// kernel's slot coordinates are 32-bit.
inline bool tma_slots_fit(int64_t pool_blocks, int block_size) {
  return pool_blocks > 0 && pool_blocks * block_size <= INT32_MAX;
}

// Rows of a TMA box of the Hopper kernel for pages of `block_size` slots, or 0 where tiles go
// through cp.async. A box is one page's run of a 64-key tile (a whole page, or 64 slots of a larger
// one), so pages must divide 64 or be a multiple of it. Boxes then start 1024-byte aligned in
// shared memory (a whole 128-byte swizzle pattern), and a box of at least 128 / (D / 8) rows (the
// rows of one producer step) starts at a key whose page the producer's thread 0 already tracks.
// Slot coordinates are 32-bit (pool_blocks pages of the pool). KvLoads::automatic takes TMA only
// for whole 64-key boxes: many small boxes from one thread are slower than cp.async.
inline int tma_box_rows(int head_dim, int block_size, int64_t pool_blocks, KvLoads kv_loads) {
  constexpr int kKeys = static_cast<int>(kKvTile);  // keys per K/V tile
  const int bs = block_size;
  const int rows = bs < kKeys ? bs : kKeys;
  const bool pow2 = (rows & (rows - 1)) == 0;
  if (kv_loads == KvLoads::cp_async || (kv_loads == KvLoads::automatic && rows < kKeys)) return 0;
  if (rows < producer_step_rows(head_dim) || !pow2 || (bs >= kKeys && bs % kKeys != 0)) return 0;
  return tma_slots_fit(pool_blocks, bs) ? rows : 0;
}

// Whether the Hopper kernel boxes a tile whose pages follow each other in the pool (page ids p, p +
// 1, ..., the tile's 64 keys one run of 64 slots) as one 64-row TMA box per column block, for pages
// smaller than a tile: an allocator that hands out consecutive pages gives a sequence such runs, and
// one box then moves a tile as pages of 64 do (the producer issues four boxes a tile instead of the
// warpgroup's cp.async and its address arithmetic). Other tiles keep tma_box_rows' loads. Pages must
// divide 64 and hold at least a producer step's rows (128 / (D / 8)): each producer warp's keys then
// touch every page of a tile, so every warp finds the same answer from its own page ids.
inline bool tma_run_boxes(int head_dim, int block_size, int64_t pool_blocks, KvLoads kv_loads) {
  constexpr int kKeys = static_cast<int>(kKvTile);
  const int bs = block_size;
  if (kv_loads == KvLoads::cp_async || bs >= kKeys || bs < producer_step_rows(head_dim) || kKeys % bs != 0)
    return false;
  return tma_slots_fit(pool_blocks, bs);
}

}  // namespace attention_policy
}  // namespace detfuzz::attention
