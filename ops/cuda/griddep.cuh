// Programmatic dependent launch (Hopper and later; no-ops on older GPUs). A kernel launched with
// cudaLaunchAttributeProgrammaticStreamSerialization may start while the kernel before it on its
// stream still runs, once every CTA of that kernel has called launch_dependents() (or exited).
// Before it reads anything that kernel wrote, or writes anything it may still read, it calls
// wait(), which returns when that kernel has finished and its writes are visible (at once for a
// normal launch). Work that needs neither (setting up barriers, fetching tensor maps) can run
// before the wait.
#pragma once

#include "ops/cuda/cuda_check.h"

#include <cuda_runtime.h>

#include <atomic>

namespace detfuzz::cuda_kernels::griddep {

__device__ __forceinline__ void launch_dependents() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
#endif
}

__device__ __forceinline__ void wait() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.wait;" ::: "memory");
#endif
}

// Whether the current device takes programmatic launches (compute capability 9.0 or later), asked
// once per device.
inline bool device_supported() {
  static std::atomic<int> major[64];  // 0: not asked yet
  int dev = 0;
  DETFUZZ_CUDA_CHECK(cudaGetDevice(&dev));
  if (dev >= 64) return false;
  int m = major[dev].load(std::memory_order_relaxed);
  if (m == 0) {
    DETFUZZ_CUDA_CHECK(cudaDeviceGetAttribute(&m, cudaDevAttrComputeCapabilityMajor, dev));
    major[dev].store(m, std::memory_order_relaxed);
  }
  return m >= 9;
}

// The launch attribute that makes a kernel a programmatic dependent of the kernel before it on its
// stream (for launches that also carry other attributes, such as a cluster's).
inline cudaLaunchAttribute dependent_attribute() {
  cudaLaunchAttribute attr{};
  attr.id = cudaLaunchAttributeProgrammaticStreamSerialization;
  attr.val.programmaticStreamSerializationAllowed = 1;
  return attr;
}

// Launches `kernel` on `stream` as a programmatic dependent of the kernel before it there (a plain
// launch before Hopper); the kernel calls wait() before it reads what that kernel wrote.
template <typename... Params, typename... Args>
void launch(void (*kernel)(Params...), dim3 grid, dim3 block, size_t smem, cudaStream_t stream, Args... args) {
  cudaLaunchAttribute attr[1] = {dependent_attribute()};
  cudaLaunchConfig_t cfg{};
  cfg.gridDim = grid;
  cfg.blockDim = block;
  cfg.dynamicSmemBytes = smem;
  cfg.stream = stream;
  cfg.attrs = attr;
  cfg.numAttrs = device_supported() ? 1 : 0;
  DETFUZZ_CUDA_CHECK(cudaLaunchKernelEx(&cfg, kernel, args...));
}

}  // namespace detfuzz::cuda_kernels::griddep
