// rms_norm: out[T, H] = x * rsqrt(mean(x^2) + eps) * weight[H] (param eps, default 1e-6); the batch
// is the tokens.
//
// Accuracy: core = ((H + 10) u + 2^-149 / (ss/H + eps)) |ref| + 2^-149 |w| + (H + 10) tiny, with
// ss = sum x^2. The second term covers squares that underflow float32 (each rounds to the
// subnormal grid, so the mean square is off by up to 2^-150, which moves 1/rms by up to
// 2^-149 / (ss/H + eps) relative); the third, x * (1/rms) underflowing before the weight scales
// it back up. Unbounded where sum x^2 exceeds FLT_MAX / 2 or ss/H + eps is below 2^-140.
#include "properties/defs/defs.h"

#include <cmath>

namespace detfuzz {
namespace {

at::Tensor rms_norm_f64(const OpArgs &a) {
  const at::Tensor x = defs::f64(a.tensors.at(0)), w = defs::f64(a.tensors.at(1));
  return x * ((x * x).mean(1, /*keepdim=*/true) + a.eps).rsqrt() * w.unsqueeze(0);
}

}  // namespace

OpDef rms_norm_def() {
  OpDef d;
  d.name = "rms_norm";
  d.size_names = {"T", "H"};
  d.input_sizes = [](const CaseSpec &c) {
    defs::need_rank(c, 2, 2);
    return std::vector<std::vector<int64_t>>{c.shape, {c.shape[1]}};
  };
  d.batch_axis = [](const CaseSpec &c) { return BatchAxis{{{0, 0}}, 0, c.shape[0]}; };
  d.read_attributes = [](const CaseSpec &c, OpArgs &a) { a.eps = c.param_double("eps", 1e-6); };
  d.gen = [](const Target &t) {
    return row_cases::gen_tokens(
        t,
        [](const row_cases::TokenDraw &r) {
          return std::vector<int64_t>{r.tokens, r.width};
        },
        [](CaseSpec &c, const row_cases::TokenDraw &r) {
          if (r.eps_kind) c.params["eps"] = double_to_hex(r.eps_kind == 1 ? 1e-5 : 0.0);
        });
  };
  d.reference = rms_norm_f64;
  d.core_bound = [](const OpArgs &a) {
    const at::Tensor x = defs::f64(a.tensors.at(0));
    const double h = static_cast<double>(x.size(1));
    const at::Tensor ref = rms_norm_f64(a).abs();
    const at::Tensor sum_sq = (x * x).sum(1, /*keepdim=*/true);
    const at::Tensor denom = (sum_sq / h + a.eps).expand_as(ref);
    const at::Tensor underflow = at::where(denom > 0x1p-140, 0x1p-149 / denom, at::full_like(denom, INFINITY));
    const at::Tensor w_abs = defs::f64(a.tensors.at(1)).abs().unsqueeze(0);
    const at::Tensor core =
        ref * ((h + 10) * kUnitRoundoffF32) + ref * underflow + w_abs * 0x1p-149 + (h + 10) * kTinyF32;
    return unbounded_where_huge(sum_sq.expand_as(ref),
                                at::where(underflow.isinf(), at::full_like(core, INFINITY), core));
  };
  d.out_dtype = [](const OpArgs &a) { return a.tensors.back().scalar_type(); };
  return d;
}

}  // namespace detfuzz
