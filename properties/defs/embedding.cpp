// embedding: out[T, H] = weight[V, H][ids[T]] (ids int64 in [0, V)); the batch is the ids, the
// table is shared by every row. Accuracy: a copy, so core = 0.
#include "properties/defs/defs.h"

namespace detfuzz {

OpDef embedding_def() {
  OpDef d;
  d.name = "embedding";
  d.size_names = {"T", "V", "H"};
  d.input_sizes = [](const CaseSpec &c) {
    defs::need_rank(c, 3, 3);
    if (c.shape[1] < 1)
      throw std::invalid_argument("embedding needs a vocabulary of at least 1, got shape '" + c.shape_string() + "'");
    return std::vector<std::vector<int64_t>>{{c.shape[1], c.shape[2]}, {c.shape[0]}};
  };
  d.output_sizes = [](const CaseSpec &c) { return std::vector<int64_t>{c.shape[0], c.shape[2]}; };
  d.batch_axis = [](const CaseSpec &c) { return BatchAxis{{{1, 0}}, 0, c.shape[0]}; };
  d.input_dtype = [](size_t t) { return t == 1 ? std::optional<at::ScalarType>(at::kLong) : std::nullopt; };
  d.index_range = [](const CaseSpec &c, size_t t) -> int64_t { return t == 1 ? std::max<int64_t>(1, c.shape[1]) : 0; };
  d.gen = [](const Target &t) {
    return row_cases::gen_tokens(t, [](const row_cases::TokenDraw &r) {
      return std::vector<int64_t>{r.tokens, r.vocab, r.width};
    });
  };
  d.reference = [](const OpArgs &a) {
    return defs::f64(a.tensors.at(0)).index_select(0, a.tensors.at(1).to(at::kCPU, at::kLong));
  };
  d.core_bound = [](const OpArgs &a) {
    return at::zeros({a.tensors.at(1).size(0), a.tensors.at(0).size(1)}, at::TensorOptions().dtype(at::kDouble));
  };
  d.out_dtype = [](const OpArgs &a) { return a.tensors.front().scalar_type(); };
  return d;
}

}  // namespace detfuzz
