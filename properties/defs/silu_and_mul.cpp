// silu_and_mul: x[T, 2I] -> silu(x[:, :I]) * x[:, I:]; the batch is the tokens.
//
// Accuracy: core = 8 u |ref| + tiny, plus |ref| itself where gate < -80 (silu underflows float32
// there). The reference flushes silu to (signed) zero where the kernels' float32 silu is zero:
// where |silu| or exp(gate) (the sigmoid's numerator for gate < 0) is at most half the smallest
// float32 subnormal. Then silu * inf is NaN in both.
#include "properties/defs/defs.h"

namespace detfuzz {
namespace {

at::Tensor silu_and_mul_f64(const OpArgs &a) {
  const at::Tensor x = defs::f64(a.tensors.at(0));
  const int64_t i = x.size(1) / 2;
  const at::Tensor g = x.narrow(1, 0, i);
  at::Tensor silu = g / (1 + (-g).exp());
  silu = at::where((silu.abs() <= 0x1p-150) | (g.exp() <= 0x1p-150), silu * 0, silu);
  return silu * x.narrow(1, i, i);
}

}  // namespace

OpDef silu_and_mul_def() {
  OpDef d;
  d.name = "silu_and_mul";
  d.size_names = {"T", "I"};
  d.input_sizes = [](const CaseSpec &c) {
    defs::need_rank(c, 2, 2);
    return std::vector<std::vector<int64_t>>{{c.shape[0], 2 * c.shape[1]}};
  };
  d.batch_axis = [](const CaseSpec &c) { return BatchAxis{{{0, 0}}, 0, c.shape[0]}; };
  d.gen = [](const Target &t) {
    return row_cases::gen_tokens(t, [](const row_cases::TokenDraw &r) {
      return std::vector<int64_t>{r.tokens, r.width};
    });
  };
  d.reference = silu_and_mul_f64;
  d.core_bound = [](const OpArgs &a) {
    const at::Tensor x = defs::f64(a.tensors.at(0));
    const int64_t i = x.size(1) / 2;
    const at::Tensor ref = silu_and_mul_f64(a).abs();
    const at::Tensor overflowed = x.narrow(1, 0, i) < -80;
    return ref * (8 * kUnitRoundoffF32) + at::where(overflowed, ref, at::zeros_like(ref)) + kTinyF32;
  };
  d.out_dtype = [](const OpArgs &a) { return a.tensors.back().scalar_type(); };
  return d;
}

}  // namespace detfuzz
