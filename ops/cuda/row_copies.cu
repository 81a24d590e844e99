// Several row-major copies in one launch (row_copies.h).
//
// Design. Grid (x blocks, one y per copy), 256 threads; each copy's 4-byte words, dst row by dst
// row, are taken grid-stride by its blocks: a word inside the source row is copied, one past it is
// zero. The registry's slots are a few KiB each (a batch's ids, positions, lengths, block table),
// so one block per copy is the usual grid; a wide copy (input embeddings) gets up to 256 blocks.
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

__global__ void __launch_bounds__(kThreads) row_copies_kernel(const RowCopies copies) {
  const RowCopy &c = copies.copy[blockIdx.y];
  const int64_t src_words = c.src_row_bytes / 4, dst_words = c.dst_row_bytes / 4;
  const uint32_t *src = static_cast<const uint32_t *>(c.src);
  uint32_t *dst = static_cast<uint32_t *>(c.dst);
  const int64_t total = c.rows * dst_words;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * kThreads + threadIdx.x; i < total;
       i += static_cast<int64_t>(gridDim.x) * kThreads) {
    const int64_t row = i / dst_words, word = i % dst_words;
    dst[i] = word < src_words ? src[row * src_words + word] : 0u;
  }
}

}  // namespace

bool row_copy_fits(const RowCopy &c) {
  const auto aligned = [](const void *p) { return reinterpret_cast<uintptr_t>(p) % 4 == 0; };
  return c.src != nullptr && c.dst != nullptr && aligned(c.src) && aligned(c.dst) && c.rows >= 0 &&
         c.src_row_bytes >= 0 && c.src_row_bytes % 4 == 0 && c.dst_row_bytes % 4 == 0 &&
         c.src_row_bytes <= c.dst_row_bytes;
}

void launch_row_copies(const RowCopy *copies, int count, cudaStream_t stream) {
  if (count < 0 || count > kMaxRowCopies)
    throw std::runtime_error("row copies: " + std::to_string(count) + " copies in one launch (at most " +
                             std::to_string(kMaxRowCopies) + ")");
  RowCopies all;
  int64_t widest = 0;
  for (int i = 0; i < count; ++i) {
    if (!row_copy_fits(copies[i]))
      throw std::runtime_error("row copies: copy " + std::to_string(i) + " is not 4-byte aligned or its source row " +
                               "is wider than its destination row");
    all.copy[i] = copies[i];
    widest = std::max(widest, copies[i].rows * (copies[i].dst_row_bytes / 4));
  }
  if (count == 0 || widest == 0) return;
  const int64_t blocks = std::min<int64_t>((widest + kThreads - 1) / kThreads, 256);
  row_copies_kernel<<<dim3(static_cast<unsigned>(blocks), static_cast<unsigned>(count)), kThreads, 0, stream>>>(all);
  DETFUZZ_LAUNCH_CHECK();
}

}  // namespace detfuzz::cuda_kernels
