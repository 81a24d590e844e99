// log_softmax: x of rank 1..4 over dim (param dim, default -1), optionally half_to_float (h2f=1);
// the batch is the first dim that is not reduced.
//
// Accuracy: core = u (2 |x_i - m| + 2 R + 2 n + 8 + 4 |log S|) + n tiny, with m the row max,
// S = sum_j exp(x_j - m), R = sum_j p_j |x_j - m| (p = softmax) and n the row length.
#include "properties/defs/defs.h"

#include <ATen/WrapDimUtils.h>

namespace detfuzz {

OpDef log_softmax_def() {
  OpDef d;
  d.name = "log_softmax";
  d.size_names = {"D0", "D1", "..."};
  d.input_sizes = [](const CaseSpec &c) {
    defs::need_rank(c, 1, 4);
    return std::vector<std::vector<int64_t>>{c.shape};
  };
  d.batch_axis = [](const CaseSpec &c) {
    const int64_t rank = c.shape.size();
    return defs::first_unreduced_axis(c, {defs::normalized_dim(c.param_int("dim", -1), rank, "dim")}, false);
  };
  d.read_attributes = [](const CaseSpec &c, OpArgs &a) {
    a.dim = c.param_int("dim", -1);
    a.half_to_float = c.param_int("h2f", 0) != 0;
  };
  d.gen = [](const Target &t) {
    return row_cases::gen_reduction(t, [t](CaseSpec &c, const row_cases::ReductionDraw &r) {
      c.params["dim"] = std::to_string(r.shown);
      // libtorch's CPU log_softmax refuses half_to_float: such a case would only ever be an error.
      const bool h2f_refused = t.impl == "torch" && t.backend == Backend::cpu;
      if (r.h2f && t.dtype != at::kFloat && !h2f_refused) c.params["h2f"] = "1";
    });
  };
  d.reference = [](const OpArgs &a) { return at::_log_softmax(defs::f64(a.tensors.at(0)), a.dim, false); };
  d.core_bound = [](const OpArgs &args) {
    const at::Tensor x = defs::f64(args.tensors.at(0));
    if (x.numel() == 0) return at::zeros_like(x);
    const at::Tensor x_nd = x.dim() == 0 ? x.reshape({1}) : x;
    const int64_t dim = c10::maybe_wrap_dim(args.dim, x.dim());
    const double n = static_cast<double>(x_nd.size(dim));
    const at::Tensor m = std::get<0>(x_nd.max(dim, /*keepdim=*/true));
    const at::Tensor deviation = (x_nd - m).abs();
    const at::Tensor p = at::_log_softmax(x_nd, dim, false).exp();
    const at::Tensor weighted = at::where(p > 0, p * deviation, at::zeros_like(p)).sum(dim, /*keepdim=*/true);
    const at::Tensor log_sum = (x_nd - m).exp().sum(dim, /*keepdim=*/true).log();
    const at::Tensor core =
        (2 * deviation + 2 * weighted + 4 * log_sum.abs() + (2 * n + 8)) * kUnitRoundoffF32 + n * kTinyF32;
    return core.view(x.sizes());
  };
  d.out_dtype = [](const OpArgs &a) { return a.half_to_float ? at::kFloat : a.tensors.back().scalar_type(); };
  d.bench = defs::row_reduction_bench("log_softmax", false);
  return d;
}

}  // namespace detfuzz
