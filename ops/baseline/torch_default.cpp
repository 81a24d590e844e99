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

namespace {

std::string param(const OpArgs &x, const char *key, const char *fallback) {
  const auto it = x.params.find(key);
  return it == x.params.end() ? fallback : it->second;
}

// w [rows, cols] times its 128 x 128 block scales s (as float32), or w as float32 when s is undefined.
at::Tensor dequantised(const at::Tensor &w, const at::Tensor &s) {
  const at::Tensor f = w.to(at::kFloat);
  if (!s.defined()) return f;
  const at::Tensor full = s.repeat_interleave(128, -2).repeat_interleave(128, -1);
  return f * full.narrow(-2, 0, w.size(-2)).narrow(-1, 0, w.size(-1));
}

// scaled_mm as a PyTorch user without fp8 kernels writes it: dequantise to float32, at::mm, bias.
at::Tensor torch_scaled_mm(const OpArgs &x) {
  TORCH_CHECK(x.tensors.size() == 4 || x.tensors.size() == 5, "scaled_mm: expected 4 or 5 tensors");
  const at::Tensor &a = x.tensors[0], &b = x.tensors[1], &sa = x.tensors[2], &sb = x.tensors[3];
  const std::string mode = param(x, "scale", "tensor");
  at::Tensor af = a.to(at::kFloat), bf = b.to(at::kFloat);
  if (mode == "block") {
    af = af * sa.repeat_interleave(128, 1).narrow(1, 0, a.size(1));
    bf = dequantised(b, sb);
  } else {
    TORCH_CHECK(mode == "tensor" || mode == "channel", "scaled_mm: unknown scale mode '", mode, "'");
    af = af * sa.reshape(mode == "tensor" ? std::vector<int64_t>{1, 1} : std::vector<int64_t>{-1, 1});
    bf = bf * sb.reshape({1, -1});
  }
  at::Tensor out = at::mm(af, bf);
  if (x.tensors.size() == 5) out = out + x.tensors[4].to(at::kFloat);
  return out.to(x.out_dtype.value_or(at::kBFloat16));
}

// fused_moe as Hugging Face transformers' eager MoE block runs it: at::topk, then per expert its
// tokens gathered, two at::mm and index_add_ into the output.
at::Tensor torch_fused_moe(const OpArgs &x) {
  TORCH_CHECK(x.tensors.size() == 4 || x.tensors.size() == 6, "fused_moe: expected 4 or 6 tensors");
  const bool fp8 = x.tensors.size() == 6;
  const at::Tensor &xs = x.tensors[0], &logits = x.tensors[1], &w13 = x.tensors[2], &w2 = x.tensors[3];
  const int64_t k = std::stoll(param(x, "topk", "1")), inter = w2.size(2);
  const auto top = at::topk(logits, k, 1);
  const at::Tensor weights = at::softmax(std::get<0>(top), 1), ids = std::get<1>(top);
  if (param(x, "routing", "0") == "1") return at::cat({weights, ids.to(at::kFloat)}, 1);
  at::Tensor out = at::zeros({xs.size(0), xs.size(1)}, xs.options().dtype(at::kFloat));
  for (int64_t e = 0; e < w13.size(0); ++e) {
    const at::Tensor hit = (ids == e).nonzero();  // [n, 2]: token, slot
    if (hit.size(0) == 0) continue;
    const at::Tensor tokens = hit.select(1, 0), slots = hit.select(1, 1);
    const at::Tensor h = at::mm(xs.index_select(0, tokens).to(at::kFloat),
                                dequantised(w13[e], fp8 ? x.tensors[4][e] : at::Tensor()).t());
    const at::Tensor act = at::silu(h.narrow(1, 0, inter)) * h.narrow(1, inter, inter);
    const at::Tensor y = at::mm(act, dequantised(w2[e], fp8 ? x.tensors[5][e] : at::Tensor()).t());
    out.index_add_(0, tokens, y * weights.index({tokens, slots}).unsqueeze(1));
  }
  return out.to(xs.scalar_type());
}

}  // namespace

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
      {"torch", "scaled_mm", backend, float_dtypes(), e, "fp8 dequantised to float32, at::mm, " + where,
       torch_scaled_mm},
      {"torch", "fused_moe", backend, float_dtypes(), e,
       "eager MoE block: at::topk, per expert at::mm on its gathered tokens, index_add_, " + where, torch_fused_moe},
      {"torch", "fused_moe_fp8", backend, float_dtypes(), e,
       "eager MoE block on block-dequantised fp8 weights, " + where, torch_fused_moe},
  };
  // Every one calls an aten op, so a mode that overrides it decides what runs.
  for (ImplInfo &i : impls) i.through_dispatcher = true;
  return impls;
}

}  // namespace detfuzz
