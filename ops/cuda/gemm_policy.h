// Launch policy of the batch-invariant matmul: which kernel path runs a problem, as pure host
// functions of its sizes, the SM count and a few facts asked of the device (as flash-attention's
// hopper/heuristics.h keeps its rules). No CUDA here, so tests/ops/policy checks every rule on
// the CPU.
//
// None of these choices reaches a result's bits: every path of a dtype runs the same arithmetic
// (the K chunks of k_chunks(K), added in chunk order), so a rule decides speed only. k_chunks is
// the exception: it fixes the arithmetic itself, and depends on K alone.
//
// Costs are counted in whole waves: `slots` CTAs run at once, so `tiles` tiles take
// waves(tiles, slots) rounds, and a persistent CTA's time is its share of the tiles. Device facts
// that cost a query (how many clusters fit at once, whether sm_90 code is there) come in as
// callables, asked only where a rule needs them, as the launchers asked them before.
// Measurements behind the constants: docs/perf/matmul.md.
#pragma once

#include <climits>
#include <cstdint>

#include "ops/host_device.h"

namespace detfuzz::cuda_kernels {

// Which kernel runs a 16-bit matmul. `automatic` takes the Hopper kernel (gemm_sm90.cu) on an
// sm_90 device and the mma.sync kernel (gemm_tc.cu) elsewhere, and on Hopper picks the persistent
// or the split path by the tile count: the two Hopper paths give the same bits (see
// gemm_sm90.cu), so the pick never changes a result. The mma.sync kernel has bits of its own
// (no K chunks), invariant on their own. Tests and variant_agree force a path.
// The sm90 paths with the _64 suffix use 64-row tiles (one consumer warpgroup), the automatic
// choice for M <= 64 and where 128-row tiles would leave half the SMs idle; the others 128-row
// tiles. sm90_split reduces a tile's K chunks in a cluster's shared memory. sm90_persistent_64x64
// runs 64 x 64 tiles (wgmma m64n64k16: the same per-element arithmetic as m64n128k16, over the
// same K order), the automatic choice where 64 x 128 tiles would leave half the SMs idle.
// sm90_persistent_128x192 runs tiles 192 columns wide (m64n192k16, the same arithmetic again): half
// as much MMA work again per byte loaded into shared memory, taken where it gives fewer waves.
// sm90_persistent_64x256 runs 64 x 256 tiles, two m64n128k16 warpgroups side by side on the same
// rows: decode over a very wide N (a vocabulary), A loaded once per 256 columns.
// sm90_paired_128x192 runs the 128 x 192 tiles in clusters of two CTAs on vertically adjacent
// tiles that share their B tile by TMA multicast: the same arithmetic, fewer bytes through L2.
// sm90_persistent_128x256 runs tiles 256 columns wide (m64n256k16, the same arithmetic again): a
// third less shared-memory reading per MMA than 128 x 128 tiles, a quarter of the chunk totals in
// registers.
enum class GemmPath {
  automatic,
  mma_sync,
  sm90_persistent,
  sm90_split,
  sm90_persistent_64,
  sm90_split_64,
  sm90_persistent_64x64,
  sm90_persistent_128x192,
  sm90_persistent_64x256,
  sm90_paired_128x192,
  sm90_persistent_128x256
};

// The float32 kernel's schedules and tile shapes (gemm_f32.cu). `automatic` picks one by shape;
// every one computes the same bits, so the pick never changes a result. Tests and variant_agree
// force each. column_stream (gemm_f32_stream.cu) is the TMA-fed streaming kernel for small M.
// split_* run a CTA per (tile, K chunk) like cluster_*, and column_stream_split the column stream,
// but leave each chunk's partials in the caller's workspace (GemmParams::workspace) for a second
// kernel to add in chunk order: no cluster, so no co-residency limit on how the CTAs spread over
// the SMs.
enum class F32Path {
  automatic,
  persistent_tall,
  persistent_large,
  persistent_small,
  cluster_large,
  cluster_small,
  column_stream,
  split_large,
  split_small,
  column_stream_split
};

// The fixed split of the K range into chunks, a function of K alone (never of M, N, the batch or
// the grid). Every kernel path computes one output element as
//   total = p_0;  total = total + p_1;  ...;  total = total + p_{count-1}
// where p_c is the dot product over chunk c's K range accumulated from zero in the kernel's K
// order, and the adds are plain float32 adds. A path may compute the p_c in one CTA (a running
// total in registers, for large M) or in `count` CTAs of one cluster (reduced through distributed
// shared memory in the order above, for small M): the bits are the same, so the path may change
// with M. Chunks are multiples of 64 so that every kernel's K step divides them.
struct KChunks {
  int64_t size;  // K elements per chunk (the last chunk may be shorter)
  int count;     // 1 .. kMaxKChunks
};
constexpr int kMaxKChunks = 8;        // a portable cluster size
constexpr int64_t kMinKChunk = 1024;  // below this a split costs more than it gains (a split CTA's
                                      // fixed costs are about two chunks of 512)
DETFUZZ_HOST_DEVICE inline KChunks k_chunks(int64_t K) {
  if (K <= kMinKChunk) return {K > 0 ? K : 1, 1};
  int64_t count = (K + kMinKChunk - 1) / kMinKChunk;
  if (count > kMaxKChunks) count = kMaxKChunks;
  const int64_t size = ((K + count - 1) / count + 63) / 64 * 64;
  return {size, static_cast<int>((K + size - 1) / size)};
}

// The float32 split schedules' workspace (gemm_f32.cu, gemm_f32_stream.cu): p_c of element
// (b, m, n) at workspace[((c * batch + b) * M + m) * f32_split_pitch(N) + n], rows 16-byte aligned.
DETFUZZ_HOST_DEVICE inline int64_t f32_split_pitch(int64_t N) { return (N + 3) / 4 * 4; }

namespace gemm_policy {

// What a rule reads of a problem: C is batch matrices of M x N, K the reduction length, and `sms`
// the persistent CTA slots (GemmParams::num_ctas: the device's SM count).
struct GemmShape {
  int64_t M = 0, N = 0, K = 0, batch = 1;
  int sms = 1;
};

// The tile_m x tile_n tiles of every C matrix of the batch, and the whole waves of them that
// `slots` CTAs at a time take.
inline int64_t tile_count(const GemmShape &s, int64_t tile_m, int64_t tile_n) {
  return (s.M + tile_m - 1) / tile_m * ((s.N + tile_n - 1) / tile_n) * s.batch;
}
inline int64_t waves(int64_t tiles, int64_t slots) { return (tiles + slots - 1) / slots; }

// ---- 16-bit: the Hopper kernel (gemm_sm90.cu) or the mma.sync one (gemm_tc.cu) ----

// Whether the Hopper kernel runs: not when mma.sync is forced or K = 0 (no chunk to run: every path
// writes alpha * 0 (+ beta * bias) the mma.sync way); when `automatic`, where the device runs sm_90
// code (sm90_device(), asked only then). A forced sm90 path is checked against the device before.
template <class Sm90Device>
bool sm90_runs(GemmPath path, int64_t K, Sm90Device &&sm90_device) {
  const bool hopper = path != GemmPath::mma_sync && (path != GemmPath::automatic || sm90_device());
  return hopper && K > 0;
}

// The Hopper kernel's launches: tile height (64 rows: one consumer warpgroup; 128: two), width,
// and whether a tile's chunks run in one persistent CTA or in a cluster of one CTA per chunk.
enum class Sm90Kernel {
  persistent_128x128,         // C not storable by TMA: the register-store epilogue
  persistent_128x128_staged,  // the staged (TMA-stored) epilogue
  persistent_128x192_staged,
  paired_128x192_staged,  // clusters of two on adjacent tiles, B multicast
  persistent_128x256_staged,
  persistent_64x128,
  persistent_64x64,
  persistent_64x256,  // the two consumer warpgroups side by side, 128 columns each
  split_128x128,      // cluster split, 128-row tiles
  split_64x128,       // cluster split, 64-row tiles
};

// Tile height: 64 rows for M <= 64 (no warpgroup multiplies only rows past M) and where 128-row
// tiles would leave half the SMs idle (twice the CTAs then stream B).
inline bool sm90_narrow_pays(const GemmShape &s) { return s.M <= 64 || 2 * tile_count(s, 128, 128) <= s.sms; }

// 64 x 64 tiles where 64 x 128 ones would leave half the SMs idle (decode with N up to about
// 8k: twice the CTAs stream B, and each SM's stream, not the HBM, bounds decode there).
inline bool sm90_half_width_pays(const GemmShape &s) { return 2 * tile_count(s, 64, 128) <= s.sms; }

// The width of the 128-row persistent tiles (128, 192 or 256 columns): the one whose waves cost
// least, a tile's cost being its work in 128 x 128 tiles over how much faster its kernel does that
// work. A 192-wide tile costs 1.5, or 1.44 where B is far wider than L2 (N >= 32768: the wide tiles
// load each B tile fewer times); a 256-wide one 1.88 (m64n256k16 reads a third less shared memory
// per MMA than m64n128k16). Ties go to the narrower tiles. Measured on an H200 (docs/perf/matmul.md):
// the 256-wide tiles 2-4% faster than the others wherever they fill the SMs in whole waves (M >=
// 2048 with N >= 4096; M = 512 and 128 with N >= 14336 and 128256), and up to 3x slower where they
// leave SMs idle (M = 512, N = 4096: 64 tiles).
inline int wide_tile_n(const GemmShape &s) {
  const double c128 = static_cast<double>(waves(tile_count(s, 128, 128), s.sms));
  const double c192 = (s.N >= 32768 ? 1.44 : 1.5) * static_cast<double>(waves(tile_count(s, 128, 192), s.sms));
  const double c256 = 1.88 * static_cast<double>(waves(tile_count(s, 128, 256), s.sms));
  if (c256 < c128 && c256 < c192) return 256;
  return c192 < c128 ? 192 : 128;
}

// Whether the 128 x 192 tiles, where they are taken, run in clusters of two sharing B: where a
// tile has many K steps per tile switch (K >= 8192) or B is far wider than L2 holds (N >= 32768),
// at M >= 2048. Measured (four interleaved rounds, bf16, H100): 2-4% faster there (M = 8192:
// N = 4096, K = 14336 and N = 128256, K = 4096; M = 2048, N = 128256), within 2% either way at
// K = 4096 and N <= 14336, and up to 5% slower at M = 512. Clusters of 2 x 2, sharing A too, were
// 5-15% slower on every shape measured (docs/perf/matmul.md).
inline bool paired_tiles_pay(const GemmShape &s) { return s.M >= 2048 && (s.K >= 8192 || s.N >= 32768); }

// Whether 64 x 256 tiles (two consumers side by side) beat 64 x 128 ones: only where they alone
// fill every SM and take no longer in whole waves (decode over a vocabulary-wide N).
inline bool side_by_side_pays(const GemmShape &s) {
  const int64_t tiles_256 = tile_count(s, 64, 256);
  return tiles_256 >= s.sms && 2 * waves(tiles_256, s.sms) <= waves(tile_count(s, 64, 128), s.sms);
}

// Whether the cluster split beats the persistent path that would run instead, in half-chunk
// times. A split CTA costs about three chunks' time for its one chunk of work (its pipeline fills
// and drains once, and the partials cross shared memory), and `clusters` clusters of chunks CTAs
// run at once (fewer than SMs / chunks: a cluster must fit in one GPC; at least 1). The persistent
// side runs `chunks` chunks per wave of tiles; a chunk of a 64 x 64 tile (half_width) costs about
// half a 64 x 128 one.
inline bool split_pays(const GemmShape &s, int consumers, bool half_width, int64_t clusters) {
  const int64_t tiles = tile_count(s, 64 * consumers, 128);
  const int chunks = k_chunks(s.K).count;
  const int64_t persistent_cost =
      half_width ? waves(tile_count(s, 64, 64), s.sms) * chunks : 2 * waves(tiles, s.sms) * chunks;
  return 2 * waves(tiles, clusters) * 3 < persistent_cost;
}

// Whether a Hopper kernel is launched as a programmatic dependent of the kernel before it
// (gemm_sm90.cu: its CTAs start while that kernel ends and wait for it before they read A): the
// 64-row ones (one consumer warpgroup: M <= 64, or few tiles), short products whose launch weighs on
// them. Measured in the prefill_graph forward on an H200 (docs/perf/graph.md): replays of 16-64 tokens
// 2-4% faster; with the 128-row kernels dependents too, the 128- and 512-token ones ran 2-4% slower.
inline bool programmatic_launch_pays(Sm90Kernel k) {
  return k == Sm90Kernel::persistent_64x64 || k == Sm90Kernel::persistent_64x128 || k == Sm90Kernel::split_64x128;
}

// The launch for `path` (automatic, or a forced sm90 path). c_storable_by_tma: C's rows and
// matrices are 16-byte aligned, so TMA can store it (the staged epilogue; else 128-row tiles store
// from registers, and a forced 128 x 192 path runs 128 x 128 tiles). clusters(consumers, chunks):
// how many clusters of `chunks` split CTAs of that tile height the device holds at once (>= 1),
// asked only where the automatic choice weighs a split.
template <class Clusters>
Sm90Kernel sm90_kernel(const GemmShape &s, GemmPath path, bool c_storable_by_tma, Clusters &&clusters) {
  const bool automatic = path == GemmPath::automatic;
  const bool narrow = path == GemmPath::sm90_persistent_64 || path == GemmPath::sm90_split_64 ||
                      path == GemmPath::sm90_persistent_64x64 || path == GemmPath::sm90_persistent_64x256 ||
                      (automatic && sm90_narrow_pays(s));
  const int consumers = narrow ? 1 : 2;
  const int chunks = k_chunks(s.K).count;
  // Where the automatic choice takes 64 x 64 tiles (unless a split is cheaper).
  const bool half_width = consumers == 1 && automatic && sm90_half_width_pays(s);
  if (path == GemmPath::sm90_persistent_64x64) return Sm90Kernel::persistent_64x64;
  const bool forced_cluster = path == GemmPath::sm90_split || path == GemmPath::sm90_split_64;
  const bool forced_persistent = path == GemmPath::sm90_persistent || path == GemmPath::sm90_persistent_64 ||
                                 path == GemmPath::sm90_persistent_128x192 ||
                                 path == GemmPath::sm90_persistent_64x256 || path == GemmPath::sm90_paired_128x192 ||
                                 path == GemmPath::sm90_persistent_128x256;
  bool cluster = forced_cluster;
  if (!forced_cluster && !forced_persistent && chunks > 1)
    cluster = split_pays(s, consumers, half_width, clusters(consumers, chunks));
  if (cluster) return consumers == 1 ? Sm90Kernel::split_64x128 : Sm90Kernel::split_128x128;
  // Where 64 x 64 tiles would run above M = 64 (so no warpgroup multiplies only rows past M), the
  // 128-row split is weighed too: half the clusters of the 64-row one, often one wave where that
  // takes two (M = 128, N = 1024, K = 8192 and 14336: 10% and 24% faster than the 64 x 64 tiles).
  if (half_width && s.M > 64 && chunks > 1 && split_pays(s, 2, true, clusters(2, chunks)))
    return Sm90Kernel::split_128x128;
  if (consumers == 1) {
    if (half_width) return Sm90Kernel::persistent_64x64;
    if (path == GemmPath::sm90_persistent_64x256 || (automatic && side_by_side_pays(s)))
      return Sm90Kernel::persistent_64x256;
    return Sm90Kernel::persistent_64x128;
  }
  if (!c_storable_by_tma) return Sm90Kernel::persistent_128x128;
  if (path == GemmPath::sm90_paired_128x192) return Sm90Kernel::paired_128x192_staged;
  if (path == GemmPath::sm90_persistent_128x192) return Sm90Kernel::persistent_128x192_staged;
  if (path == GemmPath::sm90_persistent_128x256) return Sm90Kernel::persistent_128x256_staged;
  const int wide = automatic ? wide_tile_n(s) : 128;
  if (wide == 256) return Sm90Kernel::persistent_128x256_staged;
  if (wide == 192)
    return paired_tiles_pay(s) ? Sm90Kernel::paired_128x192_staged : Sm90Kernel::persistent_128x192_staged;
  return Sm90Kernel::persistent_128x128_staged;
}

// ---- float32 (gemm_f32.cu, gemm_f32_stream.cu) ----

// The float32 kernel's CTA tiles (gemm_f32.cu checks its tile structs against these).
struct Tile {
  int m, n;
};
constexpr Tile kF32Tall{256, 128}, kF32Large{128, 128}, kF32Small{32, 128};
inline int64_t tile_count(const GemmShape &s, Tile t) { return tile_count(s, t.m, t.n); }

// The most workspace the automatic choice asks for (chunks x M x N floats, from the caller's
// allocator for the call's duration): beyond it, a path without one (M = 512, N = 128256 would
// take 1 GiB).
constexpr int64_t kSplitWorkspaceCap = int64_t{256} << 20;

// Bytes of the split schedules' workspace: every chunk's partials, rows padded to 4 floats.
inline int64_t f32_split_workspace_bytes(const GemmShape &s) {
  return static_cast<int64_t>(k_chunks(s.K).count) * s.batch * s.M * f32_split_pitch(s.N) * 4;
}

// The cluster and split schedules' grids: a CTA per (tile, chunk), at most INT_MAX.
inline bool f32_per_chunk_fits(const GemmShape &s, Tile t) { return tile_count(s, t) * k_chunks(s.K).count <= INT_MAX; }

// The column stream (gemm_f32_stream.cu): a CTA is kStreamCols columns x rows x groups rows of one
// chunk, kStreamBK k per stage. Rows per thread: up to 8 rows one column per thread (B's bytes, not
// the FMAs, set the time), beyond that 8 rows x 4 columns per thread in 2 or 4 row groups, so that
// each A value loaded serves 4 FMAs. Larger M takes several row tiles.
constexpr int kStreamCols = 128, kStreamBK = 32;
inline int f32_stream_rows(int64_t M) { return M <= 1 ? 1 : M <= 2 ? 2 : M <= 4 ? 4 : 8; }
inline int f32_stream_groups(int64_t M) { return M <= 8 ? 1 : M <= 16 ? 2 : 4; }
inline int64_t f32_stream_ctas(const GemmShape &s) {
  const int64_t rows = f32_stream_rows(s.M) * f32_stream_groups(s.M);
  return (s.M + rows - 1) / rows * ((s.N + kStreamCols - 1) / kStreamCols) * s.batch * k_chunks(s.K).count;
}
// Whether its grid and TMA coordinates (32-bit) can hold the problem.
inline bool f32_stream_fits(const GemmShape &s) {
  return f32_stream_ctas(s) <= INT_MAX && s.K < INT_MAX - kStreamBK && s.N < INT_MAX && s.M < INT_MAX &&
         s.batch < INT_MAX;
}

// Whether the column stream's split form (partials through the workspace, a second launch) beats
// its clusters. clusters(size): how many clusters of `size` CTAs of the stream kernel for this M
// fit at once, asked only where it matters.
template <class Clusters>
bool f32_stream_split_pays(const GemmShape &s, Clusters &&clusters) {
  const int size = k_chunks(s.K).count;
  if (size == 1) return false;
  const int64_t ctas = f32_stream_ctas(s), cluster_count = ctas / size, sms = s.sms;
  if (ctas > 2 * sms) return false;  // waves enough that the clusters' tail and packing matter little
  const int active = clusters(size);
  // More clusters than fit at once: a second wave for the last few.
  if (cluster_count > active) return true;
  // One wave, but with two CTAs per SM allowed the hardware packs clusters two CTAs deep on some
  // SMs while others idle; one CTA per SM holds about half as many clusters. That costs the
  // FMA-bound shapes (8 rows per thread) more than the reduction's second launch.
  return f32_stream_rows(s.M) == 8 && ctas <= sms && cluster_count > active / 2;
}

// The automatic float32 path. with_workspace: the caller gives a workspace large enough for the
// split paths. `device` answers, each asked only where the choice needs it:
//   cluster_capable()      an sm_90 device with sm_90 cluster code in this binary;
//   tall_fits()            the 256 x 128 tile's shared memory fits an SM;
//   stream_clusters(size)  clusters of `size` CTAs of the column-stream kernel for this M at once.
template <class Device>
F32Path f32_auto_path(const GemmShape &s, bool with_workspace, Device &&device) {
  const bool small_m = s.M <= kF32Small.m;
  const int64_t slots = s.sms, chunks = k_chunks(s.K).count;
  const bool split = with_workspace && f32_split_workspace_bytes(s) <= kSplitWorkspaceCap;
  // The column stream for decode (M <= 8: B read once at nearly a device copy's speed) and for
  // 17-32 rows (4 columns x 8 rows per thread); its split form where the clusters would not fit
  // one wave or would be packed two CTAs deep. At 9-16 rows the 32 x 128 tiles win.
  if ((s.M <= 8 || (s.M > 16 && s.M <= 32)) && device.cluster_capable() && f32_stream_fits(s))
    return split && f32_stream_split_pays(s, [&](int size) { return device.stream_clusters(size); })
               ? F32Path::column_stream_split
               : F32Path::column_stream;
  // 256 x 128 tiles (the shape cuBLAS picks for float32 on Hopper: more FMAs per shared-memory
  // read) where they are full and give every SM at least one; below 1024 rows they leave waves
  // half empty or compute padding.
  if (s.M >= 1024 && tile_count(s, kF32Tall) >= slots && device.tall_fits()) return F32Path::persistent_tall;
  // A CTA per (tile, chunk), the partials through the workspace: the CTAs spread over every SM
  // and a late one starts wherever an SM frees up, where clusters must wait for room for a whole
  // cluster (a second wave for the last few) and persistent CTAs split the tiles in fixed shares.
  // The 32 x 128 tiles where the large ones come to under half a CTA per SM, and for M <= 32.
  if (split) {
    const int64_t large_units = tile_count(s, kF32Large) * chunks;
    // 33-128 rows: the column stream's split form (row tiles of 32, 4 columns x 8 rows a thread)
    // where the large tiles' (tile, chunk) CTAs would keep under 9/10 of the SMs' time busy (the
    // busiest SM takes ceil(CTAs / SMs) of them). On an H200 at M = 128 it ran at 0.97 / 0.92 /
    // 0.94x cuBLAS where the rule took 0.75 / 0.77 / 0.91x (N = 1024, K = 8192; N = 6144 and
    // 14336, K = 4096: 48% / 73% / 85% busy), and lost where the large split fills its waves (N =
    // 4096: 0.86-0.87 against 0.89-0.92x; N = 128256: 0.85 against 0.91x).
    const int64_t busiest = waves(large_units, slots);
    if (s.M > 32 && s.M <= 128 && 10 * large_units < 9 * busiest * slots && device.cluster_capable() &&
        f32_stream_fits(s))
      return F32Path::column_stream_split;
    if ((small_m || 2 * large_units < slots) && f32_per_chunk_fits(s, kF32Small)) return F32Path::split_small;
    if (f32_per_chunk_fits(s, kF32Large)) return F32Path::split_large;
  }
  // Without a workspace (or where it would pass kSplitWorkspaceCap):
  // 32 x 128 tiles, persistent, where they come to between 3/4 of a wave and a wave (M > 32), or
  // to 3/4 of a wave or more (M <= 32): every SM then streams B for whole tiles, with no cluster
  // exchange.
  const int64_t small_tiles = tile_count(s, kF32Small);
  if (4 * small_tiles >= 3 * slots && (small_m || small_tiles <= slots)) return F32Path::persistent_small;
  if (device.cluster_capable()) {
    if (small_m && f32_per_chunk_fits(s, kF32Small)) return F32Path::cluster_small;
    // Persistent unless spreading each tile's chunks over a cluster (a CTA per chunk: finer waves)
    // is cheaper. In chunk times per SM: persistent runs ceil(tiles / SMs) waves of `chunks`
    // chunks, the cluster ceil(tiles * chunks / SMs) waves of one chunk; a tie goes to
    // persistent (no partials' exchange), unless the persistent tiles leave more than 1/8 of the
    // SMs idle.
    const int64_t tiles = tile_count(s, kF32Large);
    const int64_t persistent_cost = (tiles + slots - 1) / slots * chunks;
    const int64_t cluster_cost = (tiles * chunks + slots - 1) / slots;
    const bool tie_to_cluster = persistent_cost == cluster_cost && 8 * tiles < 7 * slots;
    if ((persistent_cost <= cluster_cost && !tie_to_cluster) || !f32_per_chunk_fits(s, kF32Large))
      return F32Path::persistent_large;
    // Fewer (tile, chunk) CTAs than SMs even so: the small tiles give 4 times as many.
    if (tiles * chunks < slots && f32_per_chunk_fits(s, kF32Small)) return F32Path::cluster_small;
    return F32Path::cluster_large;
  }
  return small_m ? F32Path::persistent_small : F32Path::persistent_large;
}

}  // namespace gemm_policy
}  // namespace detfuzz::cuda_kernels
