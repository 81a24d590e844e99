// mean: x of rank 1..4 over dims (param dims, e.g. 1.2; empty: every dim), keepdim; integers are
// promoted to float32. The batch is the first dim that is not reduced.
//
// Accuracy: core = (n + 2) u mean(|x|) + tiny, n the reduced element count (an empty mean is NaN).
#include "properties/defs/defs.h"

#include <ATen/WrapDimUtilsMulti.h>

namespace detfuzz {
namespace {

std::vector<int64_t> mean_dims(const at::Tensor &x, at::IntArrayRef dims) {
  if (!dims.empty()) return dims.vec();
  std::vector<int64_t> all(static_cast<size_t>(x.dim()));
  for (int64_t d = 0; d < x.dim(); ++d) all[static_cast<size_t>(d)] = d;
  return all;
}

// The reduced element count.
int64_t mean_count(const at::Tensor &x, at::IntArrayRef dims) {
  const auto reduced = at::dim_list_to_bitset(dims, x.dim());
  int64_t n = 1;
  for (int64_t d = 0; d < x.dim(); ++d)
    if (dims.empty() || reduced[d]) n *= x.size(d);
  return n;
}

}  // namespace

OpDef mean_def() {
  OpDef d;
  d.name = "mean";
  d.size_names = {"D0", "D1", "..."};
  d.input_sizes = [](const CaseSpec &c) {
    defs::need_rank(c, 1, 4);
    return std::vector<std::vector<int64_t>>{c.shape};
  };
  d.batch_axis = [](const CaseSpec &c) {
    const int64_t rank = c.shape.size();
    std::vector<int64_t> reduced;
    for (int64_t dim : defs::parse_dims(c.param("dims"))) reduced.push_back(defs::normalized_dim(dim, rank, "dims"));
    if (reduced.empty())
      for (int64_t dim = 0; dim < rank; ++dim) reduced.push_back(dim);
    return defs::first_unreduced_axis(c, reduced, c.param_int("keepdim", 0) == 0);
  };
  d.read_attributes = [](const CaseSpec &c, OpArgs &a) {
    a.dims = defs::parse_dims(c.param("dims"));
    a.keepdim = c.param_int("keepdim", 0) != 0;
  };
  d.gen = [](const Target &t) {
    return row_cases::gen_reduction(t, [](CaseSpec &c, const row_cases::ReductionDraw &r) {
      std::string dims = std::to_string(r.shown);
      // A second reduced dim, when the rank leaves a batch dim beside it.
      if (r.multi && r.rank == 3) dims += "." + std::to_string((r.reduce_at + 1) % 3);
      c.params["dims"] = dims;
      c.params["keepdim"] = r.keepdim ? "1" : "0";
    });
  };
  d.reference = [](const OpArgs &a) {
    const at::Tensor &x = a.tensors.at(0);
    return at::mean(defs::f64(x), mean_dims(x, a.dims), a.keepdim);
  };
  d.core_bound = [](const OpArgs &a) {
    const at::Tensor &x = a.tensors.at(0);
    const double n = static_cast<double>(mean_count(x, a.dims));
    const at::Tensor mean_abs = at::mean(defs::f64(x).abs(), mean_dims(x, a.dims), a.keepdim);
    return unbounded_where_huge(mean_abs * n, mean_abs * ((n + 2) * kUnitRoundoffF32) + kTinyF32);
  };
  d.out_dtype = [](const OpArgs &a) {
    const at::ScalarType in = a.tensors.back().scalar_type();
    return a.out_dtype ? *a.out_dtype : at::isFloatingType(in) ? in : at::kFloat;
  };
  d.bench = defs::row_reduction_bench("mean", true);
  return d;
}

}  // namespace detfuzz
