// Fused paged attention, batch invariant by construction.
//
// Design. One launch of the split kernel covers the whole mixed batch (prefills, prefill chunks
// and decodes alike): grid (T_q query rows, H_kv, max_splits), block = 32 x G threads where
// G = H_q / H_kv, warp w owning query head kvh * G + w (the G heads of a GQA group share each K/V
// tile in shared memory). A CTA finds its sequence by binary search in cu_seqlens_q, derives its
// row's visible keys 0 .. kv_len - q_len + q (bottom-right causal) and walks the block table
// itself: key k lives at page block_table[s][k / BS], slot k % BS.
//
// Splits and tiles are cut at absolute key positions: split j is keys [256 j, 256 j + 256) (the
// runtime split_tokens, 256 for the invariant impl), each cut in tiles of 64 keys. max_splits
// comes from the block table's shape (its capacity), not from any sequence's length; CTAs whose
// split lies past their row's visible keys exit at once. Inside a split, tile by tile: lane l
// computes the scores of keys l and l + 32 (a sequential float32 dot product over D, reading a
// padded K tile), a warp max gives m_new = max(m, tile max), a = expf(m - m_new),
// p = expf(s - m_new) (0 for a masked key), l = l * a + sum p (summed in key order), and lane l
// owns dims l, l + 32, ...: acc = acc * a + sum_k round(p_k) v_k (key order; p rounded to the
// input dtype as it would be for a tensor-core MMA). A row with one split
// writes acc / l directly; otherwise the split writes (m, l, acc) to the workspace and the combine
// kernel merges splits in index order: M = max m_j, then L += w_j l_j and O += w_j acc_j with
// w_j = expf(m_j - M), out = O / L. Nothing a CTA computes depends on another sequence, on T_q,
// on the grid, or on where the pages live: a row's bits are a function of its q, its visible keys
// and the constants. Compiled with --fmad=false: every multiply-add is rounded as written, in the
// same order as the CPU spec (ops/attention/split_cpu.cpp); only expf differs from glibc's.
//
// No tensor cores: a SIMT kernel, simple to audit. Throughput is not its point.
#include "ops/attention/paged_attention_kernel.h"
#include "ops/cuda/cuda_check.h"

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cstdint>

namespace detfuzz::attention {
namespace {

constexpr int kTile = 64;
constexpr int kPad = 8;  // elements of padding per K/V row in shared memory (16 bytes)

__device__ __forceinline__ float to_f(__half x) { return __half2float(x); }
__device__ __forceinline__ float to_f(__nv_bfloat16 x) { return __bfloat162float(x); }
template <typename T> __device__ __forceinline__ T from_f(float x);
template <> __device__ __forceinline__ __half from_f<__half>(float x) { return __float2half_rn(x); }
template <> __device__ __forceinline__ __nv_bfloat16 from_f<__nv_bfloat16>(float x) { return __float2bfloat16_rn(x); }

struct RowInfo {
  int seq, visible, nsplit;
};

__device__ __forceinline__ RowInfo row_info(const int *cu_q, const int *seq_lens, int num_seqs, int row, int split) {
  // Last s with cu_q[s] <= row (empty sequences before it share its start).
  int lo = 0, hi = num_seqs;  // answer in [0, num_seqs)
  while (hi - lo > 1) {
    const int mid = (lo + hi) / 2;
    if (cu_q[mid] <= row) lo = mid; else hi = mid;
  }
  const int q_len = cu_q[lo + 1] - cu_q[lo];
  const int visible = seq_lens[lo] - q_len + (row - cu_q[lo]) + 1;
  return {lo, visible, (visible + split - 1) / split};
}

template <typename T, int D>
__global__ void paged_attention_split_kernel(PagedAttnLaunch p) {
  constexpr int kPerLane = D / 32;
  constexpr int kRow = D + kPad;
  extern __shared__ __align__(16) unsigned char smem[];
  const int group = blockDim.x / 32;
  float *q_s = reinterpret_cast<float *>(smem);                       // [G][D]
  float *p_s = q_s + group * D;                                        // [G][kTile] p
  float *pr_s = p_s + group * kTile;                                   // [G][kTile] p rounded to T
  T *k_s = reinterpret_cast<T *>(pr_s + group * kTile);                // [kTile][kRow]
  T *v_s = k_s + kTile * kRow;                                         // [kTile][kRow]

  const int row = blockIdx.x, kvh = blockIdx.y, j = blockIdx.z;
  const RowInfo ri = row_info(p.cu_seqlens_q, p.seq_lens_kv, p.num_seqs, row, p.split_tokens);
  if (j >= ri.nsplit) return;  // uniform over the CTA
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int h = kvh * group + warp;
  const T *q = static_cast<const T *>(p.q);
  const T *kp = static_cast<const T *>(p.k_pool);
  const T *vp = static_cast<const T *>(p.v_pool);
  const int *table = p.block_table + static_cast<int64_t>(ri.seq) * p.max_blocks;

  for (int i = threadIdx.x; i < group * D; i += blockDim.x)
    q_s[i] = to_f(q[(static_cast<int64_t>(row) * p.h_q + kvh * group) * D + i]);

  const int start = j * p.split_tokens;
  const int end = min(start + p.split_tokens, ri.visible);
  const float neg_inf = -INFINITY;
  float m = neg_inf, l = 0.f;
  float acc[kPerLane];
#pragma unroll
  for (int i = 0; i < kPerLane; ++i) acc[i] = 0.f;

  constexpr int kChunks = D / 8;  // 16-byte chunks per K/V row
  for (int t0 = start; t0 < end; t0 += kTile) {
    const int n = min(kTile, end - t0);
    __syncthreads();  // previous tile fully consumed (and q_s written, first time)
    for (int c = threadIdx.x; c < kTile * kChunks; c += blockDim.x) {
      const int kk = c / kChunks, part = c % kChunks;
      uint4 kv = make_uint4(0, 0, 0, 0), vv = make_uint4(0, 0, 0, 0);
      if (kk < n) {
        const int key = t0 + kk;
        const int64_t slot = static_cast<int64_t>(table[key / p.block_size]) * p.block_size + key % p.block_size;
        const int64_t off = (slot * p.h_kv + kvh) * D + part * 8;
        kv = *reinterpret_cast<const uint4 *>(kp + off);
        vv = *reinterpret_cast<const uint4 *>(vp + off);
      }
      *reinterpret_cast<uint4 *>(k_s + kk * kRow + part * 8) = kv;
      *reinterpret_cast<uint4 *>(v_s + kk * kRow + part * 8) = vv;
    }
    __syncthreads();

    const float *qw = q_s + warp * D;
    float s[2];
    float tmax = neg_inf;
#pragma unroll
    for (int r = 0; r < 2; ++r) {
      const int kk = lane + 32 * r;
      s[r] = neg_inf;
      if (kk < n) {
        const T *krow = k_s + kk * kRow;
        float dot = 0.f;
        for (int c = 0; c < kChunks; ++c) {
          const uint4 raw = *reinterpret_cast<const uint4 *>(krow + c * 8);
          const T *e = reinterpret_cast<const T *>(&raw);
#pragma unroll
          for (int x = 0; x < 8; ++x) dot = dot + qw[c * 8 + x] * to_f(e[x]);
        }
        s[r] = dot * p.scale;
        tmax = fmaxf(tmax, s[r]);
      }
    }
#pragma unroll
    for (int o = 16; o > 0; o /= 2) tmax = fmaxf(tmax, __shfl_xor_sync(0xffffffffu, tmax, o));
    const float m_new = fmaxf(m, tmax);
    const float a = expf(m - m_new);  // m = -inf on the first tile: a = 0
    float *pw = p_s + warp * kTile, *prw = pr_s + warp * kTile;
#pragma unroll
    for (int r = 0; r < 2; ++r) {
      const float pk = (lane + 32 * r < n) ? expf(s[r] - m_new) : 0.f;
      pw[lane + 32 * r] = pk;
      prw[lane + 32 * r] = to_f(from_f<T>(pk));
    }
    __syncwarp();
    float lt = 0.f;
    for (int kk = 0; kk < n; ++kk) lt = lt + pw[kk];
#pragma unroll
    for (int i = 0; i < kPerLane; ++i) {
      const int d = lane + 32 * i;
      float pv = 0.f;
      for (int kk = 0; kk < n; ++kk) pv = pv + prw[kk] * to_f(v_s[kk * kRow + d]);
      acc[i] = acc[i] * a + pv;
    }
    l = l * a + lt;
    m = m_new;
    __syncwarp();  // pw is rewritten by the next tile
  }

  const int64_t rh = static_cast<int64_t>(row) * p.h_q + h;
  if (ri.nsplit == 1) {
    T *out = static_cast<T *>(p.out) + rh * D;
#pragma unroll
    for (int i = 0; i < kPerLane; ++i) out[lane + 32 * i] = from_f<T>(acc[i] / l);
  } else {
    const int64_t slot = rh * p.max_splits + j;
    float *pa = p.part_acc + slot * D;
#pragma unroll
    for (int i = 0; i < kPerLane; ++i) pa[lane + 32 * i] = acc[i];
    if (lane == 0) {
      p.part_ml[slot * 2] = m;
      p.part_ml[slot * 2 + 1] = l;
    }
  }
}

// grid (T_q, H_q), block D threads (one per output element); rows with one split are done.
template <typename T>
__global__ void paged_attention_combine_kernel(PagedAttnLaunch p) {
  const int row = blockIdx.x, h = blockIdx.y, d = threadIdx.x;
  const RowInfo ri = row_info(p.cu_seqlens_q, p.seq_lens_kv, p.num_seqs, row, p.split_tokens);
  if (ri.nsplit <= 1) return;
  const int64_t base = (static_cast<int64_t>(row) * p.h_q + h) * p.max_splits;
  float mx = -INFINITY;
  for (int j = 0; j < ri.nsplit; ++j) mx = fmaxf(mx, p.part_ml[(base + j) * 2]);
  float L = 0.f, O = 0.f;
  for (int j = 0; j < ri.nsplit; ++j) {
    const float w = expf(p.part_ml[(base + j) * 2] - mx);
    L = L + w * p.part_ml[(base + j) * 2 + 1];
    O = O + w * p.part_acc[(base + j) * p.head_dim + d];
  }
  static_cast<T *>(p.out)[(static_cast<int64_t>(row) * p.h_q + h) * p.head_dim + d] = from_f<T>(O / L);
}

template <typename T, int D>
void launch_typed(const PagedAttnLaunch &p, cudaStream_t stream) {
  const int group = p.h_q / p.h_kv;
  const size_t smem = sizeof(float) * (group * D + 2 * group * kTile) + sizeof(T) * 2 * kTile * (D + kPad);
  auto kernel = paged_attention_split_kernel<T, D>;
  DETFUZZ_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(smem)));
  const dim3 grid(p.num_rows, p.h_kv, p.max_splits);
  kernel<<<grid, 32 * group, smem, stream>>>(p);
  DETFUZZ_LAUNCH_CHECK();
  if (p.max_splits > 1) {
    paged_attention_combine_kernel<T><<<dim3(p.num_rows, p.h_q), D, 0, stream>>>(p);
    DETFUZZ_LAUNCH_CHECK();
  }
}

template <typename T>
void launch_dim(const PagedAttnLaunch &p, cudaStream_t stream) {
  switch (p.head_dim) {
    case 64: return launch_typed<T, 64>(p, stream);
    case 128: return launch_typed<T, 128>(p, stream);
    case 256: return launch_typed<T, 256>(p, stream);
    default: throw std::runtime_error("paged_attention: head dim " + std::to_string(p.head_dim) + " not in {64, 128, 256}");
  }
}

}  // namespace

void launch_paged_attention(const PagedAttnLaunch &p, cudaStream_t stream) {
  if (p.num_rows == 0) return;
  if (p.split_tokens <= 0 || p.split_tokens % kTile != 0)
    throw std::runtime_error("paged_attention: split_tokens " + std::to_string(p.split_tokens) +
                             " is not a positive multiple of 64");
  const int group = p.h_kv > 0 ? p.h_q / p.h_kv : 0;
  if (group < 1 || group > 8 || p.h_q != group * p.h_kv)
    throw std::runtime_error("paged_attention: GQA group H_q/H_kv = " + std::to_string(p.h_q) + "/" +
                             std::to_string(p.h_kv) + " not an integer in 1..8");
  if (p.max_splits < 1 || p.max_splits > 65535)
    throw std::runtime_error("paged_attention: max_splits " + std::to_string(p.max_splits) + " outside 1..65535");
  if (p.bf16) launch_dim<__nv_bfloat16>(p, stream);
  else launch_dim<__half>(p, stream);
}

}  // namespace detfuzz::attention
