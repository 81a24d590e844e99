// Fused paged attention on tensor cores, batch invariant by construction.
//
// Design. One launch covers the whole mixed batch (prefills, prefill chunks and decodes alike):
// grid (KV head x split group x query tile, sequence), 4 warps per CTA. A CTA holds 64 "M rows", the
// (query row, query head) pairs of up to 64 / G query rows of one sequence and the G query heads
// of one KV head (GQA packed into the MMA's M dimension, so the group shares every K/V tile);
// warp w owns M rows 16w .. 16w + 15. It walks the block table itself (key k of sequence s is
// slot k % BS of page block_table[s][k / BS]), streaming 64-key K and V tiles through shared
// memory with cp.async (2 or 3 stages, 16-byte chunks XOR-swizzled so ldmatrix is conflict-free;
// keys past kv_len are zero-filled), and computes per tile, with mma.sync.m16n8k16 and float32
// accumulators:
//   S = Q K^T (k-steps over D in order), masked to -inf past the row's visible keys
//   (bottom-right causal: row q of a sequence sees keys 0 .. kv_len - q_len + q); with
//   c = scale * log2(e), per online-softmax step of 64 keys, with x = (step max of S) * c:
//   m_new = x where x > m + 8, else m (a lagging reference: p <= 2^8, and a = 1 on most steps, whose
//   rescale a whole_rows consumer skips: acc * 1 is acc), a = 2^(m - m_new), p = 2^fma(S, c, -m_new),
//   l = l * a + (row sum of p: each lane's columns in order, then its quad), acc = acc * a, then
//   acc += round(p) V (P rounded to the input dtype, k-steps over keys in order). 2^x is
//   ex2.approx.ftz (subnormal results flush to 0).
// The keys a row sees are cut into splits at absolute positions (split j = keys [256 j, 256 j +
// 256)), each split starting from (m, l, acc) = (-inf, 0, 0). A row's result merges its splits in
// order: (M, L, O) = split 0, then for j = 1, 2, ...: M' = max(M, m_j), L = L a + l_j b,
// O = O a + acc_j b with a = exp2(M - M'), b = exp2(m_j - M'); out = O (1 / L) (written with _rn
// intrinsics, never contracted). Two schedules here run that same arithmetic: split_per_cta (a CTA
// per 1..8 consecutive splits, each split's state through a workspace, merge kernel) for decode, and
// whole_rows (a CTA walks all splits of its rows and merges in shared memory) for prefill; on
// Hopper, paged_attention_sm90.cu runs whole_rows and a third, split_groups (decode: two consumer
// warpgroups per CTA, each on its own splits, written for the same merge kernel, or folded by the
// CTA itself in the same order where it holds every split of its rows). So the
// host may choose the schedule, the splits per CTA and the grid from the batch: none of them
// reaches a row's bits, which depend only on the row's own q vector, its visible keys and the constants.
// Tensor cores compute every output element of an mma the same way wherever it sits in the tile,
// and a key a row does not see enters its sums only as p = 0 (its p*v is +-0; V past kv_len is
// zero-filled, and V the row does not see is assumed finite, as in FlashAttention).
//
// Rows past the tile's live rows are zero and their results are dropped; a warp whose 16 rows
// are all dead skips the math, except in a spread tile (see `spread`), where four warps share one
// warp's 16 rows. D = 256 runs split_per_cta only (whole_rows' merged state would not fit in
// shared memory beside the tiles).
//
// Two kernels compute the tiles (AttnKernel; tile_math in paged_attention_tile.cuh holds the
// arithmetic both use). mma.sync (any GPU from sm_80): each warp its 16 rows with
// mma.sync.m16n8k16 and ldmatrix. wgmma (an sm_90 GPU, D = 64 and 128): the CTA's four warps are
// one warpgroup; S = Q K^T is wgmma.m64n64k16 from shared memory (Q and K K-major), O += P V is
// wgmma.m64n{D}k16 with P from registers (the accumulator layout of S is the A-fragment layout)
// and V N-major; a tile is never spread. The same 128-byte-swizzled tile layout serves both. The
// two kernels' bits differ (each instruction orders its dot products its own way), each is batch
// invariant on its own, and the choice follows the device and D only. On wgmma, whole_rows runs
// the warp-specialised kernel of paged_attention_sm90.cu (same functions, same bits as
// split_per_cta here).
#include "ops/attention/paged_attention_kernel.h"
#include "ops/attention/paged_attention_tile.cuh"
#include "ops/cuda/cuda_check.h"
#include "ops/cuda/griddep.cuh"

#include <atomic>
#include <cstdint>
#include <mutex>
#include <stdexcept>
#include <string>
#include <type_traits>

namespace detfuzz::attention {
namespace {

using namespace tile_math;

constexpr int kThreads = 128;

// Shared memory: Q [64 rows][D], then kStages K tiles and kStages V tiles [64 keys][D], 16-bit,
// then the page ids of kStages tiles, then (whole_rows) the merged output state [64 rows][D]
// float32 in per-thread order. split_per_cta streams through 3 stages (2 CTAs per SM at D = 128);
// whole_rows keeps its merged state here rather than in registers (which spilled) and so has
// room for 2 stages.
template <int D, KvSchedule kSchedule>
struct Smem : Layout<D> {
  static constexpr bool kWhole = kSchedule == KvSchedule::whole_rows;
  static constexpr int kStages = kWhole ? 2 : 3;
  static constexpr int kPagesOffset = Layout<D>::kQBytes + 2 * kStages * Layout<D>::kTileBytes;
  static constexpr int kMergedOffset = kPagesOffset + kStages * kKeys * 4;
  static constexpr int kBytes = kMergedOffset + (kWhole ? kRows * D * 4 : 0);
};

template <typename T, int D, KvSchedule kSchedule, bool kWgmma>
__global__ void __launch_bounds__(kThreads) paged_attention_kernel(const PagedAttnLaunch p) {
  using L = Smem<D, kSchedule>;
  constexpr int kStages = L::kStages;
  constexpr int kChunks = D / 8;  // 16-byte chunks per row
  constexpr bool kWhole = kSchedule == KvSchedule::whole_rows;
  constexpr bool kBf16 = std::is_same<T, __nv_bfloat16>::value;
  extern __shared__ __align__(128) unsigned char smem[];
  // Where no merge kernel follows, let the next kernel (a programmatic dependent) launch now.
  if (kWhole || p.max_splits <= 1) cuda_kernels::griddep::launch_dependents();
  const uint32_t q_s = static_cast<uint32_t>(__cvta_generic_to_shared(smem));
  const uint32_t k_s = q_s + L::kQBytes;
  const uint32_t v_s = k_s + kStages * L::kTileBytes;
  // The wgmma descriptors address 128-byte-swizzled blocks based 1024-byte aligned: dynamic
  // shared memory starts there when the kernel has no static shared memory (this one has none).
  if (kWgmma && (q_s & 1023) != 0) __trap();
  int *page_s = reinterpret_cast<int *>(smem + L::kPagesOffset);

  // blockIdx.x = kvh + h_kv * (split group + groups * reversed tile): the KV heads of one (tile,
  // split group) are neighbours, so CTAs running together read the same tokens' rows (adjacent in
  // the pool); the longest query tiles (the last ones under the causal mask) start first. A split
  // group is splits_per_cta consecutive splits (split_per_cta) or all of them (whole_rows).
  const int groups = kWhole ? 1 : split_group_count(p.max_splits, p.splits_per_cta);
  const int kvh = blockIdx.x % p.h_kv, split_group = (blockIdx.x / p.h_kv) % groups;
  const int tile = p.q_tiles - 1 - static_cast<int>(blockIdx.x / (p.h_kv * groups));
  const int seq = blockIdx.y;
  const int group = p.h_q / p.h_kv;
  const int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31;
  const int key_begin = kWhole ? 0 : split_group * p.splits_per_cta * p.split_tokens;
  const int *table = p.block_table + static_cast<int64_t>(seq) * p.max_blocks;
  // The page ids of the first kStages + 1 tiles (key key_begin + 64 j + tid, threads tid < 64),
  // read before the sequence's lengths arrive rather than after them (one round trip to memory
  // less before the first K/V load): any column of the table row may be read; ids past kv_len
  // are replaced by 0 below.
  int first_pages[kStages + 1];
#pragma unroll
  for (int j = 0; j <= kStages; ++j) {
    const int column = (key_begin + j * kKeys + tid) / p.block_size;
    first_pages[j] = tid < kKeys && column < p.max_blocks ? table[column] : 0;
  }
  const int q_start = p.cu_seqlens_q[seq], q_len = p.cu_seqlens_q[seq + 1] - q_start;
  const int q0 = tile * attention_rows_per_tile(group);
  if (q0 >= q_len) return;
  const int live_rows = min(attention_rows_per_tile(group), q_len - q0) * group;
  const int kv_len = p.seq_lens_kv[seq];
  const int first_visible = kv_len - q_len + q0 + 1;  // keys seen by the tile's first query row
  const int last_visible = first_visible + live_rows / group - 1;
  if (key_begin >= last_visible) return;  // uniform over the CTA
  const int key_end = kWhole ? last_visible : min(key_begin + p.splits_per_cta * p.split_tokens, last_visible);

  // Spread: when all live rows fit in the first 16 (decode, short chunks), the four warps share
  // those rows' work instead of one warp doing it alone: warp w computes S for keys 16w .. 16w + 15
  // and shares it through shared memory, each warp redoes the row statistics from the whole S
  // (same fragments, same order, same bits), and warp w accumulates output columns D/4 w ...
  // Every value is computed by the same operations in the same order as in the unspread layout.
  // The wgmma kernel computes the warpgroup's 64 rows in every MMA: it never spreads.
  const bool spread = !kWgmma && live_rows <= 16;  // uniform over the CTA
  const int row_block = spread ? 0 : warp;         // the 16 M rows whose state this warp holds
  const bool warp_live = row_block * 16 < live_rows;
  // Spread tiles share S through the Q rows no live row uses (rows 16 and up of the first column
  // block; 16 x 72 floats fit).
  float2 *s_share = reinterpret_cast<float2 *>(smem + 16 * 128);
  static_assert(16 * 72 * 4 <= 48 * 128, "S exchange buffer must fit in Q rows 16..63");
  int visible[2];
#pragma unroll
  for (int i = 0; i < 2; ++i) {
    const int r = row_block * 16 + (lane >> 2) + 8 * i;
    visible[i] = r < live_rows ? first_visible + r / group : 0;
  }
  const int min_visible = live_min_visible(visible, row_block * 16 + (lane >> 2), live_rows);

  const T *q = static_cast<const T *>(p.q);
  const T *k_pool = static_cast<const T *>(p.k_pool);
  const T *v_pool = static_cast<const T *>(p.v_pool);

  for (int c = tid; c < kRows * kChunks; c += kThreads) {
    const int r = c / kChunks, part = c % kChunks;
    const bool ok = r < live_rows;
    const int64_t src =
        ok ? (static_cast<int64_t>(q_start + q0 + r / group) * p.h_q + kvh * group + r % group) * D + part * 8 : 0;
    cp_async16(q_s + L::offset(r, part), q + src, ok);
  }
  // The page of key t0 + tid (threads tid < 64), 0 past kv_len: fetched a tile ahead of its use.
  auto page_of = [&](int t0) {
    const int key = t0 + tid;
    return tid < kKeys && key < kv_len ? table[key / p.block_size] : 0;
  };
  // Issues the cp.async of the tile at key t0 into `stage`; its page ids are in page_s[stage].
  auto load_tile = [&](int t0, int stage) {
#pragma unroll
    for (int c = tid; c < kKeys * kChunks; c += kThreads) {
      const int kk = c / kChunks, part = c % kChunks, key = t0 + kk;
      const bool ok = key < kv_len;
      int64_t off = 0;
      if (ok) {
        const int64_t slot = static_cast<int64_t>(page_s[stage * kKeys + kk]) * p.block_size + key % p.block_size;
        off = (slot * p.h_kv + kvh) * D + part * 8;
      }
      const uint32_t dst = stage * L::kTileBytes + L::offset(kk, part);
      cp_async16(k_s + dst, k_pool + off, ok);
      cp_async16(v_s + dst, v_pool + off, ok);
    }
  };

  RowState<D> st;
  st.reset();
  // whole_rows: the merged state of the splits finished so far.
  MergedRows<D> merged_rows(reinterpret_cast<float *>(smem + L::kMergedOffset), warp, lane);

  const int first_block = spread ? warp * (D / 32) : 0;  // output column block of acc[0]
  auto finish_split = [&](int j) {
    if constexpr (kWhole)
      merged_rows.fold(st, visible, j, p.split_tokens);
    else
      write_split<kBf16, D>(p, st, j, visible, live_rows, q_start + q0, kvh, row_block, first_block,
                            spread ? D / 32 : D / 8, warp == row_block, lane);
  };

  const int n_tiles = (key_end - key_begin + kKeys - 1) / kKeys;
  // Pipeline: tiles it + 1 .. it + kStages - 1 are in flight while tile it is computed. One
  // commit group per tile (empty past the end), so "all groups but the newest kStages - 2 done"
  // means tile it arrived. Page ids run one step further ahead: those of tile it + kStages go to
  // shared memory during tile it (into the slot of tile it, issued long before), those of the
  // tile after are being fetched.
  if (tid < kKeys)
#pragma unroll
    for (int j = 0; j < kStages; ++j)
      page_s[j * kKeys + tid] = key_begin + j * kKeys + tid < kv_len ? first_pages[j] : 0;
  int next_pages = key_begin + kStages * kKeys + tid < kv_len ? first_pages[kStages] : 0;
  __syncthreads();
#pragma unroll
  for (int j = 0; j < kStages - 1; ++j) {
    if (j < n_tiles) load_tile(key_begin + j * kKeys, j);
    cp_async_commit();  // the first group carries Q too
  }
  for (int it = 0; it < n_tiles; ++it) {
    const int t0 = key_begin + it * kKeys, stage = it % kStages;
    cp_async_wait<kStages - 2>();
#if DETFUZZ_SM90A
    if constexpr (kWgmma) sm90::fence_proxy_async_shared();  // the tile is read by wgmma
#endif
    __syncthreads();  // tile it visible to all; tile it - 1 consumed by all, so its stage is free
    if (it + kStages - 1 < n_tiles) load_tile(t0 + (kStages - 1) * kKeys, (it + kStages - 1) % kStages);
    cp_async_commit();
    if (tid < kKeys) {
      page_s[stage * kKeys + tid] = next_pages;  // tile it + kStages's, read after the next barrier
      next_pages = page_of(t0 + (kStages + 1) * kKeys);
    }
    if (it > 0 && t0 % p.split_tokens == 0) {  // a split ended with the previous tile
      if (warp_live) finish_split(t0 / p.split_tokens - 1);
      st.reset();
    }
    // Every warp of the wgmma kernel takes part in its MMAs (dead rows are masked to p = 0).
    if (kWgmma || warp_live) {
      const uint32_t k_tile = k_s + stage * L::kTileBytes, v_tile = v_s + stage * L::kTileBytes;
      const bool half_steps = !kWhole && p.softmax_keys == 32;
      if constexpr (kWgmma)
        tile_step<T, D, false, true>(st, q_s, k_tile, v_tile, s_share, row_block, t0, visible, min_visible,
                                     p.scale_log2, half_steps, lane, warp);
      else if (spread)
        tile_step<T, D, true, false>(st, q_s, k_tile, v_tile, s_share, row_block, t0, visible, min_visible,
                                     p.scale_log2, half_steps, lane, warp);
      else
        tile_step<T, D, false, false>(st, q_s, k_tile, v_tile, s_share, row_block, t0, visible, min_visible,
                                      p.scale_log2, half_steps, lane, warp);
    }
  }
  if (!warp_live) return;
  finish_split((key_end - 1) / p.split_tokens);
  if constexpr (kWhole) {
#pragma unroll
    for (int i = 0; i < 2; ++i) {
      const int r = row_block * 16 + (lane >> 2) + 8 * i;
      if (r >= live_rows) continue;
      const int64_t row_head = static_cast<int64_t>(q_start + q0 + r / group) * p.h_q + kvh * group + r % group;
      merged_rows.write<kBf16>(static_cast<T *>(p.out) + row_head * D, i, first_block, spread ? D / 32 : D / 8,
                               lane & 3);
    }
  }
}

// split_per_cta's merge: grid (T_q, H_q), D threads (one per output element). Rows with a
// single split were written by the attention kernel. The fold over the splits is sequential
// (split 0, then 1, 2, ...: the order whole_rows folds in), but its loads are not:
//  - where the launch's dynamic shared memory holds every split of the row (an early merge asks
//    for room to spread its CTAs: merge_spread_smem), the whole row is copied in at once by
//    cp.async, one round trip to memory, and the fold reads it there;
//  - elsewhere the splits come in batches of kMergeBatch, every load of a batch issued before the
//    previous batch is folded.
// The fold is the same either way, so are the bits (LongRowsMergeAsWholeRowsFold). In batches, a
// row of 128 splits (batch 1 at 32k keys) waited on a round trip per batch: on an H200 the
// decode took 50 us against 45 us with the whole row at once (docs/perf/attention.md).
constexpr int kMergeBatch = 32;

// The whole-row merge (see above): splits * merge_bytes_per_split(D) bytes of dynamic shared
// memory. Returns the row's output element d.
__device__ __forceinline__ float merge_whole_row(const float *part, const float2 *ml, int splits, int D, int d) {
  extern __shared__ float4 merge_smem[];
  float *o_s = reinterpret_cast<float *>(merge_smem);
  float2 *ml_s = reinterpret_cast<float2 *>(o_s + splits * D);
  const uint32_t o_at = static_cast<uint32_t>(__cvta_generic_to_shared(o_s)),
                 ml_at = static_cast<uint32_t>(__cvta_generic_to_shared(ml_s));
  for (int c = d; c < splits * D / 4; c += blockDim.x) cp_async16(o_at + 16 * c, part + 4 * c, true);
  for (int c = d; c < splits; c += blockDim.x)
    asm volatile("cp.async.ca.shared.global [%0], [%1], 8;" ::"r"(ml_at + 8 * c), "l"(ml + c) : "memory");
  cp_async_commit();
  cp_async_wait<0>();
  __syncthreads();
  float M = ml_s[0].x, L = ml_s[0].y, O = o_s[d];
#pragma unroll 8
  for (int j = 1; j < splits; ++j) merge_split(M, L, O, ml_s[j], o_s[j * D + d]);
  return normalised(O, reciprocal(L));
}

template <typename T>
__global__ void paged_attention_merge_kernel(const PagedAttnLaunch p) {
  const int row = blockIdx.x, h = blockIdx.y, d = threadIdx.x;
  int lo = 0, hi = p.num_seqs;  // the last sequence s with cu_seqlens_q[s] <= row
  while (hi - lo > 1) {
    const int mid = (lo + hi) / 2;
    if (p.cu_seqlens_q[mid] <= row)
      lo = mid;
    else
      hi = mid;
  }
  const int q_len = p.cu_seqlens_q[lo + 1] - p.cu_seqlens_q[lo];
  const int visible = p.seq_lens_kv[lo] - q_len + (row - p.cu_seqlens_q[lo]) + 1;
  const int splits = (visible + p.split_tokens - 1) / p.split_tokens;
  if (splits <= 1) return;  // uniform over the CTA
  // Launched as a programmatic dependent of the attention kernel: the row's shape above is the
  // batch's (read while that grid runs); its partials are that grid's, so wait here until it has
  // finished and its writes are visible (the launch itself overlapped its tail, or, where
  // PagedAttnLaunch::early_merge, came at its start).
  cuda_kernels::griddep::wait();
  cuda_kernels::griddep::launch_dependents();
  const int64_t base = (static_cast<int64_t>(row) * p.h_q + h) * p.max_splits;
  const float2 *ml = reinterpret_cast<const float2 *>(p.part_ml) + base;
  uint32_t dyn_smem = 0;
  asm("mov.u32 %0, %%dynamic_smem_size;" : "=r"(dyn_smem));
  uint16_t *out = static_cast<uint16_t *>(p.out) + (static_cast<int64_t>(row) * p.h_q + h) * p.head_dim + d;
  if (static_cast<int64_t>(splits) * merge_bytes_per_split(p.head_dim) <= dyn_smem) {
    *out = from_f<T>(merge_whole_row(p.part_acc + base * p.head_dim, ml, splits, p.head_dim, d));
    return;
  }
  const float *acc = p.part_acc + base * p.head_dim + d;
  // Batch b's (m, l) in ml_s[b % 2]. Batch b + 1's loads are issued before batch b is folded, into
  // registers (its (m, l) too: a shared-memory store would wait for its load), so a long row waits
  // for about one round trip to memory, not one per batch.
  __shared__ float2 ml_s[2][kMergeBatch];
  float o[kMergeBatch], o_next[kMergeBatch];
  float2 ml_next = make_float2(0.f, 0.f);
  auto load_batch = [&](float(&into)[kMergeBatch], int j0) {
#pragma unroll
    for (int i = 0; i < kMergeBatch; ++i)
      if (j0 + i < splits) into[i] = acc[static_cast<int64_t>(j0 + i) * p.head_dim];
    if (d < kMergeBatch && j0 + d < splits) ml_next = ml[j0 + d];
  };
  load_batch(o, 0);
  if (d < kMergeBatch) ml_s[0][d] = ml_next;
  float M = 0.f, L = 0.f, O = 0.f;
  for (int j0 = 0, b = 0; j0 < splits; j0 += kMergeBatch, b ^= 1) {
    const bool more = j0 + kMergeBatch < splits;
    if (more) load_batch(o_next, j0 + kMergeBatch);
    // The batch's (m, l) are in, and every thread is done with the previous batch's (whose buffer
    // the next batch's are stored into below).
    __syncthreads();
#pragma unroll
    for (int i = 0; i < kMergeBatch; ++i) {
      if (j0 + i >= splits) break;
      if (j0 + i == 0) {
        M = ml_s[0][0].x, L = ml_s[0][0].y, O = o[0];
        continue;
      }
      merge_split(M, L, O, ml_s[b][i], o[i]);
    }
    if (more) {
      if (d < kMergeBatch) ml_s[b ^ 1][d] = ml_next;
#pragma unroll
      for (int i = 0; i < kMergeBatch; ++i) o[i] = o_next[i];
    }
  }
  *out = from_f<T>(normalised(O, reciprocal(L)));
}

// The kernel's shared-memory size set on the current device, once per instantiation and device
// (a per-launch call costs microseconds at decode sizes).
template <typename T, int D, KvSchedule kSchedule, bool kWgmma>
void configure_kernel() {
  static std::once_flag configured[64];
  int device = 0;
  DETFUZZ_CUDA_CHECK(cudaGetDevice(&device));
  std::call_once(configured[device % 64], [&] {
    DETFUZZ_CUDA_CHECK(cudaFuncSetAttribute(paged_attention_kernel<T, D, kSchedule, kWgmma>,
                                            cudaFuncAttributeMaxDynamicSharedMemorySize, Smem<D, kSchedule>::kBytes));
  });
}

template <typename T, int D, bool kWgmma>
int split_ctas_per_sm() {
  configure_kernel<T, D, KvSchedule::split_per_cta, kWgmma>();
  int ctas = 0;
  DETFUZZ_CUDA_CHECK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(
      &ctas, paged_attention_kernel<T, D, KvSchedule::split_per_cta, kWgmma>, kThreads,
      Smem<D, KvSchedule::split_per_cta>::kBytes));
  return ctas;
}

// The same for a head dim known at run time (64, 128 or 256; wgmma at 64 and 128 only).
template <typename T>
int split_ctas_per_sm_of(int head_dim, bool wgmma) {
  switch (head_dim) {
    case 64: return wgmma ? split_ctas_per_sm<T, 64, true>() : split_ctas_per_sm<T, 64, false>();
    case 128: return wgmma ? split_ctas_per_sm<T, 128, true>() : split_ctas_per_sm<T, 128, false>();
    default: return split_ctas_per_sm<T, 256, false>();
  }
}

template <typename T, int D, KvSchedule kSchedule, bool kWgmma>
void launch_kernel(const PagedAttnLaunch &p, cudaStream_t stream) {
  auto kernel = paged_attention_kernel<T, D, kSchedule, kWgmma>;
  configure_kernel<T, D, kSchedule, kWgmma>();
  const int groups = kSchedule == KvSchedule::whole_rows ? 1 : split_group_count(p.max_splits, p.splits_per_cta);
  const unsigned x = static_cast<unsigned>(p.h_kv) * groups * p.q_tiles;
  kernel<<<dim3(x, p.num_seqs), kThreads, Smem<D, kSchedule>::kBytes, stream>>>(p);
  DETFUZZ_LAUNCH_CHECK();
}

// An early merge's CTAs wait on the SMs they are placed on, and a CTA placed there runs its fold
// on that SM: packed many to an SM (the few SMs a one-wave split grid leaves free hold all of them)
// they share its load bandwidth. A CTA asks for shared memory enough that an SM holds only
// ceil(CTAs / SMs) of them and the rest are placed as the split kernel's CTAs finish
// (attention_policy::merge_spread_smem); where a row's splits fit in it, the merge copies them
// there at once. Device facts asked once per device.
template <typename T>
size_t merge_spread_smem(int64_t merge_ctas) {
  struct Facts {
    int sms, per_sm, per_cta_max, reserved, static_smem;
  };
  static Facts facts[64];
  static std::once_flag asked[64];
  int device = 0;
  DETFUZZ_CUDA_CHECK(cudaGetDevice(&device));
  Facts &f = facts[device % 64];
  std::call_once(asked[device % 64], [&] {
    DETFUZZ_CUDA_CHECK(cudaDeviceGetAttribute(&f.sms, cudaDevAttrMultiProcessorCount, device));
    DETFUZZ_CUDA_CHECK(cudaDeviceGetAttribute(&f.per_sm, cudaDevAttrMaxSharedMemoryPerMultiprocessor, device));
    DETFUZZ_CUDA_CHECK(cudaDeviceGetAttribute(&f.per_cta_max, cudaDevAttrMaxSharedMemoryPerBlockOptin, device));
    DETFUZZ_CUDA_CHECK(cudaDeviceGetAttribute(&f.reserved, cudaDevAttrReservedSharedMemoryPerBlock, device));
    cudaFuncAttributes fa{};
    DETFUZZ_CUDA_CHECK(cudaFuncGetAttributes(&fa, paged_attention_merge_kernel<T>));
    f.static_smem = static_cast<int>(fa.sharedSizeBytes);
    DETFUZZ_CUDA_CHECK(cudaFuncSetAttribute(
        paged_attention_merge_kernel<T>, cudaFuncAttributeMaxDynamicSharedMemorySize, f.per_cta_max - f.static_smem));
  });
  return static_cast<size_t>(
      attention_policy::merge_spread_smem(merge_ctas, f.sms, f.per_sm, f.per_cta_max, f.reserved, f.static_smem));
}

// The merge of split_per_cta and split_groups, when some row has more than one split: a
// programmatic dependent of the attention kernel just launched on `stream`.
template <typename T, int D>
void launch_merge(const PagedAttnLaunch &p, cudaStream_t stream) {
  if (p.max_splits <= 1) return;
  const size_t smem = p.early_merge ? merge_spread_smem<T>(static_cast<int64_t>(p.num_rows) * p.h_q) : 0;
  cuda_kernels::griddep::launch(paged_attention_merge_kernel<T>, dim3(p.num_rows, p.h_q), dim3(D), smem, stream, p);
}

template <typename T, int D, bool kWgmma>
void launch_schedule(const PagedAttnLaunch &p, cudaStream_t stream) {
  if (p.schedule == KvSchedule::whole_rows) {  // on wgmma: the warp-specialised kernel (launch_typed)
    if constexpr (D <= 128 && !kWgmma)
      return launch_kernel<T, D, KvSchedule::whole_rows, kWgmma>(p, stream);
    else
      throw std::runtime_error("paged_attention: whole_rows runs on D <= 128 (on wgmma: paged_attention_sm90.cu)");
  }
  launch_kernel<T, D, KvSchedule::split_per_cta, kWgmma>(p, stream);
  launch_merge<T, D>(p, stream);
}

template <typename T, int D>
void launch_typed(const PagedAttnLaunch &p, cudaStream_t stream) {
  if (p.schedule == KvSchedule::split_groups) {
    if (p.kernel != AttnKernel::wgmma)
      throw std::runtime_error("paged_attention: split_groups runs on the wgmma kernel only");
    launch_split_groups_sm90(p, stream);
    if (!p.cta_merge) launch_merge<T, D>(p, stream);
    return;
  }
  if (p.kernel == AttnKernel::wgmma) {
    // whole_rows on wgmma: the warp-specialised kernel (paged_attention_sm90.cu), same bits.
    if (p.schedule == KvSchedule::whole_rows) return launch_whole_rows_sm90(p, stream);
    if constexpr (D <= 128)
      return launch_schedule<T, D, true>(p, stream);
    else
      throw std::runtime_error("paged_attention: the wgmma kernel takes head dims 64 and 128");
  }
  launch_schedule<T, D, false>(p, stream);
}

template <typename T>
void launch_dim(const PagedAttnLaunch &p, cudaStream_t stream) {
  switch (p.head_dim) {
    case 64: return launch_typed<T, 64>(p, stream);
    case 128: return launch_typed<T, 128>(p, stream);
    case 256: return launch_typed<T, 256>(p, stream);
    default:
      throw std::runtime_error("paged_attention: head dim " + std::to_string(p.head_dim) + " not in {64, 128, 256}");
  }
}

}  // namespace

int paged_attention_split_ctas_per_sm(int head_dim, bool bf16, AttnKernel kernel, int device) {
  // Per device and (head dim, dtype, kernel): 0 not yet asked.
  static std::atomic<int> known[64][3][2][2] = {};
  const int d = head_dim == 64 ? 0 : head_dim == 128 ? 1 : head_dim == 256 ? 2 : -1;
  if (d < 0)
    throw std::runtime_error("paged_attention: head dim " + std::to_string(head_dim) + " not in {64, 128, 256}");
  const bool wgmma = kernel == AttnKernel::wgmma;
  if (wgmma && head_dim > 128) throw std::runtime_error("paged_attention: the wgmma kernel takes head dims 64 and 128");
  std::atomic<int> &slot = known[device % 64][d][bf16][wgmma];
  if (const int n = slot.load()) return n;
  int current = 0;
  DETFUZZ_CUDA_CHECK(cudaGetDevice(&current));
  DETFUZZ_CUDA_CHECK(cudaSetDevice(device));
  const int n =
      bf16 ? split_ctas_per_sm_of<__nv_bfloat16>(head_dim, wgmma) : split_ctas_per_sm_of<__half>(head_dim, wgmma);
  DETFUZZ_CUDA_CHECK(cudaSetDevice(current));
  slot.store(n < 1 ? 1 : n);
  return slot.load();
}

bool paged_attention_wgmma_available(int device) {
  static std::atomic<int> known[64] = {};  // per device: 0 not yet asked, 1 yes, 2 no
  if (device >= 0 && device < 64 && known[device].load() != 0) return known[device].load() == 1;
  int major = 0, minor = 0;
  DETFUZZ_CUDA_CHECK(cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, device));
  DETFUZZ_CUDA_CHECK(cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, device));
  bool ok = major == 9 && minor == 0;  // sm_90a code runs on sm_90 only
  if (ok) {
    cudaFuncAttributes fa{};
    ok = cudaFuncGetAttributes(&fa, paged_attention_kernel<__nv_bfloat16, 128, KvSchedule::split_per_cta, true>) ==
             cudaSuccess &&
         fa.binaryVersion == 90;
    (void)cudaGetLastError();  // no sm_90 code in this binary: not an error of the caller's
  }
  if (device >= 0 && device < 64) known[device].store(ok ? 1 : 2);
  return ok;
}

void launch_paged_attention(const PagedAttnLaunch &p, cudaStream_t stream) {
  if (p.num_rows == 0) return;
  if (p.split_tokens <= 0 || p.split_tokens % kKeys != 0)
    throw std::runtime_error("paged_attention: split_tokens " + std::to_string(p.split_tokens) +
                             " is not a positive multiple of 64");
  if (p.softmax_keys != 64 && (p.softmax_keys != 32 || p.schedule != KvSchedule::split_per_cta))
    throw std::runtime_error("paged_attention: softmax_keys " + std::to_string(p.softmax_keys) +
                             " (64, or 32 with split_per_cta)");
  const int group = p.h_kv > 0 ? p.h_q / p.h_kv : 0;
  if (group < 1 || group > 8 || p.h_q != group * p.h_kv)
    throw std::runtime_error("paged_attention: GQA group H_q/H_kv = " + std::to_string(p.h_q) + "/" +
                             std::to_string(p.h_kv) + " not an integer in 1..8");
  if (p.kernel == AttnKernel::wgmma && p.head_dim > 128)
    throw std::runtime_error("paged_attention: the wgmma kernel takes head dims 64 and 128, not " +
                             std::to_string(p.head_dim));
  if (p.splits_per_cta < 1)
    throw std::runtime_error("paged_attention: splits_per_cta " + std::to_string(p.splits_per_cta));
  if (p.fold_ctas < 1 || p.fold_ctas > 2)
    throw std::runtime_error("paged_attention: fold_ctas " + std::to_string(p.fold_ctas) + " (1 or 2)");
  if (p.cta_merge &&
      (p.schedule != KvSchedule::split_groups || p.max_splits > p.fold_ctas * p.group_consumers * p.splits_per_cta))
    throw std::runtime_error("paged_attention: cta_merge needs split_groups with every split of a row in its " +
                             std::to_string(p.fold_ctas) + " folding CTA(s) (" + std::to_string(p.max_splits) +
                             " splits, " + std::to_string(p.group_consumers) + " x " +
                             std::to_string(p.splits_per_cta) + " a CTA)");
  if (p.cta_merge && p.fold_ctas > 1 &&
      split_group_ctas(p.max_splits, p.splits_per_cta, p.group_consumers) != p.fold_ctas)
    throw std::runtime_error("paged_attention: a cluster of " + std::to_string(p.fold_ctas) +
                             " folding CTAs needs rows of that many CTAs (" + std::to_string(p.max_splits) +
                             " splits, " + std::to_string(p.group_consumers) + " x " +
                             std::to_string(p.splits_per_cta) + " a CTA)");
  const long long x =
      static_cast<long long>(p.h_kv) * (p.schedule == KvSchedule::whole_rows ? 1 : p.max_splits) * p.q_tiles;
  if (p.q_tiles < 1 || p.num_seqs < 1 || p.num_seqs > 65535 || p.max_splits < 1 || x > 0x7fffffffLL)
    throw std::runtime_error("paged_attention: grid (" + std::to_string(x) + ", " + std::to_string(p.num_seqs) +
                             ") outside CUDA's limits (x < 2^31, y <= 65535)");
  if (p.bf16)
    launch_dim<__nv_bfloat16>(p, stream);
  else
    launch_dim<__half>(p, stream);
}

}  // namespace detfuzz::attention
