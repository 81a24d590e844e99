// The bitwise diff engine's measurements, on the GPU: the same counts, first differing index,
// max |a-b| and max ULP distance as harness/diff.cpp, without copying either tensor to the host.
//
// Design. One thread per element, grid-stride, over two contiguous buffers read as integers of
// the dtype's width. An element differs when its bit patterns differ. Each differing thread
// folds into one result with atomics: a count (add), the first index (min), the ULP distance
// (max; a NaN on either side gives UINT64_MAX; floats are mapped to ordered integers, -0 just
// below +0; integers give |a-b| through float64 as the host engine does) and |a-b| in float64
// (max over the bit patterns, which order as the values for non-negative doubles; a pair with a
// non-finite side gives inf). Atomics are rare: only differing elements reach them.
#include "ops/cuda/cuda_check.h"
#include "properties/cuda/device_kernels.h"

#include <algorithm>
#include <climits>

namespace detfuzz::device_kernels {
namespace {

__device__ double value_of(uint64_t bits, DiffKind kind) {
  switch (kind) {
    case DiffKind::float16: {
      // Exact half -> float: sign, exponent rebased, subnormals normalised.
      const uint32_t sign = static_cast<uint32_t>(bits & 0x8000u) << 16, exp = (bits >> 10) & 0x1fu,
                     mant = bits & 0x3ffu;
      uint32_t f;
      if (exp == 0x1f)
        f = sign | 0x7f800000u | (mant << 13);
      else if (exp != 0)
        f = sign | ((exp + 112u) << 23) | (mant << 13);
      else if (mant == 0)
        f = sign;
      else
        return (sign ? -1.0 : 1.0) * static_cast<double>(mant) * 0x1.0p-24;
      return static_cast<double>(__uint_as_float(f));
    }
    case DiffKind::bfloat16: return static_cast<double>(__uint_as_float(static_cast<uint32_t>(bits) << 16));
    case DiffKind::float32: return static_cast<double>(__uint_as_float(static_cast<uint32_t>(bits)));
    case DiffKind::float64: return __longlong_as_double(static_cast<long long>(bits));
    case DiffKind::int32: return static_cast<double>(static_cast<int32_t>(bits));
    default: return static_cast<double>(static_cast<int64_t>(bits));
  }
}

__device__ bool is_nan_bits(uint64_t bits, DiffKind kind) {
  switch (kind) {
    case DiffKind::float16: return (bits & 0x7c00) == 0x7c00 && (bits & 0x03ff) != 0;
    case DiffKind::bfloat16: return (bits & 0x7f80) == 0x7f80 && (bits & 0x007f) != 0;
    case DiffKind::float32: return (bits & 0x7f800000u) == 0x7f800000u && (bits & 0x007fffffu) != 0;
    case DiffKind::float64:
      return (bits & 0x7ff0000000000000ull) == 0x7ff0000000000000ull && (bits & 0x000fffffffffffffull) != 0;
    default: return false;
  }
}

__device__ int width_bits(DiffKind kind) {
  switch (kind) {
    case DiffKind::float16:
    case DiffKind::bfloat16: return 16;
    case DiffKind::float32:
    case DiffKind::int32: return 32;
    default: return 64;
  }
}

__device__ int64_t ordered(uint64_t bits, int width) {
  const uint64_t sign = 1ull << (width - 1);
  const uint64_t mag = bits & (sign - 1);
  return (bits & sign) ? -static_cast<int64_t>(mag) - 1 : static_cast<int64_t>(mag);
}

__device__ uint64_t ulp_distance(uint64_t a, uint64_t b, DiffKind kind) {
  if (kind == DiffKind::int32 || kind == DiffKind::int64) {
    const int64_t x = static_cast<int64_t>(value_of(a, kind)), y = static_cast<int64_t>(value_of(b, kind));
    return static_cast<uint64_t>(x > y ? x - y : y - x);
  }
  if (is_nan_bits(a, kind) || is_nan_bits(b, kind)) return ULLONG_MAX;
  const int w = width_bits(kind);
  const int64_t x = ordered(a, w), y = ordered(b, w);
  return static_cast<uint64_t>(x > y ? x - y : y - x);
}

__global__ void init_result(DeviceDiff *r) { *r = DeviceDiff{0ull, LLONG_MAX, 0ull, 0ull}; }

template <typename Word>
__global__ void bitwise_diff_kernel(const Word *expected, const Word *actual, int64_t n, DiffKind kind, DeviceDiff *r) {
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const uint64_t x = expected[i], y = actual[i];
    if (x == y) continue;
    atomicAdd(&r->differing, 1ull);
    atomicMin(&r->first_index, static_cast<long long>(i));
    const double vx = value_of(x, kind), vy = value_of(y, kind);
    const double d = (isfinite(vx) && isfinite(vy)) ? fabs(vx - vy) : HUGE_VAL;
    atomicMax(&r->max_abs_bits, static_cast<unsigned long long>(__double_as_longlong(d)));
    atomicMax(&r->max_ulp, static_cast<unsigned long long>(ulp_distance(x, y, kind)));
  }
}

template <typename Word>
void launch(const void *expected, const void *actual, int64_t n, DiffKind kind, DeviceDiff *result,
            cudaStream_t stream) {
  constexpr int threads = 256;
  const int blocks = static_cast<int>(std::min<int64_t>(std::max<int64_t>((n + threads - 1) / threads, 1), 2048));
  bitwise_diff_kernel<Word><<<blocks, threads, 0, stream>>>(static_cast<const Word *>(expected),
                                                            static_cast<const Word *>(actual), n, kind, result);
  DETFUZZ_LAUNCH_CHECK();
}

}  // namespace

void launch_bitwise_diff(const void *expected, const void *actual, int64_t n, DiffKind kind, DeviceDiff *result,
                         cudaStream_t stream) {
  init_result<<<1, 1, 0, stream>>>(result);
  DETFUZZ_LAUNCH_CHECK();
  if (n == 0) return;
  switch (kind) {
    case DiffKind::float16:
    case DiffKind::bfloat16: launch<uint16_t>(expected, actual, n, kind, result, stream); break;
    case DiffKind::float32:
    case DiffKind::int32: launch<uint32_t>(expected, actual, n, kind, result, stream); break;
    default: launch<uint64_t>(expected, actual, n, kind, result, stream); break;
  }
}

}  // namespace detfuzz::device_kernels
