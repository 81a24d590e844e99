// bmm: out[B, M, N] = a[B, M, K] @ b[B, K, N]. The batch is the batch of matrices (param
// axis=matrices, the default: it grows with the serving batch) or the rows of each matrix
// (axis=rows).
//
// Accuracy: as mm, per product: core = (K + 2) u sum_k |a_ik||b_kj| + (K + 2) tiny.
#include "properties/defs/defs.h"

namespace detfuzz {

OpDef bmm_def() {
  OpDef d;
  d.name = "bmm";
  d.size_names = {"B", "M", "N", "K"};
  d.input_sizes = [](const CaseSpec &c) {
    defs::need_rank(c, 4, 4);
    const auto &s = c.shape;
    return std::vector<std::vector<int64_t>>{{s[0], s[1], s[3]}, {s[0], s[3], s[2]}};
  };
  d.output_sizes = [](const CaseSpec &c) { return std::vector<int64_t>{c.shape[0], c.shape[1], c.shape[2]}; };
  d.batch_axis = [](const CaseSpec &c) {
    const std::string axis = c.param("axis", "matrices");
    if (axis == "matrices") return BatchAxis{{{0, 0}, {1, 0}}, 0, c.shape[0]};
    if (axis == "rows") return BatchAxis{{{0, 1}}, 1, c.shape[1]};
    throw std::invalid_argument("parameter axis='" + axis + "' (expected matrices or rows)");
  };
  d.pick_batch_axis = [](CaseSpec &c, int choice) { c.params["axis"] = choice < 3 ? "matrices" : "rows"; };
  d.gen = [](const Target &t) { return row_cases::gen_matmul(t, {true, 2, {}}); };
  d.reference = [](const OpArgs &a) { return at::bmm(defs::f64(a.tensors.at(0)), defs::f64(a.tensors.at(1))); };
  d.core_bound = [](const OpArgs &a) { return defs::matmul_core(a.tensors.at(0), a.tensors.at(1), true); };
  d.out_dtype = [](const OpArgs &a) { return a.tensors.back().scalar_type(); };
  return d;
}

}  // namespace detfuzz
