// Host dispatch of the fp8 scaled matmul on CUDA: the checks of the CPU kernel (same messages),
// contiguous copies of what is not (bitwise), then the launcher. Nothing here depends on M.
#include "ops/cuda/moe_ops.h"

#include "ops/cuda/scaled_mm.cuh"

#include <ATen/cuda/CUDAContext.h>
#include <c10/cuda/CUDAGuard.h>

#include <string>
#include <vector>

namespace detfuzz::cuda_ops {
namespace {

namespace ck = detfuzz::cuda_kernels;

std::string sizes_text(const std::vector<int64_t> &s) {
  std::string out = "[";
  for (size_t k = 0; k < s.size(); ++k) out += (k ? ", " : "") + std::to_string(s[k]);
  return out + "]";
}

ck::DType out_kernel_dtype(at::ScalarType t) {
  switch (t) {
    case at::kFloat: return ck::DType::f32;
    case at::kHalf: return ck::DType::f16;
    case at::kBFloat16: return ck::DType::bf16;
    default: TORCH_CHECK(false, "scaled_mm: the output dtype must be bfloat16, float16 or float32, got ", t);
  }
}

ck::Fp8Scale kernel_mode(cpu_ops::ScaleMode m) {
  switch (m) {
    case cpu_ops::ScaleMode::tensor: return ck::Fp8Scale::tensor;
    case cpu_ops::ScaleMode::channel: return ck::Fp8Scale::channel;
    default: return ck::Fp8Scale::block;
  }
}

void check_on(const at::Tensor &t, const at::Tensor &a, const char *name) {
  TORCH_CHECK(t.is_cuda() && t.device() == a.device(), "scaled_mm: ", name, " must be on ", a.device(), ", got ",
              t.device());
}

}  // namespace

at::Tensor scaled_mm(const at::Tensor &a, const at::Tensor &b, const at::Tensor &scale_a, const at::Tensor &scale_b,
                     const at::Tensor &bias, cpu_ops::ScaleMode mode, at::ScalarType out_dtype) {
  TORCH_CHECK(a.scalar_type() == at::kFloat8_e4m3fn && b.scalar_type() == at::kFloat8_e4m3fn,
              "scaled_mm: a and b must be float8_e4m3fn, got ", a.scalar_type(), " and ", b.scalar_type());
  TORCH_CHECK(a.dim() == 2 && b.dim() == 2 && a.size(1) == b.size(0), "scaled_mm: a [M, K] and b [K, N] expected, got ",
              a.sizes(), " and ", b.sizes());
  const ck::DType out_kernel = out_kernel_dtype(out_dtype);
  const int64_t m = a.size(0), k = a.size(1), n = b.size(1);
  TORCH_CHECK(scale_a.scalar_type() == at::kFloat && scale_b.scalar_type() == at::kFloat,
              "scaled_mm: scales must be float32");
  const std::vector<int64_t> sa_sizes = cpu_ops::scale_a_sizes(mode, m, k),
                             sb_sizes = cpu_ops::scale_b_sizes(mode, k, n);
  TORCH_CHECK(scale_a.sizes().vec() == sa_sizes, "scaled_mm: scale_a must be ", sizes_text(sa_sizes),
              " for scale mode ", cpu_ops::to_string(mode), ", got ", scale_a.sizes());
  TORCH_CHECK(scale_b.sizes().vec() == sb_sizes, "scaled_mm: scale_b must be ", sizes_text(sb_sizes),
              " for scale mode ", cpu_ops::to_string(mode), ", got ", scale_b.sizes());
  TORCH_CHECK(!bias.defined() || (bias.dim() == 1 && bias.size(0) == n), "scaled_mm: bias must be [", n, "], got ",
              bias.sizes());
  TORCH_CHECK(!bias.defined() || bias.scalar_type() == out_dtype, "scaled_mm: bias must have the output dtype ",
              out_dtype, ", got ", bias.scalar_type());
  TORCH_CHECK(a.is_cuda(), "scaled_mm: a must be a CUDA tensor, got device ", a.device());
  check_on(b, a, "b");
  check_on(scale_a, a, "scale_a");
  check_on(scale_b, a, "scale_b");
  if (bias.defined()) check_on(bias, a, "bias");

  const c10::cuda::CUDAGuard guard(a.device());
  const at::Tensor ac = a.contiguous(), bc = b.contiguous(), sac = scale_a.contiguous(), sbc = scale_b.contiguous();
  const at::Tensor biasc = bias.defined() ? bias.contiguous() : at::Tensor();
  at::Tensor out = at::empty({m, n}, a.options().dtype(out_dtype));
  ck::ScaledMmParams p;
  p.a = static_cast<const uint8_t *>(ac.data_ptr());
  p.lda = k;
  p.b = static_cast<const uint8_t *>(bc.data_ptr());
  p.ldb = n;
  p.scale_a = sac.const_data_ptr<float>();
  p.scale_b = sbc.const_data_ptr<float>();
  p.mode = kernel_mode(mode);
  p.bias = biasc.defined() ? biasc.data_ptr() : nullptr;
  p.out = out.data_ptr();
  p.out_dtype = out_kernel;
  p.M = m;
  p.N = n;
  p.K = k;
  ck::launch_scaled_mm(p, at::cuda::getCurrentCUDAStream(a.device().index()).stream());
  return out;
}

}  // namespace detfuzz::cuda_ops
