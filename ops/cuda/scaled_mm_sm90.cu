// The batch-invariant fp8 scaled matmul on Hopper (sm_90a): TMA loads, wgmma e4m3 with float32
// promotion every 128 of K, a producer warpgroup and one or two consumer warpgroups.
//
// Design. A pipeline stage is one 128-wide K block, the fp8 scale block: the producer (one
// thread) TMA-loads a's TILE_M x 128 box and b's BN x 128 box (b column-major: BN weight rows of
// 128 bytes, K-major as 8-bit wgmma wants both operands) into 128-byte-swizzled shared memory;
// rows, columns and K past the matrix are zero-filled (zero products add nothing). Each consumer
// warpgroup owns 64 rows and issues four wgmma.m64nBNk32.e4m3 over the block, the first starting
// from zero, then waits for them and promotes on the CUDA cores:
//   total = total + partial * (sa * sb)        (three float32 roundings, __fmul_rn / __fadd_rn)
// with total starting at +0 and the blocks in K order; the bias is added after the last block and
// the sum rounded once to the output dtype. This is the recipe of DeepSeek-V3 (section 3.3.2):
// the tensor core's fp8 accumulation keeps about 14 bits, so its partial never spans more than
// one block, and what is kept across blocks is float32.
//
// Arithmetic of one output element (the invariance argument): the same four wgmma over the same
// bytes of its row of a and column of b, block after block, and the same promotion, whatever
// tile, tile shape, CTA or grid holds it. The tile shapes (128 x 128: two consumers; 64 x 128 down
// to 64 x 8: one) run the same instruction family (m64nNk32 computes an element from the same
// operands in the same way for every N: a 64-column tile is half of a 128-column one), so the
// launcher picks among them by M, N and the SM count without changing a bit; the GPU tests force
// each and compare. Rows of a 64-row slab past M hold stale shared memory (only ceil8(M) rows are
// loaded when M < 64): a row of the MMA never reads another row, and those rows are never stored.
//
// Scales: per tensor, one product for the whole matrix; per channel, sa of the row times sb of
// the column; block-wise, sa[row, kb] times sb[kb, column / 128] (a tile's columns share one
// 128-column block, since tiles are 8 to 128 wide and aligned). They are read after the block's
// wgmma are issued, so their latency hides behind the MMAs.
#include "ops/cuda/cuda_check.h"
#include "ops/cuda/gemm.cuh"  // gemm_path_available: whether the device is an sm_90 one
#include "ops/cuda/gemm_common.cuh"
#include "ops/cuda/mma_sm80.cuh"
#include "ops/cuda/ptx_sm90.cuh"
#include "ops/cuda/scaled_mm.cuh"
#include "ops/cuda/tensor_map.h"

#include <cuda.h>
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <stdexcept>
#include <string>
#include <type_traits>
#include <utility>

namespace detfuzz::cuda_kernels {
namespace {

constexpr int BK = static_cast<int>(kScaledMmBlockK);  // K per stage: one promotion block, 128 bytes a row
constexpr int GROUP_M = 8;
static_assert(BK == 128, "a stage's rows are one 128-byte swizzle row");

template <int CONSUMERS>
constexpr int kThreads = 128 * (CONSUMERS + 1);

template <int CONSUMERS, int BN>
struct Geometry {
  static constexpr int tile_m = 64 * CONSUMERS;
  static constexpr int a_bytes = tile_m * BK, b_bytes = BN * BK;
  static constexpr int stage_bytes = a_bytes + b_bytes;                  // 32, 24, 16 ... 9 KiB
  static constexpr int stages = std::min(12, 196 * 1024 / stage_bytes);  // 6, 8 or 12
  static constexpr int smem_bytes = 1024 + stages * stage_bytes + 2 * stages * 8;
  static_assert(smem_bytes <= 227 * 1024, "fits an SM");
};

struct Args {
  ScaledMmParams p;
  int64_t tiles_m, tiles_n, tiles;
  int kblocks, nblocks;  // ceil(K / 128), ceil(N / 128): the block scales' grid
  int stage_tx_bytes;    // bytes TMA writes per stage
};

// Rounds and stores a consumer thread's values of one row: columns 8 j + 2 (lane % 4) + {0, 1}.
template <typename Out, int BN>
__device__ __forceinline__ void store_row(const float (&total)[BN / 2], int h, const Args &a, int64_t gm, int64_t n0,
                                          int lane) {
  const ScaledMmParams &p = a.p;
#pragma unroll
  for (int j = 0; j < BN / 8; ++j) {
    const int64_t gn = n0 + 8 * j + 2 * (lane % 4);
    float v[2];
#pragma unroll
    for (int e = 0; e < 2; ++e) {
      v[e] = total[4 * j + 2 * h + e];
      if (p.bias && gn + e < p.N) v[e] = __fadd_rn(v[e], load_out<Out>(p.bias, gn + e));
    }
    const int64_t at = gm * p.N + gn;
    if constexpr (std::is_same_v<Out, float>) {
      float *out = static_cast<float *>(p.out) + at;
      if (gn + 1 < p.N && (at & 1) == 0)
        *reinterpret_cast<float2 *>(out) = make_float2(v[0], v[1]);
      else
        for (int e = 0; e < 2 && gn + e < p.N; ++e) out[e] = v[e];
    } else {
      uint16_t *out = static_cast<uint16_t *>(p.out) + at;
      const uint16_t r0 = from_f<Out>(v[0]), r1 = from_f<Out>(v[1]);
      if (gn + 1 < p.N && (at & 1) == 0)
        *reinterpret_cast<uint32_t *>(out) = static_cast<uint32_t>(r0) | (static_cast<uint32_t>(r1) << 16);
      else {
        if (gn < p.N) out[0] = r0;
        if (gn + 1 < p.N) out[1] = r1;
      }
    }
  }
}

template <typename Out, Fp8Scale MODE, int CONSUMERS, int BN>
__global__ void __launch_bounds__(kThreads<CONSUMERS>, 1)
    scaled_mm_sm90_kernel(const __grid_constant__ CUtensorMap tmap_a, const __grid_constant__ CUtensorMap tmap_b,
                          const Args args) {
#if DETFUZZ_SM90A
  using namespace sm90;
  using G = Geometry<CONSUMERS, BN>;
  constexpr int TILE_M = G::tile_m, STAGES = G::stages, STAGE_BYTES = G::stage_bytes, A_BYTES = G::a_bytes;
  const ScaledMmParams &p = args.p;
  extern __shared__ uint8_t smem_raw[];
  const uint32_t raw = static_cast<uint32_t>(__cvta_generic_to_shared(smem_raw));
  const uint32_t stages = (raw + 1023) & ~1023u;  // the 128-byte swizzle wants 1024-byte alignment
  const uint32_t full_bar = stages + STAGES * STAGE_BYTES;
  const uint32_t empty_bar = full_bar + STAGES * 8;
  auto stage_a = [&](int s) { return stages + s * STAGE_BYTES; };
  auto stage_b = [&](int s) { return stages + s * STAGE_BYTES + A_BYTES; };

  const int tid = threadIdx.x;
  const int wg = __shfl_sync(0xffffffffu, tid / 128, 0);
  if (tid == 0) {
    for (int s = 0; s < STAGES; ++s) {
      mbar_init(full_bar + 8 * s, 1);
      mbar_init(empty_bar + 8 * s, CONSUMERS * 4);  // one arrival per consumer warp
    }
    fence_mbar_init();
    prefetch_tensor_map(&tmap_a);
    prefetch_tensor_map(&tmap_b);
  }
  __syncthreads();

  if (wg == 0) {
    if constexpr (CONSUMERS == 2) release_registers<40>();
    if (tid == 0) {
      int it = 0;
      for (int64_t tile = blockIdx.x; tile < args.tiles; tile += gridDim.x) {
        const TileCoord tc = persistent_tile<GROUP_M>(tile, args.tiles_m, args.tiles_n);
        const int m0 = static_cast<int>(tc.pid_m * TILE_M), n0 = static_cast<int>(tc.pid_n * BN);
        for (int kb = 0; kb < args.kblocks; ++kb, ++it) {
          const int s = it % STAGES;
          mbar_wait(empty_bar + 8 * s, ((it / STAGES) & 1) ^ 1);
          const uint32_t fb = full_bar + 8 * s;
          mbar_expect_tx(fb, args.stage_tx_bytes);
          tma_load_2d(stage_a(s), &tmap_a, fb, kb * BK, m0);
          tma_load_2d(stage_b(s), &tmap_b, fb, kb * BK, n0);
        }
      }
    }
    return;
  }

  if constexpr (CONSUMERS == 2) claim_registers<232>();
  const int cw = wg - 1;  // rows [64 cw, 64 cw + 64) of the tile
  const int t = tid % 128, warp = t / 32, lane = t % 32;
  const int row_in_tile = cw * 64 + warp * 16 + lane / 4;  // and + 8
  float acc[BN / 2], total[BN / 2];
  int it = 0;
  for (int64_t tile = blockIdx.x; tile < args.tiles; tile += gridDim.x) {
    const TileCoord tc = persistent_tile<GROUP_M>(tile, args.tiles_m, args.tiles_n);
    const int64_t m0 = tc.pid_m * TILE_M, n0 = tc.pid_n * BN;
    const int64_t rows[2] = {m0 + row_in_tile, m0 + row_in_tile + 8};
    const bool in_m[2] = {rows[0] < p.M, rows[1] < p.M};
    // The scales that do not change along K: the row's (per tensor: the matrix's) and, per
    // channel, each column's.
    float sa_fixed[2] = {0.f, 0.f}, sb_col[MODE == Fp8Scale::channel ? BN / 4 : 1];
    if constexpr (MODE == Fp8Scale::tensor) {
      sa_fixed[0] = sa_fixed[1] = p.scale_a[0];
      sb_col[0] = p.scale_b[0];
    } else if constexpr (MODE == Fp8Scale::channel) {
      for (int h = 0; h < 2; ++h) sa_fixed[h] = in_m[h] ? p.scale_a[rows[h]] : 0.f;
#pragma unroll
      for (int j = 0; j < BN / 8; ++j)
#pragma unroll
        for (int e = 0; e < 2; ++e) {
          const int64_t gn = n0 + 8 * j + 2 * (lane % 4) + e;
          sb_col[2 * j + e] = gn < p.N ? p.scale_b[gn] : 0.f;
        }
    }
#pragma unroll
    for (int i = 0; i < BN / 2; ++i) total[i] = 0.f;

    for (int kb = 0; kb < args.kblocks; ++kb, ++it) {
      const int s = it % STAGES;
      mbar_wait(full_bar + 8 * s, (it / STAGES) & 1);
      wgmma_fence();
      const uint64_t da0 = desc_k_major(stage_a(s) + cw * (64 * BK)), db0 = desc_k_major(stage_b(s));
#pragma unroll
      for (int kk = 0; kk < BK / 32; ++kk) {
        const uint64_t da = desc_advance(da0, kk * 32), db = desc_advance(db0, kk * 32);
        const int accumulate = kk > 0 ? 1 : 0;
        if constexpr (BN == 128) wgmma_m64n128k32_e4m3(acc, da, db, accumulate);
        if constexpr (BN == 64) wgmma_m64n64k32_e4m3(acc, da, db, accumulate);
        if constexpr (BN == 32) wgmma_m64n32k32_e4m3(acc, da, db, accumulate);
        if constexpr (BN == 16) wgmma_m64n16k32_e4m3(acc, da, db, accumulate);
        if constexpr (BN == 8) wgmma_m64n8k32_e4m3(acc, da, db, accumulate);
      }
      wgmma_commit();
      // This block's scales, read while the MMAs run.
      float sa[2] = {sa_fixed[0], sa_fixed[1]}, sb_block = 0.f;
      if constexpr (MODE == Fp8Scale::block) {
        for (int h = 0; h < 2; ++h) sa[h] = in_m[h] ? p.scale_a[rows[h] * args.kblocks + kb] : 0.f;
        sb_block = p.scale_b[static_cast<int64_t>(kb) * args.nblocks + n0 / BK];
      }
      wgmma_wait<0>();
      fence_registers(acc);
      if (lane == 0) mbar_arrive(empty_bar + 8 * s);
#pragma unroll
      for (int j = 0; j < BN / 8; ++j)
#pragma unroll
        for (int h = 0; h < 2; ++h)
#pragma unroll
          for (int e = 0; e < 2; ++e) {
            const float sb = MODE == Fp8Scale::channel ? sb_col[2 * j + e]
                             : MODE == Fp8Scale::block ? sb_block
                                                       : sb_col[0];
            const int i = 4 * j + 2 * h + e;
            total[i] = __fadd_rn(total[i], __fmul_rn(acc[i], __fmul_rn(sa[h], sb)));
          }
    }
    for (int h = 0; h < 2; ++h)
      if (in_m[h]) store_row<Out, BN>(total, h, args, rows[h], n0, lane);
  }
#endif
}

// L2 fills of 256 bytes (a box row and the next 128 bytes of K). On an H200 the 42 shapes ran at
// 1.038x cuBLASLt's fp8 with them and 0.954x with 128-byte fills, one run each
// (docs/perf/matmul.md); the 16-bit kernel measured the other way.
constexpr CUtensorMapL2promotion kL2Fill = CU_TENSOR_MAP_L2_PROMOTION_L2_256B;

template <typename Out, Fp8Scale MODE, int CONSUMERS, int BN>
void launch_shape(const ScaledMmParams &p, int dev, int sms, cudaStream_t stream) {
  using G = Geometry<CONSUMERS, BN>;
  auto kernel = scaled_mm_sm90_kernel<Out, MODE, CONSUMERS, BN>;
  static std::atomic<uint64_t> opted_in{0};
  configure_once_per_device(opted_in, dev, [&] {
    DETFUZZ_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, G::smem_bytes));
  });
  Args args{};
  args.p = p;
  args.tiles_m = (p.M + G::tile_m - 1) / G::tile_m;
  args.tiles_n = (p.N + BN - 1) / BN;
  args.tiles = args.tiles_m * args.tiles_n;
  args.kblocks = static_cast<int>((p.K + BK - 1) / BK);
  args.nblocks = static_cast<int>((p.N + BK - 1) / BK);
  // Only ceil8(M) rows of a when M is below the tile: a row of the MMA reads no other row.
  const int a_box_rows = p.M >= G::tile_m ? G::tile_m : static_cast<int>((p.M + 7) / 8 * 8);
  args.stage_tx_bytes = a_box_rows * BK + BN * BK;
  const MatrixMap ma = matrix_map("scaled_mm_sm90", CU_TENSOR_MAP_DATA_TYPE_UINT8, p.a, p.K, p.M, p.lda, 1, 0, BK,
                                  a_box_rows, CU_TENSOR_MAP_SWIZZLE_128B, kL2Fill);
  const MatrixMap mb = matrix_map("scaled_mm_sm90", CU_TENSOR_MAP_DATA_TYPE_UINT8, p.b, p.K, p.N, p.ldb, 1, 0, BK, BN,
                                  CU_TENSOR_MAP_SWIZZLE_128B, kL2Fill);
  const int grid = static_cast<int>(std::min<int64_t>(args.tiles, sms));
  kernel<<<grid, kThreads<CONSUMERS>, G::smem_bytes, stream>>>(ma.map, mb.map, args);
  DETFUZZ_LAUNCH_CHECK();
}

template <typename Out, Fp8Scale MODE>
void launch_path(const ScaledMmParams &p, ScaledMmPath path, int dev, int sms, cudaStream_t stream) {
  switch (path) {
    case ScaledMmPath::wgmma_128x128: return launch_shape<Out, MODE, 2, 128>(p, dev, sms, stream);
    case ScaledMmPath::wgmma_64x128: return launch_shape<Out, MODE, 1, 128>(p, dev, sms, stream);
    case ScaledMmPath::wgmma_64x64: return launch_shape<Out, MODE, 1, 64>(p, dev, sms, stream);
    case ScaledMmPath::wgmma_64x32: return launch_shape<Out, MODE, 1, 32>(p, dev, sms, stream);
    case ScaledMmPath::wgmma_64x16: return launch_shape<Out, MODE, 1, 16>(p, dev, sms, stream);
    default: return launch_shape<Out, MODE, 1, 8>(p, dev, sms, stream);
  }
}

template <typename Out>
void launch_mode(const ScaledMmParams &p, ScaledMmPath path, int dev, int sms, cudaStream_t stream) {
  switch (p.mode) {
    case Fp8Scale::tensor: return launch_path<Out, Fp8Scale::tensor>(p, path, dev, sms, stream);
    case Fp8Scale::channel: return launch_path<Out, Fp8Scale::channel>(p, path, dev, sms, stream);
    case Fp8Scale::block: return launch_path<Out, Fp8Scale::block>(p, path, dev, sms, stream);
  }
}

// The tile shape for p (automatic): 128-row tiles above 64 rows. At 64 rows or fewer each tile
// is one chain of dependent blocks along K whose length does not shrink with the tile's width, so
// the narrowest columns that still fit one wave (8-128 wide: the most CTAs, the most bytes in
// flight), or 128-column tiles when even those take more than one.
ScaledMmPath pick_path(const ScaledMmParams &p, int sms) {
  if (p.M > 64) return ScaledMmPath::wgmma_128x128;
  constexpr std::pair<int, ScaledMmPath> narrowest_first[] = {{8, ScaledMmPath::wgmma_64x8},
                                                              {16, ScaledMmPath::wgmma_64x16},
                                                              {32, ScaledMmPath::wgmma_64x32},
                                                              {64, ScaledMmPath::wgmma_64x64}};
  for (const auto &[bn, path] : narrowest_first)
    if ((p.N + bn - 1) / bn <= sms) return path;
  return ScaledMmPath::wgmma_64x128;
}

bool aligned16(const void *ptr) { return (reinterpret_cast<uintptr_t>(ptr) & 15) == 0; }

}  // namespace

std::string scaled_mm_sm90_unfit(const ScaledMmParams &p) {
  int dev = 0;
  DETFUZZ_CUDA_CHECK(cudaGetDevice(&dev));
  if (!gemm_path_available(GemmPath::sm90_persistent, dev))
    return "device " + std::to_string(dev) + " is not an sm_90 GPU";
  if (p.K < 1) return "K = 0";
  if (!p.b_col_major) return "b is not column-major";
  if (p.lda % 16 || p.ldb % 16) return "lda or ldb is not a multiple of 16";
  if (!aligned16(p.a) || !aligned16(p.b)) return "a or b is not 16-byte aligned";
  if (p.M > INT32_MAX || p.N > INT32_MAX) return "M or N past the TMA coordinates' range";
  return "";
}

void launch_scaled_mm_sm90(const ScaledMmParams &p, cudaStream_t stream) {
  const std::string unfit = scaled_mm_sm90_unfit(p);
  if (!unfit.empty()) throw std::invalid_argument("launch_scaled_mm_sm90: " + unfit);
  if (p.path == ScaledMmPath::mma_sync) throw std::invalid_argument("launch_scaled_mm_sm90: path mma_sync");
  if (p.M == 0 || p.N == 0) return;
  int dev = 0, sms = 0;
  DETFUZZ_CUDA_CHECK(cudaGetDevice(&dev));
  DETFUZZ_CUDA_CHECK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev));
  const ScaledMmPath path = p.path == ScaledMmPath::automatic ? pick_path(p, sms) : p.path;
  switch (p.out_dtype) {
    case DType::f32: return launch_mode<float>(p, path, dev, sms, stream);
    case DType::f16: return launch_mode<__half>(p, path, dev, sms, stream);
    case DType::bf16: return launch_mode<__nv_bfloat16>(p, path, dev, sms, stream);
    default: throw std::invalid_argument(std::string("scaled_mm: output dtype ") + dtype_name(p.out_dtype));
  }
}

}  // namespace detfuzz::cuda_kernels
