// Raw-pointer launchers of the batch-invariant row reductions (no torch here). Input is `rows`
// rows of `len` elements; element j of row r is at x[r * x_row_stride + j] (unit inner stride).
//
//   log_softmax: y[r * y_row_stride + j] = x[r, j] - max_r - log(sum_j exp(x[r, j] - max_r))
//   mean:        y[r] = (sum_j x[r, j]) / len      (len == 0 gives NaN)
//
// The reduction order of a row is fixed by `len` and the input dtype alone (see row_reduce.cu),
// never by `rows`, the row index, alignment or the stream.
#pragma once

#include "ops/cuda/gemm.cuh"  // DType

#include <cuda_runtime_api.h>

#include <cstdint>

namespace detfuzz::cuda_kernels {

struct RowReduceParams {
  DType in_dtype = DType::f32;   // log_softmax: f32/f16/bf16; mean: also i32/i64
  DType out_dtype = DType::f32;  // f32/f16/bf16
  const void *x = nullptr;
  int64_t rows = 0, len = 0, x_row_stride = 0;
  void *y = nullptr;
  int64_t y_row_stride = 0;  // log_softmax only; mean writes y[r] contiguously
};

void launch_log_softmax(const RowReduceParams &p, cudaStream_t stream);
void launch_mean(const RowReduceParams &p, cudaStream_t stream);

// The threads that cooperate on one row of `len` elements of `in` (a power of two, 32..1024):
// part of the fixed order, exposed for tests and reports.
int row_reduce_threads(DType in, int64_t len);   // mean
int log_softmax_threads(DType in, int64_t len);  // log_softmax

}  // namespace detfuzz::cuda_kernels
