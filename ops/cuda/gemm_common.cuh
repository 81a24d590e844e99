// What the tensor-core and the float32 persistent matmul kernels share: their argument block
// and the tile order. Tile index t (batch outermost, then groups of
// GROUP_M tile rows walked column by column) maps to one (batch, tile row, tile column); the map
// depends on the tile counts only, never on which CTA takes the tile, so the bits of a tile do
// not depend on the grid either.
#pragma once

#include "ops/cuda/cuda_check.h"
#include "ops/cuda/gemm.cuh"
#include "ops/cuda/mma_sm80.cuh"

#include <atomic>
#include <cstdint>
#include <map>
#include <mutex>
#include <utility>

namespace detfuzz::cuda_kernels {

// The kernel's view of GemmParams, with typed pointers (E: float, or uint16_t bit patterns of
// bf16/fp16).
template <typename E>
struct GemmArgs {
  const E *a, *b, *bias;
  E *c;
  int64_t lda, ldb, ldc, sa, sb, sc, sbias, bsm, bsn;
  int64_t M, N, K, batch;
  float alpha, beta;
};

template <typename E>
GemmArgs<E> gemm_args(const GemmParams &p) {
  GemmArgs<E> a{};
  a.a = static_cast<const E *>(p.a);
  a.b = static_cast<const E *>(p.b);
  a.bias = static_cast<const E *>(p.bias);
  a.c = static_cast<E *>(p.c);
  a.lda = p.lda;
  a.ldb = p.ldb;
  a.ldc = p.ldc;
  a.sa = p.batch_stride_a;
  a.sb = p.batch_stride_b;
  a.sc = p.batch_stride_c;
  a.sbias = p.batch_stride_bias;
  a.bsm = p.bias_stride_m;
  a.bsn = p.bias_stride_n;
  a.M = p.M;
  a.N = p.N;
  a.K = p.K;
  a.batch = p.batch;
  a.alpha = p.alpha;
  a.beta = p.beta;
  return a;
}

// k_chunks(K), the fixed split of K into chunks that every path adds in order, and
// f32_split_pitch: ops/cuda/gemm_policy.h (through gemm.cuh).

// Host: runs `configure` (a kernel's cudaFuncSetAttribute calls) once per device for devices
// 0..63 and on every call for others; `done` is that kernel instantiation's own record.
template <class Configure>
void configure_once_per_device(std::atomic<uint64_t> &done, int dev, Configure configure) {
  const uint64_t bit = dev >= 0 && dev < 64 ? uint64_t(1) << dev : 0;
  if (bit && (done.load() & bit)) return;
  configure();
  done.fetch_or(bit);
}

// Host: how many clusters of `size` CTAs of one kernel a device runs at once
// (cudaOccupancyMaxActiveClusters: a cluster must fit in one GPC, so fewer than SMs / size),
// asked once per (device, size). One instance per kernel instantiation; the kernel's shared
// memory must be opted into before the first ask.
class ClusterCapacity {
 public:
  template <class Kernel>
  int get(int dev, int size, Kernel kernel, unsigned threads, size_t smem_bytes) {
    std::lock_guard<std::mutex> lock(mu_);
    const auto key = std::make_pair(dev, size);
    auto it = known_.find(key);
    if (it == known_.end()) {
      cudaLaunchConfig_t cfg = {};
      cfg.gridDim = dim3(static_cast<unsigned>(size));
      cfg.blockDim = dim3(threads);
      cfg.dynamicSmemBytes = smem_bytes;
      cudaLaunchAttribute attr[1];
      attr[0].id = cudaLaunchAttributeClusterDimension;
      attr[0].val.clusterDim = {static_cast<unsigned>(size), 1, 1};
      cfg.attrs = attr;
      cfg.numAttrs = 1;
      int clusters = 0;
      DETFUZZ_CUDA_CHECK(cudaOccupancyMaxActiveClusters(&clusters, kernel, &cfg));
      it = known_.emplace(key, clusters).first;
    }
    return it->second;
  }

 private:
  std::mutex mu_;
  std::map<std::pair<int, int>, int> known_;
};

// The float32 paths' epilogue (gemm_f32.cu, gemm_f32_stream.cu), which fixes an element's last
// roundings: alpha * total, then + beta * bias when the element has one (bias: it, or nullptr).
__device__ __forceinline__ float f32_epilogue(const GemmArgs<float> &g, float total, const float *bias) {
  float v = __fmul_rn(g.alpha, total);
  if (bias) v = __fadd_rn(v, __fmul_rn(g.beta, *bias));
  return v;
}
// Four float32 adds, t + p, as the chunk reduction orders them.
__device__ __forceinline__ float4 add4(float4 t, float4 p) {
  return make_float4(__fadd_rn(t.x, p.x), __fadd_rn(t.y, p.y), __fadd_rn(t.z, p.z), __fadd_rn(t.w, p.w));
}

struct TileCoord {
  int64_t batch, pid_m, pid_n;
};

template <int GROUP_M>
__device__ __forceinline__ TileCoord persistent_tile(int64_t tile, int64_t tiles_m, int64_t tiles_n) {
  const int64_t tiles_per_batch = tiles_m * tiles_n;
  const int64_t batch = tile / tiles_per_batch;
  const int64_t t = tile - batch * tiles_per_batch;
  const int64_t in_group = GROUP_M * tiles_n;
  const int64_t first_m = (t / in_group) * GROUP_M;
  const int64_t gsize = min(tiles_m - first_m, static_cast<int64_t>(GROUP_M));
  return {batch, first_m + (t % in_group) % gsize, (t % in_group) / gsize};
}

}  // namespace detfuzz::cuda_kernels
