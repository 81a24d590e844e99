// The launch floor: a kernel of one thread that does nothing. Benches time it beside their
// latency-bound rows (decode at short contexts), replayed from a CUDA graph as the rows are, so a
// row's distance from what no kernel can beat is on the page.
#include "ops/cuda/empty_kernel.cuh"

#include "ops/cuda/cuda_check.h"

namespace detfuzz::cuda_kernels {
namespace {

__global__ void empty_kernel() {}

}  // namespace

void launch_empty_kernel(cudaStream_t stream) {
  empty_kernel<<<1, 1, 0, stream>>>();
  DETFUZZ_LAUNCH_CHECK();
}

}  // namespace detfuzz::cuda_kernels
