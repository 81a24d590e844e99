// rope: NeoX rotary embedding of x[T, H, D] (D even) at positions[T] (int64 in [0, 4096)), param
// theta (default 10000); the batch is the tokens and their positions.
//
// Accuracy: core = 4 u (|x_i c| + |x_j s|) + 4 tiny, with c, s the cos and sin of the angle in
// float64.
#include "properties/defs/defs.h"

#include <cmath>

namespace detfuzz {
namespace {

// cos and sin of RoPE's angles in float64, [T, 1, D/2] (broadcast over heads).
std::pair<at::Tensor, at::Tensor> cos_sin_f64(const at::Tensor &positions, int64_t d, double theta) {
  const int64_t half = d / 2;
  auto inv_freq = at::empty({half}, at::kDouble);
  for (int64_t i = 0; i < half; ++i)
    inv_freq[i] = std::pow(theta, -2.0 * static_cast<double>(i) / static_cast<double>(d));
  const at::Tensor angle = positions.to(at::kCPU, at::kDouble).unsqueeze(1) * inv_freq.unsqueeze(0);
  return {angle.cos().unsqueeze(1), angle.sin().unsqueeze(1)};
}

}  // namespace

OpDef rope_def() {
  OpDef d;
  d.name = "rope";
  d.size_names = {"T", "H", "D"};
  d.input_sizes = [](const CaseSpec &c) {
    defs::need_rank(c, 3, 3);
    if (c.shape[2] % 2 != 0)
      throw std::invalid_argument("rope needs an even head dim, got shape '" + c.shape_string() + "'");
    return std::vector<std::vector<int64_t>>{c.shape, {c.shape[0]}};
  };
  d.batch_axis = [](const CaseSpec &c) { return BatchAxis{{{0, 0}, {1, 0}}, 0, c.shape[0]}; };
  d.input_dtype = [](size_t t) { return t == 1 ? std::optional<at::ScalarType>(at::kLong) : std::nullopt; };
  d.index_range = [](const CaseSpec &, size_t t) -> int64_t { return t == 1 ? 4096 : 0; };
  d.read_attributes = [](const CaseSpec &c, OpArgs &a) { a.theta = c.param_double("theta", 10000.0); };
  d.gen = [](const Target &t) {
    return row_cases::gen_tokens(t, [](const row_cases::TokenDraw &r) {
      return std::vector<int64_t>{r.tokens, r.heads, 2 * r.half_dim};
    });
  };
  d.reference = [](const OpArgs &a) {
    const at::Tensor x = defs::f64(a.tensors.at(0));
    const int64_t half = x.size(2) / 2;
    const auto [c, s] = cos_sin_f64(a.tensors.at(1), half * 2, a.theta);
    const at::Tensor x0 = x.narrow(2, 0, half), x1 = x.narrow(2, half, half);
    return at::cat({x0 * c - x1 * s, x1 * c + x0 * s}, 2);
  };
  d.core_bound = [](const OpArgs &a) {
    const at::Tensor x = defs::f64(a.tensors.at(0));
    const int64_t half = x.size(2) / 2;
    const auto [c, s] = cos_sin_f64(a.tensors.at(1), half * 2, a.theta);
    const at::Tensor x0 = x.narrow(2, 0, half).abs(), x1 = x.narrow(2, half, half).abs();
    const at::Tensor ca = c.abs(), sa = s.abs();
    return at::cat({x0 * ca + x1 * sa, x1 * ca + x0 * sa}, 2) * (4 * kUnitRoundoffF32) + 4 * kTinyF32;
  };
  d.out_dtype = [](const OpArgs &a) { return a.tensors.front().scalar_type(); };
  return d;
}

}  // namespace detfuzz
