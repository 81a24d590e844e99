// The float32 matmul's column-stream path (sm_90a): decode and small M at HBM speed.
//
// Arithmetic: exactly that of gemm_f32.cu (every float32 path computes the same bits). For each
// chunk c of k_chunks(K): p_c = 0; for k in chunk c, increasing: p_c = fmaf(a[m,k], b[k,n], p_c);
// total = p_0; total = total + p_1; ... (float adds in chunk order); v = alpha * total, with a bias
// v = v + beta * bias[m,n]. Only the k < K of a chunk enter its chain.
//
// Shape of the work: a CTA is 128 columns x R G rows of one chunk, plus one producer warp. For M
// up to 8 (G = 1) a thread owns one column and R = 1, 2, 4 or 8 rows (the fewest that cover M): its
// R chains read B[k, n] once, and B's bytes set the time. For larger M a thread owns 4 columns x
// 8 rows and a CTA G = 2 or 4 warps of them (M up to 16, 32 and beyond, in row tiles of 32): each
// A value loaded serves 4 FMAs. R and C are compile-time counts: every chain runs unpredicated
// (rows past M compute on TMA's zero fill and are never stored), so the compiler interleaves the
// chains and hoists the shared loads. The producer streams B (and A's R G rows) into STAGES
// shared-memory stages with TMA, so the bytes in flight sit in shared memory, not in registers;
// consumers wait on a stage's full mbarrier and release it on its empty one (no CTA barrier in
// the loop). B [K,N] is a 128-column x 32-k box read along k rows (conflict-free); B [N,K] a 32-k
// x 128-row box, 128-byte swizzled so that 16-byte reads of a thread's rows are conflict-free. A's
// rows are read as float4 broadcasts.
// The chunks of a (row tile, column tile) are the CTAs of one thread-block cluster; each leaves
// its p_c tile in shared memory and, after a cluster barrier, rank r adds the r-th slice over
// ranks 0..count-1 in order through distributed shared memory (as gemm_f32.cu's cluster
// schedule does), applies the epilogue and stores. With one chunk a thread stores its own columns.
// Split (column_stream_split): no cluster; each CTA stores its p_c to the caller's workspace and
// gemm_f32.cu's reduce kernel adds them in chunk order. A cluster must be resident whole, and the
// hardware packs clusters two CTAs deep on some SMs while others stay idle; without clusters the
// CTAs spread one per SM. gemm_policy::f32_stream_split_pays weighs the two.
// Block order: chunk fastest, then row tile, then column tile, so the row tiles of a column tile
// (M > 8 G) run together and share B through L2.
#include "ops/cuda/cuda_check.h"
#include "ops/cuda/gemm.cuh"
#include "ops/cuda/gemm_common.cuh"
#include "ops/cuda/ptx_sm90.cuh"
#include "ops/cuda/tensor_map.h"

#include <algorithm>
#include <atomic>
#include <climits>
#include <cstdint>
#include <stdexcept>
#include <string>

namespace detfuzz::cuda_kernels {
namespace {

constexpr int kCols = gemm_policy::kStreamCols;  // columns per CTA
constexpr int kBK = gemm_policy::kStreamBK;      // k per stage: 128 bytes of a K-contiguous row (the swizzle span)

// Rows per thread and row groups per CTA for M rows (gemm_policy.h: up to 8 rows one column per
// thread, beyond that 8 rows x 4 columns per thread in 2 or 4 groups).
using gemm_policy::f32_stream_groups;
using gemm_policy::f32_stream_rows;

template <int G, int R, int C>
struct StreamShape {
  static constexpr int BM = R * G;                        // rows per CTA
  static constexpr int GROUP = kCols / C;                 // threads of a row group
  static constexpr int CONSUMERS = GROUP * G;             // consumer threads
  static constexpr int THREADS = CONSUMERS + 32;          // + the producer warp
  static constexpr int STAGES = G == 4 ? 5 : 6;           // two CTAs per SM (6 of 4 groups' 20 KiB would not)
  static constexpr int B_BYTES = kCols * kBK * 4;         // 16 KiB
  static constexpr int A_BOX_BYTES = BM * kBK * 4;        // what a stage's TMA boxes bring:
  static constexpr int TX_BYTES = B_BYTES + A_BOX_BYTES;  // the full mbarrier's byte count
  static constexpr int STAGE_BYTES = B_BYTES + (A_BOX_BYTES + 1023) / 1024 * 1024;  // a multiple of 1 KiB
  static constexpr int SMEM_BYTES = STAGES * STAGE_BYTES + 2 * STAGES * 8 + 1024;   // + mbarriers, alignment
  static_assert(STAGE_BYTES % 1024 == 0, "stages stay 1 KiB aligned (the 128-byte swizzle)");
  static_assert(BM * kCols * 4 <= STAGES * STAGE_BYTES, "the p_c tile fits in the stages");
  static_assert(2 * (SMEM_BYTES + 1024) <= 228 * 1024, "two CTAs per SM");
};

struct StreamArgs {
  GemmArgs<float> g;
  int64_t tiles_m, tiles_n;
  int chunks;
  int64_t chunk_size;
  int a_rank3, b_rank3;
  float *workspace;  // split: the chunks' partials go here (f32_split_pitch layout); else nullptr
};

// One k group (4 k) of a thread's R x C chains: b[kk][c] is B[k + kk, column c of the thread];
// a_rows points at A's row of the group's first k in the stage (rows kBK floats apart). Each
// chain takes its 4 k in increasing order.
template <int R, int C>
__device__ __forceinline__ void fma_group(float (&acc)[R][C], const float (&b)[4][C], const float *a_rows) {
  float4 a[R];
#pragma unroll
  for (int m = 0; m < R; ++m) a[m] = *reinterpret_cast<const float4 *>(a_rows + m * kBK);
#pragma unroll
  for (int m = 0; m < R; ++m)
#pragma unroll
    for (int c = 0; c < C; ++c) {
      acc[m][c] = __fmaf_rn(a[m].x, b[0][c], acc[m][c]);
      acc[m][c] = __fmaf_rn(a[m].y, b[1][c], acc[m][c]);
      acc[m][c] = __fmaf_rn(a[m].z, b[2][c], acc[m][c]);
      acc[m][c] = __fmaf_rn(a[m].w, b[3][c], acc[m][c]);
    }
}

// The float32 epilogue of element (m, n).
__device__ __forceinline__ float finish(const GemmArgs<float> &g, const float *bias, int64_t m, int64_t n,
                                        float total) {
  return f32_epilogue(g, total, bias ? bias + m * g.bsm + n * g.bsn : nullptr);
}

template <int G, int R, int C, bool B_KN>
__global__ void __launch_bounds__(StreamShape<G, R, C>::THREADS, 2)
    gemm_f32_stream_kernel(const __grid_constant__ CUtensorMap map_a, const __grid_constant__ CUtensorMap map_b,
                           const StreamArgs p) {
#if DETFUZZ_SM90A
  using S = StreamShape<G, R, C>;
  extern __shared__ __align__(16) unsigned char smem_raw[];
  const uint32_t raw = static_cast<uint32_t>(__cvta_generic_to_shared(smem_raw));
  const uint32_t base = (raw + 1023u) & ~1023u;
  unsigned char *const smem = smem_raw + (base - raw);
  const uint32_t full = base + S::STAGES * S::STAGE_BYTES, empty = full + S::STAGES * 8;

  const int64_t id = blockIdx.x;
  const int chunk = static_cast<int>(id % p.chunks);
  const int64_t tile = id / p.chunks;
  const int64_t tile_m = tile % p.tiles_m, rest = tile / p.tiles_m;
  const int64_t tile_n = rest % p.tiles_n, batch = rest / p.tiles_n;
  const int64_t m0 = tile_m * S::BM, n0 = tile_n * kCols;
  const int64_t kbeg = chunk * p.chunk_size, kend = min(p.g.K, kbeg + p.chunk_size);
  const int steps = static_cast<int>((kend - kbeg + kBK - 1) / kBK);

  const int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31;
  constexpr int kConsumerWarps = S::CONSUMERS / 32;
  if (tid == 0) {
    for (int s = 0; s < S::STAGES; ++s) {
      sm90::mbar_init(full + s * 8, 1);
      sm90::mbar_init(empty + s * 8, kConsumerWarps);
    }
    sm90::fence_mbar_init();
  }
  __syncthreads();

  if (warp == kConsumerWarps) {
    // The producer: step s into stage s % STAGES once its previous contents are released.
    if (lane == 0) {
      sm90::prefetch_tensor_map(&map_a);
      sm90::prefetch_tensor_map(&map_b);
      for (int s = 0; s < steps; ++s) {
        const int slot = s % S::STAGES;
        if (s >= S::STAGES) sm90::mbar_wait(empty + slot * 8, ((s / S::STAGES) - 1) & 1);
        const uint32_t stage = base + slot * S::STAGE_BYTES, bar = full + slot * 8;
        const int k0 = static_cast<int>(kbeg + static_cast<int64_t>(s) * kBK);
        sm90::mbar_expect_tx(bar, S::TX_BYTES);
        if (B_KN)
          sm90::tma_load_matrix(stage, &map_b, p.b_rank3, bar, static_cast<int>(n0), k0, static_cast<int>(batch));
        else
          sm90::tma_load_matrix(stage, &map_b, p.b_rank3, bar, k0, static_cast<int>(n0), static_cast<int>(batch));
        sm90::tma_load_matrix(stage + S::B_BYTES, &map_a, p.a_rank3, bar, k0, static_cast<int>(m0),
                              static_cast<int>(batch));
      }
    }
  } else {
    // The thread's columns: C = 1: column t; over B [K,N]: columns C t .. C t + C - 1 (one
    // 16-byte read per k row); over B [N,K]: columns t + GROUP c (rows of the swizzled box with the
    // same t % 8, so a quarter warp's 16-byte reads hit 8 different 16-byte bank groups).
    const int t = tid % S::GROUP, group = tid / S::GROUP;
    auto column = [&](int c) { return C == 1 ? t : B_KN ? C * t + c : t + S::GROUP * c; };
    const int rows = static_cast<int>(max(min(static_cast<int64_t>(R), p.g.M - m0 - group * R), int64_t{0}));
    float acc[R][C];
#pragma unroll
    for (int m = 0; m < R; ++m)
#pragma unroll
      for (int c = 0; c < C; ++c) acc[m][c] = 0.f;
    for (int s = 0; s < steps; ++s) {
      const int slot = s % S::STAGES;
      sm90::mbar_wait(full + slot * 8, (s / S::STAGES) & 1);
      const unsigned char *stage = smem + slot * S::STAGE_BYTES;
      const float *a_rows = reinterpret_cast<const float *>(stage + S::B_BYTES) + group * R * kBK;
      // k group j of the thread's columns. B [K,N]: row k of the box is 128 floats; B [N,K]: row n
      // is 32 floats in 16-byte groups j stored at j ^ (n % 8).
      auto b_group = [&](int j, float(&b)[4][C]) {
        if constexpr (B_KN) {
          const float *row = reinterpret_cast<const float *>(stage) + j * 4 * kCols;
#pragma unroll
          for (int kk = 0; kk < 4; ++kk) {
            if constexpr (C == 1) {
              b[kk][0] = row[kk * kCols + t];
            } else {
              const float4 v = *reinterpret_cast<const float4 *>(row + kk * kCols + 4 * t);
              b[kk][0] = v.x;
              b[kk][1] = v.y;
              b[kk][2] = v.z;
              b[kk][3] = v.w;
            }
          }
        } else {
#pragma unroll
          for (int c = 0; c < C; ++c) {
            const int n = column(c);
            const float4 v = *reinterpret_cast<const float4 *>(stage + n * 128 + ((j ^ (n & 7)) << 4));
            b[0][c] = v.x;
            b[1][c] = v.y;
            b[2][c] = v.z;
            b[3][c] = v.w;
          }
        }
      };
      const int kvalid = static_cast<int>(min(static_cast<int64_t>(kBK), kend - kbeg - static_cast<int64_t>(s) * kBK));
      float b[4][C];
      if (kvalid == kBK) {
#pragma unroll
        for (int j = 0; j < kBK / 4; ++j) {
          b_group(j, b);
          fma_group<R, C>(acc, b, a_rows + j * 4);
        }
      } else {
        for (int j = 0; j < kvalid / 4; ++j) {  // K % 4 == 0
          b_group(j, b);
          fma_group<R, C>(acc, b, a_rows + j * 4);
        }
      }
      __syncwarp();
      if (lane == 0) sm90::mbar_arrive(empty + slot * 8);
    }

    const float *bias = p.g.bias ? p.g.bias + batch * p.g.sbias : nullptr;
    float *out = p.g.c + batch * p.g.sc;
    if (p.chunks == 1) {
      for (int m = 0; m < rows; ++m) {
        const int64_t gm = m0 + group * R + m;
#pragma unroll
        for (int c = 0; c < C; ++c) {
          const int64_t n = n0 + column(c);
          if (n < p.g.N) out[gm * p.g.ldc + n] = finish(p.g, bias, gm, n, acc[m][c]);
        }
      }
    } else if (p.workspace) {
      const int64_t pitch = f32_split_pitch(p.g.N);
      float *plane = p.workspace + ((chunk * p.g.batch + batch) * p.g.M + m0 + group * R) * pitch + n0;
      for (int m = 0; m < rows; ++m)
#pragma unroll
        for (int c = 0; c < C; ++c)
          if (n0 + column(c) < p.g.N) plane[m * pitch + column(c)] = acc[m][c];
    } else {
      // Every stage is consumed, so no TMA write is pending: the stages take the p_c tile once
      // every consumer is past its last one.
      asm volatile("bar.sync 1, %0;" ::"n"(S::CONSUMERS));
      float *partial = reinterpret_cast<float *>(smem);
#pragma unroll
      for (int m = 0; m < R; ++m)
#pragma unroll
        for (int c = 0; c < C; ++c) partial[(group * R + m) * kCols + column(c)] = acc[m][c];
    }
  }
  if (p.chunks == 1 || p.workspace) return;
  __syncwarp();  // the producer's lanes and the consumers' stores reconverge for the cluster barrier

  // The ordered reduction of the cluster's p_c tiles: rank r adds its slice of float4s over
  // ranks 0 .. count - 1 in rank order.
  sm90::cluster_sync();
  constexpr int Q4 = S::BM * kCols / 4;
  const int per = (Q4 + p.chunks - 1) / p.chunks;
  const int q_end = min(Q4, (chunk + 1) * per);
  const float *bias = p.g.bias ? p.g.bias + batch * p.g.sbias : nullptr;
  float *out = p.g.c + batch * p.g.sc;
  for (int q = chunk * per + tid; q < q_end; q += S::THREADS) {
    const int r = q / (kCols / 4), c4 = (q % (kCols / 4)) * 4;
    const int64_t gm = m0 + r;
    if (gm >= p.g.M || n0 + c4 >= p.g.N) continue;
    const uint32_t at = base + static_cast<uint32_t>(q) * 16;
    float4 t = sm90::ld_dsmem4(sm90::map_dsmem(at, 0));
    for (int src = 1; src < p.chunks; ++src) {
      const float4 v = sm90::ld_dsmem4(sm90::map_dsmem(at, src));
      t = add4(t, v);
    }
    const float tv[4] = {t.x, t.y, t.z, t.w};
#pragma unroll
    for (int e = 0; e < 4; ++e) {
      const int64_t gn = n0 + c4 + e;
      if (gn < p.g.N) out[gm * p.g.ldc + gn] = finish(p.g, bias, gm, gn, tv[e]);
    }
  }
  sm90::cluster_sync();  // no CTA leaves while another still reads its shared memory
#else
  (void)map_a;
  (void)map_b;
  (void)p;
  __trap();  // the host launches this path only with sm_90a code on an sm_90 GPU
#endif
}

CUtensorMap f32_map(const void *base, int64_t cols, int64_t rows, int64_t ld, int64_t batch, int64_t batch_stride,
                    int box_cols, int box_rows, bool swizzle128, int *rank3) {
  // K = 0 has no step to load, but a map needs sizes >= 1 and a row pitch of >= 16 bytes.
  // L2 fills of 128 bytes: float32 at M <= 32 ran 2-4% faster than with 256 on an H200 (docs/perf/matmul.md).
  const MatrixMap m = matrix_map(
      "gemm_f32 column-stream", CU_TENSOR_MAP_DATA_TYPE_FLOAT32, base, std::max<int64_t>(cols, 1),
      std::max<int64_t>(rows, 1), std::max<int64_t>(ld, 4), batch, batch_stride, box_cols, box_rows,
      swizzle128 ? CU_TENSOR_MAP_SWIZZLE_128B : CU_TENSOR_MAP_SWIZZLE_NONE, CU_TENSOR_MAP_L2_PROMOTION_L2_128B);
  *rank3 = m.rank3;
  return m.map;
}

// The launch configuration of one kernel instance (Shape: StreamShape's G, R, C and B_KN), its
// shared-memory opt-in done once per device.
template <int G_, int R_, int C_, bool B_KN_>
struct Instance {
  static constexpr int G = G_, R = R_, C = C_;
  static constexpr bool B_KN = B_KN_;
  using S = StreamShape<G, R, C>;
  static auto kernel() { return gemm_f32_stream_kernel<G, R, C, B_KN>; }

  static void configure(int dev) {
    static std::atomic<uint64_t> opted_in{0};
    configure_once_per_device(opted_in, dev, [] {
      DETFUZZ_CUDA_CHECK(cudaFuncSetAttribute(kernel(), cudaFuncAttributeMaxDynamicSharedMemorySize, S::SMEM_BYTES));
    });
  }
  // How many clusters of `size` CTAs the device holds at once (at this kernel's two CTAs per SM).
  static int max_active_clusters(int dev, int size) {
    static ClusterCapacity capacity;
    configure(dev);
    return capacity.get(dev, size, kernel(), S::THREADS, S::SMEM_BYTES);
  }
};

// f(Instance<...>{}) for the kernel instance that runs M rows with this B layout.
template <class F>
void with_instance(const GemmParams &p, F f) {
  const bool kn = p.b_kn;
  switch (f32_stream_groups(p.M) * 8 + f32_stream_rows(p.M)) {
    case 8 + 1: kn ? f(Instance<1, 1, 1, true>{}) : f(Instance<1, 1, 1, false>{}); break;
    case 8 + 2: kn ? f(Instance<1, 2, 1, true>{}) : f(Instance<1, 2, 1, false>{}); break;
    case 8 + 4: kn ? f(Instance<1, 4, 1, true>{}) : f(Instance<1, 4, 1, false>{}); break;
    case 8 + 8: kn ? f(Instance<1, 8, 1, true>{}) : f(Instance<1, 8, 1, false>{}); break;
    case 16 + 8: kn ? f(Instance<2, 8, 4, true>{}) : f(Instance<2, 8, 4, false>{}); break;
    default: kn ? f(Instance<4, 8, 4, true>{}) : f(Instance<4, 8, 4, false>{}); break;
  }
}

template <class I>
void launch(const GemmParams &p, bool split, int dev, cudaStream_t stream) {
  using S = typename I::S;
  I::configure(dev);
  StreamArgs args{};
  args.g = gemm_args<float>(p);
  const KChunks ch = k_chunks(p.K);
  args.chunks = ch.count;
  args.chunk_size = ch.size;
  args.tiles_m = (p.M + S::BM - 1) / S::BM;
  args.tiles_n = (p.N + kCols - 1) / kCols;
  args.workspace = split && ch.count > 1 ? static_cast<float *>(p.workspace) : nullptr;
  const CUtensorMap map_a = f32_map(p.a, p.K, p.M, p.lda, p.batch, p.batch_stride_a, kBK, S::BM, false, &args.a_rank3);
  const CUtensorMap map_b =
      I::B_KN ? f32_map(p.b, p.N, p.K, p.ldb, p.batch, p.batch_stride_b, kCols, kBK, false, &args.b_rank3)
              : f32_map(p.b, p.K, p.N, p.ldb, p.batch, p.batch_stride_b, kBK, kCols, true, &args.b_rank3);
  cudaLaunchConfig_t cfg = {};
  cfg.gridDim = dim3(static_cast<unsigned>(args.tiles_m * args.tiles_n * p.batch * ch.count));
  cfg.blockDim = dim3(S::THREADS);
  cfg.dynamicSmemBytes = S::SMEM_BYTES;
  cfg.stream = stream;
  cudaLaunchAttribute attr[1];
  attr[0].id = cudaLaunchAttributeClusterDimension;
  attr[0].val.clusterDim = {static_cast<unsigned>(ch.count), 1, 1};
  cfg.attrs = attr;
  cfg.numAttrs = args.workspace ? 0 : 1;
  DETFUZZ_CUDA_CHECK(cudaLaunchKernelEx(&cfg, I::kernel(), map_a, map_b, args));
  if (args.workspace) launch_gemm_f32_split_reduce(p, stream);
}

}  // namespace

bool gemm_f32_stream_fits(const GemmParams &p) { return gemm_policy::f32_stream_fits(gemm_shape(p)); }

int gemm_f32_stream_clusters(const GemmParams &p, int size, int device) {
  int active = 0;
  with_instance(p, [&](auto instance) { active = decltype(instance)::max_active_clusters(device, size); });
  return active;
}

void launch_gemm_f32_stream(const GemmParams &p, bool split, int dev, cudaStream_t stream) {
  with_instance(p, [&](auto instance) { launch<decltype(instance)>(p, split, dev, stream); });
}

}  // namespace detfuzz::cuda_kernels
