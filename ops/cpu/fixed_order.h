// Fixed-order CPU kernels: the executable specification of every batch-invariant reduction.
//
// Each output element is reduced in an order that depends only on the reduction length and the
// block constants below, never on the batch size, the row index, the thread count or the layout:
//
//   blocked sum of terms t[0..L):  total = 0
//                                  for each block [k0, k0+B) of B consecutive terms (the last may be short):
//                                      partial = 0; partial += t[k] for k ascending   (float32)
//                                      total   = total + partial
//
// Matmul sums the products a[i,k]*b[k,j] (each rounded to float32, no FMA) that way with
// B = kMatmulKBlock; log_softmax sums exp(x - max) and mean sums x with B = kReduceBlock. Maxima
// are taken sequentially with NaN propagation. All arithmetic is float32 on values converted
// exactly from the input type; the callers round the float32 results to the output dtype.
//
// The kernels read through element strides (any view: transposed, sliced, offset, strided) and
// know nothing of torch. Parallelism belongs to the callers, over whole output rows: a row's
// order never depends on which thread runs it. Loops run over output columns innermost, so the
// compiler vectorises across independent accumulators without reassociating any of them.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <vector>

namespace detfuzz::fixed_order {

// K is consumed in blocks of this many products, each summed sequentially from zero and then
// added into the running accumulator.
constexpr int64_t kMatmulKBlock = 64;
// Width of the column tile of B staged as float32. Memory traffic only: it never changes the order.
constexpr int64_t kMatmulNTile = 256;
// Block length of the row reductions (log_softmax's sum of exponentials, mean's sum).
constexpr int64_t kReduceBlock = 64;

template <typename T>
struct StridedMatrix {
  const T *data;
  int64_t row_stride;  // in elements
  int64_t col_stride;
};

// Converts n elements spaced `stride` apart, starting at base, to float32 in dst.
template <typename T>
inline void load_row(const T *base, int64_t n, int64_t stride, float *dst) {
  for (int64_t j = 0; j < n; ++j) dst[j] = static_cast<float>(base[j * stride]);
}

// Converts the elements of the strided block at base (row-major over sizes[0..ndim)) to float32,
// writing them at dst and advancing it. A block of no dimensions is the one element at base.
template <typename T>
void load_strided(const T *base, const int64_t *sizes, const int64_t *strides, size_t ndim, float *&dst) {
  if (ndim == 0) {
    *dst++ = static_cast<float>(*base);
  } else if (ndim == 1) {
    load_row(base, sizes[0], strides[0], dst);
    dst += sizes[0];
  } else {
    for (int64_t i = 0; i < sizes[0]; ++i) load_strided(base + i * strides[0], sizes + 1, strides + 1, ndim - 1, dst);
  }
}

// The blocked sum defined above over term(0), ..., term(n-1).
template <typename Term>
inline float blocked_sum(int64_t n, Term term) {
  float total = 0.f;
  for (int64_t k0 = 0; k0 < n; k0 += kReduceBlock) {
    const int64_t k1 = std::min(n, k0 + kReduceBlock);
    float partial = 0.f;
    for (int64_t k = k0; k < k1; ++k) partial += term(k);
    total = total + partial;
  }
  return total;
}

// One K block of the product on float32 tiles: for each of `rows` rows i, the partial sum over
// kk ascending, from zero, of a[i * kt + kk] * b[kk * nt + j], then acc[i * ldc + j] += partial.
// accumulate_tile picks the AVX-512 kernel where the CPU has it (ops/cpu/matmul_tile.cpp), the
// portable loop otherwise; both give the same bits (a NaN's payload aside: which operand's NaN
// propagates is the compiler's choice in either loop, and the callers canonicalise NaN), and
// accumulate_tile_vectorised says which runs.
void accumulate_tile(const float *a, int64_t rows, int64_t kt, const float *b, int64_t nt, float *acc, int64_t ldc);
void accumulate_tile_portable(const float *a, int64_t rows, int64_t kt, const float *b, int64_t nt, float *acc,
                              int64_t ldc);
bool accumulate_tile_vectorised();

// Accumulates rows [row_begin, row_end) of a(MxK) @ b(KxN) into acc, row-major with leading
// dimension n (row i of the product lands at acc + (i - row_begin) * n). Every acc element ends
// as the blocked sum of its K products with block length kMatmulKBlock.
template <typename T>
void matmul_accumulate_rows(StridedMatrix<T> a, StridedMatrix<T> b, int64_t n, int64_t k, int64_t row_begin,
                            int64_t row_end, float *acc) {
  const int64_t rows = row_end - row_begin;
  std::fill(acc, acc + rows * n, 0.f);
  // Staging reused from call to call on this thread (every element read was written first): a
  // fresh zeroed 64 KiB tile per call had cost more than the product of a small matmul.
  thread_local std::vector<float> b_tile, a_blocks;
  b_tile.resize(static_cast<size_t>(std::min(k, kMatmulKBlock) * std::min(n, kMatmulNTile)));
  a_blocks.resize(static_cast<size_t>(rows * std::min(k, kMatmulKBlock)));
  for (int64_t n0 = 0; n0 < n; n0 += kMatmulNTile) {
    const int64_t nt = std::min(kMatmulNTile, n - n0);
    for (int64_t k0 = 0; k0 < k; k0 += kMatmulKBlock) {
      const int64_t kt = std::min(kMatmulKBlock, k - k0);
      for (int64_t kk = 0; kk < kt; ++kk)
        load_row(b.data + (k0 + kk) * b.row_stride + n0 * b.col_stride, nt, b.col_stride, b_tile.data() + kk * nt);
      for (int64_t i = row_begin; i < row_end; ++i)
        load_row(a.data + i * a.row_stride + k0 * a.col_stride, kt, a.col_stride,
                 a_blocks.data() + (i - row_begin) * kt);
      accumulate_tile(a_blocks.data(), rows, kt, b_tile.data(), nt, acc + n0, n);
    }
  }
}

// addmm's epilogue, beta*bias + alpha*acc, with torch's convention that a zero coefficient drops
// its term entirely (NaN or inf in the dropped operand does not propagate).
inline float addmm_epilogue(float acc, float bias, float alpha, float beta) {
  if (alpha == 0.f) return beta == 0.f ? 0.f : beta * bias;
  if (beta == 0.f) return alpha * acc;
  return alpha * acc + beta * bias;
}

// Offset (in elements) of the element with row-major linear index `linear` over `sizes`.
inline int64_t strided_offset(int64_t linear, const std::vector<int64_t> &sizes, const std::vector<int64_t> &strides) {
  int64_t offset = 0;
  for (size_t d = sizes.size(); d-- > 0;) {
    offset += (linear % sizes[d]) * strides[d];
    linear /= sizes[d];
  }
  return offset;
}

// max(a, b) where a NaN on either side wins and ties keep `a`.
inline float nan_propagating_max(float a, float b) { return (std::isnan(a) || a >= b) ? a : b; }

// Sequential maximum of x[0..n), NaN-propagating; -inf for an empty row.
inline float row_max(const float *x, int64_t n) {
  float m = -std::numeric_limits<float>::infinity();
  for (int64_t j = 0; j < n; ++j) m = nan_propagating_max(m, x[j]);
  return m;
}

// Blocked sum of exp(x[j] - shift).
inline float row_sum_exp(const float *x, int64_t n, float shift) {
  return blocked_sum(n, [&](int64_t j) { return std::exp(x[j] - shift); });
}

// out[j] = (x[j] - shift) - log_sum, the third pass of log_softmax.
inline void log_softmax_store(const float *x, int64_t n, float shift, float log_sum, float *out) {
  for (int64_t j = 0; j < n; ++j) out[j] = (x[j] - shift) - log_sum;
}

// The three passes on one row: max, blocked sum of exp(x - max), x - max - log(sum).
// A row with +inf or NaN, or of all -inf, becomes NaN throughout, as in torch.
inline void log_softmax_row(const float *x, int64_t n, float *out) {
  const float m = row_max(x, n);
  log_softmax_store(x, n, m, std::log(row_sum_exp(x, n, m)), out);
}

}  // namespace detfuzz::fixed_order
