// mm: out[M, N] = a[M, K] @ b[K, N]; the batch is the rows of a (and of out).
//
// Accuracy: a float32 sum of K products passes each term through at most K roundings in a blocked
// sum (ops/cpu/fixed_order.h), so core = (K + 2) u sum_k |a_ik||b_kj| + (K + 2) tiny.
#include "properties/defs/defs.h"

namespace detfuzz {

OpDef mm_def() {
  OpDef d;
  d.name = "mm";
  d.size_names = {"M", "N", "K"};
  d.input_sizes = [](const CaseSpec &c) {
    defs::need_rank(c, 3, 3);
    const auto &s = c.shape;
    return std::vector<std::vector<int64_t>>{{s[0], s[2]}, {s[2], s[1]}};
  };
  d.output_sizes = [](const CaseSpec &c) { return std::vector<int64_t>{c.shape[0], c.shape[1]}; };
  d.batch_axis = [](const CaseSpec &c) { return BatchAxis{{{0, 0}}, 0, c.shape[0]}; };
  d.gen = [](const Target &t) { return row_cases::gen_matmul(t, {false, 2, {}}); };
  d.reference = [](const OpArgs &a) { return at::mm(defs::f64(a.tensors.at(0)), defs::f64(a.tensors.at(1))); };
  d.core_bound = [](const OpArgs &a) { return defs::matmul_core(a.tensors.at(0), a.tensors.at(1), false); };
  d.out_dtype = [](const OpArgs &a) { return a.tensors.back().scalar_type(); };
  d.bench = defs::matmul_bench();
  return d;
}

}  // namespace detfuzz
