// cuTensorMapEncodeTiled, the driver call that builds a TMA descriptor, found once through the
// runtime's driver entry points (the project links cudart, never -lcuda). Host code only; shared by
// the Hopper matmul (gemm_sm90.cu) and the Hopper paged attention (paged_attention_sm90.cu).
#pragma once

#include <cuda.h>
#include <cudaTypedefs.h>

namespace detfuzz::cuda_kernels {

// The driver's encoder. Throws std::runtime_error if the driver lacks it.
PFN_cuTensorMapEncodeTiled_v12000 encode_tiled();

}  // namespace detfuzz::cuda_kernels
