// Several row-major copies in one launch (row_copies.h).
//
// Design. Grid (x blocks, one y per copy), 256 threads; each copy's destination words (4 bytes for
// RowOp::copy, 8 for the int64 ops), dst row by dst row, are taken grid-stride by its blocks: a
// copied word inside the source row is copied, one past it is zero. The registry's slots are a few
// KiB each (a batch's ids, positions, lengths, block table), so one block per copy is the usual
// grid; a wide copy (input embeddings) gets up to 256 blocks.
#include "ops/cuda/cuda_check.h"
#include "ops/cuda/row_copies.h"

#include <algorithm>
#include <stdexcept>
#include <string>

namespace detfuzz::cuda_kernels {
namespace {

constexpr int kThreads = 256;

struct RowCopies {
  RowCopy copy[kMaxRowCopies];
};

// Destination words of a copy: 4 bytes for RowOp::copy, 8 for the int64 ops.
__host__ __device__ int64_t dst_word_bytes(RowOp op) { return op == RowOp::copy ? 4 : 8; }

__global__ void __launch_bounds__(kThreads) row_copies_kernel(const RowCopies copies) {
  const RowCopy &c = copies.copy[blockIdx.y];
  const int64_t words = c.dst_row_bytes / dst_word_bytes(c.op), total = c.rows * words;
  const int64_t first = static_cast<int64_t>(blockIdx.x) * kThreads + threadIdx.x,
                step = static_cast<int64_t>(gridDim.x) * kThreads;
  if (c.op == RowOp::copy) {
    const int64_t src_words = c.src_row_bytes / 4;
    const uint32_t *src = static_cast<const uint32_t *>(c.src);
    uint32_t *dst = static_cast<uint32_t *>(c.dst);
    for (int64_t i = first; i < total; i += step) {
      const int64_t row = i / words, word = i % words;
      dst[i] = word < src_words ? src[row * src_words + word] : 0u;
    }
  } else {
    const int32_t *src = static_cast<const int32_t *>(c.src);
    int64_t *dst = static_cast<int64_t *>(c.dst);
    for (int64_t i = first; i < total; i += step)
      dst[i] = c.op == RowOp::fill_int64
                   ? c.value
                   : static_cast<int64_t>(src[(i / words) * (c.src_row_bytes / 4) + i % words]) + c.value;
  }
}

}  // namespace

bool row_copy_fits(const RowCopy &c) {
  const auto aligned = [](const void *p, uintptr_t to) { return reinterpret_cast<uintptr_t>(p) % to == 0; };
  const int64_t word = dst_word_bytes(c.op);
  if (c.dst == nullptr || !aligned(c.dst, static_cast<uintptr_t>(word)) || c.rows < 0 || c.dst_row_bytes < 0 ||
      c.dst_row_bytes % word != 0)
    return false;
  switch (c.op) {
    case RowOp::copy:
      return c.src != nullptr && aligned(c.src, 4) && c.src_row_bytes >= 0 && c.src_row_bytes % 4 == 0 &&
             c.src_row_bytes <= c.dst_row_bytes;
    case RowOp::widen_int32_add: return c.src != nullptr && aligned(c.src, 4) && 2 * c.src_row_bytes == c.dst_row_bytes;
    case RowOp::fill_int64: return true;
  }
  return false;
}

void launch_row_copies(const RowCopy *copies, int count, cudaStream_t stream) {
  if (count < 0 || count > kMaxRowCopies)
    throw std::runtime_error("row copies: " + std::to_string(count) + " copies in one launch (at most " +
                             std::to_string(kMaxRowCopies) + ")");
  RowCopies all;
  int64_t widest = 0;
  for (int i = 0; i < count; ++i) {
    if (!row_copy_fits(copies[i]))
      throw std::runtime_error("row copies: copy " + std::to_string(i) +
                               " is misaligned or its source and destination rows do not match");
    all.copy[i] = copies[i];
    widest = std::max(widest, copies[i].rows * (copies[i].dst_row_bytes / dst_word_bytes(copies[i].op)));
  }
  if (count == 0 || widest == 0) return;
  const int64_t blocks = std::min<int64_t>((widest + kThreads - 1) / kThreads, 256);
  row_copies_kernel<<<dim3(static_cast<unsigned>(blocks), static_cast<unsigned>(count)), kThreads, 0, stream>>>(all);
  DETFUZZ_LAUNCH_CHECK();
}

}  // namespace detfuzz::cuda_kernels
