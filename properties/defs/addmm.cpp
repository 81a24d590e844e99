// addmm: out[M, N] = beta * bias + alpha * (a[M, K] @ b[K, N]), bias [N] (param bias=1) or
// [M, N] (bias=2); the batch is the rows of a, and of a [M, N] bias.
//
// Accuracy: core = (K + 5) u (|alpha| sum_k |a_ik||b_kj| + |beta| |bias_ij|) + (K + 5) tiny, the
// alpha term left out when alpha == 0 and the beta term when beta == 0 (torch drops a term whose
// coefficient is zero).
#include "properties/defs/defs.h"

namespace detfuzz {

OpDef addmm_def() {
  OpDef d;
  d.name = "addmm";
  d.size_names = {"M", "N", "K"};
  d.input_sizes = [](const CaseSpec &c) {
    defs::need_rank(c, 3, 3);
    const auto &s = c.shape;
    const int64_t bias = c.param_int("bias", 1);
    if (bias != 1 && bias != 2)
      throw std::invalid_argument("addmm bias=" + std::to_string(bias) + " (expected 1 or 2: the bias rank)");
    return std::vector<std::vector<int64_t>>{
        bias == 1 ? std::vector<int64_t>{s[1]} : std::vector<int64_t>{s[0], s[1]}, {s[0], s[2]}, {s[2], s[1]}};
  };
  d.output_sizes = [](const CaseSpec &c) { return std::vector<int64_t>{c.shape[0], c.shape[1]}; };
  d.batch_axis = [](const CaseSpec &c) {
    BatchAxis ax{{{1, 0}}, 0, c.shape[0]};
    if (c.param_int("bias", 1) == 2) ax.inputs.push_back({0, 0});
    return ax;
  };
  d.read_attributes = [](const CaseSpec &c, OpArgs &a) {
    a.alpha = c.param_double("alpha", 1.0);
    a.beta = c.param_double("beta", 1.0);
  };
  d.gen = [](const Target &t) {
    return row_cases::gen_matmul(t, {false, 3, [](CaseSpec &c, int bias_rank, int scalars) {
                                       c.params["bias"] = std::to_string(bias_rank);
                                       // alpha/beta: 1/1 most of the time, else values that are not
                                       // powers of two, and beta 0.
                                       static const double alphas[] = {1.0, 0.75, -1.5, 1.0};
                                       static const double betas[] = {1.0, 0.5, 1.0, 0.0};
                                       c.params["alpha"] = double_to_hex(alphas[scalars]);
                                       c.params["beta"] = double_to_hex(betas[scalars]);
                                     }});
  };
  d.reference = [](const OpArgs &a) {
    return at::addmm(defs::f64(a.tensors.at(0)), defs::f64(a.tensors.at(1)), defs::f64(a.tensors.at(2)), a.beta,
                     a.alpha);
  };
  d.core_bound = [](const OpArgs &args) {
    const at::Tensor &bias = args.tensors.at(0), &a = args.tensors.at(1), &b = args.tensors.at(2);
    const double k = static_cast<double>(a.size(1));
    at::Tensor magnitude = at::zeros({a.size(0), b.size(1)}, a.options().dtype(at::kDouble));
    if (args.alpha != 0) magnitude = magnitude + std::abs(args.alpha) * at::mm(defs::f64(a).abs(), defs::f64(b).abs());
    if (args.beta != 0) magnitude = magnitude + std::abs(args.beta) * defs::f64(bias).abs();
    return unbounded_where_huge(magnitude, magnitude * ((k + 5) * kUnitRoundoffF32) + (k + 5) * kTinyF32);
  };
  d.out_dtype = [](const OpArgs &a) { return a.tensors.back().scalar_type(); };
  return d;
}

}  // namespace detfuzz
