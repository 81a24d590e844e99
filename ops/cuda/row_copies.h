// Several small row-major copies in one launch: the buffer registry's fill (ops/graph) copies a
// batch's inputs into its slots this way, one kernel launch instead of one libtorch op per slot
// (each op costs microseconds of host time, which eager forwards of short prompts wait on).
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

namespace detfuzz::cuda_kernels {

// What a RowCopy writes into each dst row.
enum class RowOp {
  copy,             // the src row's bytes, then zeros up to dst_row_bytes
  widen_int32_add,  // each int32 of the src row as an int64 plus `value` (dst_row_bytes = 2 src_row_bytes)
  fill_int64,       // `value` as every int64 of the row (src unused)
};

// `rows` rows: src's rows src_row_bytes apart, dst's dst_row_bytes apart. Pointers and byte
// counts are multiples of 4 (of 8 for int64 destinations); src and dst do not overlap.
struct RowCopy {
  const void *src = nullptr;
  void *dst = nullptr;
  int64_t rows = 0, src_row_bytes = 0, dst_row_bytes = 0;
  RowOp op = RowOp::copy;
  int64_t value = 0;
};

constexpr int kMaxRowCopies = 16;

// Whether a copy can go through launch_row_copies (alignment and sizes as above).
bool row_copy_fits(const RowCopy &c);

// Runs copies[0 .. count) on `stream` in one launch (count <= kMaxRowCopies). Throws
// std::runtime_error naming the call site on a bad argument or a CUDA error.
void launch_row_copies(const RowCopy *copies, int count, cudaStream_t stream);

}  // namespace detfuzz::cuda_kernels
