// The kernels of the planted GPU faults (gpu_faults.cpp registers them as torch operators). Each
// is a plain row-wise kernel, out = 2 a, or a float32 matmul, with one bug planted at one size:
//
//   oob_rows_kernel    at the planted batch size, thread 0 also stores 1 TiB past the output, an
//                      address no allocation holds: cudaErrorIllegalAddress, a sticky error.
//   spin_rows_kernel   at the planted batch size, thread 0 waits on a flag nothing ever sets: the
//                      kernel never ends (a hang the host cannot interrupt).
//   atomic_splitk_mm_kernel  split-K whose partial sums meet in float atomicAdd, each block
//                      waiting a clock-dependent moment first, so the order of the additions,
//                      and the bits, change from run to run (the `repeat` property's bug).
// They know nothing of torch: pointers, sizes and a stream.
#include <cuda_runtime.h>

#include <cstdint>

namespace detfuzz_gpu_faults {
namespace {

constexpr int kThreads = 256;

__global__ void oob_rows_kernel(const float *a, float *out, int64_t elements, int planted) {
  const int64_t e = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (e >= elements) return;
  out[e] = a[e] * 2.0f;
  // The planted bug: a store whose offset was computed in the wrong units.
  if (planted && e == 0) out[e + (int64_t(1) << 38)] = 0.0f;
}

__global__ void spin_rows_kernel(const float *a, float *out, int64_t elements, int planted,
                                 const volatile int *never_set) {
  const int64_t e = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (e >= elements) return;
  out[e] = a[e] * 2.0f;
  // The planted bug: waits for a flag that no one sets (a producer that never comes).
  if (planted && e == 0)
    while (*never_set == 0) __nanosleep(1000);
}

__global__ void atomic_splitk_mm_kernel(const float *a, const float *b, float *out, int64_t m, int64_t n, int64_t k,
                                        int64_t chunk) {
  const int64_t e = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (e >= m * n) return;
  const int64_t i = e / n, j = e % n, k0 = static_cast<int64_t>(blockIdx.y) * chunk;
  const int64_t k1 = k0 + chunk < k ? k0 + chunk : k;
  float partial = 0.0f;
  for (int64_t p = k0; p < k1; ++p) partial = __fadd_rn(partial, __fmul_rn(a[i * k + p], b[p * n + j]));
  __nanosleep(static_cast<unsigned>(clock64() & 2047));  // the blocks reach the atomics in no fixed order
  atomicAdd(out + e, partial);
}

unsigned blocks_for(int64_t elements) { return static_cast<unsigned>((elements + kThreads - 1) / kThreads); }

}  // namespace

void launch_oob_rows(const float *a, float *out, int64_t elements, bool planted, cudaStream_t stream) {
  if (elements == 0) return;
  oob_rows_kernel<<<blocks_for(elements), kThreads, 0, stream>>>(a, out, elements, planted ? 1 : 0);
}

void launch_spin_rows(const float *a, float *out, int64_t elements, bool planted, const int *never_set,
                      cudaStream_t stream) {
  if (elements == 0) return;
  spin_rows_kernel<<<blocks_for(elements), kThreads, 0, stream>>>(a, out, elements, planted ? 1 : 0, never_set);
}

void launch_atomic_splitk_mm(const float *a, const float *b, float *out, int64_t m, int64_t n, int64_t k, int64_t chunk,
                             cudaStream_t stream) {
  if (m * n == 0 || k == 0) return;
  const dim3 grid(blocks_for(m * n), static_cast<unsigned>((k + chunk - 1) / chunk));
  atomic_splitk_mm_kernel<<<grid, kThreads, 0, stream>>>(a, b, out, m, n, k, chunk);
}

}  // namespace detfuzz_gpu_faults
