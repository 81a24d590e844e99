// Batch-invariant CUDA ops on CUDA tensors (host dispatch: shape checks, then the launchers in
// the .cu files, which know nothing of torch). Same signatures and semantics as cpu_ops.h.
#pragma once

#include <ATen/ATen.h>

#include "ops/cuda/gemm.cuh"

#include <optional>
#include <string>
#include <vector>

namespace detfuzz::cuda_ops {

at::Tensor mm(const at::Tensor &a, const at::Tensor &b);
at::Tensor addmm(const at::Tensor &bias, const at::Tensor &a, const at::Tensor &b, double beta, double alpha);
at::Tensor bmm(const at::Tensor &a, const at::Tensor &b);
at::Tensor log_softmax(const at::Tensor &x, int64_t dim, bool half_to_float);

// One forceable matmul path: `half` for the 16-bit dtypes, `f32` for float32 (automatic: the
// launcher's own choice).
struct MatmulPathChoice {
  cuda_kernels::GemmPath half = cuda_kernels::GemmPath::automatic;
  cuda_kernels::F32Path f32 = cuda_kernels::F32Path::automatic;
  const char *name() const;
};
// Forces the kernel path of the matmuls (mm, addmm, bmm) that this thread launches while the
// guard lives: a GemmPath for the 16-bit dtypes (float32 keeps its automatic choice), or a
// MatmulPathChoice for both. Tests, variant_agree and the `invariant-mma-sync` impl use it.
class ScopedMatmulPath {
 public:
  explicit ScopedMatmulPath(cuda_kernels::GemmPath path);
  explicit ScopedMatmulPath(const MatmulPathChoice &choice);
  ~ScopedMatmulPath();
  ScopedMatmulPath(const ScopedMatmulPath &) = delete;
  ScopedMatmulPath &operator=(const ScopedMatmulPath &) = delete;

 private:
  MatmulPathChoice saved_;
};
// The paths whose bits must equal the automatic choice's on `device` for `dtype`: the four Hopper
// paths (16-bit) or the four float32 schedules and tile shapes that the device can run. The
// mma.sync kernel has bits of its own and is not among them.
std::vector<MatmulPathChoice> equivalent_matmul_paths(int device, at::ScalarType dtype);
// The path named `name` (a GemmPath name such as "sm90_split_64", or a float32 path name such
// as "cluster-32x128"), or nullopt. `detfuzz bench --impl invariant@NAME` times one forced path.
std::optional<MatmulPathChoice> matmul_path_by_name(const std::string &name);
at::Tensor mean(const at::Tensor &x, at::IntArrayRef dims, bool keepdim, std::optional<at::ScalarType> dtype);

// The transformer's row and element-wise ops (transformer_ops_host.cpp, kernels in transformer_ops.cu).
at::Tensor rms_norm(const at::Tensor &x, const at::Tensor &weight, double eps);
at::Tensor silu_and_mul(const at::Tensor &x);
at::Tensor rope(const at::Tensor &x, const at::Tensor &positions, double theta);
// rope over the Q and K heads of a QKV product's rows (qkv [T, (q_heads + 2 kv_heads) D]: Q, K, V),
// returning Q [T, q_heads, D] and writing K (rotated) and V to row slots[t] of the pools' [slots,
// kv_heads, D] view: the bits of rope, rope and KVCache::set_kv, in one launch. The slots must lie
// in the pools (KVCache::check_slots).
at::Tensor rope_store_kv(const at::Tensor &qkv, const at::Tensor &positions, double theta, int64_t q_heads,
                         int64_t kv_heads, const at::Tensor &slots, const at::Tensor &k_pool, const at::Tensor &v_pool);
at::Tensor embedding(const at::Tensor &weight, const at::Tensor &ids);

// Whether x's current stream is capturing a CUDA graph (host checks that sync must not run then).
bool capturing(const at::Tensor &x);

}  // namespace detfuzz::cuda_ops
