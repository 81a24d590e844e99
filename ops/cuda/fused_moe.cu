// The batch-invariant fused MoE layer on CUDA: routing, two grouped GEMMs over all experts, the
// combine; the order of ops/cpu/moe.h, operation for operation.
//
// Design. Routing is one warp per token (a selection of the top k under the CPU's rule, then
// the softmax of the chosen logits in slot order). The (token, slot) pairs are grouped by
// expert into tiles of at most 32 pairs of one expert (moe_group.cu: a stable counting sort on the
// device); each grouped GEMM is one launch over all tiles (x the output columns in fixed widths),
// so an expert's weights are read once per tile, and skips the empty tiles that pad the list to
// its bound.
// The tile count follows the routing, but no bit does: each output element is one thread's own
// dot product, summed on the CUDA cores (IEEE float32, --fmad=false, __f*_rn) in the CPU's order
// (a float32 partial per 128-wide K block, sequential from zero, times its fp8 block scale,
// added in K order) over 32-wide chunks staged in shared memory. The gate/up GEMM computes a
// column's gate and up rows together and applies silu_and_mul (silu's expf as the CUDA
// silu_and_mul kernel's) in its epilogue, rounding to x's dtype; the down GEMM writes each pair's expert output; the
// combine adds a token's k outputs in slot order, from zero, with no atomics, and rounds once.
// So a token's bits are the CPU kernel's (but for expf and exp in the last place), whatever the
// batch, the experts' loads or the tiles. On an sm_90 GPU, 16-bit layers whose widths TMA can read
// run the tensor-core grouped GEMMs of fused_moe_sm90.cu (fp8 weights: fused_moe_fp8_sm90.cu)
// instead, with bits of their own; the routing and the combine stay these. The planted mutants
// run these kernels with a schedule taken from the experts' loads (MoeGemmParams' mutation
// fields, the combine's slot_order), which the invariant layer never sets.
#include "ops/cuda/activation.cuh"
#include "ops/cuda/cuda_check.h"
#include "ops/cuda/fused_moe.cuh"
#include "ops/cuda/mma_sm80.cuh"  // to_f, from_f

#include <cuda_fp8.h>

#include <algorithm>
#include <climits>
#include <stdexcept>
#include <string>

namespace detfuzz::cuda_kernels {
namespace {

constexpr int kThreads = 256, kChunk = 32, kBlockK = 128, kRows = static_cast<int>(kMoeTileRows);

__device__ __forceinline__ bool routes_before(const float *l, int64_t a, int64_t b) {
  const bool na = isnan(l[a]), nb = isnan(l[b]);
  if (na != nb) return nb;
  if (!na && l[a] != l[b]) return l[a] > l[b];
  return a < b;
}

// One warp per token. Each slot's expert is the first of the untaken experts under
// routes_before, a strict total order, so the warp's reduction picks the one the CPU's scan picks;
// the weights are then lane 0's, in the CPU's order.
__global__ void moe_route_kernel(const float *logits, int64_t t_len, int64_t e_len, int64_t k, int32_t *ids,
                                 float *weights) {
  const int lane = threadIdx.x % 32;
  const int64_t t = blockIdx.x * static_cast<int64_t>(blockDim.x / 32) + threadIdx.x / 32;
  if (t >= t_len) return;
  const float *l = logits + t * e_len;
  int32_t *id = ids + t * k;
  float *w = weights + t * k;
  for (int64_t s = 0; s < k; ++s) {
    int64_t best = -1;
    for (int64_t c = lane; c < e_len; c += 32) {
      bool taken = false;
      for (int64_t q = 0; q < s; ++q) taken = taken || id[q] == c;
      if (!taken && (best < 0 || routes_before(l, c, best))) best = c;
    }
    for (int off = 16; off > 0; off /= 2) {
      const int64_t other = __shfl_down_sync(0xffffffffu, best, off);
      if (other >= 0 && (best < 0 || routes_before(l, other, best))) best = other;
    }
    if (lane == 0) id[s] = static_cast<int32_t>(best);
    __syncwarp();
  }
  if (lane != 0) return;
  const float top = l[id[0]];
  float sum = 0.f;
  for (int64_t s = 0; s < k; ++s) {
    w[s] = static_cast<float>(exp(static_cast<double>(__fsub_rn(l[id[s]], top))));
    sum = __fadd_rn(sum, w[s]);
  }
  for (int64_t s = 0; s < k; ++s) w[s] = __fdiv_rn(w[s], sum);
}

__device__ __forceinline__ float load_as_float(const void *p, DType t, int64_t i) {
  switch (t) {
    case DType::f16: return to_f<__half>(static_cast<const uint16_t *>(p)[i]);
    case DType::bf16: return to_f<__nv_bfloat16>(static_cast<const uint16_t *>(p)[i]);
    default: return static_cast<const float *>(p)[i];
  }
}

__device__ __forceinline__ float weight_as_float(const MoeGemmParams &p, int64_t i) {
  if (!p.w_scale) return load_as_float(p.w, p.w_dtype, i);
  __nv_fp8_e4m3 v;
  v.__x = static_cast<const __nv_fp8_storage_t *>(p.w)[i];
  return static_cast<float>(v);
}

// act is stored rounded to x's dtype, as the down GEMM reads it (ops/cpu/moe.h).
__device__ __forceinline__ float round_as(DType t, float v) {
  switch (t) {
    case DType::f16: return to_f<__half>(from_f<__half>(v));
    case DType::bf16: return to_f<__nv_bfloat16>(from_f<__nv_bfloat16>(v));
    default: return v;
  }
}

// A tile of up to kRows pairs of one expert by kCols output columns; gate_up: each column's
// gate and up rows (2 dots per element), down: one row per column.
template <bool kGateUp>
__global__ void __launch_bounds__(kThreads) moe_gemm_kernel(const MoeGemmParams p, const MoeTiles tiles) {
  constexpr int kCols = kGateUp ? 32 : 64, kWRows = 64, kPer = kRows * kCols / kThreads, kDots = kGateUp ? 2 : 1;
  __shared__ float a_s[kRows][kChunk + 1];
  __shared__ float w_s[kWRows][kChunk + 1];
  const int tid = threadIdx.x;
  const int64_t expert = tiles.tiles[3 * blockIdx.x], first = tiles.tiles[3 * blockIdx.x + 1];
  const int count = tiles.tiles[3 * blockIdx.x + 2];
  if (count == 0) return;  // a tile that pads the list (uniform over the block)
  const int64_t n_out = kGateUp ? p.rows / 2 : p.rows, c0 = static_cast<int64_t>(blockIdx.y) * kCols;
  const int64_t K = p.cols, kblocks_w = (p.cols + kBlockK - 1) / kBlockK;
  const int64_t srows = (p.rows + kBlockK - 1) / kBlockK;
  const int64_t w_base = expert * p.rows * p.cols;
  // The planted mutants' schedules (ops/cuda/fused_moe.cuh); the invariant kernel has neither.
  const int64_t load = p.expert_tokens ? p.expert_tokens[expert] : 0;
  const int64_t k_block = p.small_k_block_from > 0 && load >= p.small_k_block_from ? kChunk : kBlockK;
  const bool split = p.split_k_up_to > 0 && load <= p.split_k_up_to;
  const int64_t k_split = split ? K / 2 / kChunk * kChunk : -1;

  // The weight row of shared-memory row c, or -1 past the matrix.
  auto weight_row = [&](int c) -> int64_t {
    const int64_t col = c0 + (kGateUp ? c % kCols : c);
    if (col >= n_out) return -1;
    return kGateUp && c >= kCols ? n_out + col : col;
  };

  float total[kPer][kDots], partial[kPer][kDots], second[kPer][kDots];  // second: a split's part after k_split
#pragma unroll
  for (int q = 0; q < kPer; ++q)
#pragma unroll
    for (int d = 0; d < kDots; ++d) total[q][d] = partial[q][d] = second[q][d] = 0.f;

  for (int64_t kc = 0; kc < K; kc += kChunk) {
    const int len = static_cast<int>(K - kc < kChunk ? K - kc : kChunk);
    __syncthreads();
    for (int i = tid; i < kRows * kChunk; i += kThreads) {
      const int r = i / kChunk, k = i % kChunk;
      float v = 0.f;
      if (r < count && k < len) {
        const int64_t pair = tiles.order[first + r];
        const int64_t row = kGateUp ? pair / p.top_k : pair;
        v = load_as_float(p.a, p.a_dtype, row * K + kc + k);
      }
      a_s[r][k] = v;
    }
    for (int i = tid; i < kWRows * kChunk; i += kThreads) {
      const int c = i / kChunk, k = i % kChunk;
      const int64_t wr = weight_row(c);
      w_s[c][k] = wr >= 0 && k < len ? weight_as_float(p, w_base + wr * K + kc + k) : 0.f;
    }
    __syncthreads();
#pragma unroll
    for (int q = 0; q < kPer; ++q) {
      const int e = tid + q * kThreads, r = e / kCols, c = e % kCols;
#pragma unroll
      for (int d = 0; d < kDots; ++d) {
        float s = partial[q][d];
        for (int k = 0; k < len; ++k) s = __fadd_rn(s, __fmul_rn(w_s[c + d * kCols][k], a_s[r][k]));
        partial[q][d] = s;
      }
    }
    // The end of a 128-wide K block (or of K): promote the block's partials.
    if ((kc + kChunk) % k_block == 0 || kc + kChunk >= K || kc + kChunk == k_split) {
      const int64_t kb = kc / kBlockK;
      float(&into)[kPer][kDots] = split && kc >= k_split ? second : total;
#pragma unroll
      for (int q = 0; q < kPer; ++q) {
        const int c = (tid + q * kThreads) % kCols;
#pragma unroll
        for (int d = 0; d < kDots; ++d) {
          const int64_t wr = weight_row(c + d * kCols);
          if (p.w_scale && wr >= 0) {
            const float scale = p.w_scale[(expert * srows + wr / kBlockK) * kblocks_w + kb];
            into[q][d] = __fadd_rn(into[q][d], __fmul_rn(partial[q][d], scale));
          } else {
            into[q][d] = __fadd_rn(into[q][d], partial[q][d]);
          }
          partial[q][d] = 0.f;
        }
      }
    }
  }

  if (split)
#pragma unroll
    for (int q = 0; q < kPer; ++q)
#pragma unroll
      for (int d = 0; d < kDots; ++d) total[q][d] = __fadd_rn(total[q][d], second[q][d]);
#pragma unroll
  for (int q = 0; q < kPer; ++q) {
    const int e = tid + q * kThreads, r = e / kCols, c = e % kCols;
    const int64_t col = c0 + c;
    if (r >= count || col >= n_out) continue;
    const int64_t pair = tiles.order[first + r];
    p.out[pair * n_out + col] = kGateUp ? round_as(p.a_dtype, silu_mul(total[q][0], total[q][kDots - 1])) : total[q][0];
  }
}

template <typename Out>
__global__ void moe_combine_kernel(const float *y, const float *weights, int64_t t_len, int64_t k, int64_t h, void *out,
                                   const int32_t *slot_order) {
  const int64_t n = t_len * h;
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t t = i / h, j = i % h;
    float acc = 0.f;
    for (int64_t o = 0; o < k; ++o) {
      const int64_t s = slot_order ? slot_order[t * k + o] : o;
      acc = __fadd_rn(acc, __fmul_rn(weights[t * k + s], y[(t * k + s) * h + j]));
    }
    store_out<Out>(out, i, acc);
  }
}

unsigned blocks_for(int64_t n, int threads) {
  const int64_t b = (n + threads - 1) / threads;
  return static_cast<unsigned>(b < 65535 * 16 ? b : 65535 * 16);
}

}  // namespace

void launch_moe_route(const float *logits, int64_t t, int64_t e, int64_t k, int32_t *ids, float *weights,
                      cudaStream_t stream) {
  if (t == 0) return;
  if (k < 1 || k > e) throw std::invalid_argument("moe route: top_k must be in [1, E]");
  moe_route_kernel<<<static_cast<unsigned>((t + 3) / 4), 128, 0, stream>>>(logits, t, e, k, ids, weights);
  DETFUZZ_LAUNCH_CHECK();
}

void launch_moe_gemm(const MoeGemmParams &p, const MoeTiles &tiles, cudaStream_t stream) {
  const int64_t n_out = p.gate_up ? p.rows / 2 : p.rows, cols = p.gate_up ? 32 : 64;
  if (tiles.count == 0 || n_out == 0) return;
  if ((n_out + cols - 1) / cols > 65535)
    throw std::invalid_argument("moe gemm: " + std::to_string(n_out) + " output columns exceed the grid");
  const dim3 grid(static_cast<unsigned>(tiles.count), static_cast<unsigned>((n_out + cols - 1) / cols));
  if (p.gate_up)
    moe_gemm_kernel<true><<<grid, kThreads, 0, stream>>>(p, tiles);
  else
    moe_gemm_kernel<false><<<grid, kThreads, 0, stream>>>(p, tiles);
  DETFUZZ_LAUNCH_CHECK();
}

void launch_moe_combine(const float *y, const float *weights, int64_t t, int64_t k, int64_t h, void *out,
                        DType out_dtype, cudaStream_t stream, const int32_t *slot_order) {
  if (t * h == 0) return;
  const unsigned blocks = blocks_for(t * h, 256);
  switch (out_dtype) {
    case DType::f32: moe_combine_kernel<float><<<blocks, 256, 0, stream>>>(y, weights, t, k, h, out, slot_order); break;
    case DType::f16:
      moe_combine_kernel<__half><<<blocks, 256, 0, stream>>>(y, weights, t, k, h, out, slot_order);
      break;
    case DType::bf16:
      moe_combine_kernel<__nv_bfloat16><<<blocks, 256, 0, stream>>>(y, weights, t, k, h, out, slot_order);
      break;
    default: throw std::invalid_argument(std::string("moe combine: output dtype ") + dtype_name(out_dtype));
  }
  DETFUZZ_LAUNCH_CHECK();
}

}  // namespace detfuzz::cuda_kernels
