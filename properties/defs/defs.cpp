// The built-in row ops' definitions, one registration line each, and the helpers their files share.
#include "properties/defs/defs.h"

#include <algorithm>
#include <sstream>

namespace detfuzz {
std::vector<OpDef> builtin_op_defs() {
  return {mm_def(),   addmm_def(),        bmm_def(),       log_softmax_def(), mean_def(),      rms_norm_def(),
          rope_def(), silu_and_mul_def(), embedding_def(), scaled_mm_def(),   fused_moe_def(), fused_moe_fp8_def()};
}

std::string OpDef::shape_text() const {
  std::string s;
  for (const auto &n : size_names) s += (s.empty() ? "" : "x") + n;
  return s;
}

namespace defs {

void need_rank(const CaseSpec &c, size_t lo, size_t hi) {
  if (c.shape.size() < lo || c.shape.size() > hi)
    throw std::invalid_argument(c.op + " needs a shape of " + std::to_string(lo) +
                                (lo == hi ? "" : ".." + std::to_string(hi)) + " sizes, got '" + c.shape_string() + "'");
}

int64_t normalized_dim(int64_t d, int64_t rank, const std::string &what) {
  if (d < -rank || d >= rank)
    throw std::invalid_argument(what + "=" + std::to_string(d) + " is out of range for rank " + std::to_string(rank));
  return d < 0 ? d + rank : d;
}

std::vector<int64_t> parse_dims(const std::string &s) {
  std::vector<int64_t> dims;
  std::stringstream ss(s);
  std::string part;
  while (std::getline(ss, part, '.')) {
    if (part.empty()) continue;
    try {
      dims.push_back(std::stoll(part));
    } catch (const std::exception &) {
      throw std::invalid_argument("dims '" + s + "' is not integers joined by '.'");
    }
  }
  return dims;
}

at::Tensor f64(const at::Tensor &t) { return t.to(at::kDouble); }

at::Tensor matmul_core(const at::Tensor &a, const at::Tensor &b, bool batched) {
  const double k = static_cast<double>(a.size(-1));
  const at::Tensor magnitude = batched ? at::bmm(f64(a).abs(), f64(b).abs()) : at::mm(f64(a).abs(), f64(b).abs());
  return unbounded_where_huge(magnitude, magnitude * ((k + 2) * kUnitRoundoffF32) + (k + 2) * kTinyF32);
}

BatchAxis first_unreduced_axis(const CaseSpec &c, const std::vector<int64_t> &reduced, bool drop_reduced) {
  const int64_t rank = c.shape.size();
  int64_t batch_dim = -1;
  for (int64_t d = 0; d < rank && batch_dim < 0; ++d)
    if (std::find(reduced.begin(), reduced.end(), d) == reduced.end()) batch_dim = d;
  if (batch_dim < 0) throw std::invalid_argument(c.op + " case reduces every dim: it has no batch dim to slice");
  int64_t out_dim = batch_dim;
  if (drop_reduced) out_dim -= std::count_if(reduced.begin(), reduced.end(), [&](int64_t d) { return d < batch_dim; });
  return BatchAxis{{{0, static_cast<int>(batch_dim)}}, static_cast<int>(out_dim), c.shape[batch_dim]};
}

std::vector<BenchShape> matmul_bench_shapes(const std::string &op) {
  std::vector<BenchShape> shapes;
  const std::pair<int64_t, int64_t> nk[] = {{4096, 4096}, {14336, 4096}, {4096, 14336},
                                            {1024, 8192}, {6144, 4096},  {128256, 4096}};
  for (auto [n, k] : nk)
    for (int64_t m : {1, 8, 32, 128, 512, 2048, 8192}) shapes.push_back({op, m, n, k});
  return shapes;
}

BenchDef matmul_bench() {
  BenchDef b;
  b.shapes = matmul_bench_shapes("mm");
  b.uses_k = true;
  b.baseline = "cublas";
  b.dispatch_row = true;
  b.args = [](const BenchShape &s, at::ScalarType dtype, at::Generator &gen) {
    const auto opts = at::TensorOptions().device(at::kCUDA).dtype(at::kFloat);
    OpArgs a;
    a.tensors = {at::randn({s.m, s.k}, gen, opts).to(dtype), at::randn({s.k, s.n}, gen, opts).to(dtype)};
    return a;
  };
  b.flops = [](const BenchShape &s) { return 2.0 * s.m * s.n * s.k; };
  b.bytes = [](const BenchShape &s, at::ScalarType dtype) {
    return static_cast<double>(c10::elementSize(dtype)) * (s.m * s.k + s.k * s.n + s.m * s.n);
  };
  b.input_bytes = [](const BenchShape &s, at::ScalarType dtype) {
    return static_cast<double>(c10::elementSize(dtype)) * (s.m * s.k + s.k * s.n);
  };
  b.against_copy = [](const BenchShape &s) { return s.m <= 32; };
  return b;
}

BenchDef row_reduction_bench(const std::string &op, bool reduces_to_rows) {
  BenchDef b;
  for (auto [rows, cols] : {std::pair<int64_t, int64_t>{1024, 32768}, {4096, 32768}, {1024, 131072}})
    b.shapes.push_back({op, rows, cols, 0});
  b.args = [](const BenchShape &s, at::ScalarType dtype, at::Generator &gen) {
    const auto opts = at::TensorOptions().device(at::kCUDA).dtype(at::kFloat);
    OpArgs a;
    a.tensors = {at::randn({s.m, s.n}, gen, opts).to(dtype)};
    a.dim = 1;
    a.dims = {1};
    return a;
  };
  b.flops = [](const BenchShape &) { return 0.0; };
  b.bytes = [reduces_to_rows](const BenchShape &s, at::ScalarType dtype) {
    const double elem = static_cast<double>(c10::elementSize(dtype));
    // mean of an integer or 16-bit tensor: a float32 (or the dtype's) row result.
    const double out_elem = reduces_to_rows ? (dtype == at::kFloat ? 4 : elem) : elem;
    return elem * s.m * s.n + out_elem * (reduces_to_rows ? s.m : s.m * s.n);
  };
  b.input_bytes = [](const BenchShape &s, at::ScalarType dtype) {
    return static_cast<double>(c10::elementSize(dtype)) * s.m * s.n;
  };
  b.against_copy = [](const BenchShape &) { return false; };
  return b;
}

}  // namespace defs
}  // namespace detfuzz
