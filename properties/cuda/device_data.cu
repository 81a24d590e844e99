// Test data made on the GPU, bit for bit what the host makes (properties/data.cpp).
//
// Design. One thread per element, grid-stride: each computes properties/counter_data.h's
// float_value (the very function the host runs) in float64 and rounds it with the same integer
// code to float32 / float16 / bfloat16, or computes int_value. Compiled with --fmad=false so that
// no multiply-add is contracted where the host rounds twice. Where the float64 value comes from
// log1p, cos or pow (normal, wide, the normal draws of special), CUDA's libm and the host's may
// differ in the last bits; the thread rounds value*(1 -+ 2^-40) too and, when the ends round
// differently, appends its index to a list the host recomputes (properties/data.cpp). Exact
// distributions (uniform, linspace, integers, the constants of special) never flag. The paged-
// attention data (keyed_rows: runs of counter_data::irwin_hall_value) is integer arithmetic and
// one multiply, exact on both sides.
#include "ops/cuda/cuda_check.h"
#include "properties/cuda/device_kernels.h"

#include <algorithm>

namespace detfuzz::device_kernels {
namespace {

using counter_data::Dist;
using counter_data::OutType;

template <typename Word>
__global__ void counter_fill_kernel(Word *out, OutType type, int64_t n, uint64_t seed, uint64_t tensor, Dist dist,
                                    double subnormal, unsigned long long *flagged_count, int64_t *flagged,
                                    int64_t capacity) {
  const counter_data::Keys keys = counter_data::keys_of(seed, tensor);
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    if (type == OutType::int32 || type == OutType::int64) {
      out[i] = static_cast<Word>(counter_data::int_value(keys, i));
      continue;
    }
    const double v = counter_data::float_value(keys, i, n, dist, subnormal);
    out[i] = static_cast<Word>(counter_data::rounded_bits(v, type));
    const bool exact =
        counter_data::exact_dist(dist) || (dist == Dist::special && counter_data::special_constant(keys, i));
    if (!exact && !counter_data::rounds_unambiguously(v, type)) {
      const unsigned long long k = atomicAdd(flagged_count, 1ull);
      if (static_cast<int64_t>(k) < capacity) flagged[k] = i;
    }
  }
}

template <typename Word>
void launch(void *out, OutType type, int64_t n, uint64_t seed, uint64_t tensor, Dist dist, double subnormal,
            unsigned long long *flagged_count, int64_t *flagged, int64_t capacity, cudaStream_t stream) {
  constexpr int threads = 256;
  const int blocks = static_cast<int>(std::min<int64_t>((n + threads - 1) / threads, 4096));
  counter_fill_kernel<Word><<<blocks, threads, 0, stream>>>(static_cast<Word *>(out), type, n, seed, tensor, dist,
                                                            subnormal, flagged_count, flagged, capacity);
  DETFUZZ_LAUNCH_CHECK();
}

__global__ void keyed_rows_kernel(float *out, const uint64_t *key_first, int64_t rows, int64_t width) {
  const int64_t n = rows * width;
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t r = i / width, e = i - r * width;
    out[i] = counter_data::irwin_hall_value(key_first[2 * r], key_first[2 * r + 1] + static_cast<uint64_t>(e));
  }
}

}  // namespace

void launch_keyed_rows(float *out, const uint64_t *key_first, int64_t rows, int64_t width, cudaStream_t stream) {
  const int64_t n = rows * width;
  if (n == 0) return;
  constexpr int threads = 256;
  const int blocks = static_cast<int>(std::min<int64_t>((n + threads - 1) / threads, 4096));
  keyed_rows_kernel<<<blocks, threads, 0, stream>>>(out, key_first, rows, width);
  DETFUZZ_LAUNCH_CHECK();
}

void launch_counter_fill(void *out, OutType type, int64_t n, uint64_t seed, uint64_t tensor, Dist dist,
                         double subnormal, unsigned long long *flagged_count, int64_t *flagged, int64_t capacity,
                         cudaStream_t stream) {
  DETFUZZ_CUDA_CHECK(cudaMemsetAsync(flagged_count, 0, sizeof(unsigned long long), stream));
  if (n == 0) return;
  switch (type) {
    case OutType::float32:
    case OutType::int32:
      launch<uint32_t>(out, type, n, seed, tensor, dist, subnormal, flagged_count, flagged, capacity, stream);
      break;
    case OutType::float16:
    case OutType::bfloat16:
      launch<uint16_t>(out, type, n, seed, tensor, dist, subnormal, flagged_count, flagged, capacity, stream);
      break;
    case OutType::int64:
      launch<uint64_t>(out, type, n, seed, tensor, dist, subnormal, flagged_count, flagged, capacity, stream);
      break;
  }
}

}  // namespace detfuzz::device_kernels
