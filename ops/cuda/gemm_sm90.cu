// Batch-invariant matmul for bfloat16 and float16 on Hopper (sm_90a): TMA loads, wgmma, a
// producer warpgroup and two consumer warpgroups, and the fixed K chunks of k_chunks(K).
//
// Design. An output tile is 128 x 128. Each K step of 64 is one pipeline stage: the producer
// warpgroup (one thread) waits for the stage to be free, then TMA loads A's 128 x 64 box (only
// the first ceil8(M) rows when M < 128: TMA's zero fill of rows past M is slower than a load, and a
// row of the MMA never reads another row, so the stale rows below are harmless) and B's 64 x 128 (one box of 128 N rows when B is a transposed [N, K] weight, two boxes of 64 N columns
// when B is [K, N]) into 128-byte-swizzled shared memory, 6 stages deep (9 for 64-row tiles); out-of-range rows,
// columns and K are zero-filled by TMA. Each consumer warpgroup owns 64 rows of the tile and issues
// four wgmma.m64n128k16 per stage (A and B from shared memory; B K-major or N-major), keeping one
// stage's MMAs in flight while it releases the previous stage. The two consumers of a 128 x 128
// tile issue each stage's MMAs in turn (TURNS, in the kernel), so that one's drain at a chunk end
// (below) overlaps the other's MMAs.
//
// Arithmetic of one output element (the invariance argument). K is cut into the chunks of
// k_chunks(K), a function of K alone. The partial p_c of chunk c is the chain of wgmma k16 steps
// over the chunk in increasing K order, starting from zero (the first MMA of a chunk ignores the
// accumulator). The result is total = p_0, then total = total + p_c for c = 1, 2, ... in order
// (float32 adds), then alpha * total (+ beta * bias), rounded once. Two paths compute exactly this:
//  - persistent: a grid of at most one CTA per SM walks the tiles (gemm_common's grouped order);
//    a CTA computes every chunk of its tile, keeping the running total in registers beside the
//    chunk accumulator;
//  - split (cluster): a cluster of k_chunks(K).count CTAs per tile, CTA c computing p_c; the
//    partials meet in distributed shared memory, where CTA r sums rows r, r + count, ... in chunk
//    order. A GPU runs fewer clusters at once than its SMs suggest (an H100's 132 SMs hold 30
//    clusters of 4 and 15 of 8 of these CTAs: a cluster must fit in one GPC), so the launcher
//    counts the co-resident clusters before it picks this path.
// Each path comes in two tile heights: 128 rows (two consumer warpgroups) and 64 rows (one, taken
// for M <= 64 so that no warpgroup multiplies only rows past M, and wherever 128-row tiles would
// leave half the SMs idle); a 64-row slab of either is the same wgmma sequence on the same data.
// A fifth path, persistent 64 x 64 tiles, halves the columns per CTA where 64 x 128 tiles would
// leave half the SMs idle (decode with N up to about 8k: twice the CTAs stream B). It runs
// m64n64k16 instead of m64n128k16: the same instruction family, which computes each output
// element from the same operands in the same way whatever N it spans (an n64 tile is the left or
// right half of an n128 one), over the same K steps and chunks. A sixth, persistent 128 x 192 tiles
// (m64n192k16: 24 n8 blocks instead of 16, the same argument), loads half as much MMA work again per
// byte into shared memory; the launcher takes it where it needs fewer waves than 128 x 128 tiles.
// A seventh, persistent 64 x 256 tiles, puts the two consumer warpgroups side by side, each running
// the 64-row kernel's m64n128k16 chain on its 128 columns of the same rows (decode over a
// vocabulary-wide N: A loaded once per 256 columns).
// An eighth runs the 128 x 192 tiles in clusters of two CTAs on vertically adjacent tiles that
// share their B tile by TMA multicast (PAIR, in the kernel): only where the bytes land changes.
// A ninth, persistent 128 x 256 tiles (m64n256k16), reads a third less shared memory per MMA than
// the 128 x 128 tiles; it keeps a quarter of its chunk totals in registers and the rest in the
// staging area, which leaves room for 3 stages.
// All nine run that arithmetic on the same shared-memory layouts over the same K ranges, with the
// same adds in the same order, so they give the same bits: the launcher may pick any of them for
// any M. Nothing depends on M, the batch, the grid or the B layout. variant_agree runs all nine on
// the same inputs (tests force each one), and `scan` checks it across M.
//
// Epilogue. The 128-row persistent tiles write their results (rounded exactly as a register store
// would round them) into a staging area of shared memory, swizzled as TMA wants it, and one thread
// per warpgroup stores them with TMA, asynchronously: the warpgroup goes on with the next tile's
// MMAs while the store drains. Where C's rows are not 16-byte aligned, TMA cannot store it and the
// 128 x 128 tiles store from registers. Both epilogues round alpha * total without per-value checks
// where there is no bias (register stores: and the tile lies inside N); the checked form, a bounds
// test, a bias term and a 64-bit index per value, runs elsewhere. Same rounding either way.
//
// Launch. The 64-row kernels (gemm_policy::programmatic_launch_pays) are programmatic dependents
// of the kernel before them on the stream (griddep.cuh): their CTAs start while that kernel ends,
// set up their barriers, and wait (griddepcontrol.wait, a no-op after a normal launch) before they
// load A or store C. A model's forward of short batches, one small kernel after another, hides
// each product's launch this way.
//
// Which path runs a problem (tile height and width, persistent or split) is chosen by the pure
// host functions of gemm_policy.h; the measurements behind the kernel's choices are in
// docs/perf/matmul.md.
#include "ops/cuda/cuda_check.h"
#include "ops/cuda/gemm.cuh"
#include "ops/cuda/gemm_common.cuh"
#include "ops/cuda/griddep.cuh"
#include "ops/cuda/mma_sm80.cuh"
#include "ops/cuda/ptx_sm90.cuh"
#include "ops/cuda/tensor_map.h"

#include <cuda.h>
#include <cudaTypedefs.h>
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <stdexcept>
#include <string>

namespace detfuzz::cuda_kernels {
namespace {

constexpr int BK = 64, GROUP_M = 8;
// How a CTA's work is cut: every chunk of its tiles (persistent), or one chunk of one tile whose
// partials meet in a cluster's shared memory.
enum Sched { kPersistent, kCluster };
// A CTA has CONSUMERS warpgroups of 64 rows each (tile height 64 * CONSUMERS) and warpgroup 0
// produces. Two for M > 64; one for M <= 64, where a second would multiply rows past M.
template <int CONSUMERS>
constexpr int kThreads = 128 * (CONSUMERS + 1);
// Shared memory of a CTA: `stages` pipeline stages of A's box then B's 64 x BN, then the full and
// empty barriers. A 64-row tile's smaller stages buy it more of them (decode streams B, and what
// bounds it is the bytes in flight per SM).
// Tiles are 128 columns wide, 64 (BN) for the 64 x 64 tiles of sm90_persistent_64x64, or 192 for
// the 128 x 192 tiles of sm90_persistent_128x192.
// STAGED: the epilogue writes the tile into shared memory (staging_bytes after the stages), from
// where TMA stores it while the consumers go on with the next tile.
// A consumer thread keeps the running chunk total of its first reg_total accumulator values in
// registers, and of the others (192-column tiles: 96 accumulators and 96 totals a thread would
// spill) in slots of shared memory of its own, in its warpgroup's part of the staging area: a tile's
// totals are dead before its epilogue writes there, and its TMA store has read the area before the
// next tile's first chunk ends.
// BN 256: 64 x 256 tiles of sm90_persistent_64x256, the two consumers side by side (128 columns
// each, the same A rows): decode over a wide N loads A once per 256 columns and B in 512-byte rows.
// BN 256 and STAGED: the 128 x 256 tiles of sm90_persistent_128x256 (m64n256k16, a quarter of the
// totals in registers, 3 stages beside the staging area).
template <int CONSUMERS, int BN, bool STAGED = false>
struct Geometry {
  static constexpr bool n_split = BN == 256 && !STAGED;
  static constexpr int tile_m = n_split ? 64 : 64 * CONSUMERS;
  static constexpr int consumer_n = n_split ? BN / 2 : BN;  // columns of one consumer's accumulators
  static constexpr int a_bytes = tile_m * BK * 2;
  static constexpr int b_bytes = BK * BN * 2;  // 32 KiB (BN 256), 24 (192), 16 (128) or 8
  static constexpr int part_ld = BN + 4;       // floats per row of a split partial in shared memory
  static constexpr int stage_bytes = a_bytes + b_bytes;
  static constexpr int reg_total = STAGED && BN >= 192 ? BN / 4 : consumer_n / 2;
  static constexpr int staging_bytes = STAGED ? tile_m * BN * 2 : 0;
  // About 210 KiB in flight for 64-row tiles (one consumer) and 64 x 256 ones; what the staging
  // area leaves for 128-row tiles of 192 and 256 columns.
  static constexpr int stages = BN == 256 ? (STAGED ? 3 : 5) : BN == 192 ? 4 : CONSUMERS == 2 ? 6 : BN == 128 ? 9 : 13;
  static constexpr int smem_bytes = 1024 + stages * stage_bytes + staging_bytes + 2 * stages * 8;
  static_assert(reg_total == consumer_n / 2 || (STAGED && (BN / 2 - reg_total) * 4 * 128 <= 64 * BN * 2),
                "the totals not kept in registers fit in the warpgroup's staging area");
  static_assert(tile_m * part_ld * 4 <= stages * stage_bytes, "the split partial reuses the stages");
  static_assert(smem_bytes <= 227 * 1024, "fits an SM");
};
static_assert(kMinKChunk % BK == 0, "chunks are whole K steps");
static_assert(GROUP_M > 0, "tile rows per group of the persistent order");

using TcArgs = GemmArgs<uint16_t>;

struct Sm90Args {
  TcArgs g;
  int64_t tiles_m, tiles_n, tiles;
  int kblocks;        // ceil(K / BK)
  int chunk_kblocks;  // K steps per chunk: ceil(k_chunks(K).size / BK)
  int chunks;         // k_chunks(K).count
  int a_rank3, b_rank3;
  int stage_tx_bytes;  // bytes TMA writes per stage: A's box (a_box_rows x 64) and B's 64 x BN
  int c_rank3;         // STAGED: C's map has a batch coordinate
};

// alpha * total (+ beta * bias), without contraction: both paths must round identically.
template <typename T>
__device__ __forceinline__ float finish(float total, const Sm90Args &p, const uint16_t *bias, int64_t gm, int64_t gn) {
  float v = __fmul_rn(p.g.alpha, total);
  if (bias) v = __fadd_rn(v, __fmul_rn(p.g.beta, to_f<T>(bias[gm * p.g.bsm + gn * p.g.bsn])));
  return v;
}

// The rounded result of accumulator value i of a consumer thread (row gm, column gn of C): the
// bias's term only where there is a bias (LEAN: there is none, and gm, gn are in range). Out-of-range
// values round 0 (never stored).
template <typename T, bool LEAN>
__device__ __forceinline__ uint16_t rounded(float total, const Sm90Args &p, const uint16_t *bias, bool in_m, int64_t gm,
                                            int64_t gn) {
  if (LEAN) return from_f<T>(__fmul_rn(p.g.alpha, total));
  return from_f<T>(in_m && gn < p.g.N ? finish<T>(total, p, bias, gm, gn) : 0.f);
}

// Stores a consumer thread's BN / 2 results of a tile (rows row_base and row_base + 8 of the tile,
// columns 8 j + 2 (lane % 4) + {0, 1}: wgmma's accumulator layout), rows past valid_m dropped.
// The four threads of a quad hold 16 columns of a row in two n8 blocks; four shuffles give each of
// them 4 adjacent columns, and one 8-byte store per thread writes whole 32-byte sectors.
// LEAN (no bias, every column inside N, rows 8-byte aligned) has no per-value checks: the general
// form, with a bounds check, a bias term and a 64-bit index per value, is some 2000 instructions
// per thread, microseconds at the end of a decode kernel. Values are rounded before the shuffles:
// the bits are those of every other epilogue.
// vec4: C's rows are 8-byte aligned (LEAN implies it).
template <typename T, int BN, bool LEAN>
__device__ __forceinline__ void store_rows(const float (&v)[BN / 2], const Sm90Args &p, uint16_t *C,
                                           const uint16_t *bias, bool vec4, int64_t m0, int64_t n0, int row_base,
                                           int valid_m, int lane) {
  const int q = lane % 4, src = lane - q + 2 * (q % 2);
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    const int r = row_base + 8 * h;
    const int64_t gm = m0 + r;
    const bool in_m = r < valid_m;
    uint16_t *row = C + gm * p.g.ldc + n0;  // dereferenced only for rows < valid_m
#pragma unroll
    for (int jj = 0; jj < BN / 16; ++jj) {
      // This thread's 2 columns of blocks 2 jj and 2 jj + 1, rounded and packed.
      uint32_t own[2];
#pragma unroll
      for (int b = 0; b < 2; ++b) {
        const int j = 2 * jj + b;
        const int64_t gn = n0 + 8 * j + 2 * q;
        own[b] = static_cast<uint32_t>(rounded<T, LEAN>(v[4 * j + 2 * h], p, bias, in_m, gm, gn)) |
                 (static_cast<uint32_t>(rounded<T, LEAN>(v[4 * j + 2 * h + 1], p, bias, in_m, gm, gn + 1)) << 16);
      }
      // Thread q takes columns 4 q .. 4 q + 3 of the 16: the pairs of quad threads 2 (q % 2) and
      // 2 (q % 2) + 1, from block 2 jj (q < 2) or 2 jj + 1.
      const uint32_t a0 = __shfl_sync(0xffffffffu, own[0], src), a1 = __shfl_sync(0xffffffffu, own[1], src);
      const uint32_t b0 = __shfl_sync(0xffffffffu, own[0], src + 1), b1 = __shfl_sync(0xffffffffu, own[1], src + 1);
      const uint32_t lo = q < 2 ? a0 : a1, hi = q < 2 ? b0 : b1;
      const int c = 16 * jj + 4 * q;
      if (!in_m) continue;
      if (vec4 && (LEAN || n0 + c + 3 < p.g.N)) {
        asm volatile("st.global.v2.b32 [%0], {%1, %2};" ::"l"(row + c), "r"(lo), "r"(hi) : "memory");
      } else {
        const uint16_t out[4] = {static_cast<uint16_t>(lo), static_cast<uint16_t>(lo >> 16), static_cast<uint16_t>(hi),
                                 static_cast<uint16_t>(hi >> 16)};
        for (int e = 0; e < 4 && n0 + c + e < p.g.N; ++e) row[c + e] = out[e];
      }
    }
  }
}
template <typename T, int BN>
__device__ __forceinline__ void store_fragment(const float (&v)[BN / 2], const Sm90Args &p, const TileCoord &tc,
                                               int64_t m0, int64_t n0, int row_base, int valid_m, int lane) {
  static_assert(BN % 16 == 0, "pairs of n8 blocks");
  uint16_t *C = p.g.c + tc.batch * p.g.sc;
  const uint16_t *bias = p.g.bias ? p.g.bias + tc.batch * p.g.sbias : nullptr;
  const bool vec4 = p.g.ldc % 4 == 0 && (reinterpret_cast<uintptr_t>(C) & 7) == 0;
  if (!bias && n0 + BN <= p.g.N && vec4)
    store_rows<T, BN, true>(v, p, C, nullptr, true, m0, n0, row_base, valid_m, lane);
  else
    store_rows<T, BN, false>(v, p, C, bias, vec4, m0, n0, row_base, valid_m, lane);
}

// The staged epilogue of one consumer warpgroup (64 rows x BN columns): its results, rounded as
// store_fragment rounds them, go to `out` as BN / 64 boxes of 64 x 64 laid out as TMA's 128-byte
// swizzle expects (16-byte chunk c of row r at chunk c ^ (r % 8): a warp's 4-byte writes hit 32
// banks), and one thread stores the boxes. Rows and columns past M and N are clipped by TMA, so
// LEAN (no bias: the kernel's BIAS is false) rounds alpha * total everywhere without a check; the
// checked form costs the consumers a few thousand instructions per tile while the tensor cores
// wait.
template <typename T, int BN, bool LEAN>
__device__ __forceinline__ void stage_values(const float (&v)[BN / 2], const Sm90Args &p, const uint16_t *bias,
                                             int64_t m0, int64_t n0, int cw, uint32_t out, int warp, int lane) {
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    const int r = warp * 16 + lane / 4 + 8 * h;  // row within this warpgroup's 64
    const int64_t gm = m0 + cw * 64 + r;
#pragma unroll
    for (int j = 0; j < BN / 8; ++j) {
      const int64_t gn = n0 + 8 * j + 2 * (lane % 4);
      const bool in_m = gm < p.g.M;
      // rounded()'s arithmetic written out: through the helper (returning the value rounded or
      // not) ptxas spilled 64-192 bytes in the checked 128-row kernels.
      const float f0 = LEAN ? __fmul_rn(p.g.alpha, v[4 * j + 2 * h])
                            : (in_m && gn < p.g.N ? finish<T>(v[4 * j + 2 * h], p, bias, gm, gn) : 0.f);
      const float f1 = LEAN ? __fmul_rn(p.g.alpha, v[4 * j + 2 * h + 1])
                            : (in_m && gn + 1 < p.g.N ? finish<T>(v[4 * j + 2 * h + 1], p, bias, gm, gn + 1) : 0.f);
      const uint32_t packed = static_cast<uint32_t>(from_f<T>(f0)) | (static_cast<uint32_t>(from_f<T>(f1)) << 16);
      const uint32_t at = out + (j / 8) * 8192 + r * 128 + (((j % 8) ^ (r % 8)) << 4) + (lane % 4) * 4;
      asm volatile("st.shared.b32 [%0], %1;" ::"r"(at), "r"(packed) : "memory");
    }
  }
}
template <typename T, int BN, bool LEAN>
__device__ __forceinline__ void store_staged(const float (&v)[BN / 2], const Sm90Args &p, const CUtensorMap *tmap_c,
                                             const TileCoord &tc, int64_t m0, int64_t n0, int cw, uint32_t out, int t) {
#if DETFUZZ_SM90A
  using namespace sm90;
  const int warp = t / 32, lane = t % 32;
  const uint16_t *bias = p.g.bias ? p.g.bias + tc.batch * p.g.sbias : nullptr;
  // The previous tile's stores have read this warpgroup's staging before anyone writes it again.
  if (t == 0) bulk_wait_read_all();
  named_barrier_sync(2 + cw, 128);
  stage_values<T, BN, LEAN>(v, p, bias, m0, n0, cw, out, warp, lane);
  fence_proxy_async_shared();
  named_barrier_sync(2 + cw, 128);
  if (t == 0) {
    const int row = static_cast<int>(m0) + cw * 64, b = static_cast<int>(tc.batch);
    for (int box = 0; box < BN / 64; ++box)
      tma_store_matrix(tmap_c, p.c_rank3, out + box * 8192, static_cast<int>(n0) + 64 * box, row, b);
    bulk_commit_group();
  }
#endif
}

// The tile a CTA computes at step `tile` of its walk: PAIR, `tile` counts pairs of vertically
// adjacent tiles and `rank` picks one of the pair.
template <bool PAIR>
__device__ __forceinline__ TileCoord pair_tile(int64_t tile, const Sm90Args &p, uint32_t rank) {
  constexpr int kGroup = PAIR ? GROUP_M / 2 : GROUP_M;  // groups of GROUP_M tile rows either way
  TileCoord tc = persistent_tile<kGroup>(tile, p.tiles_m, p.tiles_n);
  if (PAIR) tc.pid_m = 2 * tc.pid_m + rank;
  return tc;
}

// A consumer warp is done with stage s: PAIR, the other CTA's producer writes it too (its half of
// B), so both CTAs' empty barriers hear of it.
template <bool PAIR>
__device__ __forceinline__ void release_stage(uint32_t empty_bar, uint32_t peer_empty_bar, int s) {
#if DETFUZZ_SM90A
  sm90::mbar_arrive(empty_bar + 8 * s);
  if (PAIR) sm90::mbar_arrive_cluster(peer_empty_bar + 8 * s);
#endif
}

// BIAS (staged epilogue): whether C gets a bias term. Without one the staged values are rounded
// without checks (TMA clips the stores to C's rows and columns).
// PAIR (128 x 192 staged tiles): the two CTAs of a cluster take vertically adjacent tiles, pair by
// pair (p.tiles counts pairs, p.tiles_m pairs of tile rows), and share their B tile: each loads
// its half (96 N rows of a K-major B, or 32 K rows of each N-major box) for both by TMA multicast,
// so a K step pulls 28 KiB through L2 per CTA instead of 40. A stage is free once the consumers of
// both CTAs have released it (each consumer warp arrives on its own CTA's empty barrier and the
// other's). Only where each byte lands changes: the arithmetic, and so the bits, are the unpaired
// kernel's.
template <typename T, bool B_KN, int SCHED, int CONSUMERS, int BN, bool STAGED = false, bool BIAS = true,
          bool PAIR = false>
__global__ void __launch_bounds__(kThreads<CONSUMERS>, 1)
    gemm_sm90_kernel(const __grid_constant__ CUtensorMap tmap_a, const __grid_constant__ CUtensorMap tmap_b,
                     const __grid_constant__ CUtensorMap tmap_c, const Sm90Args p) {
#if DETFUZZ_SM90A
  using namespace sm90;
  constexpr bool SPLIT = SCHED != kPersistent;
  static_assert(!STAGED || (SCHED == kPersistent && CONSUMERS == 2),
                "the staged epilogue is the 128-row persistent one's");
  using G = Geometry<CONSUMERS, BN, STAGED>;
  static_assert(!G::n_split || (!SPLIT && !STAGED && CONSUMERS == 2), "64 x 256 tiles: persistent, register stores");
  static_assert(!PAIR || (STAGED && BN == 192), "paired CTAs: the 128 x 192 staged tiles");
  constexpr int PEERS = PAIR ? 2 : 1;
  constexpr int CN = G::consumer_n;
  constexpr int PART_LD = G::part_ld;
  // TURNS: the two consumers of a persistent 128 x 128 tile issue each K step's MMAs in turn
  // (first 0, then 1; named barriers kTurnOf0 and kTurnOf1), so the tensor pipe runs them in that
  // order. At the end of a K chunk each consumer waits for its last MMAs and adds the chunk to its
  // total; with turns, the other consumer's MMAs queued behind its own keep the tensor pipe busy
  // meanwhile (without them both drained at once). The MMAs and their operands are unchanged: the
  // same bits. Measured (forced, same run): 128 x 128 tiles 6-18% faster at M = 8192 with N >= 6144
  // or K = 14336 and at N = 128256, within 2.5% either way elsewhere; the 192-column tiles within
  // noise, so they issue freely; the 256-column ones within noise too (H200: 0.4-1.5% either way in
  // geomean over the shapes they run), and they keep the turns.
  constexpr bool TURNS = CONSUMERS == 2 && !SPLIT && (BN == 128 || (BN == 256 && STAGED));
  constexpr int kTurnOf0 = 4, kTurnOf1 = 5;  // 1: this CTA's split barrier; 2, 3: the staged epilogue
  constexpr int TILE_M = G::tile_m, STAGES = G::stages, STAGE_BYTES = G::stage_bytes, A_BYTES = G::a_bytes;
  extern __shared__ uint8_t smem_raw[];
  const uint32_t raw = static_cast<uint32_t>(__cvta_generic_to_shared(smem_raw));
  const uint32_t stages = (raw + 1023) & ~1023u;           // 128-byte swizzle wants 1024-byte alignment
  const uint32_t staging = stages + STAGES * STAGE_BYTES;  // STAGED: 64 * BN * 2 bytes per consumer
  const uint32_t full_bar = staging + G::staging_bytes;
  const uint32_t empty_bar = full_bar + STAGES * 8;
  auto stage_a = [&](int s) { return stages + s * STAGE_BYTES; };
  auto stage_b = [&](int s) { return stages + s * STAGE_BYTES + A_BYTES; };

  const int tid = threadIdx.x;
  const int wg = __shfl_sync(0xffffffffu, tid / 128, 0);  // warp-uniform to the compiler
  if (tid == 0) {
    for (int s = 0; s < STAGES; ++s) {
      mbar_init(full_bar + 8 * s, 1);
      mbar_init(empty_bar + 8 * s, PEERS * CONSUMERS * 4);  // one arrival per consumer warp (of both CTAs)
    }
    fence_mbar_init();
    prefetch_tensor_map(&tmap_a);
    prefetch_tensor_map(&tmap_b);
  }
  // PAIR: the other CTA's barriers are initialised before this one's TMA or arrivals reach them.
  if constexpr (PAIR)
    cluster_sync();
  else
    __syncthreads();
  // A (and a bias) may come from the kernel before this one, and C may be memory it still reads.
  griddep::wait();
  griddep::launch_dependents();
  const uint32_t rank = PAIR ? cluster_ctarank() : 0;  // PAIR: this CTA's tile of the pair
  // The other CTA's empty barriers (PAIR), where this CTA's consumers also release a stage.
  const uint32_t peer_empty_bar = PAIR ? map_dsmem(empty_bar, rank ^ 1) : 0;

  // The work of this CTA: tiles [first, ...) stepping by `step`, and K blocks [kb_begin, kb_end).
  const int my_chunk = SPLIT ? static_cast<int>(blockIdx.x % p.chunks) : 0;
  const int64_t first = SPLIT ? blockIdx.x / p.chunks : blockIdx.x / PEERS;
  const int64_t step = SPLIT ? p.tiles : gridDim.x / PEERS;  // split: one tile per CTA; PAIR: pairs
  const int kb_begin = SPLIT ? my_chunk * p.chunk_kblocks : 0;
  const int kb_end = SPLIT ? min(p.kblocks, kb_begin + p.chunk_kblocks) : p.kblocks;

  if (wg == 0) {
    // Producer: one thread issues every TMA load.
    if constexpr (CONSUMERS == 2) release_registers<40>();
    if (tid == 0) {
      int it = 0;
      for (int64_t tile = first; tile < p.tiles; tile += step) {
        const TileCoord tc = pair_tile<PAIR>(tile, p, rank);
        const int m0 = static_cast<int>(tc.pid_m * TILE_M), n0 = static_cast<int>(tc.pid_n * BN);
        const int b = static_cast<int>(tc.batch);
        for (int kb = kb_begin; kb < kb_end; ++kb, ++it) {
          const int s = it % STAGES;
          mbar_wait(empty_bar + 8 * s, ((it / STAGES) & 1) ^ 1);
          const uint32_t fb = full_bar + 8 * s;
          mbar_expect_tx(fb, p.stage_tx_bytes);
          const int k0 = kb * BK;
          tma_load_matrix(stage_a(s), &tmap_a, p.a_rank3, fb, k0, m0, b);
          if constexpr (PAIR) {
            // This CTA's half of B, into both CTAs' stage s (swizzle phases agree: the halves
            // start at multiples of 1024 bytes).
            if (B_KN) {
              for (int box = 0; box < BN / 64; ++box)  // K rows [32 rank, +32) of each 64-column box
                tma_load_matrix_multicast(stage_b(s) + box * (64 * BK * 2) + rank * (64 * BK), &tmap_b, p.b_rank3, fb,
                                          n0 + 64 * box, k0 + static_cast<int>(rank) * (BK / 2), b, 0x3);
            } else {  // N rows [96 rank, +96)
              tma_load_matrix_multicast(stage_b(s) + rank * (BN / 2 * BK * 2), &tmap_b, p.b_rank3, fb, k0,
                                        n0 + static_cast<int>(rank) * (BN / 2), b, 0x3);
            }
          } else if (B_KN) {
            for (int half = 0; half < BN / 64; ++half)  // boxes of 64 N columns
              tma_load_matrix(stage_b(s) + half * (64 * BK * 2), &tmap_b, p.b_rank3, fb, n0 + 64 * half, k0, b);
          } else {
            tma_load_matrix(stage_b(s), &tmap_b, p.b_rank3, fb, k0, n0, b);
          }
        }
      }
    }
  } else {
    // Consumers.
    if constexpr (CONSUMERS == 2) claim_registers<232>();  // 128 x 40 + 256 x 232 <= 64K registers
    const int cw = wg - 1;  // rows [64 cw, 64 cw + 64) of the tile (64 x 256 tiles: columns [128 cw, +128))
    const int t = tid % 128, warp = t / 32, lane = t % 32;
    // The running total of the chunks (persistent: a CTA runs every chunk; a split CTA's one
    // partial stays in acc): G::reg_total values in registers, the rest in this thread's slots of
    // its warpgroup's staging area, value i at shared_total[(i - reg_total) * 128].
    constexpr int REG_TOTAL = G::reg_total;
    float acc[CN / 2];
    float total[SPLIT ? 1 : REG_TOTAL];
    const uint32_t my_staging = staging + cw * (64 * BN * 2);
    float *shared_total = reinterpret_cast<float *>(smem_raw + (my_staging - raw)) + t;
    const int my_turn = cw == 0 ? kTurnOf0 : kTurnOf1, next_turn = cw == 0 ? kTurnOf1 : kTurnOf0;
    if (TURNS && cw == 1) named_barrier_arrive(kTurnOf0, 256);  // consumer 0 goes first
    int it = 0;
    for (int64_t tile = first; tile < p.tiles; tile += step) {
      const TileCoord tc = pair_tile<PAIR>(tile, p, rank);
      const int64_t m0 = tc.pid_m * TILE_M, n0 = tc.pid_n * BN;
      // PAIR: the second tile of a pair may lie wholly past M (valid_m <= 0): its MMAs run on TMA's
      // zero rows and nothing is stored.
      const int valid_m = static_cast<int>(min(static_cast<int64_t>(TILE_M), p.g.M - m0));
      const bool active = G::n_split || cw * 64 < valid_m;  // whether any of this warpgroup's rows is stored

      for (int cb = kb_begin; cb < kb_end; cb += p.chunk_kblocks) {
        const int ce = min(kb_end, cb + p.chunk_kblocks);
        int prev = -1;
        for (int kb = cb; kb < ce; ++kb, ++it) {
          const int s = it % STAGES;
          mbar_wait(full_bar + 8 * s, (it / STAGES) & 1);
          if constexpr (TURNS) named_barrier_sync(my_turn, 256);
          // A warpgroup whose rows all lie past M still runs its MMAs (on TMA's zero rows, never
          // stored): a branch around wgmma would make ptxas serialize every wgmma of the kernel.
          wgmma_fence();
          // The stage's descriptors are built once and advanced by an add per MMA.
          // 128-row tiles: this warpgroup's 64 rows of A; 64 x 256 ones: its 128 columns of B (128
          // K-major rows, or two 64-column N-major boxes: 16 KiB either way).
          const uint64_t da0 = desc_k_major(stage_a(s) + (G::n_split ? 0 : cw * (64 * 128)));
          const uint32_t b_base = stage_b(s) + (G::n_split ? cw * 16384 : 0);
          const uint64_t db0 = B_KN ? desc_mn_major(b_base, 64 * BK * 2) : desc_k_major(b_base);
#pragma unroll
          for (int kk = 0; kk < BK / 16; ++kk) {
            const uint64_t da = desc_advance(da0, kk * 32);
            const uint64_t db = desc_advance(db0, B_KN ? kk * 2048 : kk * 32);
            const int accumulate = (kb > cb || kk > 0) ? 1 : 0;
            if constexpr (CN == 256)
              wgmma_m64n256k16<T, B_KN ? 1 : 0>(acc, da, db, accumulate);
            else if constexpr (CN == 192)
              wgmma_m64n192k16<T, B_KN ? 1 : 0>(acc, da, db, accumulate);
            else if constexpr (CN == 128)
              wgmma_m64n128k16<T, B_KN ? 1 : 0>(acc, da, db, accumulate);
            else
              wgmma_m64n64k16_ss<T, B_KN ? 1 : 0>(acc, da, db, accumulate);
          }
          wgmma_commit();
          if constexpr (TURNS) named_barrier_arrive(next_turn, 256);
          wgmma_wait<1>();  // the previous stage's MMAs are done: release it
          if (prev >= 0 && lane == 0) release_stage<PAIR>(empty_bar, peer_empty_bar, prev);
          prev = s;
        }
        wgmma_wait<0>();
        fence_registers(acc);
        if (prev >= 0 && lane == 0) release_stage<PAIR>(empty_bar, peer_empty_bar, prev);
        if constexpr (!SPLIT) {
          // acc = total + p_c (after the first chunk), kept as the total unless this was the last.
          const bool first_chunk = cb == kb_begin, last_chunk = ce == kb_end;
          if (REG_TOTAL < CN / 2 && first_chunk && !last_chunk) {
            // The previous tile's TMA store has read the staging area before the totals go there.
            if (t == 0) bulk_wait_read_all();
            named_barrier_sync(2 + cw, 128);
          }
#pragma unroll
          for (int i = 0; i < CN / 2; ++i) {
            if (i < REG_TOTAL) {
              if (!first_chunk) acc[i] = __fadd_rn(total[i], acc[i]);
              if (!last_chunk) total[i] = acc[i];
            } else {
              float &slot = shared_total[(i - REG_TOTAL) * 128];
              if (!first_chunk) acc[i] = __fadd_rn(slot, acc[i]);
              if (!last_chunk) slot = acc[i];
            }
          }
        }
      }

      // Cluster split: both consumer warpgroups are done reading the stages before either
      // overwrites them with its partial (the producer has nothing left to load).
      if (SPLIT) asm volatile("bar.sync 1, %0;" ::"n"(CONSUMERS * 128) : "memory");
      const int row_base = (G::n_split ? 0 : cw * 64) + warp * 16 + lane / 4;
      if (!active) continue;
      if constexpr (!SPLIT) {
        if constexpr (STAGED)
          store_staged<T, BN, !BIAS>(acc, p, &tmap_c, tc, m0, n0, cw, my_staging, t);
        else
          store_fragment<T, CN>(acc, p, tc, m0, n0 + (G::n_split ? cw * CN : 0), row_base, valid_m, lane);
      } else {
        // Leave the partial in this CTA's shared memory.
        float *part = reinterpret_cast<float *>(smem_raw + (stages - raw));
#pragma unroll
        for (int j = 0; j < BN / 8; ++j)
#pragma unroll
          for (int h = 0; h < 2; ++h) {
            const int r = row_base + 8 * h;
            if (r < valid_m) {
              const int c = 8 * j + 2 * (lane % 4);
              part[r * PART_LD + c] = acc[4 * j + 2 * h];
              part[r * PART_LD + c + 1] = acc[4 * j + 2 * h + 1];
            }
          }
      }
    }
    if (TURNS && cw == 0) named_barrier_sync(kTurnOf0, 256);  // consumer 1's pass after its last step
    if constexpr (STAGED)
      if (t == 0) bulk_wait_all();  // the last tile's stores are in global memory before the CTA ends
  }
  if constexpr (PAIR) {
    // Neither CTA leaves while the other may still arrive on its barriers.
    __syncwarp();
    cluster_sync();
  }

  if constexpr (SPLIT) {
    // Every partial of the tile is in its CTA's shared memory: CTA r sums rows r, r + chunks, ...
    // reading the partials in chunk order 0, 1, ..., chunks - 1.
    __syncwarp();
    cluster_sync();
    const int64_t tile = first;
    const TileCoord tc = persistent_tile<GROUP_M>(tile, p.tiles_m, p.tiles_n);
    const int64_t m0 = tc.pid_m * TILE_M, n0 = tc.pid_n * BN;
    const int valid_m = static_cast<int>(min(static_cast<int64_t>(TILE_M), p.g.M - m0));
    const int valid_n = static_cast<int>(min(static_cast<int64_t>(BN), p.g.N - n0));
    const int my_rows = valid_m > my_chunk ? (valid_m - my_chunk + p.chunks - 1) / p.chunks : 0;
    uint16_t *C = p.g.c + tc.batch * p.g.sc;
    const uint16_t *bias = p.g.bias ? p.g.bias + tc.batch * p.g.sbias : nullptr;
    // Four columns per thread: the remote loads of a row quad are independent 16-byte reads.
    for (int idx = tid; idx < my_rows * (BN / 4); idx += kThreads<CONSUMERS>) {
      const int r = my_chunk + (idx / (BN / 4)) * p.chunks, c = (idx % (BN / 4)) * 4;
      if (c >= valid_n) continue;
      const uint32_t at = stages + static_cast<uint32_t>(r * PART_LD + c) * 4;
      float4 sum = ld_dsmem4(map_dsmem(at, 0));
      for (int q = 1; q < p.chunks; ++q) {
        sum = add4(sum, ld_dsmem4(map_dsmem(at, q)));
      }
      const float sums[4] = {sum.x, sum.y, sum.z, sum.w};
      const int64_t gm = m0 + r;
      uint16_t out[4] = {0, 0, 0, 0};
      for (int e = 0; e < 4 && c + e < valid_n; ++e) out[e] = from_f<T>(finish<T>(sums[e], p, bias, gm, n0 + c + e));
      // One 8-byte store where it fits: a warp then writes whole sectors.
      uint16_t *dst = C + gm * p.g.ldc + n0 + c;
      if (c + 3 < valid_n && (reinterpret_cast<uintptr_t>(dst) & 7) == 0) {
        const uint32_t lo = out[0] | (static_cast<uint32_t>(out[1]) << 16),
                       hi = out[2] | (static_cast<uint32_t>(out[3]) << 16);
        asm volatile("st.global.v2.b32 [%0], {%1, %2};" ::"l"(dst), "r"(lo), "r"(hi) : "memory");
      } else {
        for (int e = 0; e < 4 && c + e < valid_n; ++e) dst[e] = out[e];
      }
    }
    cluster_sync();  // no CTA leaves while another still reads its shared memory
  }
#endif
}

// L2 fills of 128 bytes, a box row's own. With 256 (the row's next 128 bytes too, which a later
// box reads anyway) an H200 ran decode over N = 128256 at 0.94x cuBLAS, against 1.01-1.03x, and
// the 42 shapes at 1.034x against 1.058x in bf16 (docs/perf/matmul.md).
constexpr CUtensorMapL2promotion kL2Fill = CU_TENSOR_MAP_L2_PROMOTION_L2_128B;

// A 128-byte-swizzled map over a 16-bit operand (tensor_map.h keeps recent ones).
CUtensorMap make_map(const void *base, int64_t cols, int64_t rows, int64_t ld, int64_t batch, int64_t batch_stride,
                     int box_cols, int box_rows, int *rank3) {
  const MatrixMap m = matrix_map("gemm_sm90", CU_TENSOR_MAP_DATA_TYPE_UINT16, base, cols, rows, ld, batch, batch_stride,
                                 box_cols, box_rows, CU_TENSOR_MAP_SWIZZLE_128B, kL2Fill);
  *rank3 = m.rank3;
  return m.map;
}

// The kernel for a schedule, opted into its shared memory once per device.
template <typename T, bool B_KN, int SCHED, int CONSUMERS, int BN, bool STAGED = false, bool BIAS = true,
          bool PAIR = false>
auto prepared_kernel(int dev) {
  auto kernel = gemm_sm90_kernel<T, B_KN, SCHED, CONSUMERS, BN, STAGED, BIAS, PAIR>;
  static std::atomic<uint64_t> opted_in{0};
  configure_once_per_device(opted_in, dev, [&] {
    DETFUZZ_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                            Geometry<CONSUMERS, BN, STAGED>::smem_bytes));
  });
  return kernel;
}

// In a cluster of `cluster` CTAs where cluster > 1; a programmatic dependent of the kernel before
// it on the stream (griddep.cuh) where `programmatic` (gemm_policy::programmatic_launch_pays).
template <int CONSUMERS, int BN, bool STAGED>
cudaLaunchConfig_t launch_config(int grid, int cluster, bool programmatic, cudaStream_t stream,
                                 cudaLaunchAttribute (&attr)[2]) {
  cudaLaunchConfig_t cfg{};
  cfg.gridDim = dim3(grid);
  cfg.blockDim = dim3(kThreads<CONSUMERS>);
  cfg.dynamicSmemBytes = Geometry<CONSUMERS, BN, STAGED>::smem_bytes;
  cfg.stream = stream;
  cfg.attrs = attr;
  if (programmatic) attr[cfg.numAttrs++] = griddep::dependent_attribute();
  if (cluster > 1) {
    attr[cfg.numAttrs].id = cudaLaunchAttributeClusterDimension;
    attr[cfg.numAttrs].val.clusterDim.x = static_cast<unsigned>(cluster);
    attr[cfg.numAttrs].val.clusterDim.y = 1;
    attr[cfg.numAttrs].val.clusterDim.z = 1;
    ++cfg.numAttrs;
  }
  return cfg;
}

// How many clusters of `size` cluster-split CTAs the device runs at once (fewer than SMs / size:
// a cluster must fit in one GPC). Asked once per device, kernel and size.
template <typename T, bool B_KN, int CONSUMERS>
int max_active_clusters(int dev, int size) {
  static ClusterCapacity capacity;
  const int clusters = capacity.get(dev, size, prepared_kernel<T, B_KN, kCluster, CONSUMERS, 128>(dev),
                                    kThreads<CONSUMERS>, Geometry<CONSUMERS, 128, false>::smem_bytes);
  return std::max(clusters, 1);
}

// Whether TMA can store C (the staged epilogue): rows and matrices 16-byte aligned (the pointers
// are, by gemm_check).
bool c_storable_by_tma(const GemmParams &p) {
  return p.ldc % 8 == 0 && (p.batch <= 1 || p.batch_stride_c % 8 == 0) && p.ldc >= p.N;
}

// The kernel's arguments and TMA maps for tiles of tile_m x bn (C's only when staged). pair: tiles
// counted in pairs of tile rows, and B's boxes are the halves each CTA of a pair loads.
struct Launch {
  Sm90Args args{};
  CUtensorMap ma, mb, mc{};
};
Launch prepare(const GemmParams &p, int tile_m, int bn, bool staged, bool pair) {
  Launch l;
  Sm90Args &args = l.args;
  args.g = gemm_args<uint16_t>(p);
  args.tiles_m = (p.M + tile_m - 1) / tile_m;
  if (pair) args.tiles_m = (args.tiles_m + 1) / 2;
  args.tiles_n = (p.N + bn - 1) / bn;
  args.tiles = args.tiles_m * args.tiles_n * p.batch;
  const KChunks kc = k_chunks(p.K);
  args.kblocks = static_cast<int>((p.K + BK - 1) / BK);
  args.chunk_kblocks = static_cast<int>((kc.size + BK - 1) / BK);  // a single chunk (K <= kMinKChunk) may end mid-step
  args.chunks = kc.count;
  if (args.tiles * args.chunks > INT32_MAX)
    throw std::invalid_argument("launch_gemm_sm90: too many tiles (" + std::to_string(args.tiles) + ")");
  const int a_box_rows = p.M >= tile_m ? tile_m : static_cast<int>((p.M + 7) / 8 * 8);
  args.stage_tx_bytes = a_box_rows * BK * 2 + bn * BK * 2;
  l.ma = make_map(p.a, p.K, p.M, p.lda, p.batch, p.batch_stride_a, BK, a_box_rows, &args.a_rank3);
  const int halves = pair ? 2 : 1;
  l.mb = p.b_kn ? make_map(p.b, p.N, p.K, p.ldb, p.batch, p.batch_stride_b, 64, BK / halves, &args.b_rank3)
                : make_map(p.b, p.K, p.N, p.ldb, p.batch, p.batch_stride_b, BK, bn / halves, &args.b_rank3);
  if (staged) l.mc = make_map(p.c, p.N, p.M, p.ldc, p.batch, p.batch_stride_c, 64, 64, &args.c_rank3);
  return l;
}

// How many pairs of paired 128 x 192 CTAs the device runs at once (a cluster lies in one GPC).
template <typename T, bool B_KN>
int max_active_pairs(int dev) {
  static ClusterCapacity capacity;
  const int clusters = capacity.get(dev, 2, prepared_kernel<T, B_KN, kPersistent, 2, 192, true, true, true>(dev),
                                    kThreads<2>, Geometry<2, 192, true>::smem_bytes);
  return std::max(clusters, 1);
}

// A persistent grid takes at most p.num_ctas CTAs. PAIR: clusters of two CTAs on pairs of tiles, at
// most max_active_pairs of them and p.num_ctas / 2 (one pair at least).
template <typename T, bool B_KN, int SCHED, int CONSUMERS, int BN, bool STAGED = false, bool PAIR = false>
void launch_one(const GemmParams &p, int dev, cudaStream_t stream, bool programmatic) {
  const Launch l = prepare(p, Geometry<CONSUMERS, BN, STAGED>::tile_m, BN, STAGED, PAIR);
  const int64_t slots = p.num_ctas;
  int64_t grid = SCHED == kCluster ? l.args.tiles * l.args.chunks : std::min<int64_t>(l.args.tiles, slots);
  if constexpr (PAIR)
    grid = 2 * std::min<int64_t>({l.args.tiles, max_active_pairs<T, B_KN>(dev), std::max<int64_t>(slots / 2, 1)});
  // The staged epilogue has a kernel without the bias's checks (BIAS false).
  const auto kernel = [&] {
    if constexpr (STAGED)
      if (!p.bias) return prepared_kernel<T, B_KN, SCHED, CONSUMERS, BN, STAGED, false, PAIR>(dev);
    return prepared_kernel<T, B_KN, SCHED, CONSUMERS, BN, STAGED, true, PAIR>(dev);
  }();
  const int cluster_size = SCHED == kCluster ? l.args.chunks : PAIR ? 2 : 1;
  cudaLaunchAttribute attr[2];
  const cudaLaunchConfig_t cfg =
      launch_config<CONSUMERS, BN, STAGED>(static_cast<int>(grid), cluster_size, programmatic, stream, attr);
  DETFUZZ_CUDA_CHECK(cudaLaunchKernelEx(&cfg, kernel, l.ma, l.mb, l.mc, l.args));
  DETFUZZ_LAUNCH_CHECK();
}

// Launches the kernel gemm_policy::sm90_kernel picks for `path` (automatic or forced).
template <typename T, bool B_KN>
void dispatch(const GemmParams &p, GemmPath path, int dev, cudaStream_t stream) {
  using gemm_policy::Sm90Kernel;
  const Sm90Kernel kernel =
      gemm_policy::sm90_kernel(gemm_shape(p), path, c_storable_by_tma(p), [&](int consumers, int chunks) {
        return consumers == 1 ? max_active_clusters<T, B_KN, 1>(dev, chunks)
                              : max_active_clusters<T, B_KN, 2>(dev, chunks);
      });
  const bool pdl = gemm_policy::programmatic_launch_pays(kernel);
  switch (kernel) {
    case Sm90Kernel::split_64x128: return launch_one<T, B_KN, kCluster, 1, 128>(p, dev, stream, pdl);
    case Sm90Kernel::split_128x128: return launch_one<T, B_KN, kCluster, 2, 128>(p, dev, stream, pdl);
    case Sm90Kernel::persistent_64x64: return launch_one<T, B_KN, kPersistent, 1, 64>(p, dev, stream, pdl);
    case Sm90Kernel::persistent_64x128: return launch_one<T, B_KN, kPersistent, 1, 128>(p, dev, stream, pdl);
    case Sm90Kernel::persistent_64x256: return launch_one<T, B_KN, kPersistent, 2, 256>(p, dev, stream, pdl);
    case Sm90Kernel::persistent_128x128: return launch_one<T, B_KN, kPersistent, 2, 128>(p, dev, stream, pdl);
    case Sm90Kernel::persistent_128x128_staged:
      return launch_one<T, B_KN, kPersistent, 2, 128, true>(p, dev, stream, pdl);
    case Sm90Kernel::persistent_128x192_staged:
      return launch_one<T, B_KN, kPersistent, 2, 192, true>(p, dev, stream, pdl);
    case Sm90Kernel::paired_128x192_staged:
      return launch_one<T, B_KN, kPersistent, 2, 192, true, true>(p, dev, stream, pdl);
    case Sm90Kernel::persistent_128x256_staged:
      return launch_one<T, B_KN, kPersistent, 2, 256, true>(p, dev, stream, pdl);
  }
}

}  // namespace

void launch_gemm_sm90(const GemmParams &p, GemmPath path, cudaStream_t stream) {
  if (p.K <= 0) throw std::invalid_argument("launch_gemm_sm90: K must be >= 1");
  if (p.dtype != DType::bf16 && p.dtype != DType::f16)
    throw std::invalid_argument("launch_gemm_sm90: dtype must be f16 or bf16");
  int dev = 0;
  DETFUZZ_CUDA_CHECK(cudaGetDevice(&dev));
  const bool bf16 = p.dtype == DType::bf16;
  if (p.b_kn) {
    if (bf16)
      dispatch<__nv_bfloat16, true>(p, path, dev, stream);
    else
      dispatch<__half, true>(p, path, dev, stream);
  } else {
    if (bf16)
      dispatch<__nv_bfloat16, false>(p, path, dev, stream);
    else
      dispatch<__half, false>(p, path, dev, stream);
  }
}

}  // namespace detfuzz::cuda_kernels
