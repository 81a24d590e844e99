// The persistent matmul's tile order, shared by the tensor-core and the float32 kernels: tile
// index t (batch outermost, then groups of GROUP_M tile rows walked column by column) maps to one
// (batch, tile row, tile column). It depends on the tile counts only, never on which CTA takes
// the tile, so the bits of a tile do not depend on the grid either.
#pragma once

#include <cstdint>

namespace detfuzz::cuda_kernels {

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
