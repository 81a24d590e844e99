// Host side of the persistent matmul: parameter checks and the dispatch by dtype to the kernel
// files (gemm_tc.cu or gemm_sm90.cu for float16/bfloat16 on tensor cores, gemm_f32.cu for float32
// FMA). The choice of kernel depends on the dtype and the device (gemm_policy::sm90_runs); its K
// order is fixed per kernel.
#include "ops/cuda/cuda_check.h"
#include "ops/cuda/gemm.cuh"

#include <cstdint>
#include <map>
#include <mutex>
#include <stdexcept>

namespace detfuzz::cuda_kernels {

const char *dtype_name(DType t) {
  switch (t) {
    case DType::f32: return "float32";
    case DType::f16: return "float16";
    case DType::bf16: return "bfloat16";
    case DType::i32: return "int32";
    case DType::i64: return "int64";
  }
  return "?";
}

int dtype_size(DType t) {
  switch (t) {
    case DType::f32: return 4;
    case DType::f16: return 2;
    case DType::bf16: return 2;
    case DType::i32: return 4;
    case DType::i64: return 8;
  }
  return 0;
}

const char *gemm_path_name(GemmPath p) {
  switch (p) {
    case GemmPath::automatic: return "automatic";
    case GemmPath::mma_sync: return "mma_sync";
    case GemmPath::sm90_persistent: return "sm90_persistent";
    case GemmPath::sm90_split: return "sm90_split";
    case GemmPath::sm90_persistent_64: return "sm90_persistent_64";
    case GemmPath::sm90_split_64: return "sm90_split_64";
    case GemmPath::sm90_persistent_64x64: return "sm90_persistent_64x64";
    case GemmPath::sm90_persistent_128x192: return "sm90_persistent_128x192";
    case GemmPath::sm90_persistent_64x256: return "sm90_persistent_64x256";
    case GemmPath::sm90_paired_128x192: return "sm90_paired_128x192";
    case GemmPath::sm90_persistent_128x256: return "sm90_persistent_128x256";
  }
  return "?";
}

bool gemm_path_available(GemmPath p, int device) {
  if (p == GemmPath::automatic || p == GemmPath::mma_sync) return true;
  // Compute capability per device, read once (the kernels are built for sm_90a).
  static std::mutex mu;
  static std::map<int, int> major;
  std::lock_guard<std::mutex> lock(mu);
  auto it = major.find(device);
  if (it == major.end()) {
    int m = 0;
    DETFUZZ_CUDA_CHECK(cudaDeviceGetAttribute(&m, cudaDevAttrComputeCapabilityMajor, device));
    it = major.emplace(device, m).first;
  }
  return it->second == 9;
}

int gemm_alignment(DType t) { return t == DType::f32 ? 4 : 8; }

std::string gemm_check(const GemmParams &p) {
  if (p.dtype != DType::f32 && p.dtype != DType::f16 && p.dtype != DType::bf16)
    return std::string("dtype ") + dtype_name(p.dtype) + " is not a matmul dtype";
  if (p.M < 0 || p.N < 0 || p.K < 0 || p.batch < 0) return "negative size";
  if (p.num_ctas < 1) return "num_ctas = " + std::to_string(p.num_ctas) + " (must be >= 1)";
  const int al = gemm_alignment(p.dtype);
  auto misaligned = [](const void *ptr) { return (reinterpret_cast<uintptr_t>(ptr) & 15) != 0; };
  if (p.K % al) return "K = " + std::to_string(p.K) + " is not a multiple of " + std::to_string(al);
  if (p.lda % al || p.batch_stride_a % al)
    return "lda or the batch stride of A is not a multiple of " + std::to_string(al);
  if (p.ldb % al || p.batch_stride_b % al)
    return "ldb or the batch stride of B is not a multiple of " + std::to_string(al);
  if (p.b_kn && p.N % al && p.ldb < (p.N + al - 1) / al * al)
    return "N = " + std::to_string(p.N) + " is not a multiple of " + std::to_string(al) +
           " with B as [K,N] and ldb < N rounded up (no readable padding)";
  if (misaligned(p.a) || misaligned(p.b)) return "A or B is not 16-byte aligned";
  return "";
}

int64_t gemm_workspace_bytes(const GemmParams &p, int device) {
  if (p.dtype != DType::f32 || p.M == 0 || p.N == 0 || p.batch == 0) return 0;
  return gemm_f32_workspace_bytes(p,
                                  p.f32_path != F32Path::automatic ? p.f32_path : gemm_f32_auto_path(p, device, true));
}

void launch_gemm(const GemmParams &p, cudaStream_t stream) {
  const std::string why = gemm_check(p);
  if (!why.empty()) throw std::invalid_argument("launch_gemm: " + why);
  if (p.M == 0 || p.N == 0 || p.batch == 0) return;
  if (p.dtype == DType::f32) {
    launch_gemm_f32_path(p, p.f32_path, stream);
    return;
  }
  int dev = 0;
  DETFUZZ_CUDA_CHECK(cudaGetDevice(&dev));
  if (p.path != GemmPath::automatic && !gemm_path_available(p.path, dev))
    throw std::invalid_argument(std::string("launch_gemm: path ") + gemm_path_name(p.path) +
                                " needs an sm_90 GPU (device " + std::to_string(dev) + " is not one)");
  if (gemm_policy::sm90_runs(p.path, p.K, [&] { return gemm_path_available(GemmPath::sm90_persistent, dev); }))
    launch_gemm_sm90(p, p.path, stream);
  else
    launch_gemm_tc(p, stream);
}

}  // namespace detfuzz::cuda_kernels
