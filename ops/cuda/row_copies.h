// Several small row-major copies in one launch: the buffer registry's fill (ops/graph) copies a
// batch's inputs into its slots this way, one kernel launch instead of one libtorch op per slot
// (each op costs microseconds of host time, which eager forwards of short prompts wait on).
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

namespace detfuzz::cuda_kernels {

// Copies `rows` rows of src_row_bytes bytes (rows src_row_bytes apart) to dst (rows dst_row_bytes
// apart) and zeroes each dst row's bytes past src_row_bytes. Pointers and byte counts are
// multiples of 4; src and dst do not overlap.
struct RowCopy {
  const void *src = nullptr;
  void *dst = nullptr;
  int64_t rows = 0, src_row_bytes = 0, dst_row_bytes = 0;
};

constexpr int kMaxRowCopies = 16;

// Whether a copy can go through launch_row_copies (alignment and sizes as above).
bool row_copy_fits(const RowCopy &c);

// Runs copies[0 .. count) on `stream` in one launch (count <= kMaxRowCopies). Throws
// std::runtime_error naming the call site on a bad argument or a CUDA error.
void launch_row_copies(const RowCopy *copies, int count, cudaStream_t stream);

}  // namespace detfuzz::cuda_kernels
