// The transformer's row and element-wise ops on CUDA: rms_norm, silu_and_mul, rope (alone, or over a
// QKV product's rows with K and V stored into the KV cache's slots). The spec,
// formulas and orders are in ops/cpu/transformer_ops.cpp; this file follows it operation for
// operation (IEEE float32, --fmad=false, __f*_rn intrinsics where the compiler could otherwise
// choose), so rms_norm gives the CPU's bits. silu's expf and rope's double cos/sin/pow are
// CUDA's libdevice functions, not glibc's: those two may differ from the CPU in the last bit,
// but each is a pure function of its own element, never of the batch.
//
// rms_norm: one CTA per row. Thread b of the CTA folds block b of kRmsBlock = 64 consecutive
// elements sequentially (and blocks b + 256, b + 512, ...), storing each block partial in shared
// memory; thread 0 then sums the partials in block order, exactly the CPU's order. A row's bits
// depend on its length H alone: not on the number of rows, the grid or the stream. (The
// sequential final sum costs H/64 dependent adds per row: fine for the model sizes detfuzz runs.)
// A thread loads its whole block before it folds it, in 16-byte loads where H and the pointers
// allow, so the fold never waits on one load after another (docs/perf/graph.md); the second pass,
// y = x * r * w, runs over 16-byte pieces of the row, coalesced.
// silu_and_mul: one thread per 16-byte piece of an output row where the row and pointers allow, else
// per element, grid-stride. rope: one thread per rotated pair index of a token and up to 8 of its
// heads, which share the pair's angle (its double pow, cos and sin are computed once for them).
// rope_store_kv: the same over a token's Q and K heads; for a K head it also copies the two V
// elements of the same place. It reads the QKV product's rows in place and writes Q, and K and V at
// the token's cache slot: the work of two copies, two ropes and two index copies in one launch,
// each rotated pair computed by the same rope_angle and rotate as rope's.
// Each launches as a programmatic dependent of the kernel before it and waits for it before it
// reads (griddep.cuh): in a forward of short kernels its launch overlaps that kernel's end.
#include "ops/cuda/activation.cuh"
#include "ops/cuda/cuda_check.h"
#include "ops/cuda/griddep.cuh"
#include "ops/cuda/transformer_ops.cuh"

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <algorithm>
#include <cstdint>
#include <stdexcept>

namespace detfuzz::cuda_kernels {
namespace {

constexpr int kRmsThreads = 256;
constexpr int kRmsBlock = 64;  // = cpu_ops::kRmsBlock

template <typename T>
__device__ float load(const T *p, int64_t i);
template <>
__device__ float load<float>(const float *p, int64_t i) {
  return p[i];
}
template <>
__device__ float load<__half>(const __half *p, int64_t i) {
  return __half2float(p[i]);
}
template <>
__device__ float load<__nv_bfloat16>(const __nv_bfloat16 *p, int64_t i) {
  return __bfloat162float(p[i]);
}

template <typename T>
__device__ void store(T *p, int64_t i, float v);
template <>
__device__ void store<float>(float *p, int64_t i, float v) {
  p[i] = v;
}
template <>
__device__ void store<__half>(__half *p, int64_t i, float v) {
  p[i] = __float2half_rn(v);
}
template <>
__device__ void store<__nv_bfloat16>(__nv_bfloat16 *p, int64_t i, float v) {
  p[i] = __float2bfloat16_rn(v);
}

// Elements per 16-byte access.
template <typename T>
constexpr int kPerVec = 16 / static_cast<int>(sizeof(T));

// V consecutive elements from p as floats: one 16-byte load where V > 1 (p 16-byte aligned).
template <typename T, int V>
__device__ __forceinline__ void load_elements(const T *p, float (&v)[V]) {
  if constexpr (V == 1) {
    v[0] = load(p, 0);
  } else {
    static_assert(V == kPerVec<T>, "a vector is 16 bytes");
    const uint4 raw = *reinterpret_cast<const uint4 *>(p);
    const T *e = reinterpret_cast<const T *>(&raw);
#pragma unroll
    for (int j = 0; j < V; ++j) v[j] = load(e, j);
  }
}
// V floats rounded to T, stored at p: one 16-byte store where V > 1.
template <typename T, int V>
__device__ __forceinline__ void store_elements(T *p, const float (&v)[V]) {
  if constexpr (V == 1) {
    store(p, 0, v[0]);
  } else {
    alignas(16) T e[V];
#pragma unroll
    for (int j = 0; j < V; ++j) store(e, j, v[j]);
    *reinterpret_cast<uint4 *>(p) = *reinterpret_cast<const uint4 *>(e);
  }
}

// y = rms_norm(x). V: elements per access, kPerVec<T> (16-byte loads and stores; the host checks
// H and the pointers' alignment) or 1.
template <typename T, int V>
__global__ void rms_norm_kernel(const T *x, const T *w, T *y, int64_t h, float eps) {
  griddep::launch_dependents();
  griddep::wait();
  extern __shared__ float partials[];  // one per block of kRmsBlock elements
  __shared__ float inv_rms;
  const int64_t row = blockIdx.x;
  const T *xr = x + row * h;
  // A block's elements are all loaded before its sum of squares (in element order) starts.
  const int64_t blocks = (h + kRmsBlock - 1) / kRmsBlock;
  for (int64_t b = threadIdx.x; b < blocks; b += kRmsThreads) {
    const int64_t first = b * kRmsBlock;
    const int n = static_cast<int>(min(static_cast<int64_t>(kRmsBlock), h - first));  // a multiple of V
    float v[kRmsBlock];
#pragma unroll
    for (int c = 0; c < kRmsBlock / V; ++c)
      if (c * V < n) load_elements<T, V>(xr + first + c * V, *reinterpret_cast<float(*)[V]>(&v[c * V]));
    float part = 0.0f;
#pragma unroll
    for (int e = 0; e < kRmsBlock; ++e)
      if (e < n) part = __fadd_rn(part, __fmul_rn(v[e], v[e]));
    partials[b] = part;
  }
  __syncthreads();
  if (threadIdx.x == 0) {
    float ss = 0.0f;
    for (int64_t b = 0; b < blocks; ++b) ss = __fadd_rn(ss, partials[b]);
    inv_rms = __fdiv_rn(1.0f, __fsqrt_rn(__fadd_rn(__fdiv_rn(ss, static_cast<float>(h)), eps)));
  }
  __syncthreads();
  const float inv = inv_rms;
  for (int64_t first = threadIdx.x * static_cast<int64_t>(V); first < h; first += kRmsThreads * V) {
    float v[V], wv[V], out[V];
    load_elements<T, V>(xr + first, v);
    load_elements<T, V>(w + first, wv);
#pragma unroll
    for (int j = 0; j < V; ++j) out[j] = __fmul_rn(__fmul_rn(v[j], inv), wv[j]);
    store_elements<T, V>(y + row * h + first, out);
  }
}

// y[r, e] = silu(x[r, e]) * x[r, i + e], V elements a thread (16-byte pieces, or 1).
template <typename T, int V>
__global__ void silu_and_mul_kernel(const T *x, T *y, int64_t rows, int64_t i) {
  griddep::launch_dependents();
  griddep::wait();
  const int64_t per_row = i / V, n = rows * per_row;
  for (int64_t k = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; k < n;
       k += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t r = k / per_row, e = (k - r * per_row) * V;
    float g[V], u[V], out[V];
    load_elements<T, V>(x + r * 2 * i + e, g);
    load_elements<T, V>(x + r * 2 * i + i + e, u);
#pragma unroll
    for (int j = 0; j < V; ++j) out[j] = silu_mul(g[j], u[j]);
    store_elements<T, V>(y + r * i + e, out);
  }
}

// cos and sin of pair i's angle at `position` (the spec's formula: double, rounded to float).
__device__ __forceinline__ void rope_angle(int64_t position, int64_t i, int64_t d, double theta, float &c, float &s) {
  const double a = static_cast<double>(position) * pow(theta, -2.0 * static_cast<double>(i) / static_cast<double>(d));
  c = static_cast<float>(cos(a));
  s = static_cast<float>(sin(a));
}

// Element pair (x0, x1) = (i, i + half) of a head, rotated by its angle's (c, s).
__device__ __forceinline__ void rotate(float x0, float x1, float c, float s, float &y0, float &y1) {
  y0 = __fsub_rn(__fmul_rn(x0, c), __fmul_rn(x1, s));
  y1 = __fadd_rn(__fmul_rn(x1, c), __fmul_rn(x0, s));
}

// A pair's angle depends on the token and the pair alone, so a thread rotates pair i of up to
// kRopeHeads heads of a token with one angle (its double pow, cos and sin are most of the work),
// loading every head's pair before it stores any.
constexpr int kRopeHeads = 8;

// The groups of kRopeHeads that `heads` heads make, and the threads rope runs over t tokens of them
// (one per pair index and group).
__host__ __device__ __forceinline__ int64_t rope_groups(int64_t heads) { return (heads + kRopeHeads - 1) / kRopeHeads; }
__host__ __device__ __forceinline__ int64_t rope_threads(int64_t t, int64_t heads, int64_t d) {
  return t * rope_groups(heads) * (d / 2);
}

// Thread k's token t, pair i, first head h0 and head count over `heads` heads: i fastest, then the
// heads' groups of kRopeHeads, then the token.
struct RopeWork {
  int64_t t, i, h0;
  int n;
};
__device__ __forceinline__ RopeWork rope_work(int64_t k, int64_t heads, int64_t half) {
  const int64_t groups = rope_groups(heads), g = (k / half) % groups;
  return {k / half / groups, k % half, g * kRopeHeads,
          static_cast<int>(min(static_cast<int64_t>(kRopeHeads), heads - g * kRopeHeads))};
}

template <typename T>
__global__ void rope_kernel(const T *x, const int64_t *positions, T *y, int64_t t_len, int64_t heads, int64_t d,
                            double theta) {
  griddep::launch_dependents();
  griddep::wait();
  const int64_t half = d / 2, n = rope_threads(t_len, heads, d);
  for (int64_t k = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; k < n;
       k += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const RopeWork w = rope_work(k, heads, half);
    const int64_t first = (w.t * heads + w.h0) * d + w.i;  // pair i of head h0 of token t
    float x0[kRopeHeads], x1[kRopeHeads];
#pragma unroll
    for (int j = 0; j < kRopeHeads; ++j)
      if (j < w.n) x0[j] = load(x, first + j * d), x1[j] = load(x, first + j * d + half);
    float c, s;
    rope_angle(positions[w.t], w.i, d, theta, c, s);
#pragma unroll
    for (int j = 0; j < kRopeHeads; ++j) {
      if (j >= w.n) break;
      float y0, y1;
      rotate(x0[j], x1[j], c, s, y0, y1);
      store(y, first + j * d, y0);
      store(y, first + j * d + half, y1);
    }
  }
}

// qkv: row t holds Q's q_heads heads, then K's kv_heads, then V's, each of d, ld elements apart.
// q [t, q_heads, d]; k_pool, v_pool [slots, kv_heads, d]; token t's K and V go to slot slots[t].
template <typename T>
__global__ void rope_store_kv_kernel(const T *qkv, int64_t ld, const int64_t *positions, const int64_t *slots, T *q,
                                     T *k_pool, T *v_pool, int64_t t_len, int64_t q_heads, int64_t kv_heads, int64_t d,
                                     double theta) {
  griddep::launch_dependents();
  griddep::wait();
  const int64_t half = d / 2, heads = q_heads + kv_heads, n = rope_threads(t_len, heads, d);
  for (int64_t k = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; k < n;
       k += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const RopeWork w = rope_work(k, heads, half);
    const int64_t i = w.i;
    const T *row = qkv + w.t * ld;
    // Every head's pair, and for a K head the V pair of the same place (copied as it is).
    float x0[kRopeHeads], x1[kRopeHeads];
    T v0[kRopeHeads], v1[kRopeHeads];
#pragma unroll
    for (int j = 0; j < kRopeHeads; ++j) {
      if (j >= w.n) break;
      const int64_t h = w.h0 + j;
      x0[j] = load(row, h * d + i), x1[j] = load(row, h * d + i + half);
      if (h >= q_heads) v0[j] = row[(h + kv_heads) * d + i], v1[j] = row[(h + kv_heads) * d + i + half];
    }
    float c, s;
    rope_angle(positions[w.t], i, d, theta, c, s);
    const int64_t slot = w.h0 + w.n > q_heads ? slots[w.t] : 0;
#pragma unroll
    for (int j = 0; j < kRopeHeads; ++j) {
      if (j >= w.n) break;
      const int64_t h = w.h0 + j;
      float y0, y1;
      rotate(x0[j], x1[j], c, s, y0, y1);
      if (h < q_heads) {
        T *out = q + (w.t * q_heads + h) * d;
        store(out, i, y0);
        store(out, i + half, y1);
      } else {
        const int64_t at = (slot * kv_heads + h - q_heads) * d;
        store(k_pool, at + i, y0);
        store(k_pool, at + i + half, y1);
        v_pool[at + i] = v0[j];
        v_pool[at + i + half] = v1[j];
      }
    }
  }
}

unsigned elementwise_blocks(int64_t n) {
  return static_cast<unsigned>(std::max<int64_t>(1, std::min<int64_t>((n + 255) / 256, 65535)));
}

template <typename F>
void by_dtype(DType dtype, const char *op, F &&f) {
  switch (dtype) {
    case DType::f32: return f(float{});
    case DType::f16: return f(__half{});
    case DType::bf16: return f(__nv_bfloat16{});
    default: throw std::invalid_argument(std::string(op) + ": dtype " + dtype_name(dtype) + " is not f32, f16 or bf16");
  }
}

bool aligned16(const void *p) { return reinterpret_cast<uintptr_t>(p) % 16 == 0; }

}  // namespace

void launch_rms_norm(DType dtype, const void *x, const void *w, void *y, int64_t rows, int64_t h, float eps,
                     cudaStream_t stream) {
  if (rows == 0 || h == 0) return;
  if (h > kRmsNormMaxH)
    throw std::invalid_argument("rms_norm: H = " + std::to_string(h) + " exceeds " + std::to_string(kRmsNormMaxH));
  const size_t smem = sizeof(float) * static_cast<size_t>((h + kRmsBlock - 1) / kRmsBlock);
  by_dtype(dtype, "rms_norm", [&](auto tag) {
    using T = decltype(tag);
    constexpr int V = kPerVec<T>;
    const bool pieces = h % V == 0 && aligned16(x) && aligned16(w) && aligned16(y);
    auto kernel = pieces ? rms_norm_kernel<T, V> : rms_norm_kernel<T, 1>;
    if (smem > 48 * 1024)
      DETFUZZ_CUDA_CHECK(
          cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(smem)));
    griddep::launch(kernel, static_cast<unsigned>(rows), kRmsThreads, smem, stream, static_cast<const T *>(x),
                    static_cast<const T *>(w), static_cast<T *>(y), h, eps);
  });
}

void launch_silu_and_mul(DType dtype, const void *x, void *y, int64_t rows, int64_t i, cudaStream_t stream) {
  if (rows * i == 0) return;
  by_dtype(dtype, "silu_and_mul", [&](auto tag) {
    using T = decltype(tag);
    constexpr int V = kPerVec<T>;
    const bool pieces = i % V == 0 && aligned16(x) && aligned16(y);
    griddep::launch(pieces ? silu_and_mul_kernel<T, V> : silu_and_mul_kernel<T, 1>,
                    elementwise_blocks(rows * i / (pieces ? V : 1)), 256, 0, stream, static_cast<const T *>(x),
                    static_cast<T *>(y), rows, i);
  });
}

void launch_rope(DType dtype, const void *x, const int64_t *positions, void *y, int64_t t, int64_t heads, int64_t d,
                 double theta, cudaStream_t stream) {
  if (t * heads * d == 0) return;
  by_dtype(dtype, "rope", [&](auto tag) {
    using T = decltype(tag);
    griddep::launch(rope_kernel<T>, elementwise_blocks(rope_threads(t, heads, d)), 256, 0, stream,
                    static_cast<const T *>(x), positions, static_cast<T *>(y), t, heads, d, theta);
  });
}

void launch_rope_store_kv(DType dtype, const void *qkv, int64_t ld, const int64_t *positions, const int64_t *slots,
                          void *q, void *k_pool, void *v_pool, int64_t t, int64_t q_heads, int64_t kv_heads, int64_t d,
                          double theta, cudaStream_t stream) {
  if (t * (q_heads + kv_heads) * d == 0) return;
  by_dtype(dtype, "rope_store_kv", [&](auto tag) {
    using T = decltype(tag);
    griddep::launch(rope_store_kv_kernel<T>, elementwise_blocks(rope_threads(t, q_heads + kv_heads, d)), 256, 0, stream,
                    static_cast<const T *>(qkv), ld, positions, slots, static_cast<T *>(q), static_cast<T *>(k_pool),
                    static_cast<T *>(v_pool), t, q_heads, kv_heads, d, theta);
  });
}

}  // namespace detfuzz::cuda_kernels
