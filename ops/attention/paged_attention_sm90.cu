// Paged attention on Hopper (sm_90a), warp-specialised: the whole_rows schedule of the wgmma kernel
// (prefill) and the split_groups schedule (decode, and any batch whole_rows is not taken for).
//
// Design. A CTA is producer warpgroups, then two consumer warpgroups. whole_rows has one producer;
// split_groups two, producer c streaming consumer c's tiles (a warpgroup's K/V loads are paced by
// the copies it has in flight: on an H200 one producer issued a 32 KiB stage by cp.async in about
// 1000 cycles while the consumers waited on it half their time, and two producers stream decode
// 4-10% faster: docs/perf/attention.md). whole_rows:
// each consumer owns one 64-row query tile (paged_attention.cu's tile: 64 (query row, head) pairs
// of one sequence and one KV head), the two tiles adjacent, so they read the same keys (the first
// one's keys are a prefix of the second's under the causal mask), and the producer streams the
// union of their keys. split_groups: both consumers own the same query tile, each a group of
// splits_per_cta consecutive splits (consumer 1 the group after consumer 0's; where such CTAs would
// fill under half the SMs, consumer 0 alone, in twice the CTAs: a CTA takes K/V in at a bounded
// rate, attention_policy::split_group_consumers), and each group's tiles come from its own producer
// (the stages taken in turn), each consumer waiting only on its own; a finished split is written
// for the merge kernel exactly as split_per_cta writes it (decode streams KV faster this way than
// with split_per_cta's one warpgroup per CTA, which loads and computes in turn:
// docs/perf/attention.md). Where one CTA, or a cluster of two, holds every split of its rows and a
// consumer's split states fit its Q slot (decode at batch 16 and 512-4k keys in one CTA, batch 8
// at 2k-4k in pairs: attention_policy::fold_ctas), the consumers keep the states there instead,
// and the CTAs fold their rows at their end as the merge kernel would, a pair reading each other's
// states through distributed shared memory (PagedAttnLaunch::cta_merge): no merge kernel, no state
// through memory. The producers stream 64-key K and V tiles through the stages (5 for whole_rows, 6
// for split_groups), into the 128-byte-swizzled layout the wgmma descriptors read.
// A tile whose keys all lie below kv_len is loaded by TMA for pages of 64 slots or a multiple, and
// for smaller pages dividing 64 where the tile's pages follow each other in the pool (a run: one
// 64-row box per column block, attention_policy::tma_run_boxes; the producer warps check their page
// ids), and under KvLoads::tma also for pages of 8-32 dividing 64 (16-32 for D = 64;
// attention_policy::tma_box_rows), which the plan asks for in one-wave decode grids only, where a
// CTA pulls more than its SM's share (small_box_tma_pays): one thread issues a 3-D box per page run
// and 64-column block, through the block table, and the stage's `full` mbarrier counts the bytes.
// Other tiles (the last one of a sequence, tiles of small pages that are not a run, every tile for
// other page sizes) are copied by all
// 128 threads with cp.async, 16 bytes at a time, whole 256-byte rows per warp instruction, keys
// past kv_len zero-filled; each thread's completion arrives on `full`. The block table is read once
// per lane and tile, a tile ahead; the threads take their keys' pool rows by shuffle (a producer
// iteration is about 150-220 instructions a warp). A consumer keeps its Q tile in registers (wgmma
// A fragments) and waits on `full`, computes the tile with the tile_math functions (wgmma S = Q K^T
// with K alone from shared memory, the online-softmax step, wgmma O += P V), folds a finished split
// into its merged state in shared memory (whole_rows; the last split straight into the output) or
// writes it (split_groups), and releases the stage on its `empty` mbarrier (one arrival per warp of
// each consumer that reads it); in whole_rows a consumer whose rows see fewer keys keeps waiting
// and releasing without computing. What keeps prefill from the tensor cores' rate is not the fold,
// and not the consumers' instruction count alone (docs/perf/attention.md has the profile and the
// count). Within a consumer the tiles are pipelined: tile i's S = Q K^T is issued with tile i - 1's
// P V, and tile i's softmax statistics may run while that P V is on the tensor cores (the
// accumulators are rescaled once it is done, so each tile's arithmetic and order are unchanged;
// measured, the issue returns when the MMAs are nearly done). whole_rows steps through its tiles in
// pairs where both consumers have tiles: both S at once, both tiles' statistics side by side, then
// the first tile's P V, which the other consumer's turn overlaps (a few percent faster than a tile
// a step at 4k-8k, with the fifth stage it needs to keep the next pair's loads ahead; a consumer
// alone steps a tile at a time). Across the two consumers, MMAs are issued in turns (ping-pong,
// named barriers; CudaAttentionOptions::turns): one consumer's MMAs run while the other computes
// its softmax statistics. split_groups lets the merge kernel launch at its start
// (PagedAttnLaunch::early_merge). The producers give registers back (setmaxnreg) so the consumers
// hold their accumulators without spilling.
//
// Arithmetic. Every tile of a row goes through the same tile_math functions, in the same key
// order, split boundaries and merge order, as in paged_attention.cu's wgmma kernel with either
// schedule: a row gets the same bits from this kernel, in either schedule, as from split_per_cta
// on wgmma, whatever the batch. Only where the data comes from and who loads it differ.
#include "ops/attention/paged_attention_kernel.h"
#include "ops/attention/paged_attention_tile.cuh"
#include "ops/cuda/cuda_check.h"
#include "ops/cuda/griddep.cuh"
#include "ops/cuda/tensor_map.h"

#include <cuda.h>

#include <climits>
#include <cstdint>
#include <mutex>
#include <stdexcept>
#include <string>

namespace detfuzz::attention {
namespace {

using namespace tile_math;

constexpr int kConsumers = 2;  // consumer warpgroups
// Producer warpgroups: split_groups two (producer c feeds consumer c's stream), whole_rows one.
template <bool kSplitGroups>
constexpr int ws_producers() {
  return kSplitGroups ? 2 : 1;
}
template <bool kSplitGroups>
constexpr int ws_threads() {
  return 128 * (ws_producers<kSplitGroups>() + kConsumers);
}
static_assert(kConsumers == 2, "whole_rows_ws_ctas pairs the query tiles");

// Shared memory: the consumers' Q tiles, the K and V tiles of kStages stages, the consumers'
// merged output states (whole_rows only; float32, per-thread order), the full and empty mbarriers
// of each stage, then (split_groups) the (m, l) of the splits a CTA folds (cta_merge; their
// outputs go into the Q tiles' slots). split_groups keeps no merged state and so has room for 6
// stages (224 KiB at D = 128). whole_rows has 5: its last stage's K and V slots hold the consumers' Q
// tiles until both have read Q into registers (the stage's `empty` barrier counts that as its
// first release), so the merged states fit beside them.
template <int D, bool kSplitGroups>
struct WsSmem {
  static constexpr bool kQInRing = !kSplitGroups;
  static constexpr int kStages = kSplitGroups ? 6 : 5;
  static constexpr int kQ = 0;  // split_groups' Q tiles
  static constexpr int kK = kQInRing ? 0 : kConsumers * Layout<D>::kQBytes;
  static constexpr int kV = kK + kStages * Layout<D>::kTileBytes;
  static constexpr int kMerged = kV + kStages * Layout<D>::kTileBytes;
  static constexpr int kBars = kMerged + (kSplitGroups ? 0 : kConsumers * kRows * D * 4);
  // split_groups folding its rows (PagedAttnLaunch::cta_merge): the splits' (m, l), both consumers'.
  static constexpr int kFoldMl = kBars + 2 * kStages * 8;
  static constexpr int kBytes = kFoldMl + (kSplitGroups ? kConsumers * attention_policy::kCtaFoldStates * 8 : 0);
  static_assert(Layout<D>::kQBytes == Layout<D>::kTileBytes, "a Q tile fills a K or V slot");
  static_assert(attention_policy::kCtaFoldStates * D * 4 == Layout<D>::kQBytes,
                "a consumer's split states fill its Q slot");
  // Consumer w's Q tile: whole_rows the last stage's K slot (w = 0) or V slot (w = 1).
  static constexpr int q_offset(int w) {
    return kQInRing ? (w == 0 ? kK : kV) + (kStages - 1) * Layout<D>::kTileBytes : kQ + w * Layout<D>::kQBytes;
  }
  static_assert(kBytes <= 227 * 1024, "fits an SM");
};

#if DETFUZZ_SM90A
// Arrives on `bar` once all of this thread's earlier cp.async copies have landed (counted against
// the barrier's expected arrivals, not added to them).
__device__ __forceinline__ void cp_async_arrive(uint32_t bar) {
  asm volatile("cp.async.mbarrier.arrive.noinc.shared::cta.b64 [%0];" ::"r"(bar) : "memory");
}
// cp_async16 without the `.L2::256B` prefetch hint: the producer's warps copy whole head rows, and
// with the hint tiles of shuffled pages loaded 6% slower on an H200 (decode batch 16 at 4k: 76.9
// against 72.3 us; docs/perf/attention.md).
__device__ __forceinline__ void cp_async16_no_l2_hint(uint32_t dst, const void *src, bool valid) {
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;" ::"r"(dst), "l"(src), "r"(valid ? 16 : 0) : "memory");
}
__device__ __forceinline__ void warpgroup_barrier(int id) { asm volatile("bar.sync %0, 128;" ::"r"(id) : "memory"); }
// The consumers' turns on the tensor cores: named barriers over both consumer warpgroups.
__device__ __forceinline__ void turn_wait(int id) { asm volatile("bar.sync %0, 256;" ::"r"(id) : "memory"); }
__device__ __forceinline__ void turn_pass(int id) { asm volatile("bar.arrive %0, 256;" ::"r"(id) : "memory"); }
// The threads that fold a row's splits (PagedAttnLaunch::cta_merge) meet on named barrier 5 where
// one CTA folds, and on the cluster's barrier where a pair does: every thread of the cluster that
// has not exited, with release and acquire, so that each CTA then reads the other's split states.
constexpr int kFoldBarrier = 5;
__device__ __forceinline__ void fold_barrier(int threads) {
  asm volatile("bar.sync %0, %1;" ::"n"(kFoldBarrier), "r"(threads) : "memory");
}
__device__ __forceinline__ void cluster_barrier() {
  asm volatile("barrier.cluster.arrive.release;\nbarrier.cluster.wait.acquire;" ::: "memory");
}
// A load of this CTA's shared-memory word `local` as CTA `rank` of the cluster holds it.
template <typename V>
__device__ __forceinline__ V cluster_load(const V *local, int rank) {
  static_assert(sizeof(V) == 4 || sizeof(V) == 8, "a float or a float2");
  uint32_t at;
  asm("mapa.shared::cluster.u32 %0, %1, %2;"
      : "=r"(at)
      : "r"(static_cast<uint32_t>(__cvta_generic_to_shared(local))), "r"(rank));
  V v;
  if constexpr (sizeof(V) == 4)
    asm volatile("ld.shared::cluster.f32 %0, [%1];" : "=f"(v) : "r"(at) : "memory");
  else
    asm volatile("ld.shared::cluster.v2.f32 {%0, %1}, [%2];" : "=f"(v.x), "=f"(v.y) : "r"(at) : "memory");
  return v;
}

// split_groups where the CTAs of a cluster fold their rows' splits (PagedAttnLaunch::cta_merge;
// fold_ctas CTAs: kPair two, else one): once every consumer has kept its splits' states in its
// shared memory (write_split into a SplitStage; split j in CTA j / splits_per_cta of the cluster,
// laid out there as `stage` says of a CTA whose first split is that one's), the `threads` consumer
// threads of each of the `folding` CTAs that hold splits (t their index in it, `rank` the CTA's)
// fold their share of the tile's live rows that have more than one split, each element in split
// order through merge_split: the merge kernel's arithmetic, so its bits. A pair's thread loads
// kFoldBatch splits at a time, then folds them: a round trip to the other CTA's shared memory a
// batch, not a split. q_row0: the tile's first query row in the batch; first_visible: the keys its
// first row sees.
constexpr int kFoldBatch = 8;
template <int D, bool kPair>
__device__ __forceinline__ void fold_staged_splits(const PagedAttnLaunch &p, bool bf16, SplitStage stage,
                                                   int first_visible, int64_t q_row0, int kvh, int rank, int folding,
                                                   int t, int threads) {
  const int group = p.h_q / p.h_kv, per_cta = p.group_consumers * p.splits_per_cta, pairs = stage.pairs;
  if constexpr (kPair)
    cluster_barrier();
  else
    fold_barrier(threads);
  const int elements = pairs * D, share = (elements + folding - 1) / folding;
  const int e_end = min(elements, (rank + 1) * share);
  for (int e = rank * share + t; e < e_end; e += threads) {
    const int r = e / D, d = e % D;
    const int splits = (first_visible + r / group + p.split_tokens - 1) / p.split_tokens;
    if (splits <= 1) continue;  // written as the output by write_split
    float M, L, O;
    if constexpr (kPair) {
      for (int j0 = 0; j0 < splits; j0 += kFoldBatch) {
        float o[kFoldBatch];
        float2 ml[kFoldBatch];
#pragma unroll
        for (int i = 0; i < kFoldBatch; ++i) {
          const int j = j0 + i, owner = j / per_cta;
          if (j >= splits) break;
          stage.first_split = owner * per_cta;  // split j as its CTA laid it out
          o[i] = cluster_load(stage.acc + stage.acc_at(j, r) + d, owner);
          ml[i] = cluster_load(stage.ml + stage.ml_at(j, r), owner);
        }
#pragma unroll
        for (int i = 0; i < kFoldBatch; ++i) {
          if (j0 + i >= splits) break;
          if (j0 + i == 0)
            M = ml[0].x, L = ml[0].y, O = o[0];
          else
            merge_split(M, L, O, ml[i], o[i]);
        }
      }
    } else {
      M = stage.ml[stage.ml_at(0, r)].x, L = stage.ml[stage.ml_at(0, r)].y, O = stage.acc[stage.acc_at(0, r) + d];
      for (int j = 1; j < splits; ++j)
        merge_split(M, L, O, stage.ml[stage.ml_at(j, r)], stage.acc[stage.acc_at(j, r) + d]);
    }
    const float out = normalised(O, reciprocal(L));
    const int64_t row_head = (q_row0 + r / group) * p.h_q + kvh * group + r % group;
    static_cast<uint16_t *>(p.out)[row_head * D + d] = bf16 ? from_f<__nv_bfloat16>(out) : from_f<__half>(out);
  }
  if constexpr (kPair) cluster_barrier();  // no CTA leaves while another may read its states
}
#endif

// The K and V pools as 3-D TMA maps (head dim, KV head, slot), boxes of 64 elements x 1 x
// box_rows, 128-byte swizzled (tma_box_rows decides box_rows); zeroed and unused when box_rows
// is 0, where every tile goes through cp.async.
// k_run and v_run (used where `runs`, attention_policy::tma_run_boxes) map the same pools with boxes
// of 64 rows, for tiles whose pages follow each other in the pool.
struct KvMaps {
  CUtensorMap k, v, k_run, v_run;
  int box_rows;  // 0: every tile by cp.async
  bool runs;     // a tile that is one run of consecutive pages: one 64-row box per column block
};

// kPairFold: split_groups launched in clusters of two CTAs that fold their rows' splits together
// (PagedAttnLaunch::fold_ctas 2), an instantiation of its own so that the other launches' code does
// not carry the pair's.
template <typename T, int D, bool kSplitGroups, bool kPairFold>
__global__ void __launch_bounds__(ws_threads<kSplitGroups>(), 1)
    paged_attention_ws_kernel(const PagedAttnLaunch p, const __grid_constant__ KvMaps kv_maps) {
#if DETFUZZ_SM90A
  using S = WsSmem<D, kSplitGroups>;
  using L = Layout<D>;
  constexpr int kStages = S::kStages;
  constexpr bool kBf16 = std::is_same<T, __nv_bfloat16>::value;
  extern __shared__ __align__(128) unsigned char smem[];
  const uint32_t base = static_cast<uint32_t>(__cvta_generic_to_shared(smem));
  if ((base & 1023) != 0) __trap();  // the swizzled blocks must be 1024-byte aligned (see paged_attention.cu)
  const uint32_t k_s = base + S::kK, v_s = base + S::kV;
  const uint32_t full = base + S::kBars, empty = full + kStages * 8;
  // Let the next kernel, where it is a programmatic dependent, launch now (it waits for this grid):
  // split_groups' merge where early_merge, else whatever follows the attention when no merge does
  // (a short matmul's CTAs then start while this grid ends).
  if (!kSplitGroups || p.early_merge || p.cta_merge || p.max_splits <= 1) cuda_kernels::griddep::launch_dependents();

  // whole_rows: blockIdx.x = kvh + h_kv * (reversed tile pair), consumer c on query tile
  // first_tile + c, one stream of keys for both. split_groups: blockIdx.x = kvh + h_kv * (group_cta
  // + group_ctas * reversed tile), consumer c < group_consumers on split group group_consumers *
  // group_cta + c of one query tile, a stream of keys each (one consumer: consumer 1 has no work).
  // The longest query tiles start first.
  // kPairFold: a row's two CTAs are adjacent, a cluster: blockIdx.x = group_cta + 2 * (kvh + h_kv *
  // reversed tile).
  const int kvh = kPairFold ? blockIdx.x / 2 % p.h_kv : blockIdx.x % p.h_kv, seq = blockIdx.y;
  const int group = p.h_q / p.h_kv, rows_per_tile = attention_rows_per_tile(group);
  const int q_start = p.cu_seqlens_q[seq], q_len = p.cu_seqlens_q[seq + 1] - q_start;
  const int kv_len = p.seq_lens_kv[seq];
  const int group_tokens = p.splits_per_cta * p.split_tokens;  // split_groups: keys per consumer
  int first_tile, group_cta = 0;
  if constexpr (kSplitGroups) {
    const int group_ctas = split_group_ctas(p.max_splits, p.splits_per_cta, p.group_consumers);
    group_cta = kPairFold ? blockIdx.x % 2 : (blockIdx.x / p.h_kv) % group_ctas;
    first_tile = p.q_tiles - 1 - static_cast<int>(blockIdx.x / (p.h_kv * group_ctas));
  } else {
    first_tile = (whole_rows_ws_ctas(p.q_tiles) - 1 - static_cast<int>(blockIdx.x / p.h_kv)) * kConsumers;
  }
  if (first_tile * rows_per_tile >= q_len) return;  // uniform over the CTA
  // Query rows of consumer c's tile, the keys its first row sees, the first key it computes and
  // its tiles.
  auto tile_of = [&](int c) { return kSplitGroups ? first_tile : first_tile + c; };
  auto live_rows_of = [&](int c) {
    const int q0 = tile_of(c) * rows_per_tile;
    return q0 < q_len ? min(rows_per_tile, q_len - q0) * group : 0;
  };
  auto first_visible_of = [&](int c) { return kv_len - q_len + tile_of(c) * rows_per_tile + 1; };
  auto key_begin_of = [&](int c) { return kSplitGroups ? (p.group_consumers * group_cta + c) * group_tokens : 0; };
  auto tiles_of = [&](int c) {
    if (kSplitGroups && c >= p.group_consumers) return 0;
    const int live = live_rows_of(c);
    const int key_end = first_visible_of(c) + live / group - 1;  // past the last visible key
    const int end = kSplitGroups ? min(key_end, key_begin_of(c) + group_tokens) : key_end;
    return live > 0 && end > key_begin_of(c) ? (end - key_begin_of(c) + kKeys - 1) / kKeys : 0;
  };
  // The loads, in the order the producer issues them: whole_rows the union of both consumers'
  // tiles; split_groups tile i of consumer 0 then of consumer 1 while both have one (consumer 1's
  // group lies after consumer 0's, so it has no more tiles), then consumer 0's. load_of(c, i) is
  // the index of consumer c's tile i in that order; stage load % kStages.
  const int n1 = kSplitGroups ? tiles_of(1) : 0;
  int n_loads;
  if constexpr (kSplitGroups) {
    n_loads = tiles_of(0) + n1;
  } else {
    const int key_end = kv_len - q_len + min((first_tile + kConsumers) * rows_per_tile, q_len);  // of the last live row
    n_loads = key_end > 0 ? (key_end + kKeys - 1) / kKeys : 0;
  }
  if (n_loads == 0) return;
  auto stream_of = [&](int load) { return kSplitGroups && load < 2 * n1 ? (load & 1) : 0; };

  if (threadIdx.x == 0) {
    for (int s = 0; s < kStages; ++s) {
      sm90::mbar_init(full + 8 * s, 128);  // one (asynchronous) arrival per producer thread
      // One arrival per consumer warp that reads the stage: both consumers' (whole_rows), or one's.
      sm90::mbar_init(empty + 8 * s, kSplitGroups ? 4 : kConsumers * 4);
    }
    sm90::fence_mbar_init();
  }
  __syncthreads();

  const int wg = threadIdx.x / 128, tid = threadIdx.x % 128;
  constexpr int kProducers = ws_producers<kSplitGroups>();
  if (wg < kProducers) {
    sm90::release_registers<40>();
    const int own = wg;  // split_groups: this producer's stream
    // A key's K (or V) row is D / 8 16-byte chunks; D / 8 consecutive threads copy one row, so a
    // warp's copy instruction reads whole rows (whole 32-byte sectors: half-used sectors would
    // double the L2 traffic, which bounds this kernel). Thread tid copies chunk tid % (D / 8) of
    // keys tid / (D / 8) + j * kRowsPerStep of each tile, j < kSteps: a warp copies 16 keys a tile.
    constexpr int kChunks = D / 8, kRowsPerStep = 128 / kChunks, kSteps = kKeys / kRowsPerStep;
    constexpr int kKeysPerStep = 32 / kChunks;  // a warp's keys per copy instruction
    static_assert(kKeysPerStep * kSteps == 16, "a warp's keys of a tile: one per lane of a half warp");
    const int chunk = tid % kChunks, kk = tid / kChunks, lane = tid & 31;
    const int warp_kk = (tid / 32) * kKeysPerStep;  // the warp's first kk
    // The page ids: lane l (and its mirror l + 16) reads the block table for one of its warp's 16
    // keys of a tile, `lane_key` keys past the tile's first, and the other lanes take that key's
    // pool row (page * block_size + slot) by shuffle: thread tid's key of step j is lane
    // kk - warp_kk + kKeysPerStep * j's. One table read per lane and tile, a tile ahead, so its
    // latency hides behind the wait for a stage.
    const int lane_key = warp_kk + (lane & 15) % kKeysPerStep + kRowsPerStep * ((lane & 15) / kKeysPerStep);
    const int row_lane = kk - warp_kk;
    const int *table = p.block_table + static_cast<int64_t>(seq) * p.max_blocks;
    const int bs = p.block_size;
    // Byte addresses: a pool row (slot) is H_kv * D elements; the launcher keeps rows below 2^31.
    const uint32_t row_bytes = static_cast<uint32_t>(p.h_kv) * D * sizeof(T);
    const char *k_base = static_cast<const char *>(p.k_pool) + (kvh * D + chunk * 8) * sizeof(T);
    const char *v_base = static_cast<const char *>(p.v_pool) + (kvh * D + chunk * 8) * sizeof(T);
    // The lane's key as (page index, slot) = (q, r), advanced a tile at a time by additions (no
    // division per tile); a stream each: consumer 0's (whole_rows: both), and split_groups'
    // consumer 1's. (Two named streams rather than arrays indexed by the stream: those would live
    // in local memory.)
    const int tile_q = kKeys / bs, tile_r = kKeys % bs;
    auto advance = [bs, tile_q, tile_r](int &q, int &r) {
      r += tile_r;
      q += tile_q;
      if (r >= bs) r -= bs, ++q;
    };
    int t0_a = key_begin_of(0), q_a = (t0_a + lane_key) / bs, r_a = (t0_a + lane_key) % bs;
    int t0_b = key_begin_of(1), q_b = (t0_b + lane_key) / bs, r_b = (t0_b + lane_key) % bs;
    int next_page = 0, next_slot = 0;  // the lane's key of the next load (page 0 past kv_len)
    auto read_page = [&](int t0, int q, int r) {
      next_page = t0 + lane_key < kv_len ? table[q] : 0;
      next_slot = r;
    };
    // The lane's key of this producer's first load: stream a's, or split_groups' producer 1 stream b's.
    if (kProducers == 2 && own == 1)
      read_page(t0_b, q_b, r_b);
    else
      read_page(t0_a, q_a, r_a);
    // A tile whose 64 keys all lie below kv_len is loaded by TMA where the page size allows it
    // (box_rows > 0): thread 0 issues one box per page run and column block, the copy engine
    // writes the same swizzled layout, and the stage's `full` barrier counts its bytes; the other
    // threads only arrive. A tile with keys past kv_len goes through cp.async, which zero-fills
    // them (a page's stale slots may hold NaN or infinity, and P = 0 times those is not 0).
    const int box_rows = kv_maps.box_rows, box_mask = box_rows - 1;
    if (tid == 0 && box_rows > 0) {
      sm90::prefetch_tensor_map(&kv_maps.k);
      sm90::prefetch_tensor_map(&kv_maps.v);
    }
    if (tid == 0 && kv_maps.runs) {
      sm90::prefetch_tensor_map(&kv_maps.k_run);
      sm90::prefetch_tensor_map(&kv_maps.v_run);
    }
    for (int load = 0; load < n_loads; ++load) {
      const int s = load % kStages, c = stream_of(load);
      if (kProducers == 2 && c != own) continue;
      const int t0 = c ? t0_b : t0_a;
      const int lane_row = next_page * bs + next_slot;
      const bool whole_tile = t0 + kKeys <= kv_len;
      // The consumers released the stage (whole_rows' last stage: its first release is of Q).
      sm90::mbar_wait(empty + 8 * s, ((load / kStages) & 1) ^ (S::kQInRing && s == kStages - 1 ? 0 : 1));
      // A run: the tile's pages follow each other in the pool, so that every key's pool row is the
      // tile's first row plus the key. A warp's keys touch every page of the tile (tma_run_boxes),
      // so each warp finds the same answer, and the choice is uniform over the warpgroup. (Read after
      // the wait, which the page ids' load, issued a tile ahead, overlaps.)
      const int run_start = lane_row - lane_key;  // the tile's first pool row, if it is a run
      const bool run =
          kv_maps.runs && whole_tile && __all_sync(0xffffffffu, run_start == __shfl_sync(0xffffffffu, run_start, 0));
      if (run) {
        if (tid == 0) {
          // Lane 0's key is the tile's first (lane_key 0 in warp 0).
          sm90::mbar_expect_tx(full + 8 * s, 2 * L::kTileBytes);
#pragma unroll
          for (int b = 0; b < D / 64; ++b) {
            const uint32_t dst = s * L::kTileBytes + b * kBlockBytes;
            sm90::tma_load_3d(k_s + dst, &kv_maps.k_run, full + 8 * s, b * 64, kvh, lane_row);
            sm90::tma_load_3d(v_s + dst, &kv_maps.v_run, full + 8 * s, b * 64, kvh, lane_row);
          }
        } else {
          sm90::mbar_arrive(full + 8 * s);
        }
      } else if (box_rows > 0 && whole_tile) {  // uniform over the warpgroup
        if (tid < 32) {
          // Thread 0's key j * kRowsPerStep starts a box when it is a multiple of box_rows (a
          // power of two >= kRowsPerStep): at slot 0 of a page of box_rows, or at the tile's first
          // slot of a page of 64 or more (one box per column block).
#pragma unroll
          for (int j = 0; j < kSteps; ++j) {
            const int row = __shfl_sync(0xffffffffu, lane_row, kKeysPerStep * j);
            if (tid != 0 || ((j * kRowsPerStep) & box_mask) != 0) continue;
            if (j == 0) sm90::mbar_expect_tx(full + 8 * s, 2 * L::kTileBytes);
#pragma unroll
            for (int b = 0; b < D / 64; ++b) {
              const uint32_t dst = s * L::kTileBytes + b * kBlockBytes + j * kRowsPerStep * 128;
              sm90::tma_load_3d(k_s + dst, &kv_maps.k, full + 8 * s, b * 64, kvh, row);
              sm90::tma_load_3d(v_s + dst, &kv_maps.v, full + 8 * s, b * 64, kvh, row);
            }
          }
        }
        if (tid != 0) sm90::mbar_arrive(full + 8 * s);
      } else {
        const int keys_left = kv_len - t0 - kk;  // step j's key is valid while j * kRowsPerStep < this
        const uint32_t dst = s * L::kTileBytes + L::offset(kk, chunk);  // + j * kRowsPerStep rows
#pragma unroll
        for (int j = 0; j < kSteps; ++j) {
          const uint32_t row = static_cast<uint32_t>(__shfl_sync(0xffffffffu, lane_row, row_lane + kKeysPerStep * j));
          const uint64_t offset = static_cast<uint64_t>(row) * row_bytes;
          const bool ok = j * kRowsPerStep < keys_left;
          cp_async16_no_l2_hint(k_s + dst + j * kRowsPerStep * 128, k_base + offset, ok);
          cp_async16_no_l2_hint(v_s + dst + j * kRowsPerStep * 128, v_base + offset, ok);
        }
        cp_async_arrive(full + 8 * s);
      }
      if (c)
        t0_b = t0 + kKeys, advance(q_b, r_b);
      else
        t0_a = t0 + kKeys, advance(q_a, r_a);
      if (kProducers == 2 ? c : stream_of(load + 1))
        read_page(t0_b, q_b, r_b);
      else
        read_page(t0_a, q_a, r_a);
    }
    cp_async_wait<0>();
    return;
  }

  // 128 x 40 + 256 x 232 <= 64K registers (whole_rows); 256 x 40 + 256 x 216 (split_groups)
  sm90::claim_registers<kProducers == 2 ? 216 : 232>();
  // The consumer, broadcast from lane 0 so that the compiler knows it is warp-uniform: the stage
  // addresses and MMA descriptors then live in uniform registers (no R2UR before each wgmma).
  const int w = __shfl_sync(0xffffffffu, wg - kProducers, 0), warp = tid >> 5, lane = tid & 31;
  const int q0 = tile_of(w) * rows_per_tile;
  const int live_rows = live_rows_of(w);
  const int first_visible = first_visible_of(w);  // keys seen by the tile's first query row
  const int key_begin = key_begin_of(w);
  const int my_tiles = tiles_of(w);
  auto load_of = [&](int i) { return kSplitGroups && w == 0 ? i + min(i, n1) : kSplitGroups ? 2 * i + 1 : i; };
  int visible[2];
#pragma unroll
  for (int i = 0; i < 2; ++i) {
    const int r = warp * 16 + (lane >> 2) + 8 * i;
    visible[i] = r < live_rows ? first_visible + r / group : 0;
  }
  const int min_visible = live_min_visible(visible, warp * 16 + (lane >> 2), live_rows);

  // Ping-pong (p.pingpong): the consumers take turns issuing their MMAs (named barriers 3 and 4),
  // so that one's MMAs run while the other computes its softmax statistics. A consumer's turns:
  // the first S, then each step's S with the previous P V (split_groups a tile a step, whole_rows
  // a pair of tiles a step and its last tile alone when one is left), then the last P V; a
  // pair's first P V is issued outside the turns. Consumer 0 goes first, and consumer 1 takes
  // turns only while consumer 0 has turns left, and only where it has as many or more (whole_rows:
  // its rows see as many keys or more; split_groups: its group is as long): every wait meets one
  // pass. The turns change when MMAs are issued, never what they compute (docs/perf/attention.md
  // has the measurement against free issue).
  // whole_rows steps in pairs where both consumers have tiles (below); one consumer alone (a decode
  // batch: the second query tile is empty) steps a tile at a time, as split_groups does.
  const bool pair_steps = !kSplitGroups && tiles_of(1) > 0;
  auto issues_of = [&](int c) {
    const int t = tiles_of(c);
    return t == 0 ? 0 : pair_steps ? t / 2 + 2 : t + 1;
  };
  const int issues_0 = issues_of(0);
  const bool pingpong = p.pingpong && issues_0 > 0 && issues_of(1) >= issues_0;
  const int my_turn = 3 + w, their_turn = 4 - w;
  auto wait_turn = [&](int issue) {
    if (pingpong && (w == 0 || issue < issues_0)) turn_wait(my_turn);
  };
  auto pass_turn = [&](int issue) {
    if (pingpong && (w == 0 || issue + 1 < issues_0)) turn_pass(their_turn);
  };
  if (pingpong && w == 1) turn_pass(their_turn);  // consumer 0's first turn
  if (kSplitGroups && my_tiles == 0) return;      // (no turns then: consumer 1 has fewer issues)

  const uint32_t q_s = base + S::q_offset(w);
  // Releases a stage to the producer: one arrival per warp, once the warp's MMAs reading it are done.
  auto release = [&](int load) {
    __syncwarp();
    if (lane == 0) sm90::mbar_arrive(empty + 8 * (load % kStages));
  };
  const T *q = static_cast<const T *>(p.q);
  for (int c = tid; c < kRows * (D / 8); c += 128) {
    const int r = c / (D / 8), part = c % (D / 8);
    const bool ok = r < live_rows;
    const int64_t src =
        ok ? (static_cast<int64_t>(q_start + q0 + r / group) * p.h_q + kvh * group + r % group) * D + part * 8 : 0;
    cp_async16(q_s + L::offset(r, part), q + src, ok);
  }
  cp_async_commit();
  cp_async_wait<0>();
  warpgroup_barrier(1 + w);
  uint32_t qa[D / 16][4];  // Q as the A operand of every tile's S = Q K^T
  load_q_fragments<D>(qa, q_s, warp, lane);
  if (kSplitGroups && p.cta_merge) {
    // Split states go into this Q slot: every warp's Q is in registers first. The plan keeps a
    // consumer's states within the slot (fold_ctas).
    if (p.splits_per_cta * live_rows > attention_policy::kCtaFoldStates) __trap();
    warpgroup_barrier(1 + w);
  }
  if constexpr (S::kQInRing) {  // the last stage's slots are free for the producer
    __syncwarp();
    if (lane == 0) sm90::mbar_arrive(empty + 8 * (kStages - 1));
  }

  // The tiles are pipelined within the warpgroup: tile it's S = Q K^T is issued together with
  // tile it - 1's O += P V (whole_rows: tiles it and it + 1's S, in pairs), and the softmax
  // statistics of tile it run while that P V is still on the tensor cores; the accumulators are
  // rescaled (and a finished split folded or written) once it is done. Each tile's arithmetic and
  // its order are those of tile_step: only the issue order changes.
  RowState<D> st;
  st.reset();
  MergedRows<D> merged_rows(reinterpret_cast<float *>(smem + S::kMerged) + w * kRows * D, warp, lane);
  // A finished split: folded into the merged state (whole_rows) or written for the merge kernel.
  // split_groups folding its rows (cta_merge): consumer w keeps its splits' states in its own Q slot.
  SplitStage stage;
  if (p.cta_merge)
    stage = {reinterpret_cast<float *>(smem + S::kQ),
             reinterpret_cast<float2 *>(smem + S::kFoldMl),
             live_rows,
             group_cta * p.group_consumers * p.splits_per_cta,
             p.splits_per_cta,
             Layout<D>::kQBytes / 4,
             D,
             reinterpret_cast<float *>(smem + S::q_offset(w)),
             key_begin / p.split_tokens};
  auto finish_split = [&](int j) {
    if constexpr (kSplitGroups)
      write_split<kBf16, D>(p, st, j, visible, live_rows, q_start + q0, kvh, warp, 0, D / 8, true, lane, stage);
    else
      merged_rows.fold(st, visible, j, p.split_tokens);
  };
  float s[8][4];
  float a[2];
  uint32_t pa[4][4];  // the previous tile's P, the A operand of its P V
  auto tile_k = [&](int it) { return k_s + (load_of(it) % kStages) * L::kTileBytes; };
  auto tile_v = [&](int it) { return v_s + (load_of(it) % kStages) * L::kTileBytes; };
  auto wait_full = [&](int it) {
    const int load = load_of(it);
    sm90::mbar_wait(full + 8 * (load % kStages), (load / kStages) & 1);
  };
  int it = 0;
  if (my_tiles > 0) {
    // The first tile (S, its statistics from the fresh state) is peeled off the loop rather than
    // guarded inside it: a wgmma under a branch makes ptxas serialize every wgmma of the kernel.
    wait_full(0);
    sm90::fence_proxy_async_shared();  // the producer's cp.async writes, read by wgmma
    wait_turn(0);
    sm90::wgmma_fence();
    qk_wgmma_issue_rs<T, D>(s, qa, tile_k(0));
    sm90::wgmma_commit();
    pass_turn(0);
    sm90::wgmma_wait<0>();
    sm90::fence_registers(*reinterpret_cast<float(*)[32]>(&s[0][0]));
    mask_scores<false>(s, key_begin, visible, min_visible, lane, warp);
    softmax_stats<0, 8>(st.m, st.l, s, p.scale_log2, a);
    rescale_acc<D, false>(st, a);
    pack_p<kBf16, 0, 8>(s, pa);
    if (my_tiles > 1) wait_full(1);
    const int tiles_per_split = p.split_tokens / kKeys;
    int split_tile = 0;  // tile it's index within its split, counted up to tiles_per_split
    int issue = 1;       // the consumer's next turn
    it = 1;
    // Whether tile it starts a split (a fresh state; the finished split is folded once the P V
    // before it is done), counting tiles in order.
    auto starts_split = [&] {
      if (++split_tile < tiles_per_split) return false;
      split_tile = 0;
      return true;
    };
    // A tile's statistics start from (m0, l0), the state before it, or from a fresh state where it
    // starts a split.
    auto start_state = [](bool fresh, const float(&m0)[2], const float(&l0)[2], float(&m)[2], float(&l)[2]) {
#pragma unroll
      for (int i = 0; i < 2; ++i) m[i] = fresh ? -INFINITY : m0[i], l[i] = fresh ? 0.f : l0[i];
    };
    // Once the P V before the tile at key t0 is issued: waits for it, releases its stage (`load`),
    // folds or writes the split it finished where the tile starts one, and takes the tile's
    // statistics (m, l) as the state, the accumulators rescaled by its factors f (whole_rows skips
    // a warp's rescale where every factor is 1, as on most steps: the same bits. split_groups
    // multiplies always: the branch there makes ptxas serialize its wgmma).
    auto after_pv = [&](int load, bool starts, int t0, const float(&m)[2], const float(&l)[2], const float(&f)[2]) {
      sm90::wgmma_wait<0>();
      sm90::fence_registers(acc_registers(st));
      release(load);
      if (starts) {
        finish_split(t0 / p.split_tokens - 1);
        st.reset();
      }
      st.m[0] = m[0], st.m[1] = m[1], st.l[0] = l[0], st.l[1] = l[1];
      if (kSplitGroups || __any_sync(0xffffffffu, f[0] != 1.f || f[1] != 1.f)) rescale_acc<D, false>(st, f);
    };
    if (pair_steps) {
      // whole_rows: tiles in pairs (it, it + 1). Both S are issued with the previous tile's P V,
      // and both tiles' statistics run side by side while that P V is on the tensor cores (the
      // second tile's maximum joins the first's only at the running maximum, as in two steps one
      // after the other). Then the first tile's P V, and the second's waits for the next pair's
      // S. Each tile's arithmetic and order are unchanged; only the issue order differs.
      float s2[8][4];
      float a2[2];
      uint32_t pa2[4][4];  // the pair's first P, the A operand of its P V
      for (; it + 1 < my_tiles; it += 2, ++issue) {
        wait_full(it + 1);
        sm90::fence_proxy_async_shared();
        wait_turn(issue);
        sm90::wgmma_fence();
        qk_wgmma_issue_rs<T, D>(s, qa, tile_k(it));
        qk_wgmma_issue_rs<T, D>(s2, qa, tile_k(it + 1));
        sm90::wgmma_commit();
        pv_wgmma_issue<T, D, 0, 4>(st, pa, tile_v(it - 1));
        sm90::wgmma_commit();
        pass_turn(issue);
        sm90::wgmma_wait<1>();  // both S are done; the P V may still run
        sm90::fence_registers(*reinterpret_cast<float(*)[32]>(&s[0][0]));
        sm90::fence_registers(*reinterpret_cast<float(*)[32]>(&s2[0][0]));
        const int t0 = key_begin + it * kKeys;
        mask_scores<false>(s, t0, visible, min_visible, lane, warp);
        mask_scores<false>(s2, t0 + kKeys, visible, min_visible, lane, warp);
        const bool starts_a = starts_split(), starts_b = starts_split();
        float m[2], l[2], m2[2], l2[2];
        start_state(starts_a, st.m, st.l, m, l);
        softmax_stats<0, 8>(m, l, s, p.scale_log2, a);
        start_state(starts_b, m, l, m2, l2);
        softmax_stats<0, 8>(m2, l2, s2, p.scale_log2, a2);
        if (it + 2 < my_tiles) wait_full(it + 2);
        after_pv(load_of(it - 1), starts_a, t0, m, l, a);
        pack_p<kBf16, 0, 8>(s, pa2);
        pack_p<kBf16, 0, 8>(s2, pa);
        sm90::wgmma_fence();
        pv_wgmma_issue<T, D, 0, 4>(st, pa2, tile_v(it));
        sm90::wgmma_commit();
        after_pv(load_of(it), starts_b, t0 + kKeys, m2, l2, a2);
      }
    }
    // One tile a step (split_groups; whole_rows with one consumer, or its last tile when a pair is
    // not left): tile it's S beside tile it - 1's P V (its stage was waited for in the step before).
    for (; it < my_tiles; ++it, ++issue) {
      sm90::fence_proxy_async_shared();
      wait_turn(issue);
      sm90::wgmma_fence();
      qk_wgmma_issue_rs<T, D>(s, qa, tile_k(it));
      sm90::wgmma_commit();
      pv_wgmma_issue<T, D, 0, 4>(st, pa, tile_v(it - 1));
      sm90::wgmma_commit();
      pass_turn(issue);
      sm90::wgmma_wait<1>();  // S is done; the P V may still run
      sm90::fence_registers(*reinterpret_cast<float(*)[32]>(&s[0][0]));
      const int t0 = key_begin + it * kKeys;
      mask_scores<false>(s, t0, visible, min_visible, lane, warp);
      const bool starts = starts_split();
      float m[2], l[2];
      start_state(starts, st.m, st.l, m, l);
      softmax_stats<0, 8>(m, l, s, p.scale_log2, a);
      // Tile it - 1's stage is released as soon as its P V is done, before the wait for tile it + 1:
      // a split_groups stream holds 3 stages, and keeping tile it - 1's until tile it + 1 lands left the
      // producer one load in flight while this consumer waits. The wait on tile it's own `full`
      // (long complete) is a spin loop that keeps ptxas from hoisting the P V's wait above the
      // statistics.
      wait_full(it);
      after_pv(load_of(it - 1), starts, t0, m, l, a);
      pack_p<kBf16, 0, 8>(s, pa);
      if (it + 1 < my_tiles) wait_full(it + 1);
    }
    // The last tile's P V.
    wait_turn(issue);
    sm90::wgmma_fence();
    pv_wgmma_issue<T, D, 0, 4>(st, pa, tile_v(my_tiles - 1));
    sm90::wgmma_commit();
    pass_turn(issue);
    sm90::wgmma_wait<0>();
    sm90::fence_registers(acc_registers(st));
    release(load_of(my_tiles - 1));
  }
  if constexpr (!kSplitGroups)
    for (; it < n_loads; ++it) {  // tiles past this warpgroup's rows: released unread
      wait_full(it);
      release(it);
    }
  if (my_tiles == 0) return;
  const int last_split = (key_begin + my_tiles * kKeys - 1) / p.split_tokens;
  if constexpr (kSplitGroups) {
    finish_split(last_split);
    if (p.cta_merge) {  // every consumer's splits kept (consumer 1 has some only where it has tiles): fold
      // The cluster's CTAs that hold splits of the tile: those whose first key its last row sees.
      const int cta_keys = p.group_consumers * group_tokens, key_end = first_visible + live_rows / group - 1;
      const int folding = kPairFold ? min(2, (key_end + cta_keys - 1) / cta_keys) : 1;
      fold_staged_splits<D, kPairFold>(p, kBf16, stage, first_visible, q_start + q0, kvh, kPairFold ? group_cta : 0,
                                       folding, w * 128 + tid, n1 > 0 ? 256 : 128);
    }
  } else {  // the last fold goes straight to the output
    void *row_out[2];
#pragma unroll
    for (int i = 0; i < 2; ++i) {
      const int r = warp * 16 + (lane >> 2) + 8 * i;
      const int64_t row_head = static_cast<int64_t>(q_start + q0 + r / group) * p.h_q + kvh * group + r % group;
      row_out[i] = r < live_rows ? static_cast<T *>(p.out) + row_head * D : nullptr;
    }
    merged_rows.fold_and_write<kBf16>(st, visible, last_split, p.split_tokens, row_out, lane & 3);
  }
#else
  __trap();  // the host launches this kernel only on sm_90a code
#endif
}

// Rows of a TMA box for this launch's pages, or 0 where tiles go through cp.async
// (attention_policy::tma_box_rows).
template <int D>
int tma_box_rows(const PagedAttnLaunch &p) {
  static_assert(kKeys == 64, "the policy's boxes are runs of 64-key tiles");
  return attention_policy::tma_box_rows(D, p.block_size, p.pool_blocks, p.kv_loads);
}

// A pool [NB, BS, H_kv, D] as a 3-D map (D, H_kv, NB * BS) with boxes of 64 x 1 x box_rows. No L2
// promotion: a box row is 128 bytes of a 256-byte head row, and promoting each fill to 256 bytes
// made decode 1-9% slower on an H200 (batch 16 at 4k 76.5 against 71.2 us; prefill the same:
// docs/perf/attention.md).
CUtensorMap kv_pool_map(const void *pool, const PagedAttnLaunch &p, int box_rows) {
  CUtensorMap map;
  const cuuint64_t dims[3] = {static_cast<cuuint64_t>(p.head_dim), static_cast<cuuint64_t>(p.h_kv),
                              static_cast<cuuint64_t>(p.pool_blocks * p.block_size)};
  const cuuint64_t strides[2] = {static_cast<cuuint64_t>(p.head_dim) * 2,
                                 static_cast<cuuint64_t>(p.h_kv) * p.head_dim * 2};
  const cuuint32_t box[3] = {64, 1, static_cast<cuuint32_t>(box_rows)};
  const cuuint32_t elem[3] = {1, 1, 1};
  const CUresult r =
      cuda_kernels::encode_tiled()(&map, CU_TENSOR_MAP_DATA_TYPE_UINT16, 3, const_cast<void *>(pool), dims, strides,
                                   box, elem, CU_TENSOR_MAP_INTERLEAVE_NONE, CU_TENSOR_MAP_SWIZZLE_128B,
                                   CU_TENSOR_MAP_L2_PROMOTION_NONE, CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE);
  if (r != CUDA_SUCCESS)
    throw std::runtime_error("paged_attention: cuTensorMapEncodeTiled failed (CUresult " +
                             std::to_string(static_cast<int>(r)) + ") for a pool of " + std::to_string(p.pool_blocks) +
                             " pages of " + std::to_string(p.block_size));
  return map;
}

// Launches the kernel instantiation, its shared-memory size set once per device; kPairFold in
// clusters of two CTAs.
template <typename T, int D, bool kSplitGroups, bool kPairFold>
void launch_ws_kernel(const PagedAttnLaunch &p, const KvMaps &maps, int64_t x, cudaStream_t stream) {
  using S = WsSmem<D, kSplitGroups>;
  auto kernel = paged_attention_ws_kernel<T, D, kSplitGroups, kPairFold>;
  static std::once_flag configured[64];
  int device = 0;
  DETFUZZ_CUDA_CHECK(cudaGetDevice(&device));
  std::call_once(configured[device % 64], [&] {
    DETFUZZ_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, S::kBytes));
  });
  const dim3 grid(static_cast<unsigned>(x), p.num_seqs), block(ws_threads<kSplitGroups>());
  if constexpr (kPairFold) {
    cudaLaunchConfig_t config = {};
    config.gridDim = grid;
    config.blockDim = block;
    config.dynamicSmemBytes = S::kBytes;
    config.stream = stream;
    cudaLaunchAttribute cluster[1];
    cluster[0].id = cudaLaunchAttributeClusterDimension;
    cluster[0].val.clusterDim.x = 2;
    cluster[0].val.clusterDim.y = 1;
    cluster[0].val.clusterDim.z = 1;
    config.attrs = cluster;
    config.numAttrs = 1;
    DETFUZZ_CUDA_CHECK(cudaLaunchKernelEx(&config, kernel, p, maps));
  } else {
    kernel<<<grid, block, S::kBytes, stream>>>(p, maps);
    DETFUZZ_LAUNCH_CHECK();
  }
}

template <typename T, int D, bool kSplitGroups>
void launch_ws(const PagedAttnLaunch &p, cudaStream_t stream) {
  KvMaps maps{};
  maps.box_rows = tma_box_rows<D>(p);
  if (maps.box_rows > 0) {
    maps.k = kv_pool_map(p.k_pool, p, maps.box_rows);
    maps.v = kv_pool_map(p.v_pool, p, maps.box_rows);
  }
  maps.runs = attention_policy::tma_run_boxes(D, p.block_size, p.pool_blocks, p.kv_loads);
  if (maps.runs) {
    maps.k_run = kv_pool_map(p.k_pool, p, kKeys);
    maps.v_run = kv_pool_map(p.v_pool, p, kKeys);
  }
  const int64_t x =
      kSplitGroups ? int64_t{p.h_kv} * split_group_ctas(p.max_splits, p.splits_per_cta, p.group_consumers) * p.q_tiles
                   : int64_t{p.h_kv} * whole_rows_ws_ctas(p.q_tiles);
  if (x > 0x7fffffffLL) throw std::runtime_error("paged_attention: grid x " + std::to_string(x) + " >= 2^31");
  if (p.pool_blocks * p.block_size > INT32_MAX)  // the producer's 32-bit pool rows
    throw std::runtime_error("paged_attention: the warp-specialised kernel takes pools of up to 2^31 - 1 slots, not " +
                             std::to_string(p.pool_blocks * p.block_size));
  if (kSplitGroups && p.cta_merge && p.fold_ctas == 2)  // (whole_rows has no pair instantiation)
    launch_ws_kernel<T, D, kSplitGroups, kSplitGroups>(p, maps, x, stream);
  else
    launch_ws_kernel<T, D, kSplitGroups, false>(p, maps, x, stream);
}

template <bool kSplitGroups>
void launch_ws_dim(const PagedAttnLaunch &p, cudaStream_t stream, const char *what) {
  const bool bf16 = p.bf16;
  switch (p.head_dim) {
    case 64:
      return bf16 ? launch_ws<__nv_bfloat16, 64, kSplitGroups>(p, stream)
                  : launch_ws<__half, 64, kSplitGroups>(p, stream);
    case 128:
      return bf16 ? launch_ws<__nv_bfloat16, 128, kSplitGroups>(p, stream)
                  : launch_ws<__half, 128, kSplitGroups>(p, stream);
    default:
      throw std::runtime_error(std::string("paged_attention: the warp-specialised ") + what +
                               " kernel takes head dims 64 and 128, not " + std::to_string(p.head_dim));
  }
}

}  // namespace

void launch_whole_rows_sm90(const PagedAttnLaunch &p, cudaStream_t stream) {
  launch_ws_dim<false>(p, stream, "prefill");
}

void launch_split_groups_sm90(const PagedAttnLaunch &p, cudaStream_t stream) {
  if (p.softmax_keys != kKeys) throw std::runtime_error("paged_attention: split_groups has 64-key softmax steps only");
  launch_ws_dim<true>(p, stream, "split");
}

}  // namespace detfuzz::attention
