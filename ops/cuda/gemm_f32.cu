// Batch-invariant matmul for float32: IEEE fused multiply-add on the CUDA cores, never TF32.
//
// Arithmetic (the same on every path, so the path may change with M, N or the batch):
//   for each chunk c of k_chunks(K) (gemm_common.cuh):  p_c = 0; for k in chunk c, increasing:
//                                                        p_c = fmaf(a[m,k], b[k,n], p_c)
//   total = p_0; total = total + p_1; ...; total = total + p_{count-1}   (float adds, in order)
//   v = alpha * total; with a bias: v = v + beta * bias[m,n]            (__fmul_rn / __fadd_rn)
// Only the k < K of a chunk enter its chain: the k past K of a tile's last K step are not copied
// (their shared floats hold whatever an earlier step left) and never multiplied in (not even a
// zero: a zero FMA would turn a -0 partial into +0), so the chain does not depend on the K step
// either. Rows past M and columns past N are not copied either: they are computed on stale shared
// floats, and only ever reach outputs past M or N, which are never stored.
//
// Three tile shapes, all 256 threads of SIMT register tiles fed from shared memory by a cp.async
// pipeline of STAGES K steps, two CTAs per SM (__launch_bounds__(256, 2): at most 128 registers)
// but for the tall tile's one.
// A stage holds, for each of its BK k, one shared row: A^T's BM floats (4-byte copies of A, the
// transposition done by the copy), then B's BN (16-byte copies of a [K,N] B, 4-byte transposing
// copies of an [N,K] B); the row pitch is 4 (mod 32) floats, so the transposing stores (a warp
// covers 8 k x 4 rows) and the fragment reads (LDS.128 of 2-4 distinct float4 of A and 8-16
// contiguous float4 of B per warp and k) are free of bank conflicts. Within a step each k's
// fragments are loaded while the previous k's FMAs run (two register buffers). STAGES - 1 steps
// are in flight: while step s is computed, the copies of step s + STAGES - 1 go into the stage
// step s - 1 read, in 4 bunches spread over the step's k (k = 0, (BK - 1) / 4, ...; the whole
// step's copies at once, right after the barrier, had every warp of the SM queue on the load/store
// unit together), each copy predicated off, not zero-filled, where its row, column or k is out of
// range. A step's one barrier comes before its last k's FMAs: the next stage is then complete and
// this one free, and the next step's first fragments are loaded at once, their latency hidden by
// those FMAs (at a chunk's start they are loaded there instead: held through the running totals and
// the epilogue they would cost registers). The last step of K, when shorter than BK, runs apart
// (4 k at a time) so the full steps carry no K test.
//   tall:  256 x 128, warp tile 64 x 64, 16 x 8 per thread, BK 16, 3 stages, one CTA per SM (up to
//          255 registers; the running totals take 128 KB of shared memory, so sm_90 only).
//   large: 128 x 128, warp tile 32 x 64, 8 x 8 per thread (two 4-wide groups each way), BK 16,
//          3 stages.
//   small: 32 x 128, warp tile 8 x 64, 4 x 4 per thread, BK 32, 4 stages (for M <= 32: deep B
//          streaming; warps whose rows are all past M skip their FMAs, so M <= 8 runs 2 warps of
//          FMAs).
// Three schedules:
//   persistent (any GPU): a grid of CTAs walks the tiles (persistent_tile order); a CTA computes
//     every chunk of its tile in turn, a fresh accumulator per chunk, the running total kept in
//     shared memory between chunks (each thread its own float4 slots, conflict-free; read and
//     written once per chunk, the last chunk's sum formed in the accumulator for the epilogue);
//     the cp.async pipeline runs on across chunk and tile boundaries.
//   cluster (sm_90): one CTA per (tile, chunk), the k_chunks(K).count CTAs of a tile forming one
//     thread-block cluster; each stores its p_c in its shared memory, then after cluster.sync()
//     CTA r reduces the r-th slice of the tile over ranks 0..count-1 in order through distributed
//     shared memory, applies the epilogue and stores. Used when the tiles alone cannot fill the GPU
//     and the caller gives no workspace. A cluster must be resident whole: an H100 holds 62
//     clusters of 4 of these CTAs at once (30 of 8), so one more cluster waits for a second wave,
//     and it packs clusters two CTAs deep on some SMs while others idle.
//   split (any GPU): one CTA per (tile, chunk) as in the cluster schedule, but no cluster: each
//     stores its p_c to the caller's workspace ([chunk][batch][M][N rounded up to 4] floats), and
//     split_reduce_kernel adds them in chunk order and applies the epilogue. The CTAs spread over
//     every SM, at the price of the partials' round trip through L2 and a second launch.
// The column stream for small M (TMA-fed, no register tiles of A; with clusters or split the same
// way) lives in gemm_f32_stream.cu; gemm_policy::f32_auto_path (gemm_policy.h) picks among all
// nine paths.
#include "ops/cuda/cuda_check.h"
#include "ops/cuda/gemm.cuh"
#include "ops/cuda/gemm_common.cuh"

#include <cooperative_groups.h>

#include <atomic>
#include <climits>
#include <cstdint>
#include <stdexcept>
#include <string>
#include <type_traits>

namespace detfuzz::cuda_kernels {
namespace {

namespace cg = cooperative_groups;
using F32Args = GemmArgs<float>;
constexpr int GROUP_M = 8;

enum class Schedule { persistent, cluster, split };

// Pitch (floats) of a shared-memory row of R floats: >= R and 4 (mod 32).
constexpr int pitch_of(int rows) { return (rows + 27) / 32 * 32 + 4; }

template <int BM_, int BN_, int TM_, int TN_, int LM_, int BK_, int STAGES_, int CTAS_PER_SM_>
struct TileShape {
  static constexpr int BM = BM_, BN = BN_;          // CTA tile
  static constexpr int TM = TM_, TN = TN_;          // per thread: TM / 4 groups of 4 rows, TN / 4 of 4 columns
  static constexpr int LM = LM_, LN = 32 / LM_;     // lanes of a warp along M and N
  static constexpr int WM = LM * TM, WN = LN * TN;  // warp tile
  static constexpr int WARPS_M = BM / WM, WARPS_N = BN / WN;
  static constexpr int THREADS = 32 * WARPS_M * WARPS_N;
  static constexpr int CTAS_PER_SM = CTAS_PER_SM_;  // __launch_bounds__: 2 CTAs, at most 128 registers
  static constexpr int BK = BK_, STAGES = STAGES_;
  static constexpr int ROW = pitch_of(BM + BN);  // floats of one k of a stage: A^T's BM, then B's BN
  static constexpr int STAGE = BK * ROW;         // floats
  static constexpr int PIPE_BYTES = STAGES * STAGE * 4;
  static constexpr int TOTAL_BYTES = TM * TN * THREADS * 4;  // the persistent schedule's running totals
  static constexpr int PARTIAL_BYTES = BM * BN * 4;          // the cluster schedule's p_c tile
  static_assert(TM % 4 == 0 && TN % 4 == 0 && BM % WM == 0 && BN % WN == 0, "tile shape");
  static_assert(BK % 8 == 0 && (BM * BK) % THREADS == 0 && (BN * BK) % THREADS == 0, "copy split");
  static_assert((BN / 4 * BK) % THREADS == 0 && 64 % BK == 0, "K step must divide the 64-multiple chunks");
  // CTAS_PER_SM CTAs must fit an sm_90 SM's 228 KB of shared memory (1 KB of it reserved per CTA).
  static_assert(CTAS_PER_SM * (PIPE_BYTES + TOTAL_BYTES + 1024) <= 228 * 1024, "persistent: shared memory");
  static_assert(CTAS_PER_SM * ((PIPE_BYTES > PARTIAL_BYTES ? PIPE_BYTES : PARTIAL_BYTES) + 1024) <= 228 * 1024,
                "cluster: shared memory");
};
using TallTile = TileShape<256, 128, 16, 8, 4, 16, 3, 1>;
using LargeTile = TileShape<128, 128, 8, 8, 4, 16, 3, 2>;
using SmallTile = TileShape<32, 128, 4, 4, 2, 32, 4, 2>;
// The tiles the launch rules (gemm_policy.h) count.
static_assert(TallTile::BM == gemm_policy::kF32Tall.m && TallTile::BN == gemm_policy::kF32Tall.n, "policy's tall tile");
static_assert(LargeTile::BM == gemm_policy::kF32Large.m && LargeTile::BN == gemm_policy::kF32Large.n,
              "policy's large tile");
static_assert(SmallTile::BM == gemm_policy::kF32Small.m && SmallTile::BN == gemm_policy::kF32Small.n,
              "policy's small tile");

// persistent_tile (gemm_common.cuh) in 32-bit arithmetic, which spares the kernel the register
// cost of 64-bit divisions: the same tile order while tile counts * GROUP_M stay below 2^31 (the
// launcher checks).
__device__ __forceinline__ TileCoord tile_coord(int64_t tile64, int64_t tiles_m64, int64_t tiles_n64) {
  const uint32_t tile = static_cast<uint32_t>(tile64), tiles_m = static_cast<uint32_t>(tiles_m64),
                 tiles_n = static_cast<uint32_t>(tiles_n64);
  const uint32_t tiles_per_batch = tiles_m * tiles_n;
  const uint32_t batch = tile / tiles_per_batch;
  const uint32_t t = tile - batch * tiles_per_batch;
  const uint32_t in_group = GROUP_M * tiles_n;
  const uint32_t g = t / in_group, in = t - g * in_group;
  const uint32_t first_m = g * GROUP_M;
  const uint32_t gsize = min(tiles_m - first_m, static_cast<uint32_t>(GROUP_M));
  return {batch, first_m + in % gsize, in / gsize};
}

// What a CTA computes: tiles first, first + stride, ... < end; of each, chunks [c_begin, c_end),
// which cover K range [kbeg, kend).
struct Walk {
  int tile_first, tile_stride, tile_end;  // tile counts stay below 2^31 / GROUP_M (the launcher checks)
  int64_t kbeg, kend;
  int c_begin, c_end;
};

// Predicated async copies: a copy whose predicate is false is skipped, and the shared bytes it
// would have written keep what they held. Those bytes only ever feed rows past M, columns past N
// (never stored) or k past the chunk (never multiplied in), so no zero fill is needed. ok:
// nonzero to copy.
__device__ __forceinline__ void cp_async4_if(uint32_t dst, const float *src, uint32_t ok) {
  asm volatile(
      "{\n .reg .pred p;\n setp.ne.b32 p, %2, 0;\n @p cp.async.ca.shared.global [%0], [%1], 4;\n}\n" ::"r"(dst),
      "l"(src), "r"(ok));
}
__device__ __forceinline__ void cp_async16_if(uint32_t dst, const float *src, uint32_t ok) {
  asm volatile(
      "{\n .reg .pred p;\n setp.ne.b32 p, %2, 0;\n @p cp.async.cg.shared.global.L2::256B [%0], [%1], 16;\n}\n" ::"r"(
          dst),
      "l"(src), "r"(ok));
}

// A transposing copy of R rows x BK k of a K-contiguous operand (A, or an [N,K] B) into floats
// COL .. COL + R - 1 of each k's row of a stage: copy i of a thread moves element (row r + i * RSTEP,
// k kk) of the step, a warp covering 8 consecutive k of 4 rows (32-byte global segments,
// conflict-free 4-byte shared stores at a pitch of 4 mod 32). Set once per tile, then advanced.
template <class T, int R, int COL>
struct TransposeCopy {
  static constexpr int KB8 = T::BK / 8, RSTEP = 256 / T::BK, PER = R * T::BK / 256;
  const float *src;  // (row r0 + r, k kk) of the next step
  uint32_t rows_ok;  // bit i: row r0 + r + i * RSTEP exists

  __device__ static int kk(int tid) { return (tid & 7) | (((tid >> 5) % KB8) << 3); }
  __device__ static int r(int tid) { return ((tid >> 3) & 3) | (((tid >> 5) / KB8) << 2); }
  __device__ __forceinline__ void set(const float *base, int64_t ld, int64_t r0, int64_t rows, int64_t k0, int tid) {
    // Row r0 + r + i * RSTEP exists for i < ceil(left / RSTEP).
    const int left = static_cast<int>(max(min(rows - r0 - r(tid), static_cast<int64_t>(PER * RSTEP)), int64_t{0}));
    rows_ok = (1u << ((left + RSTEP - 1) / RSTEP)) - 1u;
    src = base + (r0 + r(tid)) * ld + k0 + kk(tid);
  }
  // The step's copy predicates (bit i: copy i). kleft: the k of the step within its chunk (0: no step).
  __device__ __forceinline__ uint32_t mask(int kleft, int tid) const {
    return kleft == T::BK || kk(tid) < kleft ? rows_ok : 0u;
  }
  __device__ __forceinline__ void copy(int i, uint32_t stage, uint32_t mask, int64_t ld, int tid) const {
    cp_async4_if(stage + (kk(tid) * T::ROW + COL + r(tid) + i * RSTEP) * 4, src + i * RSTEP * ld, mask & (1u << i));
  }
  __device__ __forceinline__ void advance(int64_t) { src += T::BK; }
};

// 16-byte copies of BK k rows x BN columns of an N-contiguous B into floats BM .. BM + BN - 1 of
// each k's row of a stage: copy i of a thread moves columns lane * 4 .. + 3 of k row warp + 8 i.
template <class T>
struct RowCopy {
  static constexpr int PER = T::BK / 8;
  const float *src;  // (k row `warp` of the next step, column n0 + lane * 4)
  bool col_ok;

  __device__ __forceinline__ void set(const float *base, int64_t ld, int64_t n0, int64_t N, int64_t k0, int tid) {
    const int lane = tid & 31;
    col_ok = n0 + lane * 4 < N;
    src = base + (k0 + (tid >> 5)) * ld + n0 + lane * 4;
  }
  __device__ __forceinline__ uint32_t mask(int kleft, int tid) const {
    uint32_t m = 0;
#pragma unroll
    for (int i = 0; i < PER; ++i) m |= (col_ok && (tid >> 5) + 8 * i < kleft ? 1u : 0u) << i;
    return m;
  }
  __device__ __forceinline__ void copy(int i, uint32_t stage, uint32_t mask, int64_t ld, int tid) const {
    cp_async16_if(stage + (((tid >> 5) + 8 * i) * T::ROW + T::BM + (tid & 31) * 4) * 4, src + 8 * i * ld,
                  mask & (1u << i));
  }
  __device__ __forceinline__ void advance(int64_t ld) { src += T::BK * ld; }
};

// The copies of the walk's K steps, in walk order, one step at a time: A^T and B of the step's
// tile into a stage (rows >= M, columns >= N and k >= kend skipped). A step's COPIES copies may be
// issued apart (begin, copy(j) for each j, end: one commit group). ONE_TILE: the walk has a single
// tile (the cluster schedule).
template <class T, bool B_KN, bool ONE_TILE>
struct Loader {
  static_assert(T::THREADS == 256 && T::BN == 128 && 256 % T::BK == 0, "the copy maps assume these");
  using ACopy = TransposeCopy<T, T::BM, 0>;
  using BCopy = std::conditional_t<B_KN, RowCopy<T>, TransposeCopy<T, T::BN, T::BM>>;
  static constexpr int COPIES = ACopy::PER + BCopy::PER;
  ACopy a;
  BCopy b;
  int tile;  // the next step
  int64_t k0;
  uint32_t ma, mb;  // its copy predicates

  __device__ __forceinline__ void set_tile(const F32Args &p, const Walk &w, int64_t tiles_m, int64_t tiles_n, int tid) {
    if (tile >= w.tile_end) return;
    const TileCoord tc = tile_coord(tile, tiles_m, tiles_n);
    a.set(p.a + tc.batch * p.sa, p.lda, tc.pid_m * T::BM, p.M, k0, tid);
    b.set(p.b + tc.batch * p.sb, p.ldb, tc.pid_n * T::BN, p.N, k0, tid);
  }
  __device__ __forceinline__ void start(const F32Args &p, const Walk &w, int64_t tiles_m, int64_t tiles_n, int tid) {
    tile = w.tile_first;
    k0 = w.kbeg;
    set_tile(p, w, tiles_m, tiles_n, tid);
  }
  // The next step's predicates (all false when the walk is done).
  __device__ __forceinline__ void begin(const Walk &w, int tid) {
    const int kleft =
        tile < w.tile_end && k0 < w.kend ? static_cast<int>(min(static_cast<int64_t>(T::BK), w.kend - k0)) : 0;
    ma = a.mask(kleft, tid);
    mb = b.mask(kleft, tid);
  }
  // Copy j of the step into the stage at shared address `stage`.
  __device__ __forceinline__ void copy(int j, uint32_t stage, const F32Args &p, int tid) const {
    if (j < ACopy::PER)
      a.copy(j, stage, ma, p.lda, tid);
    else
      b.copy(j - ACopy::PER, stage, mb, p.ldb, tid);
  }
  // Closes the step's commit group and moves to the next step.
  __device__ __forceinline__ void end(const F32Args &p, const Walk &w, int64_t tiles_m, int64_t tiles_n, int tid) {
    if (tile < w.tile_end && k0 < w.kend) {
      k0 += T::BK;
      if (k0 < w.kend) {
        a.advance(p.lda);
        b.advance(p.ldb);
      } else if constexpr (ONE_TILE) {
        tile = w.tile_end;
      } else {
        k0 = w.kbeg;
        tile += w.tile_stride;
        set_tile(p, w, tiles_m, tiles_n, tid);
      }
    }
    cp_async_commit();
  }
  // A whole step at once.
  __device__ __forceinline__ void load(const F32Args &p, const Walk &w, uint32_t stage, int64_t tiles_m,
                                       int64_t tiles_n, int tid) {
    begin(w, tid);
#pragma unroll
    for (int j = 0; j < COPIES; ++j) copy(j, stage, p, tid);
    end(p, w, tiles_m, tiles_n, tid);
  }
};

// One k of a thread's fragments: its TM rows of A^T and TN columns of B (LDS.128 each 4).
template <class T>
struct Frag {
  float a[T::TM], b[T::TN];
};

template <class T>
__device__ __forceinline__ void load_frag(Frag<T> &f, const float *row, int a_off, int b_off) {
#pragma unroll
  for (int g = 0; g < T::TM / 4; ++g) {
    const float4 v = *reinterpret_cast<const float4 *>(row + a_off + g * T::LM * 4);
    f.a[g * 4] = v.x;
    f.a[g * 4 + 1] = v.y;
    f.a[g * 4 + 2] = v.z;
    f.a[g * 4 + 3] = v.w;
  }
#pragma unroll
  for (int g = 0; g < T::TN / 4; ++g) {
    const float4 v = *reinterpret_cast<const float4 *>(row + T::BM + b_off + g * T::LN * 4);
    f.b[g * 4] = v.x;
    f.b[g * 4 + 1] = v.y;
    f.b[g * 4 + 2] = v.z;
    f.b[g * 4 + 3] = v.w;
  }
}

template <class T>
__device__ __forceinline__ void fma_k(float (&acc)[T::TM][T::TN], const Frag<T> &f) {
#pragma unroll
  for (int i = 0; i < T::TM; ++i)
#pragma unroll
    for (int j = 0; j < T::TN; ++j) acc[i][j] = __fmaf_rn(f.a[i], f.b[j], acc[i][j]);
}

// Columns 4 j' .. 4 j' + 3 of row i of acc as one float4, q = i * TN / 4 + j'.
template <int TM, int TN>
__device__ __forceinline__ float4 acc4(const float (&acc)[TM][TN], int q) {
  const float *a = &acc[q / (TN / 4)][q % (TN / 4) * 4];
  return make_float4(a[0], a[1], a[2], a[3]);
}
template <int TM, int TN>
__device__ __forceinline__ void set_acc4(float (&acc)[TM][TN], int q, float4 v) {
  float *a = &acc[q / (TN / 4)][q % (TN / 4) * 4];
  a[0] = v.x;
  a[1] = v.y;
  a[2] = v.z;
  a[3] = v.w;
}
// f(r, col, q) for each group of 4 columns of the thread's accumulators whose row lies below
// valid_m: tile row r, tile columns col .. col + 3, acc4(acc, q).
template <class T, class F>
__device__ __forceinline__ void for_each_quad(int row0, int col0, int valid_m, F f) {
#pragma unroll
  for (int gi = 0; gi < T::TM / 4; ++gi)
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      const int r = row0 + gi * T::LM * 4 + i;
      if (r >= valid_m) continue;
#pragma unroll
      for (int gj = 0; gj < T::TN / 4; ++gj) f(r, col0 + gj * T::LN * 4, (gi * 4 + i) * (T::TN / 4) + gj);
    }
}

// v = alpha * total (+ beta * bias) of 4 consecutive columns, stored to dst (only the first n_left
// when n_left < 4: the columns within N). bias: that of the first column, or nullptr.
__device__ __forceinline__ void store4(const F32Args &p, float *dst, const float *bias, int64_t n_left, float4 t,
                                       bool vec_ok) {
  float v[4] = {t.x, t.y, t.z, t.w};
#pragma unroll
  for (int e = 0; e < 4; ++e) v[e] = f32_epilogue(p, v[e], bias && e < n_left ? bias + e * p.bsn : nullptr);
  if (vec_ok && n_left >= 4) {
    *reinterpret_cast<float4 *>(dst) = make_float4(v[0], v[1], v[2], v[3]);
  } else {
#pragma unroll
    for (int e = 0; e < 4; ++e)
      if (e < n_left) dst[e] = v[e];
  }
}

template <class T, bool B_KN, Schedule SCHED>
__global__ void __launch_bounds__(T::THREADS, T::CTAS_PER_SM) gemm_f32_kernel(const F32Args p, float *workspace) {
  constexpr bool ONE_TILE = SCHED != Schedule::persistent;  // a CTA per (tile, chunk)
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ < 900
  if constexpr (SCHED == Schedule::cluster) {
    __trap();  // the host launches the cluster schedule only on sm_90 code
    return;
  }
#endif
  extern __shared__ __align__(16) float smem[];
  const uint32_t smem_addr = static_cast<uint32_t>(__cvta_generic_to_shared(smem));

  const int tid = threadIdx.x;
  const int lane = tid & 31, warp = tid >> 5;
  const int wm = warp / T::WARPS_N, wn = warp % T::WARPS_N;
  const int lm = lane / T::LN, ln = lane % T::LN;
  const int row0 = wm * T::WM + lm * 4;  // rows row0 + g * LM * 4 + i
  const int col0 = wn * T::WN + ln * 4;  // columns col0 + g * LN * 4 + j

  const KChunks ch = k_chunks(p.K);
  const int64_t tiles_m = (p.M + T::BM - 1) / T::BM, tiles_n = (p.N + T::BN - 1) / T::BN;
  Walk w;
  if constexpr (ONE_TILE) {
    const int tile = static_cast<int>(blockIdx.x) / ch.count;
    const int c = static_cast<int>(blockIdx.x % ch.count);
    w = {tile, 1, tile + 1, c * ch.size, min(p.K, (c + 1) * ch.size), c, c + 1};
  } else {
    w = {static_cast<int>(blockIdx.x),
         static_cast<int>(gridDim.x),
         static_cast<int>(tiles_m * tiles_n * p.batch),
         0,
         p.K,
         0,
         ch.count};
  }

  // The pipeline: the consumer reads stage `rs` (step s) while the copies of step s + STAGES - 1
  // go into stage `ws` (the one step s - 1 read), spread over the step's k.
  Loader<T, B_KN, ONE_TILE> loader;
  loader.start(p, w, tiles_m, tiles_n, tid);
#pragma unroll 1
  for (int s = 0; s + 1 < T::STAGES; ++s) loader.load(p, w, smem_addr + s * T::STAGE * 4, tiles_m, tiles_n, tid);
  int rs = 0, ws = T::STAGES - 1;
  cp_async_wait<T::STAGES - 2>();
  __syncthreads();

  float acc[T::TM][T::TN];
  Frag<T> f[2];  // f[k % 2]: k's fragments, k + 1's loaded before k's FMAs
  // The end of a step: its copies' group closed, the next step's stage waited for; after the
  // barrier every thread is done with this stage (its last k's fragments are in registers), so
  // it is the next one to refill, and the next step's first k's fragments are loaded at once.
  auto finish_step = [&]() {
    loader.end(p, w, tiles_m, tiles_n, tid);
    cp_async_wait<T::STAGES - 2>();
    __syncthreads();
    ws = rs;
    rs = rs + 1 == T::STAGES ? 0 : rs + 1;
    load_frag<T>(f[0], smem + rs * T::STAGE, row0, col0);
  };
  constexpr int COPY_BUNCHES = 4;
  // A step of BK k (FMAS: false for warps whose rows are all past M, which only keep the pipeline
  // going: every warp runs the same barriers). Copy j goes out in bunch b = j * 4 / COPIES, with
  // k = b * (BK - 1) / 4; the step ends before its last k's FMAs, which hide the next step's first
  // fragment loads.
  auto full_step = [&](auto fmas) {
    constexpr bool FMAS = decltype(fmas)::value;
    const float *cur = smem + rs * T::STAGE;
    const uint32_t dst = smem_addr + ws * T::STAGE * 4;
    loader.begin(w, tid);
#pragma unroll
    for (int k = 0; k < T::BK; ++k) {
      if (k + 1 < T::BK) {
        if (FMAS) load_frag<T>(f[(k + 1) % 2], cur + (k + 1) * T::ROW, row0, col0);
#pragma unroll
        for (int j = 0; j < loader.COPIES; ++j)
          if (j * COPY_BUNCHES / loader.COPIES * (T::BK - 1) / COPY_BUNCHES == k) loader.copy(j, dst, p, tid);
      } else {
        finish_step();
      }
      if (FMAS) fma_k<T>(acc, f[k % 2]);
    }
  };
  // The last step of K when shorter than BK (its copies at once): kvalid k, a multiple of 4 (as K
  // is), 4 at a time, so the k past K never enter the chain.
  auto tail_step = [&](int kvalid, bool warp_has_rows_now) {
    loader.load(p, w, smem_addr + ws * T::STAGE * 4, tiles_m, tiles_n, tid);
    if (warp_has_rows_now) {
      const float *cur = smem + rs * T::STAGE;
#pragma unroll 1
      for (int k4 = 0; k4 < kvalid; k4 += 4, cur += 4 * T::ROW) {
#pragma unroll
        for (int k = 0; k < 4; ++k) {
          if (k < 3 || k4 + 4 < kvalid) load_frag<T>(f[(k + 1) % 2], cur + (k + 1) * T::ROW, row0, col0);
          fma_k<T>(acc, f[k % 2]);
        }
      }
    }
    cp_async_wait<T::STAGES - 2>();
    __syncthreads();
    ws = rs;
    rs = rs + 1 == T::STAGES ? 0 : rs + 1;
    load_frag<T>(f[0], smem + rs * T::STAGE, row0, col0);
  };

  for (int tile = w.tile_first; tile < w.tile_end; tile += w.tile_stride) {
    const TileCoord tc = tile_coord(tile, tiles_m, tiles_n);
    const int64_t m0 = tc.pid_m * T::BM, n0 = tc.pid_n * T::BN;
    const int valid_m = static_cast<int>(min(static_cast<int64_t>(T::BM), p.M - m0));
    const bool warp_has_rows = wm * T::WM < valid_m;
    for (int c = w.c_begin; c < w.c_end; ++c) {
#pragma unroll
      for (int i = 0; i < T::TM; ++i)
#pragma unroll
        for (int j = 0; j < T::TN; ++j) acc[i][j] = 0.f;
      const int64_t kbeg = static_cast<int64_t>(c) * ch.size, klen = min(p.K, kbeg + ch.size) - kbeg;
      // Every k of the chunk in order. The first k's fragments are loaded here, not kept from the
      // previous step's end: that would hold their registers through the totals and the epilogue.
      load_frag<T>(f[0], smem + rs * T::STAGE, row0, col0);
      for (int s = static_cast<int>(klen / T::BK); s > 0; --s) {
        if (warp_has_rows)
          full_step(std::true_type{});
        else
          full_step(std::false_type{});
      }
      if (const int tail = static_cast<int>(klen % T::BK)) tail_step(tail, warp_has_rows);
      if constexpr (SCHED == Schedule::persistent) {
        // total = p_c_begin, then total = total + p_c in chunk order: between chunks in shared
        // memory (slot q of thread t at float4 q * THREADS + t: conflict-free, each thread its
        // own); the last chunk's sum goes into acc for the epilogue.
        if (w.c_end - w.c_begin > 1) {
          float4 *totals = reinterpret_cast<float4 *>(smem + T::STAGES * T::STAGE) + tid;
          if (c == w.c_begin) {
#pragma unroll
            for (int q = 0; q < T::TM * T::TN / 4; ++q) totals[q * T::THREADS] = acc4(acc, q);
          } else if (c + 1 < w.c_end) {
#pragma unroll
            for (int q = 0; q < T::TM * T::TN / 4; ++q)
              totals[q * T::THREADS] = add4(totals[q * T::THREADS], acc4(acc, q));
          } else {
#pragma unroll
            for (int q = 0; q < T::TM * T::TN / 4; ++q) set_acc4(acc, q, add4(totals[q * T::THREADS], acc4(acc, q)));
          }
        }
      }
    }

    float *C = p.c + tc.batch * p.sc;
    const float *bias = p.bias ? p.bias + tc.batch * p.sbias : nullptr;
    const bool vec_ok = (p.ldc & 3) == 0 && (reinterpret_cast<uintptr_t>(C) & 15) == 0;
    if constexpr (SCHED == Schedule::persistent) {
      for_each_quad<T>(row0, col0, valid_m, [&](int r, int col, int q) {
        if (n0 + col >= p.N) return;
        store4(p, C + (m0 + r) * p.ldc + n0 + col, bias ? bias + (m0 + r) * p.bsm + (n0 + col) * p.bsn : nullptr,
               p.N - n0 - col, acc4(acc, q), vec_ok);
      });
    } else if constexpr (SCHED == Schedule::split) {
      // p_c of the rows < M and columns < N to the workspace (16-byte stores: the pitch is a
      // multiple of 4 floats and so are the thread's column groups).
      const int64_t pitch = f32_split_pitch(p.N);
      float *plane = workspace + ((static_cast<int64_t>(w.c_begin) * p.batch + tc.batch) * p.M + m0) * pitch + n0;
      for_each_quad<T>(row0, col0, valid_m, [&](int r, int col, int q) {
        if (n0 + col < p.N) *reinterpret_cast<float4 *>(plane + r * pitch + col) = acc4(acc, q);
      });
      break;  // the walk's one tile
    } else {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
      // p_c into this CTA's shared memory as [BM][BN], then the ordered reduction over the cluster.
      cp_async_wait<0>();
      __syncthreads();  // the pipeline's buffers are free (only empty groups can remain)
      float *partial = smem;
#pragma unroll
      for (int gi = 0; gi < T::TM / 4; ++gi)
#pragma unroll
        for (int i = 0; i < 4; ++i)
#pragma unroll
          for (int gj = 0; gj < T::TN / 4; ++gj) {
            const float *a = &acc[gi * 4 + i][gj * 4];
            *reinterpret_cast<float4 *>(partial + (row0 + gi * T::LM * 4 + i) * T::BN + col0 + gj * T::LN * 4) =
                make_float4(a[0], a[1], a[2], a[3]);
          }
      cg::cluster_group cluster = cg::this_cluster();
      cluster.sync();
      constexpr int Q4 = T::BM * T::BN / 4;  // float4s in the tile
      const int count = ch.count, rank = static_cast<int>(cluster.block_rank());
      const int per = (Q4 + count - 1) / count;
      const int q_end = min(Q4, (rank + 1) * per);
      for (int q = rank * per + tid; q < q_end; q += T::THREADS) {
        const int r = q / (T::BN / 4), c4 = (q % (T::BN / 4)) * 4;
        if (r >= valid_m || n0 + c4 >= p.N) continue;
        auto part = [&](int src) {
          return *reinterpret_cast<const float4 *>(cluster.map_shared_rank(partial, src) + q * 4);
        };
        float4 t = part(0);
#pragma unroll
        for (int src = 1; src < kMaxKChunks; ++src)  // the adds in rank order
          if (src < count) t = add4(t, part(src));
        store4(p, C + (m0 + r) * p.ldc + n0 + c4, bias ? bias + (m0 + r) * p.bsm + (n0 + c4) * p.bsn : nullptr,
               p.N - n0 - c4, t, vec_ok);
      }
      cluster.sync();  // no CTA leaves while another still reads its shared memory
#endif
      break;  // the walk's one tile
    }
  }
  cp_async_wait<0>();
}

// The split schedule's second kernel: element (batch, m, n4 .. n4 + 3) of C from the chunks'
// partials, added in chunk order (as the other schedules add them), then the epilogue.
__global__ void split_reduce_kernel(const F32Args p, const float *workspace, int chunks) {
  const int64_t pitch = f32_split_pitch(p.N), quads = pitch / 4, rows = p.batch * p.M;
  const int64_t plane = rows * pitch;
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < rows * quads;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t row = i / quads, n = (i - row * quads) * 4;
    const int64_t b = row / p.M, m = row - b * p.M;
    const float *src = workspace + row * pitch + n;
    float4 t = *reinterpret_cast<const float4 *>(src);
    for (int c = 1; c < chunks; ++c) t = add4(t, *reinterpret_cast<const float4 *>(src + c * plane));
    float *dst = p.c + b * p.sc + m * p.ldc + n;
    const float *bias = p.bias ? p.bias + b * p.sbias + m * p.bsm + n * p.bsn : nullptr;
    const bool vec_ok = (reinterpret_cast<uintptr_t>(dst) & 15) == 0;
    store4(p, dst, bias, p.N - n, t, vec_ok);
  }
}

// Persistent: the pipeline, then the running totals; cluster: the pipeline, later reused for p_c;
// split: the pipeline.
template <class T>
constexpr int smem_bytes(Schedule s) {
  return s == Schedule::persistent ? T::PIPE_BYTES + T::TOTAL_BYTES
         : s == Schedule::split    ? T::PIPE_BYTES
                                   : (T::PARTIAL_BYTES > T::PIPE_BYTES ? T::PARTIAL_BYTES : T::PIPE_BYTES);
}

template <class T, bool B_KN, Schedule SCHED>
void opt_in(int dev) {
  static std::atomic<uint64_t> opted_in{0};
  configure_once_per_device(opted_in, dev, [] {
    DETFUZZ_CUDA_CHECK(cudaFuncSetAttribute(gemm_f32_kernel<T, B_KN, SCHED>,
                                            cudaFuncAttributeMaxDynamicSharedMemorySize, smem_bytes<T>(SCHED)));
    // All of the SM's unified memory as shared memory, so that CTAS_PER_SM CTAs fit.
    DETFUZZ_CUDA_CHECK(cudaFuncSetAttribute(gemm_f32_kernel<T, B_KN, SCHED>,
                                            cudaFuncAttributePreferredSharedMemoryCarveout,
                                            cudaSharedmemCarveoutMaxShared));
  });
}

template <class T>
int64_t tile_count(const GemmParams &p) {
  return gemm_policy::tile_count(gemm_shape(p), T::BM, T::BN);
}

template <class T, bool B_KN>
void launch_persistent(const F32Args &args, const GemmParams &p, int dev, cudaStream_t stream) {
  opt_in<T, B_KN, Schedule::persistent>(dev);
  const int64_t tiles = tile_count<T>(p);
  const int64_t slots = static_cast<int64_t>(p.num_ctas) * T::CTAS_PER_SM;
  const int ctas = static_cast<int>(tiles < slots ? tiles : slots);
  gemm_f32_kernel<T, B_KN, Schedule::persistent>
      <<<ctas, T::THREADS, smem_bytes<T>(Schedule::persistent), stream>>>(args, nullptr);
  DETFUZZ_LAUNCH_CHECK();
}

int64_t split_workspace_bytes(const GemmParams &p) { return gemm_policy::f32_split_workspace_bytes(gemm_shape(p)); }

template <class T, bool B_KN>
void launch_split(const F32Args &args, const GemmParams &p, int dev, cudaStream_t stream) {
  opt_in<T, B_KN, Schedule::split>(dev);
  const int count = k_chunks(p.K).count;
  float *const workspace = static_cast<float *>(p.workspace);
  gemm_f32_kernel<T, B_KN, Schedule::split>
      <<<static_cast<unsigned>(tile_count<T>(p) * count), T::THREADS, smem_bytes<T>(Schedule::split), stream>>>(
          args, workspace);
  DETFUZZ_LAUNCH_CHECK();
  launch_gemm_f32_split_reduce(p, stream);
}

template <class T, bool B_KN>
void launch_cluster(const F32Args &args, const GemmParams &p, int dev, cudaStream_t stream) {
  opt_in<T, B_KN, Schedule::cluster>(dev);
  const int count = k_chunks(p.K).count;
  cudaLaunchConfig_t cfg = {};
  cfg.gridDim = dim3(static_cast<unsigned>(tile_count<T>(p) * count));
  cfg.blockDim = dim3(T::THREADS);
  cfg.dynamicSmemBytes = smem_bytes<T>(Schedule::cluster);
  cfg.stream = stream;
  cudaLaunchAttribute attr[1];
  attr[0].id = cudaLaunchAttributeClusterDimension;
  attr[0].val.clusterDim.x = static_cast<unsigned>(count);
  attr[0].val.clusterDim.y = 1;
  attr[0].val.clusterDim.z = 1;
  cfg.attrs = attr;
  cfg.numAttrs = 1;
  DETFUZZ_CUDA_CHECK(
      cudaLaunchKernelEx(&cfg, gemm_f32_kernel<T, B_KN, Schedule::cluster>, args, static_cast<float *>(nullptr)));
}

// ask(dev), asked once per device (devices 0..63; others are asked every time): the launcher's
// path choice runs on every call.
template <class Ask>
bool once_per_device(std::atomic<int> (&known)[64], int dev, Ask ask) {  // 0 not yet asked, 1 yes, 2 no
  if (dev >= 0 && dev < 64 && known[dev].load() != 0) return known[dev].load() == 1;
  const bool ok = ask(dev);
  if (dev >= 0 && dev < 64) known[dev].store(ok ? 1 : 2);
  return ok;
}

// The cluster schedule needs an sm_90 device and sm_90 code for it in this binary.
bool cluster_capable(int dev) {
  static std::atomic<int> known[64] = {};
  return once_per_device(known, dev, [](int d) {
    int major = 0;
    DETFUZZ_CUDA_CHECK(cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, d));
    if (major < 9) return false;
    cudaFuncAttributes fa{};
    DETFUZZ_CUDA_CHECK(cudaFuncGetAttributes(&fa, gemm_f32_kernel<SmallTile, true, Schedule::cluster>));
    return fa.binaryVersion >= 90;
  });
}

// The 256 x 128 tile's shared memory (about 202 KB) fits an sm_90 SM, not an sm_80 one.
bool tall_fits(int dev) {
  static std::atomic<int> known[64] = {};
  return once_per_device(known, dev, [](int d) {
    int optin = 0;
    DETFUZZ_CUDA_CHECK(cudaDeviceGetAttribute(&optin, cudaDevAttrMaxSharedMemoryPerBlockOptin, d));
    return optin >= smem_bytes<TallTile>(Schedule::persistent);
  });
}

// The cluster and split schedules' grids: a CTA per (tile, chunk).
template <class T>
bool per_chunk_fits(const GemmParams &p) {
  return gemm_policy::f32_per_chunk_fits(gemm_shape(p), {T::BM, T::BN});
}

template <class T, Schedule SCHED>
void launch_tile(const F32Args &args, const GemmParams &p, int dev, cudaStream_t stream) {
  if constexpr (SCHED == Schedule::cluster)
    p.b_kn ? launch_cluster<T, true>(args, p, dev, stream) : launch_cluster<T, false>(args, p, dev, stream);
  else if constexpr (SCHED == Schedule::split)
    p.b_kn ? launch_split<T, true>(args, p, dev, stream) : launch_split<T, false>(args, p, dev, stream);
  else
    p.b_kn ? launch_persistent<T, true>(args, p, dev, stream) : launch_persistent<T, false>(args, p, dev, stream);
}

bool is_split(F32Path path) {
  return path == F32Path::split_large || path == F32Path::split_small || path == F32Path::column_stream_split;
}

}  // namespace

void launch_gemm_f32_split_reduce(const GemmParams &p, cudaStream_t stream) {
  const int64_t quads = p.batch * p.M * (f32_split_pitch(p.N) / 4);
  const int64_t blocks = std::min<int64_t>((quads + 255) / 256, static_cast<int64_t>(p.num_ctas) * 8);
  split_reduce_kernel<<<static_cast<unsigned>(blocks), 256, 0, stream>>>(
      gemm_args<float>(p), static_cast<const float *>(p.workspace), k_chunks(p.K).count);
  DETFUZZ_LAUNCH_CHECK();
}

bool gemm_f32_path_available(F32Path path, int device) {
  if (path == F32Path::cluster_large || path == F32Path::cluster_small || path == F32Path::column_stream ||
      path == F32Path::column_stream_split)
    return cluster_capable(device);
  if (path == F32Path::persistent_tall) return tall_fits(device);
  return true;
}

const char *gemm_f32_path_name(F32Path path) {
  switch (path) {
    case F32Path::automatic: return "automatic";
    case F32Path::persistent_tall: return "persistent-256x128";
    case F32Path::persistent_large: return "persistent-128x128";
    case F32Path::persistent_small: return "persistent-32x128";
    case F32Path::cluster_large: return "cluster-128x128";
    case F32Path::cluster_small: return "cluster-32x128";
    case F32Path::column_stream: return "column-stream";
    case F32Path::split_large: return "split-128x128";
    case F32Path::split_small: return "split-32x128";
    case F32Path::column_stream_split: return "column-stream-split";
  }
  return "?";
}

namespace {

// What gemm_policy::f32_auto_path asks of the device, each asked only where the choice needs it.
struct F32Device {
  const GemmParams &p;
  int device;
  bool cluster_capable() const { return cuda_kernels::cluster_capable(device); }
  bool tall_fits() const { return cuda_kernels::tall_fits(device); }
  int stream_clusters(int size) const { return gemm_f32_stream_clusters(p, size, device); }
};

}  // namespace

F32Path gemm_f32_auto_path(const GemmParams &p, int device, bool with_workspace) {
  return gemm_policy::f32_auto_path(gemm_shape(p), with_workspace, F32Device{p, device});
}

void launch_gemm_f32_path(const GemmParams &p, F32Path path, cudaStream_t stream) {
  if (p.num_ctas < 1)
    throw std::runtime_error(std::string(__FILE__) + ":" + std::to_string(__LINE__) +
                             ": launch_gemm_f32: num_ctas = " + std::to_string(p.num_ctas) + " (must be >= 1)");
  if (p.M == 0 || p.N == 0 || p.batch == 0) return;
  int dev = 0;
  DETFUZZ_CUDA_CHECK(cudaGetDevice(&dev));
  if (path == F32Path::automatic) path = gemm_f32_auto_path(p, dev, p.workspace_bytes >= split_workspace_bytes(p));
  if (!gemm_f32_path_available(path, dev))
    throw std::runtime_error(std::string("launch_gemm_f32: path ") + gemm_f32_path_name(path) +
                             " needs an sm_90 GPU and sm_90 code");
  if (tile_count<SmallTile>(p) > INT_MAX / GROUP_M)  // tile_coord's 32-bit arithmetic
    throw std::runtime_error("launch_gemm_f32: too many tiles (" + std::to_string(tile_count<SmallTile>(p)) + ")");
  if (((path == F32Path::cluster_large || path == F32Path::split_large) && !per_chunk_fits<LargeTile>(p)) ||
      ((path == F32Path::cluster_small || path == F32Path::split_small) && !per_chunk_fits<SmallTile>(p)))
    throw std::runtime_error(std::string("launch_gemm_f32: too many tiles for path ") + gemm_f32_path_name(path));
  if (is_split(path) && (p.workspace == nullptr || p.workspace_bytes < split_workspace_bytes(p) ||
                         (reinterpret_cast<uintptr_t>(p.workspace) & 15) != 0))
    throw std::runtime_error(std::string("launch_gemm_f32: path ") + gemm_f32_path_name(path) +
                             " needs a 16-byte aligned workspace of " + std::to_string(split_workspace_bytes(p)) +
                             " bytes (gemm_workspace_bytes), got " + std::to_string(p.workspace_bytes));
  const F32Args args = gemm_args<float>(p);
  switch (path) {
    case F32Path::persistent_tall: launch_tile<TallTile, Schedule::persistent>(args, p, dev, stream); break;
    case F32Path::persistent_large: launch_tile<LargeTile, Schedule::persistent>(args, p, dev, stream); break;
    case F32Path::persistent_small: launch_tile<SmallTile, Schedule::persistent>(args, p, dev, stream); break;
    case F32Path::cluster_large: launch_tile<LargeTile, Schedule::cluster>(args, p, dev, stream); break;
    case F32Path::cluster_small: launch_tile<SmallTile, Schedule::cluster>(args, p, dev, stream); break;
    case F32Path::split_large: launch_tile<LargeTile, Schedule::split>(args, p, dev, stream); break;
    case F32Path::split_small: launch_tile<SmallTile, Schedule::split>(args, p, dev, stream); break;
    case F32Path::column_stream:
    case F32Path::column_stream_split:
      if (!gemm_f32_stream_fits(p)) throw std::runtime_error("launch_gemm_f32: too large for path column-stream");
      launch_gemm_f32_stream(p, path == F32Path::column_stream_split, dev, stream);
      break;
    case F32Path::automatic: break;
  }
}

int64_t gemm_f32_workspace_bytes(const GemmParams &p, F32Path path) {
  return is_split(path) ? split_workspace_bytes(p) : 0;
}

std::pair<int64_t, int> gemm_k_chunks(int64_t K) {
  const KChunks ch = k_chunks(K);
  return {ch.size, ch.count};
}

}  // namespace detfuzz::cuda_kernels
