// Launchers of the test-data and diff kernels (properties/cuda/*.cu): raw device pointers, no
// ATen. Host dispatch lives in properties/data.cpp (make_values on a CUDA device) and
// properties/device_diff.cpp (compare_bits of two CUDA tensors).
#pragma once

#include "properties/counter_data.h"

#include <cuda_runtime_api.h>

#include <cstdint>

namespace detfuzz::device_kernels {

// out[0..n) = counter_data's element e of tensor `tensor` of seed `seed`, rounded to `type`
// (written as 4-, 2-, 4- or 8-byte elements). Indices of elements whose float64 value the device
// cannot round with certainty as the host does are appended to flagged[0..capacity); *flagged_count
// (zeroed here) receives how many there were, which may exceed `capacity`.
void launch_counter_fill(void *out, counter_data::OutType type, int64_t n, uint64_t seed, uint64_t tensor,
                         counter_data::Dist dist, double subnormal, unsigned long long *flagged_count, int64_t *flagged,
                         int64_t capacity, cudaStream_t stream);

// out[r * width + e] = counter_data::irwin_hall_value(key_first[2r], key_first[2r+1] + e) for
// r < rows, e < width (the paged-attention data); key_first is device memory.
void launch_keyed_rows(float *out, const uint64_t *key_first, int64_t rows, int64_t width, cudaStream_t stream);

// What the host diff engine (harness/diff.h) measures, computed on the device.
enum class DiffKind : int { float64, float32, float16, bfloat16, int32, int64 };
struct DeviceDiff {
  unsigned long long differing;
  long long first_index;            // LLONG_MAX when none differ
  unsigned long long max_ulp;       // UINT64_MAX when a NaN differs
  unsigned long long max_abs_bits;  // bit pattern of the non-negative float64 max |a-b| (inf for non-finite pairs)
};
// Compares n contiguous elements of `expected` and `actual` bit for bit; *result (device memory)
// is overwritten.
void launch_bitwise_diff(const void *expected, const void *actual, int64_t n, DiffKind kind, DeviceDiff *result,
                         cudaStream_t stream);

}  // namespace detfuzz::device_kernels
