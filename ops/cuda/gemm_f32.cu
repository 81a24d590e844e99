// Batch-invariant persistent matmul for float32: IEEE fused multiply-add on the CUDA cores,
// never TF32.
//
// Design. Same persistent schedule as gemm_tc.cu (one CTA per SM, grouped tile order, batch
// outermost, a tile wholly owned by one CTA, no split-K, no atomics). A tile is 128 x 128,
// 256 threads, each owning an 8 x 8 register block (rows ty*4+i and 64+ty*4+i, columns tx*4+j and
// 64+tx*4+j). K advances 8 at a time through double-buffered shared memory (A stored k-major so
// each thread reads float4 fragments), with the next slab prefetched into registers while the
// current one is used. Every output element is acc = __fmaf_rn(a[k], b[k], acc) for k = 0, 1, ...,
// K-1 in order, starting from +0: its bits depend on nothing but its row of A, its column of B
// and K, so any tiling would give the same bits, and in particular any M does. Zero-filled
// K padding leaves acc unchanged (fma(0, 0, acc) == acc, and acc is never -0). Register rows past
// M skip their FMAs, so small-M tiles cost little more than streaming B. Epilogue as gemm_tc.cu:
// v = alpha * acc, then v + beta * bias.
#include "ops/cuda/cuda_check.h"
#include "ops/cuda/gemm.cuh"

#include <cstdint>

namespace detfuzz::cuda_kernels {
namespace {

constexpr int BM = 128, BN = 128, BK = 8, THREADS = 256, GROUP_M = 8, PAD = 4;

struct F32Args {
  const float *a, *b, *bias;
  float *c;
  int64_t lda, ldb, ldc, sa, sb, sc, sbias, bsm, bsn;
  int64_t M, N, K, batch;
  float alpha, beta;
};

template <bool PARTIAL>
__device__ __forceinline__ void fma_slab(float (&acc)[8][8], const float (*As)[BM + PAD], const float (*Bs)[BN + PAD],
                                         int ty, int tx, int valid_m) {
#pragma unroll
  for (int k = 0; k < BK; ++k) {
    const float4 a0 = *reinterpret_cast<const float4 *>(&As[k][ty * 4]);
    const float4 a1 = *reinterpret_cast<const float4 *>(&As[k][64 + ty * 4]);
    const float4 b0 = *reinterpret_cast<const float4 *>(&Bs[k][tx * 4]);
    const float4 b1 = *reinterpret_cast<const float4 *>(&Bs[k][64 + tx * 4]);
    const float a[8] = {a0.x, a0.y, a0.z, a0.w, a1.x, a1.y, a1.z, a1.w};
    const float b[8] = {b0.x, b0.y, b0.z, b0.w, b1.x, b1.y, b1.z, b1.w};
#pragma unroll
    for (int i = 0; i < 8; ++i) {
      if (PARTIAL) {
        const int r = (i < 4 ? ty * 4 + i : 64 + ty * 4 + i - 4);
        if (r >= valid_m) continue;
      }
#pragma unroll
      for (int j = 0; j < 8; ++j) acc[i][j] = __fmaf_rn(a[i], b[j], acc[i][j]);
    }
  }
}

template <bool B_KN>
__global__ void __launch_bounds__(THREADS, 1) gemm_f32_kernel(const F32Args p) {
  __shared__ __align__(16) float As[2][BK][BM + PAD];
  __shared__ __align__(16) float Bs[2][BK][BN + PAD];

  const int tid = threadIdx.x;
  const int ty = tid >> 4, tx = tid & 15;

  const int64_t tiles_m = (p.M + BM - 1) / BM, tiles_n = (p.N + BN - 1) / BN;
  const int64_t tiles_per_batch = tiles_m * tiles_n;
  const int64_t total = tiles_per_batch * p.batch;
  const int64_t ktiles = (p.K + BK - 1) / BK;

  // Loader coordinates: A (and B when stored [N,K]): row tid/2, k-quad (tid&1)*4.
  // B stored [K,N]: k row tid/32, n-quad (tid&31)*4.
  const int lr = tid >> 1, lk = (tid & 1) * 4;
  const int bk_r = tid >> 5, bn_q = (tid & 31) * 4;

  for (int64_t tile = blockIdx.x; tile < total; tile += gridDim.x) {
    const int64_t bidx = tile / tiles_per_batch;
    const int64_t t = tile - bidx * tiles_per_batch;
    const int64_t in_group = GROUP_M * tiles_n;
    const int64_t first_m = (t / in_group) * GROUP_M;
    const int64_t gsize = min(tiles_m - first_m, static_cast<int64_t>(GROUP_M));
    const int64_t pid_m = first_m + (t % in_group) % gsize;
    const int64_t pid_n = (t % in_group) / gsize;
    const int64_t m0 = pid_m * BM, n0 = pid_n * BN;
    const int valid_m = static_cast<int>(min(static_cast<int64_t>(BM), p.M - m0));

    const float *A = p.a + bidx * p.sa;
    const float *B = p.b + bidx * p.sb;

    auto load = [&](int64_t kt, float4 &ra, float4 &rb) {
      const int64_t k0 = kt * BK;
      const float4 z = make_float4(0.f, 0.f, 0.f, 0.f);
      ra = (lr < valid_m && k0 + lk < p.K) ? *reinterpret_cast<const float4 *>(A + (m0 + lr) * p.lda + k0 + lk) : z;
      if (B_KN) {
        rb = (k0 + bk_r < p.K && n0 + bn_q < p.N) ? *reinterpret_cast<const float4 *>(B + (k0 + bk_r) * p.ldb + n0 + bn_q)
                                                  : z;
      } else {
        rb = (n0 + lr < p.N && k0 + lk < p.K) ? *reinterpret_cast<const float4 *>(B + (n0 + lr) * p.ldb + k0 + lk) : z;
      }
    };
    auto store = [&](int buf, const float4 &ra, const float4 &rb) {
      As[buf][lk + 0][lr] = ra.x;
      As[buf][lk + 1][lr] = ra.y;
      As[buf][lk + 2][lr] = ra.z;
      As[buf][lk + 3][lr] = ra.w;
      if (B_KN) {
        *reinterpret_cast<float4 *>(&Bs[buf][bk_r][bn_q]) = rb;
      } else {
        Bs[buf][lk + 0][lr] = rb.x;
        Bs[buf][lk + 1][lr] = rb.y;
        Bs[buf][lk + 2][lr] = rb.z;
        Bs[buf][lk + 3][lr] = rb.w;
      }
    };

    float acc[8][8];
#pragma unroll
    for (int i = 0; i < 8; ++i)
#pragma unroll
      for (int j = 0; j < 8; ++j) acc[i][j] = 0.f;

    float4 ra, rb;
    if (ktiles > 0) {
      load(0, ra, rb);
      store(0, ra, rb);
    }
    __syncthreads();
    const bool full = valid_m == BM;
    for (int64_t kt = 0; kt < ktiles; ++kt) {
      const int buf = static_cast<int>(kt & 1);
      const bool more = kt + 1 < ktiles;
      if (more) load(kt + 1, ra, rb);
      if (full) fma_slab<false>(acc, As[buf], Bs[buf], ty, tx, valid_m);
      else fma_slab<true>(acc, As[buf], Bs[buf], ty, tx, valid_m);
      if (more) store(buf ^ 1, ra, rb);
      __syncthreads();
    }

    // Epilogue.
    float *C = p.c + bidx * p.sc;
    const float *bias = p.bias ? p.bias + bidx * p.sbias : nullptr;
    const bool vec4 = ((p.ldc & 3) == 0) && ((reinterpret_cast<uintptr_t>(C) & 15) == 0);
#pragma unroll
    for (int i = 0; i < 8; ++i) {
      const int r = (i < 4 ? ty * 4 + i : 64 + ty * 4 + i - 4);
      if (r >= valid_m) continue;
      const int64_t gm = m0 + r;
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        const int64_t gn = n0 + h * 64 + tx * 4;
        float v[4];
#pragma unroll
        for (int e = 0; e < 4; ++e) {
          v[e] = p.alpha * acc[i][h * 4 + e];
          if (bias && gn + e < p.N) v[e] = v[e] + p.beta * bias[gm * p.bsm + (gn + e) * p.bsn];
        }
        float *dst = C + gm * p.ldc + gn;
        if (vec4 && gn + 3 < p.N) {
          *reinterpret_cast<float4 *>(dst) = make_float4(v[0], v[1], v[2], v[3]);
        } else {
#pragma unroll
          for (int e = 0; e < 4; ++e)
            if (gn + e < p.N) dst[e] = v[e];
        }
      }
    }
  }
}

}  // namespace

void launch_gemm_f32(const GemmParams &p, cudaStream_t stream) {
  F32Args args{};
  args.a = static_cast<const float *>(p.a);
  args.b = static_cast<const float *>(p.b);
  args.bias = static_cast<const float *>(p.bias);
  args.c = static_cast<float *>(p.c);
  args.lda = p.lda;
  args.ldb = p.ldb;
  args.ldc = p.ldc;
  args.sa = p.batch_stride_a;
  args.sb = p.batch_stride_b;
  args.sc = p.batch_stride_c;
  args.sbias = p.batch_stride_bias;
  args.bsm = p.bias_stride_m;
  args.bsn = p.bias_stride_n;
  args.M = p.M;
  args.N = p.N;
  args.K = p.K;
  args.batch = p.batch;
  args.alpha = p.alpha;
  args.beta = p.beta;
  if (p.b_kn) gemm_f32_kernel<true><<<p.num_ctas, THREADS, 0, stream>>>(args);
  else gemm_f32_kernel<false><<<p.num_ctas, THREADS, 0, stream>>>(args);
  DETFUZZ_LAUNCH_CHECK();
}

}  // namespace detfuzz::cuda_kernels
