// fused_moe and fused_moe_fp8: the mixture-of-experts layer of ops/cpu/moe.h. Shape T H E I
// (tokens, hidden, experts, expert width), parameter topk (1, 2 or 8; at most E). Inputs: x [T, H]
// of the case's dtype, logits [T, E] float32, w13 [E, 2I, H], w2 [E, H, I]: of the case's dtype
// (fused_moe) or float8 e4m3fn with float32 128 x 128 block scales s13 [E, 2I/128, H/128] and
// s2 [E, H/128, I/128] (fused_moe_fp8). The batch is the tokens (x and logits). The MoE family
// (properties/moe) adds expert_load_invariance and routing_invariance to the row properties.
//
// The reference routes exactly as the kernel does (top-k on the float32 logits, ties to the lower
// index: a selection, no rounding, so both pick the same experts) and computes the rest in
// float64 on the dequantised weights: weights w = softmax of the chosen logits, [g, u] = W13 x,
// a = silu(g) u, y = W2 a, out = sum_s w_s y_s.
//
// Accuracy, per token and output j, with u = 2^-24 and every bound first order plus slack:
//  - g_i, u_i: a float32 dot product of H terms in any blocking (each product one rounding, or
//    exact for 16-bit x times 16-bit or fp8 w; at most H - 1 additions; one scale product):
//      dg_i <= (H + 4) u G_i + (H + 4) tiny,   G = |W13| |x|   (likewise du_i);
//  - a_i = silu(g_i) u_i, with |silu'| <= 1.1 and |silu(g)| <= |g|, rounded as silu_and_mul
//    (8 u), and flushed to zero where g < -80:
//      da_i <= 1.1 dg_i (|u_i| + du_i) + |g_i| du_i + 8 u (|g_i| + dg_i)(|u_i| + du_i) [+ |a_i| if g_i < -80],
//    then a is rounded to x's dtype (unit roundoff u_x: 2^-8 bfloat16, 2^-11 float16, 0 float32;
//    eta_x half its smallest subnormal):  da_i += u_x (|a_i| + da_i) + eta_x, and every output of
//    the token unbounded where |a_i| + da_i reaches past x's largest finite value (a rounds to inf);
//  - y_j = W2 a, I terms:  dy_j <= (I + 4) u (|W2| (|a| + da))_j + (|W2| da)_j + (I + 4) tiny;
//  - the weights: l_s - max (one rounding), exp (libm, within 1 ulp), k additions, one division:
//      dw_s <= w_s (2 |l_s - max| + k + 6) u;
//  - the combine, k float32 products and additions in slot order:
//      core_j = sum_s (k + 1) u (w_s + dw_s)(|y_sj| + dy_sj) + dw_s |y_sj| + w_s dy_sj + dw_s dy_sj.
// Unbounded where the magnitude sum_s (w_s + dw_s)(|y_sj| + dy_sj) could overflow float32.
#include "ops/cpu/moe.h"
#include "properties/defs/defs.h"

#include <algorithm>
#include <array>
#include <cmath>
#include <map>
#include <numeric>

namespace detfuzz {
namespace {

int64_t blocks_of(int64_t n) { return (n + cpu_ops::kFp8Block - 1) / cpu_ops::kFp8Block; }

int64_t top_k_of(const CaseSpec &c) {
  const std::string k = c.param("topk", "1");
  int64_t v = 0;
  try {
    v = std::stoll(k);
  } catch (const std::exception &) {
    throw std::invalid_argument(c.op + ": topk=" + k + " is not an integer");
  }
  const int64_t e = c.shape.size() == 4 ? c.shape[2] : 0;
  if (v < 1 || v > e)
    throw std::invalid_argument(c.op + ": topk=" + k + " is outside [1, E] = [1, " + std::to_string(e) + "]");
  return v;
}

int64_t top_k_of(const OpArgs &a) {
  const auto it = a.params.find("topk");
  return it == a.params.end() ? 1 : std::stoll(it->second);
}

// Larger logit first, ties to the lower index, NaN last (the kernel's rule, ops/cpu/moe.h).
std::vector<int64_t> route(const float *l, int64_t e, int64_t k) {
  std::vector<int64_t> order(static_cast<size_t>(e));
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(), [l](int64_t a, int64_t b) {
    const bool na = std::isnan(l[a]), nb = std::isnan(l[b]);
    if (na != nb) return nb;
    return !na && l[a] > l[b];
  });
  order.resize(static_cast<size_t>(k));
  return order;
}

// Expert e's weights, dequantised to float64 [rows, cols], made once per call.
class Dequantised {
 public:
  Dequantised(const at::Tensor &w, const at::Tensor &scale) : w_(w), scale_(scale) {}
  const at::Tensor &operator[](int64_t e) {
    auto it = cache_.find(e);
    if (it != cache_.end()) return it->second;
    at::Tensor d = defs::f64(w_[e]);
    if (scale_.defined()) {
      const int64_t blk = cpu_ops::kFp8Block;
      at::Tensor s = defs::f64(scale_[e]).repeat_interleave(blk, 0).repeat_interleave(blk, 1);
      d = d * s.narrow(0, 0, d.size(0)).narrow(1, 0, d.size(1));
    }
    return cache_.emplace(e, d).first->second;
  }

 private:
  at::Tensor w_, scale_;
  std::map<int64_t, at::Tensor> cache_;
};

// The reference output and, when asked, the core of the bound (see the derivation above).
std::pair<at::Tensor, at::Tensor> moe_f64(const OpArgs &a, bool with_core) {
  const at::Tensor x = defs::f64(a.tensors.at(0));
  const at::Tensor logits = a.tensors.at(1).contiguous();
  const bool fp8 = a.tensors.size() == 6;
  Dequantised w13(a.tensors.at(2), fp8 ? a.tensors[4] : at::Tensor()),
      w2(a.tensors.at(3), fp8 ? a.tensors[5] : at::Tensor());
  const int64_t t_len = x.size(0), h = x.size(1), e_len = logits.size(1), inter = a.tensors.at(3).size(2);
  const int64_t k = top_k_of(a);
  const double u = kUnitRoundoffF32, tiny = kTinyF32;
  // x's dtype, to which the activation is rounded: unit roundoff, half its smallest subnormal, its
  // largest finite value (float32: no rounding).
  const at::ScalarType x_dtype = a.tensors.at(0).scalar_type();
  const bool half = x_dtype == at::kHalf, bf16 = x_dtype == at::kBFloat16;
  const double u_x = bf16 ? 0x1p-8 : half ? 0x1p-11 : 0.0, eta_x = bf16 ? 0x1p-134 : half ? 0x1p-25 : 0.0;
  const double max_x = bf16 ? 0x1.fep127 : 65504.0;
  const double ch = static_cast<double>(h + 4), ci = static_cast<double>(inter + 4), ck = static_cast<double>(k + 1);
  at::Tensor out = at::zeros({t_len, h}, at::kDouble), core = at::zeros({t_len, h}, at::kDouble);
  at::Tensor magnitude = at::zeros({t_len, h}, at::kDouble);
  for (int64_t t = 0; t < t_len; ++t) {
    const float *l = logits.const_data_ptr<float>() + t * e_len;
    const std::vector<int64_t> ids = route(l, e_len, k);
    const double top = l[ids[0]];
    std::vector<double> w(static_cast<size_t>(k));
    double sum = 0;
    for (int64_t s = 0; s < k; ++s) sum += (w[s] = std::exp(static_cast<double>(l[ids[s]]) - top));
    const at::Tensor xt = x[t];
    for (int64_t s = 0; s < k; ++s) {
      const double ws = w[s] / sum;
      const at::Tensor &W1 = w13[ids[s]], &W2 = w2[ids[s]];
      const at::Tensor hv = at::mv(W1, xt);
      const at::Tensor g = hv.narrow(0, 0, inter), up = hv.narrow(0, inter, inter);
      at::Tensor silu = g / (1 + (-g).exp());
      silu = at::where((silu.abs() <= 0x1p-150) | (g.exp() <= 0x1p-150), silu * 0, silu);
      const at::Tensor act = silu * up;
      const at::Tensor y = at::mv(W2, act);
      out[t] += ws * y;
      if (!with_core) continue;
      const at::Tensor habs = at::mv(W1.abs(), xt.abs()) * (ch * u) + ch * tiny;
      const at::Tensor dg = habs.narrow(0, 0, inter), du = habs.narrow(0, inter, inter);
      const at::Tensor ua = up.abs() + du, ga = g.abs();
      at::Tensor da = 1.1 * dg * ua + ga * du + 8 * u * (ga + dg) * ua;
      da = da + at::where(g < -80, act.abs(), at::zeros_like(act));
      da = da + (act.abs() + da) * u_x + eta_x;
      // An activation that may round past x's range makes the token's outputs inf or NaN.
      if (u_x > 0 && ((act.abs() + da) >= max_x).any().item<bool>()) core[t] += INFINITY;
      const at::Tensor W2a = W2.abs();
      const at::Tensor dy = at::mv(W2a, act.abs() + da) * (ci * u) + at::mv(W2a, da) + ci * tiny;
      const double dw = ws * (2 * std::abs(static_cast<double>(l[ids[s]]) - top) + k + 6) * u;
      const at::Tensor ya = y.abs();
      core[t] += ck * u * (ws + dw) * (ya + dy) + dw * ya + ws * dy + dw * dy;
      magnitude[t] += (ws + dw) * (ya + dy);
    }
  }
  if (with_core) {
    core = at::where(at::isnan(core), at::full_like(core, INFINITY), core);
    core = unbounded_where_huge(at::where(at::isnan(magnitude), at::full_like(core, INFINITY), magnitude), core);
  }
  return {out, core};
}

rc::Gen<int64_t> gen_width() {
  return rc::gen::weightedOneOf<int64_t>({{5, gen_dim(1, 160)}, {1, rc::gen::element<int64_t>(128, 256)}});
}

OpDef moe_def(const std::string &name, bool fp8) {
  OpDef d;
  d.name = name;
  d.size_names = {"T", "H", "E", "I"};
  d.input_sizes = [fp8](const CaseSpec &c) {
    defs::need_rank(c, 4, 4);
    const int64_t t = c.shape[0], h = c.shape[1], e = c.shape[2], i = c.shape[3];
    if (h < 1 || e < 1)
      throw std::invalid_argument(c.op + " needs H >= 1 and E >= 1, got shape '" + c.shape_string() + "'");
    top_k_of(c);
    std::vector<std::vector<int64_t>> sizes = {{t, h}, {t, e}, {e, 2 * i, h}, {e, h, i}};
    if (fp8) {
      sizes.push_back({e, blocks_of(2 * i), blocks_of(h)});
      sizes.push_back({e, blocks_of(h), blocks_of(i)});
    }
    return sizes;
  };
  d.batch_axis = [](const CaseSpec &c) { return BatchAxis{{{0, 0}, {1, 0}}, 0, c.shape[0]}; };
  d.input_dtype = [fp8](size_t t) -> std::optional<at::ScalarType> {
    if (t == 1 || t >= 4) return at::kFloat;  // logits, block scales
    if (fp8 && t >= 2) return at::kFloat8_e4m3fn;
    return std::nullopt;
  };
  d.gen = [fp8](const Target &t) {
    const OpDef def = *find_op_def(t.op);
    return rc::gen::apply(
        [t, def, fp8](int64_t tokens, int64_t h, int64_t e, int64_t i, std::string topk, std::string layout,
                      std::string dist, uint64_t seed, row_cases::SliceRaw raw) {
          CaseSpec c = row_cases::base_case(t, {tokens, h, e, i}, layout + (fp8 ? "cc" : ""), dist, seed);
          c.params["topk"] = topk;
          row_cases::add_property_params(c, raw, def);
          return c;
        },
        // Small widths keep CPU cases fast; E and top-k take the values of real models. One width in
        // six is 128 or 256, the multiples of 128 that the Hopper kernels run (fp8 weights need them).
        gen_dim(0, 24), gen_width(), shrinking_choice<int64_t>({{6, 8}, {2, 64}, {1, 128}}), gen_width(),
        shrinking_choice<std::string>({{2, "1"}, {2, "2"}, {2, "8"}}), row_cases::gen_layout(4),
        shrinking_choice<std::string>({{5, "normal"}, {2, "uniform"}, {1, "linspace"}}),
        rc::gen::inRange<uint64_t>(0, 1ull << 48), row_cases::gen_slice_raw());
  };
  d.reference = [](const OpArgs &a) { return moe_f64(a, false).first; };
  d.core_bound = [](const OpArgs &a) { return moe_f64(a, true).second; };
  d.out_dtype = [](const OpArgs &a) { return a.tensors.at(0).scalar_type(); };
  d.family = "moe";
  d.graph_replay = false;  // routing is data-dependent: a CUDA impl may size its work on the host
  return d;
}

// Weights w [E, R, C] (R, C multiples of 128) quantised to float8 e4m3fn with float32 128 x 128
// block scales (each block's largest magnitude maps to 448, e4m3's largest), as checkpoints ship.
std::pair<at::Tensor, at::Tensor> block_quantised(const at::Tensor &w) {
  const int64_t e = w.size(0), r = w.size(1) / 128, c = w.size(2) / 128;
  const at::Tensor blocks = w.to(at::kFloat).reshape({e, r, 128, c, 128});
  const at::Tensor scale = blocks.abs().amax({2, 4}).clamp_min(1e-12) / 448.0;  // [E, R/128, C/128]
  const at::Tensor q = (blocks / scale.reshape({e, r, 1, c, 1})).reshape(w.sizes()).to(at::kFloat8_e4m3fn);
  return {q, scale.contiguous()};
}
at::Tensor block_dequantised(const at::Tensor &q, const at::Tensor &scale, at::ScalarType dtype) {
  const int64_t e = q.size(0), r = q.size(1) / 128, c = q.size(2) / 128;
  return (q.to(at::kFloat).reshape({e, r, 128, c, 128}) * scale.reshape({e, r, 1, c, 1})).reshape(q.sizes()).to(dtype);
}

// The bench of fused_moe: two layers of real models, tokens 1 to 8192, against the torch-grouped
// pipeline; of fused_moe_fp8: the same layers with 128 x 128 block-quantised weights, against our
// 16-bit kernel on the dequantised weights (the speed fp8 weights buy). Shape M = tokens, N = H,
// K = I, page = E; top-k 2 for 8 experts, else 8.
//   Mixtral 8x7B:     H 4096, I 14336, E 8,   top-2
//   Qwen3-30B-A3B:    H 2048, I 768,   E 128, top-8
BenchDef moe_bench(bool fp8) {
  BenchDef b;
  const std::string op = fp8 ? "fused_moe_fp8" : "fused_moe";
  for (auto [h, i, e] : {std::array<int64_t, 3>{4096, 14336, 8}, {2048, 768, 128}})
    for (int64_t t : {1, 8, 64, 512, 2048, 8192}) b.shapes.push_back({op, t, h, i, e});
  b.uses_k = true;
  b.baseline = fp8 ? "fused_moe:invariant" : "torch-grouped";
  b.args = [fp8](const BenchShape &s, at::ScalarType dtype, at::Generator &gen) {
    const auto opts = at::TensorOptions().device(at::kCUDA).dtype(at::kFloat);
    const int64_t e = s.page, k = e == 8 ? 2 : 8;
    OpArgs a;
    a.tensors = {at::randn({s.m, s.n}, gen, opts).to(dtype), at::randn({s.m, e}, gen, opts)};
    const at::Tensor w13 = at::randn({e, 2 * s.k, s.n}, gen, opts) * 0.02,
                     w2 = at::randn({e, s.n, s.k}, gen, opts) * 0.02;
    if (fp8) {
      const auto [q13, s13] = block_quantised(w13);
      const auto [q2, s2] = block_quantised(w2);
      a.tensors.insert(a.tensors.end(), {q13, q2, s13, s2});
    } else {
      a.tensors.insert(a.tensors.end(), {w13.to(dtype), w2.to(dtype)});
    }
    a.params = {{"topk", std::to_string(k)}};
    return a;
  };
  if (fp8)
    b.baseline_args = [](const OpArgs &a) {
      const at::ScalarType dtype = a.tensors[0].scalar_type();
      OpArgs wide = a;
      wide.tensors = {a.tensors[0], a.tensors[1], block_dequantised(a.tensors[2], a.tensors[4], dtype),
                      block_dequantised(a.tensors[3], a.tensors[5], dtype)};
      return wide;
    };
  b.flops = [](const BenchShape &s) { return 2.0 * s.m * (s.page == 8 ? 2 : 8) * 3.0 * s.n * s.k; };
  // The weights of the experts a batch reaches (all of them from a few tokens on), x and out.
  b.bytes = [fp8](const BenchShape &s, at::ScalarType dtype) {
    const double reached = std::min<double>(static_cast<double>(s.page), s.m * (s.page == 8 ? 2.0 : 8.0));
    const double x_bytes = static_cast<double>(c10::elementSize(dtype)), w_bytes = fp8 ? 1.0 : x_bytes;
    return w_bytes * reached * 3.0 * s.n * s.k + x_bytes * 2.0 * s.m * s.n;
  };
  b.input_bytes = [fp8](const BenchShape &s, at::ScalarType dtype) {
    const double x_bytes = static_cast<double>(c10::elementSize(dtype)), w_bytes = fp8 ? 1.0 : x_bytes;
    return w_bytes * s.page * 3.0 * s.n * s.k + x_bytes * s.m * s.n;
  };
  b.against_copy = [](const BenchShape &) { return false; };
  b.batch_inputs = [](const BenchShape &) { return std::vector<size_t>{0, 1}; };  // x and logits
  b.small_m = 64;                                                                 // decode batches
  return b;
}

}  // namespace

OpDef fused_moe_def() {
  OpDef d = moe_def("fused_moe", false);
  d.bench = moe_bench(false);
  return d;
}
OpDef fused_moe_fp8_def() {
  OpDef d = moe_def("fused_moe_fp8", true);
  d.bench = moe_bench(true);
  return d;
}

}  // namespace detfuzz
