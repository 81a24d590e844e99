// Programmatic dependent launch (Hopper and later; no-ops on older GPUs). A kernel launched with
// cudaLaunchAttributeProgrammaticStreamSerialization may start while the kernel before it on its
// stream still runs, once every CTA of that kernel has called launch_dependents() (or exited).
// Before it reads anything that kernel wrote, or writes anything it may still read, it calls
// wait(), which returns when that kernel has finished and its writes are visible (at once for a
// normal launch). Work that needs neither, such as pulling constant weights towards the L2, can
// run before the wait.
#pragma once

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

}  // namespace detfuzz::cuda_kernels::griddep
