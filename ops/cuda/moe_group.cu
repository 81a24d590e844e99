// The fused MoE layer's grouping of (token, slot) pairs by expert, on the device: a stable counting
// sort (pairs in p order within each expert) and the tile list the grouped GEMMs walk, with no
// host round trip, so a CUDA graph can hold the whole layer at any batch.
//
// Design. Up to kGroupChunk pairs, one block of kGroupThreads does everything: the experts' counts
// (shared-memory atomics: integers, so any order gives the same counts), their first positions and
// first tiles (a block-wide exclusive scan over the experts, kScanItems a thread), the tiles an
// expert a thread, the empty tiles that pad the list to moe_max_tiles and the count of the others
// (the Hopper GEMMs share only those among their CTAs), then warp 0 places the pairs 32 at a time
// in p order: a pair's position is its expert's next free slot plus the number of lower lanes of
// its warp with the same expert. Larger batches take three launches over chunks of
// kGroupChunk pairs: each block counts its chunk into the workspace (hist [block][expert]); one
// block adds the chunks' counts, lays out the tiles as above and turns hist into each chunk's first
// position per expert (the chunks before it, in order); each block then places its chunk as warp 0
// does above. Chunk b's pairs land after chunk b - 1's within an expert, so the order is the same
// stable order either way, and so are the tiles: the host's grouping, pair for pair.
#include "ops/cuda/cuda_check.h"
#include "ops/cuda/fused_moe.cuh"

#include <cub/block/block_scan.cuh>

#include <algorithm>
#include <climits>
#include <stdexcept>
#include <string>

namespace detfuzz::cuda_kernels {
namespace {

constexpr int kGroupThreads = 1024;
constexpr int kScanItems = 4;  // experts per thread in the scan
static_assert(kGroupThreads * kScanItems >= kMoeGroupMaxExperts, "the scan covers every expert");
constexpr int64_t kGroupChunk = 1024;  // pairs a block counts and places
using ExpertScan = cub::BlockScan<int32_t, kGroupThreads>;

// count[e] = the pairs of ids[lo, hi) routed to expert e (count in shared memory, zeroed here).
__device__ void count_experts(const int32_t *ids, int64_t lo, int64_t hi, int experts, int32_t *count) {
  for (int e = threadIdx.x; e < experts; e += blockDim.x) count[e] = 0;
  __syncthreads();
  for (int64_t p = lo + threadIdx.x; p < hi; p += blockDim.x) atomicAdd(&count[ids[p]], 1);
  __syncthreads();
}

// From each expert's pair count total(e): hands each expert's first position in the order to
// start(e, position), writes the tiles expert by expert (expert, first position, count), zeroes
// the tiles past them up to max_tiles and writes their count after those. Every thread of the
// block calls it.
template <typename Total, typename Start>
__device__ void lay_out_tiles(Total total, Start start, int experts, int tile_rows, int64_t max_tiles, int32_t *tiles,
                              ExpertScan::TempStorage &scan) {
  int32_t count[kScanItems], first[kScanItems], first_tile[kScanItems];
#pragma unroll
  for (int i = 0; i < kScanItems; ++i) {
    const int e = threadIdx.x * kScanItems + i;
    count[i] = e < experts ? total(e) : 0;
    first_tile[i] = (count[i] + tile_rows - 1) / tile_rows;
  }
  int32_t used_tiles = 0;
  ExpertScan(scan).ExclusiveSum(count, first);
  __syncthreads();  // the temporary storage is reused
  ExpertScan(scan).ExclusiveSum(first_tile, first_tile, used_tiles);
#pragma unroll
  for (int i = 0; i < kScanItems; ++i) {
    const int e = threadIdx.x * kScanItems + i;
    if (e >= experts) continue;
    start(e, first[i]);
    for (int32_t done = 0, t = first_tile[i]; done < count[i]; done += tile_rows, ++t) {
      tiles[3 * t] = e;
      tiles[3 * t + 1] = first[i] + done;
      tiles[3 * t + 2] = min(tile_rows, count[i] - done);
    }
  }
  for (int64_t t = used_tiles + threadIdx.x; t < max_tiles; t += blockDim.x)
    tiles[3 * t] = tiles[3 * t + 1] = tiles[3 * t + 2] = 0;
  if (threadIdx.x == 0) tiles[3 * max_tiles] = used_tiles;
}

// Warp 0 places the pairs of ids[lo, hi) in p order, next[e] (shared memory) being expert e's next
// free position.
__device__ void place_pairs(const int32_t *ids, int64_t lo, int64_t hi, int32_t *next, int32_t *order) {
  if (threadIdx.x >= 32) return;
  const int lane = threadIdx.x;
  for (int64_t base = lo; base < hi; base += 32) {
    const int64_t p = base + lane;
    const bool live = p < hi;
    const unsigned active = __ballot_sync(0xffffffffu, live);
    if (live) {
      const int e = ids[p];
      const unsigned same = __match_any_sync(active, e);
      const int rank = __popc(same & ((1u << lane) - 1u));
      order[next[e] + rank] = static_cast<int32_t>(p);
      __syncwarp(active);  // every lane has read next[e] before its first lane moves it on
      if (rank == 0) next[e] += __popc(same);
    }
    __syncwarp();
  }
}

// Up to kGroupChunk pairs: the whole grouping in one block.
__global__ void __launch_bounds__(kGroupThreads)
    moe_group_kernel(const int32_t *ids, int64_t pairs, int experts, int tile_rows, int64_t max_tiles, int32_t *order,
                     int32_t *tiles) {
  extern __shared__ int32_t group_smem[];
  int32_t *count = group_smem, *next = count + experts;
  __shared__ ExpertScan::TempStorage scan;
  count_experts(ids, 0, pairs, experts, count);
  lay_out_tiles([&](int e) { return count[e]; }, [&](int e, int32_t first) { next[e] = first; }, experts, tile_rows,
                max_tiles, tiles, scan);
  __syncthreads();
  place_pairs(ids, 0, pairs, next, order);
}

// Larger batches, first launch: block b counts chunk b into hist[b * experts + e].
__global__ void __launch_bounds__(kGroupThreads)
    moe_count_kernel(const int32_t *ids, int64_t pairs, int experts, int32_t *hist) {
  extern __shared__ int32_t count[];
  const int64_t lo = static_cast<int64_t>(blockIdx.x) * kGroupChunk;
  count_experts(ids, lo, min(pairs, lo + kGroupChunk), experts, count);
  for (int e = threadIdx.x; e < experts; e += blockDim.x)
    hist[static_cast<int64_t>(blockIdx.x) * experts + e] = count[e];
}

// Second launch, one block: the experts' totals over the chunks, the tiles, and hist turned into
// each chunk's first position per expert.
__global__ void __launch_bounds__(kGroupThreads)
    moe_scan_kernel(int32_t *hist, int chunks, int experts, int tile_rows, int64_t max_tiles, int32_t *tiles) {
  __shared__ ExpertScan::TempStorage scan;
  auto total = [&](int e) {
    int32_t sum = 0;
    for (int b = 0; b < chunks; ++b) sum += hist[static_cast<int64_t>(b) * experts + e];
    return sum;
  };
  auto start = [&](int e, int32_t first) {
    for (int b = 0; b < chunks; ++b) {
      int32_t &h = hist[static_cast<int64_t>(b) * experts + e];
      const int32_t in_chunk = h;
      h = first;
      first += in_chunk;
    }
  };
  lay_out_tiles(total, start, experts, tile_rows, max_tiles, tiles, scan);
}

// Third launch: block b places chunk b from its first positions.
__global__ void __launch_bounds__(kGroupThreads)
    moe_place_kernel(const int32_t *ids, int64_t pairs, int experts, const int32_t *hist, int32_t *order) {
  extern __shared__ int32_t next[];
  for (int e = threadIdx.x; e < experts; e += blockDim.x)
    next[e] = hist[static_cast<int64_t>(blockIdx.x) * experts + e];
  __syncthreads();
  const int64_t lo = static_cast<int64_t>(blockIdx.x) * kGroupChunk;
  place_pairs(ids, lo, min(pairs, lo + kGroupChunk), next, order);
}

int64_t group_chunks(int64_t pairs) { return (pairs + kGroupChunk - 1) / kGroupChunk; }

}  // namespace

int64_t moe_max_tiles(int64_t pairs, int64_t experts, int64_t tile_rows) {
  // sum over experts of ceil(count / tile_rows) <= pairs / tile_rows + (experts with a pair)
  return (pairs + tile_rows - 1) / tile_rows + std::min(experts, pairs);
}

int64_t moe_group_workspace(int64_t pairs, int64_t experts) {
  return pairs <= kGroupChunk ? 0 : group_chunks(pairs) * experts;
}

void launch_moe_group(const int32_t *ids, int64_t pairs, int64_t experts, int64_t tile_rows, int32_t *workspace,
                      int32_t *order, int32_t *tiles, cudaStream_t stream) {
  if (experts < 1 || experts > kMoeGroupMaxExperts || tile_rows < 1 || pairs > INT32_MAX)
    throw std::invalid_argument("moe group: " + std::to_string(experts) + " experts, " + std::to_string(pairs) +
                                " pairs and tiles of " + std::to_string(tile_rows) + " (takes 1-" +
                                std::to_string(kMoeGroupMaxExperts) + " experts and fewer than 2^31 pairs)");
  if (pairs == 0) {  // no tiles: only their count
    DETFUZZ_CUDA_CHECK(cudaMemsetAsync(tiles, 0, sizeof(int32_t), stream));
    return;
  }
  const int e = static_cast<int>(experts), rows = static_cast<int>(tile_rows);
  const int64_t max_tiles = moe_max_tiles(pairs, experts, tile_rows);
  const size_t counts = static_cast<size_t>(experts) * sizeof(int32_t);
  if (pairs <= kGroupChunk) {
    moe_group_kernel<<<1, kGroupThreads, 2 * counts, stream>>>(ids, pairs, e, rows, max_tiles, order, tiles);
    DETFUZZ_LAUNCH_CHECK();
    return;
  }
  if (workspace == nullptr)
    throw std::invalid_argument("moe group: " + std::to_string(pairs) + " pairs need a workspace of " +
                                std::to_string(moe_group_workspace(pairs, experts)) + " int32");
  const unsigned chunks = static_cast<unsigned>(group_chunks(pairs));
  moe_count_kernel<<<chunks, kGroupThreads, counts, stream>>>(ids, pairs, e, workspace);
  DETFUZZ_LAUNCH_CHECK();
  moe_scan_kernel<<<1, kGroupThreads, 0, stream>>>(workspace, static_cast<int>(chunks), e, rows, max_tiles, tiles);
  DETFUZZ_LAUNCH_CHECK();
  moe_place_kernel<<<chunks, kGroupThreads, counts, stream>>>(ids, pairs, e, workspace, order);
  DETFUZZ_LAUNCH_CHECK();
}

}  // namespace detfuzz::cuda_kernels
