// Error checks for every CUDA runtime, cuBLAS and cuBLASLt call and every kernel launch.
//
//   DETFUZZ_CUDA_CHECK(cudaMemcpyAsync(...));   // any call returning cudaError_t or cublasStatus_t
//   kernel<<<grid, block, smem, stream>>>(...);
//   DETFUZZ_LAUNCH_CHECK();                      // right after each launch
//
// A failure throws std::runtime_error("file:line: <call text> failed: <error name> (<error string>)").
// DETFUZZ_LAUNCH_CHECK reads cudaGetLastError(), which reports (and clears) launch-configuration
// errors; a fault inside a running kernel surfaces at the next checked call that synchronises.
#pragma once

#include <cublasLt.h>
#include <cublas_v2.h>
#include <cuda_runtime_api.h>

#include <stdexcept>
#include <string>

namespace detfuzz::cuda_detail {

inline bool status_ok(cudaError_t e) { return e == cudaSuccess; }
inline bool status_ok(cublasStatus_t s) { return s == CUBLAS_STATUS_SUCCESS; }

inline std::string status_text(cudaError_t e) {
  return std::string(cudaGetErrorName(e)) + " (" + cudaGetErrorString(e) + ")";
}
inline std::string status_text(cublasStatus_t s) {
  return std::string(cublasGetStatusName(s)) + " (" + cublasGetStatusString(s) + ")";
}

[[noreturn]] inline void throw_failure(const char *file, int line, const char *call, const std::string &what) {
  throw std::runtime_error(std::string(file) + ":" + std::to_string(line) + ": " + call + " failed: " + what);
}

}  // namespace detfuzz::cuda_detail

#define DETFUZZ_CUDA_CHECK(call)                                                                   \
  do {                                                                                             \
    const auto detfuzz_status_ = (call);                                                           \
    if (!::detfuzz::cuda_detail::status_ok(detfuzz_status_))                                       \
      ::detfuzz::cuda_detail::throw_failure(__FILE__, __LINE__, #call,                             \
                                            ::detfuzz::cuda_detail::status_text(detfuzz_status_)); \
  } while (0)

#define DETFUZZ_LAUNCH_CHECK()                                                                            \
  do {                                                                                                    \
    const cudaError_t detfuzz_launch_status_ = cudaGetLastError();                                        \
    if (detfuzz_launch_status_ != cudaSuccess)                                                            \
      ::detfuzz::cuda_detail::throw_failure(__FILE__, __LINE__, "kernel launch",                          \
                                            ::detfuzz::cuda_detail::status_text(detfuzz_launch_status_)); \
  } while (0)
