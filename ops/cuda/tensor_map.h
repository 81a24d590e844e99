// cuTensorMapEncodeTiled, the driver call that builds a TMA descriptor, found once through the
// runtime's driver entry points (the project links cudart, never -lcuda), and a cache of the maps
// of matrix operands. Host code only; shared by the Hopper matmuls (gemm_sm90.cu, scaled_mm_sm90.cu,
// gemm_f32_stream.cu) and the Hopper paged attention (paged_attention_sm90.cu).
#pragma once

#include <cuda.h>
#include <cudaTypedefs.h>

#include <cstdint>

namespace detfuzz::cuda_kernels {

// The driver's encoder. Throws std::runtime_error if the driver lacks it.
PFN_cuTensorMapEncodeTiled_v12000 encode_tiled();

// A tiled map over a row-major [batch][rows][cols] tensor (row pitch ld, matrix pitch
// batch_stride, in elements) of 8-bit (UINT8), 16-bit (UINT16) or FLOAT32 elements, boxes of box_cols x box_rows;
// rank3 is 0 when the map is rank 2 (one matrix, or a batch stride of 0: every batch reads the
// same matrix, and the kernel passes no batch coordinate).
struct MatrixMap {
  CUtensorMap map;
  int rank3;
};
// Kept per host thread for recent calls: encoding is a driver call on the host, paid on every
// launch, and at decode sizes the host time of a call shows in its latency; a model's weights and
// the allocator's reused activation buffers give the same pointers and shapes call after call. A
// map holds only these parameters (no data), so a hit is exact. Throws std::runtime_error, naming
// `who`, when the driver refuses the map. l2_fill: how much the L2 fetches for a box row's miss,
// the kernel's own choice (measured per kernel: docs/perf/matmul.md).
MatrixMap matrix_map(const char *who, CUtensorMapDataType type, const void *base, int64_t cols, int64_t rows,
                     int64_t ld, int64_t batch, int64_t batch_stride, int box_cols, int box_rows,
                     CUtensorMapSwizzle swizzle, CUtensorMapL2promotion l2_fill);

}  // namespace detfuzz::cuda_kernels
