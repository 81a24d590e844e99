// Impl `torch`: whatever libtorch's dispatcher runs for the op on the backend (MKL/oneDNN/ATen
// kernels on the CPU, cuBLAS and ATen reductions on CUDA). Expectation: observed, and must-hold
// while a batch-invariant mode overrides the aten ops (they run through the dispatcher).
//
// On CUDA, also libtorch's fp8 and grouped kernels as engines call them (observed; no mode
// overrides these ops): `torch-scaled-mm` of scaled_mm (at::_scaled_mm, cuBLASLt fp8) and
// `torch-grouped` of fused_moe and fused_moe_fp8 (at::_grouped_mm in the sort-by-expert
// pipeline). `torch` of the MoE ops is the loop over experts with at::mm.
#include "ops/registry.h"

#ifdef DETFUZZ_WITH_CUDA
#include <ATen/BlasBackend.h>
#endif

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

#ifdef DETFUZZ_WITH_CUDA
int64_t round_up(int64_t v, int64_t m) { return (v + m - 1) / m * m; }

// An fp8 [rows, cols] matrix zero-padded to [to_rows, to_cols] (a zero byte is +0 in e4m3).
at::Tensor padded_fp8(const at::Tensor &t, int64_t to_rows, int64_t to_cols) {
  if (t.size(0) == to_rows && t.size(1) == to_cols) return t.contiguous();
  const at::Tensor bytes = t.contiguous().view(at::kByte);
  return at::constant_pad_nd(bytes, {0, to_cols - t.size(1), 0, to_rows - t.size(0)}, 0).view(at::kFloat8_e4m3fn);
}

// A [rows, cols] float32 tensor laid out column-major (stride [1, rows]), as cuBLASLt's block
// scales are read.
at::Tensor column_major(const at::Tensor &t) {
  // Strides written out: t.t().contiguous() keeps a [1, n] matrix's row-major strides.
  return at::empty_strided(t.sizes(), {1, std::max<int64_t>(t.size(0), 1)}, t.options()).copy_(t);
}

// b [K, N] as cuBLASLt reads it, column-major and padded to [kp, np]: b itself where it already is
// (a [N, K] weight's transpose), else a copy.
at::Tensor b_operand(const at::Tensor &b, int64_t kp, int64_t np) {
  if (b.size(0) == kp && b.size(1) == np && b.stride(0) == 1 && b.stride(1) == kp) return b;
  return column_major(padded_fp8(b, kp, np));
}

// scaled_mm through at::_scaled_mm, cuBLASLt's fp8 GEMM, in the scale mode of the case: per
// tensor; rowwise (our channel: scale_a [M, 1], scale_b [1, N]); block-wise 1 x 128 activations
// by 128 x 128 weights (at::_scaled_mm_v2's DeepSeek recipe; its scales column-major, scale_b's
// rows padded to a multiple of 4). cuBLASLt wants a row-major, b column-major, K and N multiples
// of 16 (of 128 for block scales): they are zero-padded there (zero products; the extra columns
// dropped), the padded scales are 1. The output dtype is the case's, where cuBLASLt refuses it
// libtorch's error is the case's.
at::Tensor torch_scaled_mm_cublaslt(const OpArgs &x) {
  TORCH_CHECK(x.tensors.size() == 4 || x.tensors.size() == 5, "scaled_mm: expected 4 or 5 tensors");
  const at::Tensor &a = x.tensors[0], &b = x.tensors[1], &sa = x.tensors[2], &sb = x.tensors[3];
  const std::string mode = param(x, "scale", "tensor");
  TORCH_CHECK(mode == "tensor" || mode == "channel" || mode == "block", "scaled_mm: unknown scale mode '", mode, "'");
  const at::ScalarType out_dtype = x.out_dtype.value_or(at::kBFloat16);
  const int64_t m = a.size(0), k = a.size(1), n = b.size(1), align = mode == "block" ? 128 : 16;
  const int64_t kp = round_up(k, align), np = round_up(n, align);
  const at::Tensor ap = padded_fp8(a, m, kp), bp = b_operand(b, kp, np);
  std::optional<at::Tensor> bias;
  if (x.tensors.size() == 5) bias = at::constant_pad_nd(x.tensors[4], {0, np - n}, 0);
  at::Tensor out;
  if (mode == "tensor") {
    out = at::_scaled_mm(ap, bp, sa, sb, bias, {}, out_dtype);
  } else if (mode == "channel") {
    out = at::_scaled_mm(ap, bp, sa.contiguous(), at::constant_pad_nd(sb, {0, np - n}, 1), bias, {}, out_dtype);
  } else {
    using at::blas::ScalingType;
    const int64_t kb = kp / 128, rows4 = round_up(kb, 4);
    const at::Tensor sbp = column_major(at::constant_pad_nd(sb, {0, 0, 0, rows4 - kb}, 1));
    const auto none = static_cast<int64_t>(at::blas::SwizzleType::NO_SWIZZLE);
    out = at::_scaled_mm_v2(ap, bp, {column_major(sa)}, {static_cast<int64_t>(ScalingType::BlockWise1x128)}, {none},
                            {sbp}, {static_cast<int64_t>(ScalingType::BlockWise128x128)}, {none}, bias, out_dtype);
  }
  return out.narrow(1, 0, n).contiguous();
}

// fused_moe as an engine's reference MoE pipeline runs it: at::topk routing, the (token, slot)
// pairs sorted by expert, at::_grouped_mm over all experts for gate/up (offsets: cumulative
// tokens per expert, int32), silu_and_mul, at::_grouped_mm for down, each output times its
// routing weight and scattered into the tokens with index_add_ (float32). Weights and
// activations in x's dtype (fp8 weights dequantised per 128 x 128 block to it, as an engine
// without fp8 grouped kernels runs them); H and I zero-padded to multiples of 8, the 16-byte
// alignment _grouped_mm needs (zero rows and columns add nothing: silu(0) * 0 = 0).
at::Tensor torch_grouped_moe(const OpArgs &x) {
  TORCH_CHECK(x.tensors.size() == 4 || x.tensors.size() == 6, "fused_moe: expected 4 or 6 tensors");
  const bool fp8 = x.tensors.size() == 6;
  const at::Tensor &xs = x.tensors[0], &logits = x.tensors[1];
  const int64_t k = std::stoll(param(x, "topk", "1"));
  const auto top = at::topk(logits, k, 1);
  const at::Tensor weights = at::softmax(std::get<0>(top), 1), ids = std::get<1>(top);
  if (param(x, "routing", "0") == "1") return at::cat({weights, ids.to(at::kFloat)}, 1);
  const at::ScalarType dtype = xs.scalar_type();
  const at::Tensor w13 = fp8 ? dequantised(x.tensors[2], x.tensors[4]).to(dtype) : x.tensors[2];
  const at::Tensor w2 = fp8 ? dequantised(x.tensors[3], x.tensors[5]).to(dtype) : x.tensors[3];
  const int64_t t_len = xs.size(0), h = xs.size(1), e = w13.size(0), inter = w2.size(2);
  if (t_len == 0) return at::zeros({0, h}, xs.options());
  const int64_t hp = round_up(h, 8), ip = round_up(inter, 8);
  // Padded copies only where a width is off the alignment (a real layer's weights are used as they are).
  const bool aligned = hp == h && ip == inter;
  const at::Tensor w13p =
      aligned
          ? w13
          : at::constant_pad_nd(w13.reshape({e, 2, inter, h}), {0, hp - h, 0, ip - inter}, 0).reshape({e, 2 * ip, hp});
  const at::Tensor w2p = aligned ? w2 : at::constant_pad_nd(w2, {0, ip - inter, 0, hp - h}, 0);
  const at::Tensor flat = ids.reshape({-1});
  const at::Tensor order = std::get<1>(at::sort(flat, /*stable=*/true, 0, false));
  const at::Tensor tokens = at::div(order, k, "floor");
  const at::Tensor offs = at::bincount(flat, {}, e).cumsum(0).to(at::kInt);
  const at::Tensor gathered = (hp == h ? xs : at::constant_pad_nd(xs, {0, hp - h}, 0)).index_select(0, tokens);
  const at::Tensor gate_up = at::_grouped_mm(gathered, w13p.transpose(1, 2), offs);
  const at::Tensor act = at::silu(gate_up.narrow(1, 0, ip)) * gate_up.narrow(1, ip, ip);
  const at::Tensor y = at::_grouped_mm(act, w2p.transpose(1, 2), offs);
  const at::Tensor routed = weights.reshape({-1}).index_select(0, order).unsqueeze(1);
  at::Tensor out = at::zeros({t_len, hp}, xs.options().dtype(at::kFloat));
  out.index_add_(0, tokens, y.to(at::kFloat) * routed);
  return out.narrow(1, 0, h).to(dtype);
}
#endif

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
#ifdef DETFUZZ_WITH_CUDA
  if (backend == Backend::cuda) {
    impls.push_back({"torch-scaled-mm", "scaled_mm", backend, float_dtypes(), e,
                     "at::_scaled_mm (cuBLASLt fp8): per tensor, rowwise, block-wise 1x128 x 128x128",
                     torch_scaled_mm_cublaslt});
    impls.push_back({"torch-grouped", "fused_moe", backend, float_dtypes(), e,
                     "sort by expert, at::_grouped_mm gate/up and down, silu_and_mul, index_add_ combine",
                     torch_grouped_moe});
    impls.push_back({"torch-grouped", "fused_moe_fp8", backend, float_dtypes(), e,
                     "the at::_grouped_mm pipeline on fp8 weights dequantised per block to x's dtype",
                     torch_grouped_moe});
  }
#endif
  return impls;
}

}  // namespace detfuzz
