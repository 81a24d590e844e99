// The per-tile arithmetic of the fused paged attention kernels (paged_attention.cu: one warpgroup
// per CTA, mma.sync or wgmma; paged_attention_sm90.cu: the warp-specialised Hopper prefill
// kernel): the shared-memory tile layout, S = Q K^T, the online-softmax step, P V, and the
// sequential split merge. Every kernel and schedule that computes a row's tiles through these
// functions gives the row the same bits for the same kernel choice (wgmma or mma.sync); the
// arithmetic itself is described at the top of paged_attention.cu. Device code only.
#pragma once

#include "ops/attention/paged_attention_kernel.h"
#include "ops/attention/split_contract.h"
#include "ops/cuda/mma_sm80.cuh"
#include "ops/cuda/ptx_sm90.cuh"

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <climits>
#include <cstdint>
#include <type_traits>

namespace detfuzz::attention::tile_math {

using cuda_kernels::cp_async16;
using cuda_kernels::cp_async_commit;
using cuda_kernels::cp_async_wait;
using cuda_kernels::from_f;
using cuda_kernels::ldmatrix_x4;
using cuda_kernels::ldmatrix_x4_trans;
using cuda_kernels::mma16816;
namespace sm90 = cuda_kernels::sm90;

constexpr int kRows = 64;                         // M rows per warpgroup tile
constexpr int kKeys = static_cast<int>(kKvTile);  // keys per K/V tile: an online-softmax step

// A 64-row tile (Q, or K or V) is stored as D / 64 column blocks of 64 rows x 128 bytes, 8 KiB
// apart; in a block, row r's 16-byte chunk c sits at chunk c ^ (r & 7). That is the 128-byte
// swizzle the wgmma descriptors read (blocks based 1024-byte aligned), and the 8 rows an ldmatrix
// phase reads fall in 8 different bank groups.
constexpr int kBlockBytes = 64 * 128;
template <int D>
struct Layout {
  static constexpr int kTileBytes = kKeys * D * 2;
  static constexpr int kQBytes = kRows * D * 2;
  static __device__ __forceinline__ uint32_t offset(int row, int chunk) {
    return static_cast<uint32_t>((chunk >> 3) * kBlockBytes + row * 128 + (((chunk & 7) ^ (row & 7)) << 4));
  }
};

// Rows row_block * 16 .. + 15, columns 16 ks .. 16 ks + 15 of a Q tile in this layout as the
// m16n8k16 A fragment (mma.sync, and wgmma with A from registers: the same per-warp layout).
template <int D>
__device__ __forceinline__ void load_q_fragment(uint32_t (&a)[4], uint32_t q_s, int row_block, int ks, int lane) {
  ldmatrix_x4(a, q_s + Layout<D>::offset(row_block * 16 + (lane & 15), ks * 2 + (lane >> 4)));
}

// 2^x, flushing subnormal results to 0 (one MUFU.EX2): the kernel's only exponential.
__device__ __forceinline__ float exp2_ftz(float x) {
  float y;
  asm("ex2.approx.ftz.f32 %0, %1;" : "=f"(y) : "f"(x));
  return y;
}

// One step of the sequential split merge, shared by the whole_rows kernel and the merge kernel.
struct MergeWeights {
  float m, a, b;
};
__device__ __forceinline__ MergeWeights merge_weights(float M, float m_j) {
  const float mn = fmaxf(M, m_j);
  return {mn, exp2_ftz(__fsub_rn(M, mn)), exp2_ftz(__fsub_rn(m_j, mn))};
}
__device__ __forceinline__ float merged(float acc, float part, const MergeWeights &w) {
  return __fadd_rn(__fmul_rn(acc, w.a), __fmul_rn(part, w.b));
}

// One split's (m, l) and output element o folded into a row's running maximum M, sum L and
// output element O: the merge kernel (both its forms) and split_groups' fold in the CTA
// (PagedAttnLaunch::cta_merge) fold every split through this, in split order.
__device__ __forceinline__ void merge_split(float &M, float &L, float &O, float2 ml_j, float o_j) {
  const MergeWeights w = merge_weights(M, ml_j.x);
  L = merged(L, ml_j.y, w);
  O = merged(O, o_j, w);
  M = w.m;
}

// The shared memory a split takes where a merge copies a row's splits in: its partial output and
// its (m, l).
__host__ __device__ constexpr int merge_bytes_per_split(int head_dim) { return head_dim * 4 + 8; }

// A row's output is O / L computed as O times L's reciprocal: one IEEE reciprocal a row, then a
// multiply an element (a division an element took about 4% of an 8k prefill's warp samples on an
// H200). Every schedule and the merge kernel write through these two, so their bits agree.
__device__ __forceinline__ float reciprocal(float L) { return __frcp_rn(L); }
__device__ __forceinline__ float normalised(float O, float inv_L) { return __fmul_rn(O, inv_L); }

__device__ __forceinline__ uint32_t pack2(float lo, float hi, bool bf16) {
  const uint16_t a = bf16 ? from_f<__nv_bfloat16>(lo) : from_f<__half>(lo);
  const uint16_t b = bf16 ? from_f<__nv_bfloat16>(hi) : from_f<__half>(hi);
  return static_cast<uint32_t>(a) | (static_cast<uint32_t>(b) << 16);
}
// Two adjacent output elements of a row, O (1 / L) each, packed in the output dtype: what every
// schedule and fold writes.
__device__ __forceinline__ uint32_t pack2_normalised(float lo, float hi, float inv_L, bool bf16) {
  return pack2(normalised(lo, inv_L), normalised(hi, inv_L), bf16);
}

// The per-thread online-softmax state of the two M rows a lane holds (rows g and g + 8 of its
// warp's 16): row i owns s[nb][2i], s[nb][2i+1] and acc[nb][2i], acc[nb][2i+1].
template <int D>
struct RowState {
  float m[2], l[2];
  float acc[D / 8][4];
  __device__ __forceinline__ void reset() {
#pragma unroll
    for (int i = 0; i < 2; ++i) {
      m[i] = -INFINITY;
      l[i] = 0.f;
    }
#pragma unroll
    for (int nb = 0; nb < D / 8; ++nb)
#pragma unroll
      for (int e = 0; e < 4; ++e) acc[nb][e] = 0.f;
  }
};

// whole_rows: the merged state of the splits a thread's two rows finished so far. m and l in
// registers; the output part in shared memory, one warpgroup's [warp][block][lane][element]
// (D / 8 * 32 float4 per warp), each thread touching only its own entries: a block's four values
// (both rows) are one 16-byte access, and a warp's access covers 512 contiguous bytes (no bank
// conflict).
template <int D>
struct MergedRows {
  float m[2], l[2];
  float *o;  // this thread's first entry
  __device__ __forceinline__ MergedRows(float *warpgroup_base, int warp, int lane)
      : o(warpgroup_base + (warp * (D / 8) * 32 + lane) * 4) {}
  __device__ __forceinline__ float &at(int nb, int e) { return o[nb * 128 + e]; }
  __device__ __forceinline__ float4 &block(int nb) { return *reinterpret_cast<float4 *>(o + nb * 128); }
  // Folds the finished split j into the merged state, for the rows that see any key of it (a row
  // that does not keeps its entries: they are written back as they were).
  __device__ __forceinline__ void fold(const RowState<D> &st, const int (&visible)[2], int j, int split_tokens) {
    if (j == 0) {  // every live row sees split 0; a dead row's entries are never read
#pragma unroll
      for (int i = 0; i < 2; ++i) m[i] = st.m[i], l[i] = st.l[i];
#pragma unroll
      for (int nb = 0; nb < D / 8; ++nb) block(nb) = acc_block(st, nb);
      return;
    }
    bool sees[2];
    MergeWeights w[2];
    fold_weights(st, visible, j, split_tokens, sees, w);
#pragma unroll
    for (int i = 0; i < 2; ++i)
      if (sees[i]) l[i] = merged(l[i], st.l[i], w[i]), m[i] = w[i].m;
#pragma unroll
    for (int nb = 0; nb < D / 8; ++nb) block(nb) = folded_block(st, nb, sees, w);
  }
  // The last split's fold, written out instead of stored back: out = O (1 / L) for each row i with a
  // row_out[i] (the row's first element, 16-bit; null for a dead row), all D / 8 column blocks.
  // The same values as fold() and then write(), without the merged state's store and reload.
  template <bool kBf16>
  __device__ __forceinline__ void fold_and_write(const RowState<D> &st, const int (&visible)[2], int j,
                                                 int split_tokens, void *const (&row_out)[2], int t) {
    uint32_t *out[2] = {static_cast<uint32_t *>(row_out[0]), static_cast<uint32_t *>(row_out[1])};
    auto store = [&](int nb, const float4 &v, const float(&inv)[2]) {
      if (out[0]) out[0][nb * 4 + t] = pack2_normalised(v.x, v.y, inv[0], kBf16);
      if (out[1]) out[1][nb * 4 + t] = pack2_normalised(v.z, v.w, inv[1], kBf16);
    };
    if (j == 0) {  // the row's only split: its state is the output
      const float inv[2] = {reciprocal(st.l[0]), reciprocal(st.l[1])};
#pragma unroll
      for (int nb = 0; nb < D / 8; ++nb) store(nb, acc_block(st, nb), inv);
      return;
    }
    bool sees[2];
    MergeWeights w[2];
    fold_weights(st, visible, j, split_tokens, sees, w);
    float inv[2];
#pragma unroll
    for (int i = 0; i < 2; ++i) inv[i] = reciprocal(sees[i] ? merged(l[i], st.l[i], w[i]) : l[i]);
#pragma unroll
    for (int nb = 0; nb < D / 8; ++nb) store(nb, folded_block(st, nb, sees, w), inv);
  }
  // out = O (1 / L) for row i, output column blocks [0, blocks) of this thread, into `row_out` (the
  // row's first element, 16-bit).
  template <bool kBf16>
  __device__ __forceinline__ void write(void *row_out, int i, int first_block, int blocks, int t) {
    uint32_t *out = static_cast<uint32_t *>(row_out);
    const float inv = reciprocal(l[i]);
#pragma unroll
    for (int nb = 0; nb < D / 8; ++nb) {
      if (nb >= blocks) break;
      out[(first_block + nb) * 4 + t] = pack2_normalised(at(nb, 2 * i), at(nb, 2 * i + 1), inv, kBf16);
    }
  }

 private:
  static __device__ __forceinline__ float4 acc_block(const RowState<D> &st, int nb) {
    return make_float4(st.acc[nb][0], st.acc[nb][1], st.acc[nb][2], st.acc[nb][3]);
  }
  // Whether each of the thread's rows sees split j, and the weights of its fold.
  __device__ __forceinline__ void fold_weights(const RowState<D> &st, const int (&visible)[2], int j, int split_tokens,
                                               bool (&sees)[2], MergeWeights (&w)[2]) const {
#pragma unroll
    for (int i = 0; i < 2; ++i) {
      sees[i] = j * split_tokens < visible[i];
      w[i] = merge_weights(m[i], st.m[i]);
    }
  }
  // Block nb of the merged state with the split folded in, for the rows that see it.
  __device__ __forceinline__ float4 folded_block(const RowState<D> &st, int nb, const bool (&sees)[2],
                                                 const MergeWeights (&w)[2]) {
    float4 v = block(nb);
    if (sees[0]) v.x = merged(v.x, st.acc[nb][0], w[0]), v.y = merged(v.y, st.acc[nb][1], w[0]);
    if (sees[1]) v.z = merged(v.z, st.acc[nb][2], w[1]), v.w = merged(v.w, st.acc[nb][3], w[1]);
    return v;
  }
};

// Where split_groups keeps its splits' states in shared memory for its CTAs to fold
// (PagedAttnLaunch::cta_merge). A CTA holds splits first_split .. first_split + consumers *
// splits_per_slot - 1, consumer c's in its own Q slot (slot_floats floats, consumer 0's at `acc`):
// split j's row r at acc_at(j, r), its (m, l) at ml[ml_at(j, r)]; pairs: the tile's live rows. Every
// CTA of a cluster that folds a row together lays its splits out alike. The consumer that writes
// split j has its slot at `own` and its first split at own_first: there the row is at own_at(j, r)
// (the same place; the writes take the shorter sum). A null acc: no stage.
struct SplitStage {
  float *acc = nullptr;
  float2 *ml = nullptr;
  int pairs = 0, first_split = 0, splits_per_slot = 1, slot_floats = 0, head_dim = 0;
  float *own = nullptr;
  int own_first = 0;
  __device__ __forceinline__ int acc_at(int j, int r) const {
    const int k = j - first_split;
    return (k / splits_per_slot) * slot_floats + ((k % splits_per_slot) * pairs + r) * head_dim;
  }
  __device__ __forceinline__ int own_at(int j, int r) const { return ((j - own_first) * pairs + r) * head_dim; }
  __device__ __forceinline__ int ml_at(int j, int r) const { return (j - first_split) * pairs + r; }
};

// split_per_cta and split_groups: writes the finished split j of the two rows a thread holds
// (rows row_block * 16 + lane / 4 + 8 i of the tile, (query row, head) pairs of the query rows
// from q_row0 on and the heads of KV head kvh), for the rows that see a key of it: the output itself
// (acc (1 / l)) when it is the row's only split, else the split's state for the merge kernel, or
// into `stage` where it has an acc. The thread holds output column blocks first_block .. first_block
// + blocks - 1; writes_ml: this warp writes the rows' (m, l) (in a spread tile only the warp that
// owns the rows does).
template <bool kBf16, int D>
__device__ __forceinline__ void write_split(const PagedAttnLaunch &p, const RowState<D> &st, int j,
                                            const int (&visible)[2], int live_rows, int64_t q_row0, int kvh,
                                            int row_block, int first_block, int blocks, bool writes_ml, int lane,
                                            const SplitStage &stage = SplitStage{}) {
  const int group = p.h_q / p.h_kv, t = lane & 3;
#pragma unroll
  for (int i = 0; i < 2; ++i) {
    const int r = row_block * 16 + (lane >> 2) + 8 * i;
    if (r >= live_rows || j * p.split_tokens >= visible[i]) continue;  // nothing of it here
    const int64_t row_head = (q_row0 + r / group) * p.h_q + kvh * group + r % group;
    if (visible[i] <= p.split_tokens) {
      uint32_t *out = reinterpret_cast<uint32_t *>(static_cast<uint16_t *>(p.out) + row_head * D);
      const float inv = reciprocal(st.l[i]);
#pragma unroll
      for (int nb = 0; nb < D / 8; ++nb) {
        if (nb >= blocks) break;
        out[(first_block + nb) * 4 + t] = pack2_normalised(st.acc[nb][2 * i], st.acc[nb][2 * i + 1], inv, kBf16);
      }
    } else if (stage.acc) {
      float2 *part = reinterpret_cast<float2 *>(stage.own + stage.own_at(j, r));
#pragma unroll
      for (int nb = 0; nb < D / 8; ++nb) {
        if (nb >= blocks) break;
        part[(first_block + nb) * 4 + t] = make_float2(st.acc[nb][2 * i], st.acc[nb][2 * i + 1]);
      }
      if (t == 0 && writes_ml) stage.ml[stage.ml_at(j, r)] = make_float2(st.m[i], st.l[i]);
    } else {
      const int64_t slot = row_head * p.max_splits + j;
      float2 *part = reinterpret_cast<float2 *>(p.part_acc + slot * D);
#pragma unroll
      for (int nb = 0; nb < D / 8; ++nb) {
        if (nb >= blocks) break;
        part[(first_block + nb) * 4 + t] = make_float2(st.acc[nb][2 * i], st.acc[nb][2 * i + 1]);
      }
      if (t == 0 && writes_ml) reinterpret_cast<float2 *>(p.part_ml)[slot] = make_float2(st.m[i], st.l[i]);
    }
  }
}

// Output column blocks (8 columns each) whose accumulators a warp holds: all D / 8, or a quarter
// when the tile is spread (warp w: blocks w * D / 32 ...; its accumulators acc[0 .. D/32)).
template <int D, bool kSpread>
constexpr int kAccBlocks = kSpread ? D / 32 : D / 8;

// The online-softmax statistics of one step over the key columns of n-blocks [NB0, NB1) of the
// warp's S tile, given the rows' state (m, l) before it: the new (m, l), S turned into p in place,
// and the accumulators' rescale factors a = 2^(m_old - m_new) (applied by rescale_acc). The
// running maximum is a lagging reference: it moves to the step's maximum only where that passes it
// by more than kRescaleSlack (log2 domain), so most steps keep a = 1 (p then stays at most 2^8, which
// float32 sums and a 16-bit P hold; the reference only ever rises, so the row's final sums are the
// same fractions). The CPU algorithm (split_cpu.cpp) uses the same rule.
template <int NB0, int NB1>
__device__ __forceinline__ void softmax_stats(float (&m)[2], float (&l)[2], float (&s)[8][4], float scale_log2,
                                              float (&a)[2]) {
#pragma unroll
  for (int i = 0; i < 2; ++i) {
    // The row's maximum as a tree (max is exact, so any order gives the same value): a chain of
    // log2 steps instead of one per n-block.
    float mxs[NB1 - NB0];
#pragma unroll
    for (int nb = NB0; nb < NB1; ++nb) mxs[nb - NB0] = fmaxf(s[nb][2 * i], s[nb][2 * i + 1]);
#pragma unroll
    for (int width = (NB1 - NB0 + 1) / 2, n = NB1 - NB0; n > 1; n = width, width = (width + 1) / 2)
#pragma unroll
      for (int k = 0; k + width < n; ++k) mxs[k] = fmaxf(mxs[k], mxs[k + width]);
    float mx = fmaxf(-INFINITY, mxs[0]);  // -inf, not NaN, where every score is NaN (as a fold from -inf)
    mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 1));
    mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 2));
    const float mx_scaled = __fmul_rn(mx, scale_log2);
    const float m_new = mx_scaled > __fadd_rn(m[i], kRescaleSlack) ? mx_scaled : m[i];
    // A row that has seen no key yet has m_new = -inf: use 0 so p and a are 0, not NaN (such a
    // row is either past its last split, whose state is never merged, or a dead row).
    const float m_use = m_new == -INFINITY ? 0.f : m_new;
    a[i] = exp2_ftz(__fsub_rn(m[i], m_use));
    float sum = 0.f;
#pragma unroll
    for (int nb = NB0; nb < NB1; ++nb)
#pragma unroll
      for (int e = 0; e < 2; ++e) {
        s[nb][2 * i + e] = exp2_ftz(__fmaf_rn(s[nb][2 * i + e], scale_log2, -m_use));
        sum = __fadd_rn(sum, s[nb][2 * i + e]);
      }
    sum = __fadd_rn(sum, __shfl_xor_sync(0xffffffffu, sum, 1));
    sum = __fadd_rn(sum, __shfl_xor_sync(0xffffffffu, sum, 2));
    l[i] = __fadd_rn(__fmul_rn(l[i], a[i]), sum);
    m[i] = m_new;
  }
}

// The accumulators of the warp's output columns rescaled by softmax_stats' factors.
template <int D, bool kSpread>
__device__ __forceinline__ void rescale_acc(RowState<D> &st, const float (&a)[2]) {
#pragma unroll
  for (int nb = 0; nb < kAccBlocks<D, kSpread>; ++nb) {
    st.acc[nb][0] = __fmul_rn(st.acc[nb][0], a[0]);
    st.acc[nb][1] = __fmul_rn(st.acc[nb][1], a[0]);
    st.acc[nb][2] = __fmul_rn(st.acc[nb][2], a[1]);
    st.acc[nb][3] = __fmul_rn(st.acc[nb][3], a[1]);
  }
}

// One online-softmax step's statistics and rescale, at once.
template <int D, bool kSpread, int NB0, int NB1>
__device__ __forceinline__ void online_softmax(RowState<D> &st, float (&s)[8][4], float scale_log2) {
  float a[2];
  softmax_stats<NB0, NB1>(st.m, st.l, s, scale_log2, a);
  rescale_acc<D, kSpread>(st, a);
}

// P rounded to the input dtype as the A operand of k-steps NB0/2 .. NB1/2 - 1: k-step kk takes
// the C fragments of n-blocks 2kk and 2kk + 1.
template <bool kBf16, int NB0, int NB1>
__device__ __forceinline__ void pack_p(const float (&s)[8][4], uint32_t (&pa)[NB1 / 2 - NB0 / 2][4]) {
#pragma unroll
  for (int x = 0; x < NB1 / 2 - NB0 / 2; ++x) {
    const int kk = NB0 / 2 + x;
    pa[x][0] = pack2(s[2 * kk][0], s[2 * kk][1], kBf16);
    pa[x][1] = pack2(s[2 * kk][2], s[2 * kk][3], kBf16);
    pa[x][2] = pack2(s[2 * kk + 1][0], s[2 * kk + 1][1], kBf16);
    pa[x][3] = pack2(s[2 * kk + 1][2], s[2 * kk + 1][3], kBf16);
  }
}

#if DETFUZZ_SM90A
// The warpgroup MMA's view of the accumulators: acc[nb][e] is its register 4 nb + e.
template <int D>
__device__ __forceinline__ float (&acc_registers(RowState<D> &st))[D / 2] {
  return *reinterpret_cast<float(*)[D / 2]>(&st.acc[0][0]);
}

// Where k-step ks (16 columns along the head dim) of a K-major 128-byte-swizzled tile starts: its
// 64-column block, then 32 bytes per k-step within the block's 128-byte rows.
__device__ __forceinline__ constexpr uint32_t k_step_offset(int ks) { return (ks / 4) * kBlockBytes + (ks % 4) * 32; }
// Issues (does not wait for) S = Q K^T of the warpgroup's 64 rows and the tile's 64 keys on
// wgmma: k-steps over D in order, the first one ignoring the old S.
template <typename T, int D>
__device__ __forceinline__ void qk_wgmma_issue(float (&s)[8][4], uint32_t q_s, uint32_t k_tile) {
  float(&sf)[32] = *reinterpret_cast<float(*)[32]>(&s[0][0]);
  const uint64_t q_desc = sm90::desc_k_major(q_s), k_desc = sm90::desc_k_major(k_tile);
#pragma unroll
  for (int ks = 0; ks < D / 16; ++ks)
    sm90::wgmma_m64n64k16_ss<T>(sf, sm90::desc_advance(q_desc, k_step_offset(ks)),
                                sm90::desc_advance(k_desc, k_step_offset(ks)), ks > 0);
}
// The warp's 16 rows of the warpgroup's Q tile as wgmma A fragments, one per 16-column k-step (Q
// stays in registers for every tile: S = Q K^T then reads only K from shared memory, where a
// 64-key step with both operands there is bound by shared-memory bandwidth).
template <int D>
__device__ __forceinline__ void load_q_fragments(uint32_t (&qa)[D / 16][4], uint32_t q_s, int warp, int lane) {
#pragma unroll
  for (int ks = 0; ks < D / 16; ++ks) load_q_fragment<D>(qa[ks], q_s, warp, ks, lane);
}
// Issues (does not wait for) S = Q K^T as qk_wgmma_issue does, with Q from registers: the same
// k-steps in the same order, the same products.
template <typename T, int D>
__device__ __forceinline__ void qk_wgmma_issue_rs(float (&s)[8][4], const uint32_t (&qa)[D / 16][4], uint32_t k_tile) {
  float(&sf)[32] = *reinterpret_cast<float(*)[32]>(&s[0][0]);
  const uint64_t k_desc = sm90::desc_k_major(k_tile);
#pragma unroll
  for (int ks = 0; ks < D / 16; ++ks)
    sm90::wgmma_m64n64k16_rs<T, 0>(sf, qa[ks], sm90::desc_advance(k_desc, k_step_offset(ks)), ks > 0);
}
// Issues acc += P V over k-steps FIRST .. FIRST + STEPS - 1 (16 keys each, in key order) on wgmma:
// A (P) from registers, V N-major from shared memory.
template <typename T, int D, int FIRST, int STEPS>
__device__ __forceinline__ void pv_wgmma_issue(RowState<D> &st, const uint32_t (&pa)[STEPS][4], uint32_t v_tile) {
  float(&acc)[D / 2] = acc_registers(st);
  const uint64_t v_desc = sm90::desc_mn_major(v_tile, kBlockBytes);
#pragma unroll
  for (int x = 0; x < STEPS; ++x) {
    const uint64_t desc = sm90::desc_advance(v_desc, (FIRST + x) * 16 * 128);
    if constexpr (D == 128)
      sm90::wgmma_m64n128k16_rs<T>(acc, pa[x], desc);
    else
      sm90::wgmma_m64n64k16_rs<T>(acc, pa[x], desc);
  }
}
#endif

// One online-softmax step over the key columns of n-blocks [NB0, NB1) of the warp's S tile:
// the statistics and rescale, then accumulate round(p) V over those keys into the warp's output
// columns (wgmma: the warpgroup's 64 rows at once; mma.sync: the warp's own).
template <typename T, int D, bool kSpread, bool kWgmma, int NB0, int NB1>
__device__ __forceinline__ void softmax_step(RowState<D> &st, float (&s)[8][4], float scale_log2, uint32_t v_tile,
                                             int lane, int warp) {
  constexpr bool kBf16 = std::is_same<T, __nv_bfloat16>::value;
  constexpr int kSteps = NB1 / 2 - NB0 / 2;
  online_softmax<D, kSpread, NB0, NB1>(st, s, scale_log2);
  uint32_t pa[kSteps][4];
  pack_p<kBf16, NB0, NB1>(s, pa);
  if constexpr (kWgmma) {
#if DETFUZZ_SM90A
    sm90::wgmma_fence();
    pv_wgmma_issue<T, D, NB0 / 2, kSteps>(st, pa, v_tile);
    sm90::wgmma_commit();
    sm90::wgmma_wait<0>();
    sm90::fence_registers(acc_registers(st));
#else
    __trap();  // the host launches the wgmma kernels only on sm_90a code
#endif
  } else {
    const int first_pair = kSpread ? warp * (D / 64) : 0;  // first column-block pair of the warp
#pragma unroll
    for (int x = 0; x < kSteps; ++x) {
      const int key = (NB0 / 2 + x) * 16 + ((lane >> 3) & 1) * 8 + (lane & 7);
#pragma unroll
      for (int j = 0; j < kAccBlocks<D, kSpread> / 2; ++j) {
        uint32_t b[4];
        ldmatrix_x4_trans(b, v_tile + Layout<D>::offset(key, (first_pair + j) * 2 + (lane >> 4)));
        mma16816<T>(st.acc[2 * j], pa[x], {b[0], b[1]});
        mma16816<T>(st.acc[2 * j + 1], pa[x], {b[2], b[3]});
      }
    }
  }
}

// S = Q K^T for the tile's 64 rows and 64 keys, k-steps over D in order: with wgmma, the
// warpgroup's four warps together (each receives its 16 rows); with mma.sync, each warp its own
// 16 rows (spread: keys 16w .. 16w + 15 only).
template <typename T, int D, bool kSpread, bool kWgmma>
__device__ __forceinline__ void qk_scores(float (&s)[8][4], uint32_t q_s, uint32_t k_tile, int row_block, int lane,
                                          int warp) {
  if constexpr (kWgmma) {
#if DETFUZZ_SM90A
    sm90::wgmma_fence();
    qk_wgmma_issue<T, D>(s, q_s, k_tile);
    sm90::wgmma_commit();
    sm90::wgmma_wait<0>();
    sm90::fence_registers(*reinterpret_cast<float(*)[32]>(&s[0][0]));
#else
    __trap();
#endif
  } else {
    using L = Layout<D>;
#pragma unroll
    for (int nb = 0; nb < 8; ++nb)
#pragma unroll
      for (int e = 0; e < 4; ++e) s[nb][e] = 0.f;
    constexpr int kPairs = kSpread ? 1 : 4;  // n-block pairs (16 keys) of S this warp computes
    const int first_key = kSpread ? warp * 16 : 0;
#pragma unroll
    for (int ks = 0; ks < D / 16; ++ks) {
      uint32_t a[4];
      load_q_fragment<D>(a, q_s, row_block, ks, lane);
#pragma unroll
      for (int j = 0; j < kPairs; ++j) {
        uint32_t b[4];
        ldmatrix_x4(b,
                    k_tile + L::offset(first_key + j * 16 + (lane >> 4) * 8 + (lane & 7), ks * 2 + ((lane >> 3) & 1)));
        mma16816<T>(s[2 * j], a, {b[0], b[1]});
        mma16816<T>(s[2 * j + 1], a, {b[2], b[3]});
      }
    }
  }
}

// The fewest keys a live row of the warp sees (rows row0 and row0 + 8 of the lane; rows from
// live_rows on are dead), INT_MAX where the warp has none: mask_scores skips a tile whose keys all
// lie below it. Dead rows are left out, as their scores reach no output (a row of O is its own row
// of P times V, and the outputs, splits and folds skip dead rows): counted with their 0 visible
// keys, they masked every tile of a decode row (4 live rows of 64).
__device__ __forceinline__ int live_min_visible(const int (&visible)[2], int row0, int live_rows) {
  const int v0 = row0 < live_rows ? visible[0] : INT_MAX, v1 = row0 + 8 < live_rows ? visible[1] : INT_MAX;
  return __reduce_min_sync(0xffffffffu, min(v0, v1));
}

// Masks S to -inf past each row's visible keys (skipped when every key of the tile is visible to
// all the warp's live rows). Spread: the warp holds keys 16w .. 16w + 15 only.
template <bool kSpread>
__device__ __forceinline__ void mask_scores(float (&s)[8][4], int t0, const int (&visible)[2], int min_visible,
                                            int lane, int warp) {
  constexpr int kPairs = kSpread ? 1 : 4;
  const int first_key = kSpread ? warp * 16 : 0;
  if (t0 + kKeys > min_visible) {
#pragma unroll
    for (int nb = 0; nb < 2 * kPairs; ++nb)
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        const int key = t0 + first_key + nb * 8 + 2 * (lane & 3) + (e & 1);
        if (key >= visible[e >> 1]) s[nb][e] = -INFINITY;
      }
  }
}

// One 64-key tile for the warp's 16 rows: S = Q K^T, the mask, then the online-softmax step(s).
// Spread: warp w computes S for keys 16w .. 16w + 15 only, the four warps exchange S through
// `s_share` (every warp of the CTA must call this), and each then holds the whole S.
template <typename T, int D, bool kSpread, bool kWgmma>
__device__ __forceinline__ void tile_step(RowState<D> &st, uint32_t q_s, uint32_t k_tile, uint32_t v_tile,
                                          float2 *s_share, int row_block, int t0, const int (&visible)[2],
                                          int min_visible, float scale_log2, bool half_steps, int lane, int warp) {
  static_assert(!(kSpread && kWgmma), "the wgmma kernel never spreads a tile");
  float s[8][4];
  qk_scores<T, D, kSpread, kWgmma>(s, q_s, k_tile, row_block, lane, warp);
  mask_scores<kSpread>(s, t0, visible, min_visible, lane, warp);
  if constexpr (kSpread) {
    // [16 rows][64 keys] float32, rows 72 floats apart: a half-warp's float2 accesses (4 rows x
    // 4 lanes) fall in 16 different bank pairs.
    constexpr int kStride = 72;
    const int g = lane >> 2, t = lane & 3;
    const int first_key = warp * 16;
#pragma unroll
    for (int nb = 0; nb < 2; ++nb)
#pragma unroll
      for (int i = 0; i < 2; ++i)
        s_share[((g + 8 * i) * kStride + first_key + nb * 8 + 2 * t) / 2] = make_float2(s[nb][2 * i], s[nb][2 * i + 1]);
    __syncthreads();
#pragma unroll
    for (int nb = 0; nb < 8; ++nb)
#pragma unroll
      for (int i = 0; i < 2; ++i) {
        const float2 v = s_share[((g + 8 * i) * kStride + nb * 8 + 2 * t) / 2];
        s[nb][2 * i] = v.x;
        s[nb][2 * i + 1] = v.y;
      }
  }
  if (half_steps) {
    softmax_step<T, D, kSpread, kWgmma, 0, 4>(st, s, scale_log2, v_tile, lane, warp);
    softmax_step<T, D, kSpread, kWgmma, 4, 8>(st, s, scale_log2, v_tile, lane, warp);
  } else {
    softmax_step<T, D, kSpread, kWgmma, 0, 8>(st, s, scale_log2, v_tile, lane, warp);
  }
}

}  // namespace detfuzz::attention::tile_math
