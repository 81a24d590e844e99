// A kernel that does nothing (empty_kernel.cu): the launch floor benches report beside
// latency-bound rows. Host C++ may include this header.
#pragma once

#include <cuda_runtime_api.h>

namespace detfuzz::cuda_kernels {

void launch_empty_kernel(cudaStream_t stream);

}  // namespace detfuzz::cuda_kernels
