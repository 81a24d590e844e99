// Impl `torch`: whatever libtorch's dispatcher runs for the op on the backend (MKL/oneDNN/ATen
// kernels on the CPU, cuBLAS and ATen reductions on CUDA). Expectation: observed, and must-hold
// while a batch-invariant mode overrides the aten ops (they run through the dispatcher).
#include "ops/registry.h"

namespace detfuzz {

at::Tensor torch_rope(const at::Tensor &x, const at::Tensor &positions, double theta) {
  TORCH_CHECK(x.dim() == 3 && x.size(2) % 2 == 0, "rope: x must be [T, H, D] with D even, got ", x.sizes());
  const int64_t d = x.size(2), half = d / 2;
  const auto f64 = x.options().dtype(at::kDouble);
  const at::Tensor inv_freq = at::pow(theta, at::arange(0, half, f64) * (-2.0 / static_cast<double>(d)));
  const at::Tensor angle = positions.to(at::kDouble).unsqueeze(1) * inv_freq.unsqueeze(0);  // [T, D/2]
  const at::Tensor c = angle.cos().to(at::kFloat).unsqueeze(1), s = angle.sin().to(at::kFloat).unsqueeze(1);
  const at::Tensor xf = x.to(at::kFloat), x0 = xf.narrow(2, 0, half), x1 = xf.narrow(2, half, half);
  return at::cat({x0 * c - x1 * s, x1 * c + x0 * s}, 2).to(x.scalar_type());
}

std::vector<ImplInfo> torch_default_impls(Backend backend) {
  const auto e = Expectation::observed;
  const std::string where =
      backend == Backend::cpu ? "libtorch's default CPU kernel" : "libtorch's default CUDA kernel";
  std::vector<ImplInfo> impls = {
      {"torch", "mm", backend, float_dtypes(), e, "at::mm, " + where,
       [](const OpArgs &x) { return at::mm(x.tensors[0], x.tensors[1]); }},
      {"torch", "addmm", backend, float_dtypes(), e, "at::addmm, " + where,
       [](const OpArgs &x) { return at::addmm(x.tensors[0], x.tensors[1], x.tensors[2], x.beta, x.alpha); }},
      {"torch", "bmm", backend, float_dtypes(), e, "at::bmm, " + where,
       [](const OpArgs &x) { return at::bmm(x.tensors[0], x.tensors[1]); }},
      {"torch", "log_softmax", backend, float_dtypes(), e, "at::_log_softmax, " + where,
       [](const OpArgs &x) { return at::_log_softmax(x.tensors[0], x.dim, x.half_to_float); }},
      {"torch", "mean", backend, float_and_int_dtypes(), e, "at::mean (integers promoted to float32), " + where,
       [](const OpArgs &x) {
         auto dtype = x.out_dtype;
         if (!dtype && at::isIntegralType(x.tensors[0].scalar_type(), false)) dtype = at::kFloat;
         return at::mean(x.tensors[0], x.dims, x.keepdim, dtype);
       }},
      {"torch", "rms_norm", backend, float_dtypes(), e, "at::rms_norm, " + where,
       [](const OpArgs &x) { return at::rms_norm(x.tensors[0], {x.tensors[0].size(-1)}, x.tensors[1], x.eps); }},
      {"torch", "rope", backend, float_dtypes(), e, "RoPE composed of at:: ops (float32 rotation), " + where,
       [](const OpArgs &x) { return torch_rope(x.tensors[0], x.tensors[1], x.theta); }},
      {"torch", "silu_and_mul", backend, float_dtypes(), e, "at::silu(gate) * up, " + where,
       [](const OpArgs &x) {
         const int64_t i = x.tensors[0].size(-1) / 2;
         return at::silu(x.tensors[0].narrow(-1, 0, i)) * x.tensors[0].narrow(-1, i, i);
       }},
      {"torch", "embedding", backend, float_dtypes(), e, "at::embedding, " + where,
       [](const OpArgs &x) { return at::embedding(x.tensors[0], x.tensors[1]); }},
  };
  // Every one calls an aten op, so a mode that overrides it decides what runs.
  for (ImplInfo &i : impls) i.through_dispatcher = true;
  return impls;
}

}  // namespace detfuzz
