// Batch-invariant row reductions: log_softmax (three passes, as the seed) and mean.
//
// Design. A row of `len` elements is cut into chunks of V = 16 bytes / sizeof(input) consecutive
// elements. A group of TPR threads (a power of two, 32..1024, picked from len and the dtype
// alone by row_reduce_threads / log_softmax_threads) owns the row; thread t takes chunks t,
// t + TPR, t + 2*TPR, ... in
// that order and folds each chunk's elements in index order into one float32 partial. The TPR
// partials are then combined in a fixed tree: a shfl_down tree (16, 8, 4, 2, 1) inside each warp,
// then lane 0 of each warp publishes to shared memory and every thread folds the group's warp
// results in warp order. So a row's reduction order is a function of (len, dtype) only: the
// number of rows, the row's index, the grid, the stream and the alignment never enter it
// (unaligned rows take scalar loads of the very same chunks). A block holds max(TPR, 256) / TPR
// row groups and walks rows grid-stride.
//
// log_softmax: pass 1 max (NaN-propagating, so a NaN row gives NaN), pass 2 sum of
// expf(x - max), pass 3 y = (x - max) - logf(sum). A row of -inf gives NaN (as torch), a -inf
// element in a finite row gives -inf. When the row fits (at most 64 values per thread) pass 1
// keeps its chunks in registers and passes 2 and 3 read them there; otherwise they re-read
// global memory (L2). Both ways fold the same values in the same order.
// mean: one pass, y = sum / len in float32, integers converted to float32 element by element.
#include "ops/cuda/cuda_check.h"
#include "ops/cuda/row_reduce.cuh"

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cstdint>
#include <stdexcept>
#include <string>

namespace detfuzz::cuda_kernels {
namespace {

template <typename T>
__device__ __forceinline__ float to_f(T v) {
  return static_cast<float>(v);
}
template <>
__device__ __forceinline__ float to_f<__half>(__half v) {
  return __half2float(v);
}
template <>
__device__ __forceinline__ float to_f<__nv_bfloat16>(__nv_bfloat16 v) {
  return __bfloat162float(v);
}

template <typename T>
__device__ __forceinline__ uint32_t out_bits(float v);
template <>
__device__ __forceinline__ uint32_t out_bits<float>(float v) {
  return __float_as_uint(v);
}
template <>
__device__ __forceinline__ uint32_t out_bits<__half>(float v) {
  return __half_as_ushort(__float2half_rn(v));
}
template <>
__device__ __forceinline__ uint32_t out_bits<__nv_bfloat16>(float v) {
  return __bfloat16_as_ushort(__float2bfloat16_rn(v));
}
template <typename T>
__device__ __forceinline__ T from_f(float v);
template <>
__device__ __forceinline__ float from_f<float>(float v) {
  return v;
}
template <>
__device__ __forceinline__ __half from_f<__half>(float v) {
  return __float2half_rn(v);
}
template <>
__device__ __forceinline__ __nv_bfloat16 from_f<__nv_bfloat16>(float v) {
  return __float2bfloat16_rn(v);
}

template <typename Tin>
struct Chunk {
  static constexpr int V = 16 / static_cast<int>(sizeof(Tin));
};

__device__ __forceinline__ float nan_max(float a, float b) { return (a != a || a > b) ? a : b; }

// Loads chunk c of a row as floats; elements past `len` read as `pad` (the identity of the fold
// that follows: -inf for max, 0 for sum), so every fold runs over whole chunks.
template <typename Tin>
__device__ __forceinline__ void load_chunk(const Tin *row, int64_t c, int64_t len, bool vec, float pad,
                                           float (&v)[Chunk<Tin>::V]) {
  constexpr int V = Chunk<Tin>::V;
  const int64_t base = c * V;
  if (vec && base + V <= len) {
    const uint4 u = *reinterpret_cast<const uint4 *>(row + base);
    Tin t[V];
    memcpy(t, &u, sizeof(u));
#pragma unroll
    for (int e = 0; e < V; ++e) v[e] = to_f(t[e]);
  } else {
#pragma unroll
    for (int e = 0; e < V; ++e) v[e] = base + e < len ? to_f(row[base + e]) : pad;
  }
}

// Fixed-order combination of the TPR partials of each row group; every thread of the group gets
// the result. All threads of the block must call it (it holds two barriers).
template <bool IS_MAX>
__device__ __forceinline__ float group_reduce(float v, int tpr, float *red) {
#pragma unroll
  for (int off = 16; off > 0; off >>= 1) {
    const float o = __shfl_down_sync(0xffffffffu, v, off);
    v = IS_MAX ? nan_max(v, o) : v + o;
  }
  const int warp = threadIdx.x >> 5;
  if ((threadIdx.x & 31) == 0) red[warp] = v;
  __syncthreads();
  const int wpg = tpr >> 5;
  const int first = (warp / wpg) * wpg;
  float r = red[first];
  for (int w = 1; w < wpg; ++w) r = IS_MAX ? nan_max(r, red[first + w]) : r + red[first + w];
  __syncthreads();
  return r;
}

// CACHE: one row per block (blockDim == tpr) and the row's floats fit the dynamic shared
// memory; pass 1 writes each thread's chunks there and passes 2 and 3 read them back (the same
// thread's own chunks, so no barrier is needed beyond the reductions').
template <typename Tin, typename Tout, bool CACHE>
__global__ void __launch_bounds__(1024)
    log_softmax_kernel(const Tin *__restrict__ x, Tout *__restrict__ y, int64_t rows, int64_t len, int64_t xs,
                       int64_t ys, int tpr, bool vec_in, bool vec_out) {
  constexpr int V = Chunk<Tin>::V;
  constexpr int OUT_BYTES = V * static_cast<int>(sizeof(Tout));
  static_assert(OUT_BYTES % 16 == 0, "chunk output must be whole 16-byte vectors");
  __shared__ float red[32];
  extern __shared__ __align__(16) uint8_t row_cache_raw[];
  Tin *row_cache = reinterpret_cast<Tin *>(row_cache_raw);  // the row's raw input values
  const int gpb = blockDim.x / tpr;
  const int g = threadIdx.x / tpr, lt = threadIdx.x % tpr;
  const int64_t chunks = (len + V - 1) / V;

  for (int64_t rbase = static_cast<int64_t>(blockIdx.x) * gpb; rbase < rows;
       rbase += static_cast<int64_t>(gridDim.x) * gpb) {
    const int64_t row = rbase + g;
    const bool active = row < rows;
    const Tin *xr = x + (active ? row * xs : 0);
    // Chunk c as floats, padded past len with -inf (pass 1's identity; passes 2 and 3 skip pads).
    auto get = [&](int64_t c, float(&v)[V]) {
      if (CACHE) {
        // Whole chunks are cached (pads included), so this re-creates pass 1's floats exactly.
        load_chunk<Tin>(row_cache, c, chunks * V, true, -INFINITY, v);
      } else {
        load_chunk<Tin>(xr, c, len, vec_in, -INFINITY, v);
      }
    };

    float m = -INFINITY;
    if (active) {
#pragma unroll 4
      for (int64_t c = lt; c < chunks; c += tpr) {
        float v[V];
        if (CACHE) {
          // Keep the raw chunk (pads as -inf) so passes 2 and 3 convert the same values again.
          Tin raw[V];
          const int64_t base = c * V;
          if (vec_in && base + V <= len) {
            const uint4 u = *reinterpret_cast<const uint4 *>(xr + base);
            memcpy(raw, &u, sizeof(u));
          } else {
#pragma unroll
            for (int e = 0; e < V; ++e) raw[e] = base + e < len ? xr[base + e] : from_f<Tin>(-INFINITY);
          }
          uint4 u;
          memcpy(&u, raw, sizeof(u));
          *reinterpret_cast<uint4 *>(row_cache + base) = u;
#pragma unroll
          for (int e = 0; e < V; ++e) v[e] = to_f(raw[e]);
        } else {
          load_chunk<Tin>(xr, c, len, vec_in, -INFINITY, v);
        }
#pragma unroll
        for (int e = 0; e < V; ++e) m = nan_max(m, v[e]);
      }
    }
    m = group_reduce<true>(m, tpr, red);

    float s = 0.f;
    if (active) {
#pragma unroll 4
      for (int64_t c = lt; c < chunks; c += tpr) {
        float v[V];
        get(c, v);
        const int64_t nv = len - c * V;
#pragma unroll
        for (int e = 0; e < V; ++e)
          if (e < nv) s = s + expf(v[e] - m);
      }
    }
    s = group_reduce<false>(s, tpr, red);
    const float lse = logf(s);

    if (active) {
      Tout *yr = y + row * ys;
#pragma unroll 2
      for (int64_t c = lt; c < chunks; c += tpr) {
        float v[V];
        get(c, v);
        const int64_t base = c * V;
        if (vec_out && base + V <= len) {
          uint32_t words[OUT_BYTES / 4];
          if (sizeof(Tout) == 4) {
#pragma unroll
            for (int e = 0; e < V; ++e) words[e] = out_bits<Tout>((v[e] - m) - lse);
          } else {
#pragma unroll
            for (int w = 0; w < V / 2; ++w)
              words[w] = out_bits<Tout>((v[2 * w] - m) - lse) | (out_bits<Tout>((v[2 * w + 1] - m) - lse) << 16);
          }
#pragma unroll
          for (int q = 0; q < OUT_BYTES / 16; ++q)
            reinterpret_cast<uint4 *>(yr + base)[q] =
                make_uint4(words[4 * q], words[4 * q + 1], words[4 * q + 2], words[4 * q + 3]);
        } else {
#pragma unroll
          for (int e = 0; e < V; ++e)
            if (base + e < len) yr[base + e] = from_f<Tout>((v[e] - m) - lse);
        }
      }
    }
    if (CACHE) __syncthreads();  // the next row overwrites the cache
  }
}

template <typename Tin, typename Tout>
__global__ void __launch_bounds__(1024) mean_kernel(const Tin *__restrict__ x, Tout *__restrict__ y, int64_t rows,
                                                    int64_t len, int64_t xs, int tpr, bool vec_in) {
  constexpr int V = Chunk<Tin>::V;
  __shared__ float red[32];
  const int gpb = blockDim.x / tpr;
  const int g = threadIdx.x / tpr, lt = threadIdx.x % tpr;
  const int64_t chunks = (len + V - 1) / V;
  for (int64_t rbase = static_cast<int64_t>(blockIdx.x) * gpb; rbase < rows;
       rbase += static_cast<int64_t>(gridDim.x) * gpb) {
    const int64_t row = rbase + g;
    const bool active = row < rows;
    float s = 0.f;
    if (active) {
      const Tin *xr = x + row * xs;
#pragma unroll 4
      for (int64_t c = lt; c < chunks; c += tpr) {
        float v[V];
        load_chunk<Tin>(xr, c, len, vec_in, 0.f, v);
#pragma unroll
        for (int e = 0; e < V; ++e) s = s + v[e];
      }
    }
    s = group_reduce<false>(s, tpr, red);
    if (active && lt == 0) y[row] = from_f<Tout>(s / static_cast<float>(len));
  }
}

constexpr int64_t kMaxCacheBytes = 160 * 1024;

int chunk_width(DType t) { return 16 / dtype_size(t); }

bool aligned16(const void *p) { return (reinterpret_cast<uintptr_t>(p) & 15) == 0; }

struct Launch {
  int tpr, threads, blocks;
};

Launch plan(const RowReduceParams &p, int tpr) {
  Launch l{};
  l.tpr = tpr;
  l.threads = l.tpr > 256 ? l.tpr : 256;
  const int64_t gpb = l.threads / l.tpr;
  const int64_t want = (p.rows + gpb - 1) / gpb;
  l.blocks = static_cast<int>(want < (1 << 20) ? want : (1 << 20));
  return l;
}

template <typename Tin, typename Tout>
void lsm_typed(const RowReduceParams &p, cudaStream_t stream) {
  const Launch l = plan(p, log_softmax_threads(p.in_dtype, p.len));
  const int V = chunk_width(p.in_dtype);
  const int64_t chunks = (p.len + V - 1) / V;
  const int64_t cache_bytes = chunks * V * static_cast<int64_t>(sizeof(Tin));
  const bool cache = l.threads == l.tpr && cache_bytes <= kMaxCacheBytes;
  const bool vec_in = aligned16(p.x) && p.x_row_stride % V == 0;
  const bool vec_out = aligned16(p.y) && p.y_row_stride % V == 0;
  const auto *x = static_cast<const Tin *>(p.x);
  auto *y = static_cast<Tout *>(p.y);
  if (cache) {
    DETFUZZ_CUDA_CHECK(cudaFuncSetAttribute(log_softmax_kernel<Tin, Tout, true>,
                                            cudaFuncAttributeMaxDynamicSharedMemorySize,
                                            static_cast<int>(kMaxCacheBytes)));
    log_softmax_kernel<Tin, Tout, true><<<l.blocks, l.threads, static_cast<size_t>(cache_bytes), stream>>>(
        x, y, p.rows, p.len, p.x_row_stride, p.y_row_stride, l.tpr, vec_in, vec_out);
  } else {
    log_softmax_kernel<Tin, Tout, false><<<l.blocks, l.threads, 0, stream>>>(x, y, p.rows, p.len, p.x_row_stride,
                                                                             p.y_row_stride, l.tpr, vec_in, vec_out);
  }
  DETFUZZ_LAUNCH_CHECK();
}

template <typename Tin, typename Tout>
void mean_typed(const RowReduceParams &p, cudaStream_t stream) {
  const Launch l = plan(p, row_reduce_threads(p.in_dtype, p.len));
  const int V = chunk_width(p.in_dtype);
  const bool vec_in = aligned16(p.x) && p.x_row_stride % V == 0;
  mean_kernel<Tin, Tout><<<l.blocks, l.threads, 0, stream>>>(static_cast<const Tin *>(p.x), static_cast<Tout *>(p.y),
                                                             p.rows, p.len, p.x_row_stride, l.tpr, vec_in);
  DETFUZZ_LAUNCH_CHECK();
}

template <typename Tin>
void mean_out(const RowReduceParams &p, cudaStream_t stream) {
  switch (p.out_dtype) {
    case DType::f32: return mean_typed<Tin, float>(p, stream);
    case DType::f16: return mean_typed<Tin, __half>(p, stream);
    case DType::bf16: return mean_typed<Tin, __nv_bfloat16>(p, stream);
    default:
      throw std::invalid_argument(std::string("launch_mean: output dtype ") + dtype_name(p.out_dtype) +
                                  " is not supported");
  }
}

}  // namespace

namespace {
// The smallest power of two in [32, 1024] giving each thread at most `per_thread` elements.
int threads_for(DType in, int64_t len, int64_t per_thread) {
  const int64_t V = chunk_width(in);
  const int64_t maxc = per_thread / V;
  const int64_t chunks = (len + V - 1) / V;
  const int64_t want = (chunks + maxc - 1) / maxc;
  int tpr = 32;
  while (tpr < 1024 && tpr < want) tpr <<= 1;
  return tpr;
}
}  // namespace

// mean: up to 64 elements per thread (512 threads at 32768; H200: 1.0x torch there, where 1024
// threads gave 0.91x for float32 and 0.84x for bfloat16).
int row_reduce_threads(DType in, int64_t len) { return threads_for(in, len, 64); }

// log_softmax: float32 up to 32 elements per thread (1024 threads at 32768: 0.85x torch on an
// H200, against 0.79x with 512); 16-bit up to 64 (512 threads, with the raw row in 64 KiB of
// shared memory: three blocks per SM).
int log_softmax_threads(DType in, int64_t len) { return threads_for(in, len, in == DType::f32 ? 32 : 64); }

void launch_log_softmax(const RowReduceParams &p, cudaStream_t stream) {
  if (p.rows < 0 || p.len < 0) throw std::invalid_argument("launch_log_softmax: negative size");
  if (p.rows == 0 || p.len == 0) return;
  const DType i = p.in_dtype, o = p.out_dtype;
  if (i == DType::f32 && o == DType::f32) return lsm_typed<float, float>(p, stream);
  if (i == DType::f16 && o == DType::f16) return lsm_typed<__half, __half>(p, stream);
  if (i == DType::f16 && o == DType::f32) return lsm_typed<__half, float>(p, stream);
  if (i == DType::bf16 && o == DType::bf16) return lsm_typed<__nv_bfloat16, __nv_bfloat16>(p, stream);
  if (i == DType::bf16 && o == DType::f32) return lsm_typed<__nv_bfloat16, float>(p, stream);
  throw std::invalid_argument(std::string("launch_log_softmax: ") + dtype_name(i) + " -> " + dtype_name(o) +
                              " is not supported");
}

void launch_mean(const RowReduceParams &p, cudaStream_t stream) {
  if (p.rows < 0 || p.len < 0) throw std::invalid_argument("launch_mean: negative size");
  if (p.rows == 0) return;
  switch (p.in_dtype) {
    case DType::f32: return mean_out<float>(p, stream);
    case DType::f16: return mean_out<__half>(p, stream);
    case DType::bf16: return mean_out<__nv_bfloat16>(p, stream);
    case DType::i32: return mean_out<int32_t>(p, stream);
    case DType::i64: return mean_out<int64_t>(p, stream);
  }
}

}  // namespace detfuzz::cuda_kernels
