// Host dispatch of the transformer's row and element-wise ops on CUDA tensors: checks, then the
// launchers of transformer_ops.cu. Same signatures and semantics as cpu_ops (transformer_ops.cpp).
// Nothing here synchronises with the host while a CUDA graph is being captured: embedding checks
// its ids on the host only outside a capture (the graph runner checks them before it fills its
// buffers).
#include "ops/cuda/cuda_check.h"
#include "ops/cuda/cuda_ops.h"
#include "ops/cuda/transformer_ops.cuh"

#include <ATen/cuda/CUDAContext.h>
#include <c10/cuda/CUDAGuard.h>

#include <cmath>

namespace detfuzz::cuda_ops {
namespace {

namespace ck = detfuzz::cuda_kernels;

ck::DType float_dtype(const at::Tensor &x, const char *op, const char *name) {
  TORCH_CHECK(x.defined() && x.is_cuda(), op, ": ", name, " must be a CUDA tensor");
  switch (x.scalar_type()) {
    case at::kFloat: return ck::DType::f32;
    case at::kHalf: return ck::DType::f16;
    case at::kBFloat16: return ck::DType::bf16;
    default: TORCH_CHECK(false, op, ": ", name, " must be float32, float16 or bfloat16, got ", x.scalar_type());
  }
}

void check_index(const at::Tensor &i, const at::Tensor &like, const char *op, const char *name) {
  TORCH_CHECK(i.scalar_type() == at::kLong || i.scalar_type() == at::kInt, op, ": ", name,
              " must be int32 or int64, got ", i.scalar_type());
  TORCH_CHECK(i.dim() == 1, op, ": ", name, " must be 1-D, got ", i.sizes());
  TORCH_CHECK(i.device() == like.device(), op, ": ", name, " must be on ", like.device(), ", got ", i.device());
}

cudaStream_t stream_of(const at::Tensor &x) { return at::cuda::getCurrentCUDAStream(x.device().index()).stream(); }

}  // namespace

bool capturing(const at::Tensor &x) {
  cudaStreamCaptureStatus status = cudaStreamCaptureStatusNone;
  DETFUZZ_CUDA_CHECK(cudaStreamIsCapturing(stream_of(x), &status));
  return status != cudaStreamCaptureStatusNone;
}

at::Tensor rms_norm(const at::Tensor &x, const at::Tensor &weight, double eps) {
  const ck::DType dt = float_dtype(x, "rms_norm", "x");
  TORCH_CHECK(x.dim() == 2, "rms_norm: x must be [rows, H], got ", x.sizes());
  TORCH_CHECK(weight.dim() == 1 && weight.size(0) == x.size(1), "rms_norm: weight must be [", x.size(1), "], got ",
              weight.sizes());
  TORCH_CHECK(weight.scalar_type() == x.scalar_type() && weight.device() == x.device(), "rms_norm: weight (",
              weight.scalar_type(), " on ", weight.device(), ") must match x (", x.scalar_type(), " on ", x.device(),
              ")");
  TORCH_CHECK(eps >= 0 && std::isfinite(eps), "rms_norm: eps must be finite and >= 0, got ", eps);
  TORCH_CHECK(x.size(1) <= ck::kRmsNormMaxH, "rms_norm: H = ", x.size(1), " exceeds the kernel's ", ck::kRmsNormMaxH);
  const c10::cuda::CUDAGuard guard(x.device());
  const at::Tensor xc = x.contiguous(), wc = weight.contiguous();
  at::Tensor y = at::empty(x.sizes(), x.options());
  ck::launch_rms_norm(dt, xc.data_ptr(), wc.data_ptr(), y.data_ptr(), x.size(0), x.size(1), static_cast<float>(eps),
                      stream_of(x));
  return y;
}

at::Tensor silu_and_mul(const at::Tensor &x) {
  const ck::DType dt = float_dtype(x, "silu_and_mul", "x");
  TORCH_CHECK(x.dim() == 2 && x.size(1) % 2 == 0, "silu_and_mul: x must be [rows, 2*I], got ", x.sizes());
  const c10::cuda::CUDAGuard guard(x.device());
  const at::Tensor xc = x.contiguous();
  at::Tensor y = at::empty({x.size(0), x.size(1) / 2}, x.options());
  ck::launch_silu_and_mul(dt, xc.data_ptr(), y.data_ptr(), x.size(0), x.size(1) / 2, stream_of(x));
  return y;
}

at::Tensor rope(const at::Tensor &x, const at::Tensor &positions, double theta) {
  const ck::DType dt = float_dtype(x, "rope", "x");
  check_index(positions, x, "rope", "positions");
  TORCH_CHECK(x.dim() == 3 && x.size(2) % 2 == 0, "rope: x must be [T, H, D] with D even, got ", x.sizes());
  TORCH_CHECK(positions.size(0) == x.size(0), "rope: positions must be [", x.size(0), "], got ", positions.sizes());
  TORCH_CHECK(theta > 1 && std::isfinite(theta), "rope: theta must be finite and > 1, got ", theta);
  const c10::cuda::CUDAGuard guard(x.device());
  const at::Tensor xc = x.contiguous(), pc = positions.to(at::kLong).contiguous();
  at::Tensor y = at::empty(x.sizes(), x.options());
  ck::launch_rope(dt, xc.data_ptr(), pc.data_ptr<int64_t>(), y.data_ptr(), x.size(0), x.size(1), x.size(2), theta,
                  stream_of(x));
  return y;
}

at::Tensor rope_store_kv(const at::Tensor &qkv, const at::Tensor &positions, double theta, int64_t q_heads,
                         int64_t kv_heads, const at::Tensor &slots, const at::Tensor &k_pool,
                         const at::Tensor &v_pool) {
  const ck::DType dt = float_dtype(qkv, "rope_store_kv", "qkv");
  check_index(positions, qkv, "rope_store_kv", "positions");
  check_index(slots, qkv, "rope_store_kv", "slots");
  TORCH_CHECK(q_heads > 0 && kv_heads > 0, "rope_store_kv: q_heads and kv_heads must be positive, got ", q_heads, ", ",
              kv_heads);
  TORCH_CHECK(k_pool.dim() >= 2 && k_pool.size(-2) == kv_heads && k_pool.size(-1) % 2 == 0,
              "rope_store_kv: k_pool must be [..., ", kv_heads, ", D] with D even, got ", k_pool.sizes());
  const int64_t d = k_pool.size(-1), t = qkv.size(0);
  TORCH_CHECK(qkv.dim() == 2 && qkv.size(1) == (q_heads + 2 * kv_heads) * d && qkv.stride(1) == 1,
              "rope_store_kv: qkv must be [T, ", (q_heads + 2 * kv_heads) * d, "] with unit column stride, got ",
              qkv.sizes());
  TORCH_CHECK(positions.size(0) == t && slots.size(0) == t, "rope_store_kv: positions and slots must be [", t,
              "], got ", positions.sizes(), " and ", slots.sizes());
  TORCH_CHECK(theta > 1 && std::isfinite(theta), "rope_store_kv: theta must be finite and > 1, got ", theta);
  for (const at::Tensor *pool : {&k_pool, &v_pool})
    TORCH_CHECK(pool->sizes() == k_pool.sizes() && pool->scalar_type() == qkv.scalar_type() &&
                    pool->device() == qkv.device() && pool->is_contiguous(),
                "rope_store_kv: the pools must be contiguous ", qkv.scalar_type(), " on ", qkv.device(),
                " of one shape, got ", pool->sizes(), " ", pool->scalar_type());
  // The slots' range is the caller's to check (KVCache::check_slots): a host sync, outside a capture.
  const c10::cuda::CUDAGuard guard(qkv.device());
  const at::Tensor pc = positions.to(at::kLong).contiguous(), sc = slots.to(at::kLong).contiguous();
  at::Tensor q = at::empty({t, q_heads, d}, qkv.options());
  ck::launch_rope_store_kv(dt, qkv.data_ptr(), qkv.stride(0), pc.data_ptr<int64_t>(), sc.data_ptr<int64_t>(),
                           q.data_ptr(), k_pool.data_ptr(), v_pool.data_ptr(), t, q_heads, kv_heads, d, theta,
                           stream_of(qkv));
  return q;
}

at::Tensor embedding(const at::Tensor &weight, const at::Tensor &ids) {
  float_dtype(weight, "embedding", "weight");
  check_index(ids, weight, "embedding", "ids");
  TORCH_CHECK(weight.dim() == 2, "embedding: weight must be [V, H], got ", weight.sizes());
  const c10::cuda::CUDAGuard guard(weight.device());
  if (ids.numel() > 0 && !capturing(weight)) {
    const int64_t lo = ids.min().item<int64_t>(), hi = ids.max().item<int64_t>();
    TORCH_CHECK(lo >= 0 && hi < weight.size(0), "embedding: ids hold ", (lo < 0 ? lo : hi), ", outside [0, ",
                weight.size(0), ")");
  }
  // A gather: every output element is a copy of one weight element, whatever the kernel.
  return weight.contiguous().index_select(0, ids);
}

}  // namespace detfuzz::cuda_ops
