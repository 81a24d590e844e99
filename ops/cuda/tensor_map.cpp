// See tensor_map.h.
#include "ops/cuda/tensor_map.h"

#include "ops/cuda/cuda_check.h"

#include <cuda_runtime_api.h>

#include <stdexcept>

namespace detfuzz::cuda_kernels {

PFN_cuTensorMapEncodeTiled_v12000 encode_tiled() {
  static PFN_cuTensorMapEncodeTiled_v12000 fn = [] {
    void *f = nullptr;
    cudaDriverEntryPointQueryResult q{};
    DETFUZZ_CUDA_CHECK(cudaGetDriverEntryPointByVersion("cuTensorMapEncodeTiled", &f, 12000, cudaEnableDefault, &q));
    if (q != cudaDriverEntryPointSuccess || !f) throw std::runtime_error("the CUDA driver has no cuTensorMapEncodeTiled");
    return reinterpret_cast<PFN_cuTensorMapEncodeTiled_v12000>(f);
  }();
  return fn;
}

}  // namespace detfuzz::cuda_kernels
