// DETFUZZ_HOST_DEVICE marks a function that host code and CUDA kernels both call (__host__
// __device__ under nvcc, nothing for the host compiler).
#pragma once

#if defined(__CUDACC__)
#define DETFUZZ_HOST_DEVICE __host__ __device__
#else
#define DETFUZZ_HOST_DEVICE
#endif
