// Batch-invariant CUDA ops on CUDA tensors (host dispatch: shape checks, then the launchers in
// the .cu files, which know nothing of torch). Same signatures and semantics as cpu_ops.h.
#pragma once

#include <ATen/ATen.h>

#include "ops/cuda/gemm.cuh"

#include <optional>
#include <vector>

namespace detfuzz::cuda_ops {

at::Tensor mm(const at::Tensor &a, const at::Tensor &b);
at::Tensor addmm(const at::Tensor &bias, const at::Tensor &a, const at::Tensor &b, double beta, double alpha);
at::Tensor bmm(const at::Tensor &a, const at::Tensor &b);
at::Tensor log_softmax(const at::Tensor &x, int64_t dim, bool half_to_float);

// Forces the kernel path of the 16-bit matmuls (mm, addmm, bmm) that this thread launches while
// the guard lives; tests, variant_agree and the `invariant-mma-sync` impl use it.
class ScopedMatmulPath {
 public:
  explicit ScopedMatmulPath(cuda_kernels::GemmPath path);
  ~ScopedMatmulPath();
  ScopedMatmulPath(const ScopedMatmulPath &) = delete;
  ScopedMatmulPath &operator=(const ScopedMatmulPath &) = delete;

 private:
  cuda_kernels::GemmPath saved_;
};
// The paths whose bits must equal the automatic choice's on `device`: the four Hopper paths on an
// sm_90 GPU, none elsewhere (the mma.sync kernel is the only one there).
std::vector<cuda_kernels::GemmPath> equivalent_matmul_paths(int device);
at::Tensor mean(const at::Tensor &x, at::IntArrayRef dims, bool keepdim, std::optional<at::ScalarType> dtype);

// The transformer's row and element-wise ops (transformer_ops_host.cpp, kernels in transformer_ops.cu).
at::Tensor rms_norm(const at::Tensor &x, const at::Tensor &weight, double eps);
at::Tensor silu_and_mul(const at::Tensor &x);
at::Tensor rope(const at::Tensor &x, const at::Tensor &positions, double theta);
at::Tensor embedding(const at::Tensor &weight, const at::Tensor &ids);

// Whether x's current stream is capturing a CUDA graph (host checks that sync must not run then).
bool capturing(const at::Tensor &x);

}  // namespace detfuzz::cuda_ops
