#include "properties/generators.h"

#include "properties/row_properties.h"

#include <algorithm>

namespace detfuzz {
namespace {

// Sizes kernels get wrong: tiny, primes, powers of two and their neighbours (tile edges).
const std::vector<int64_t> &edge_sizes() {
  static const std::vector<int64_t> e = {1,  2,  3,  5,   7,   8,   13,  16,  17,  31,  32,  33,  63,  64,  65, 97,
                                         127, 128, 129, 191, 255, 256, 257, 383, 511, 512, 513, 1023, 1024, 1025, 4095, 4096, 4097};
  return e;
}

rc::Gen<std::string> gen_dist() {
  return shrinking_choice<std::string>({{5, "normal"}, {2, "uniform"}, {1, "linspace"}, {1, "wide"}, {1, "special"}});
}

rc::Gen<char> gen_layout_code() { return shrinking_choice<char>({{6, 'c'}, {2, 't'}, {1, 'p'}, {1, 'g'}}); }

rc::Gen<std::string> gen_layout(size_t n) {
  return rc::gen::map(rc::gen::container<std::vector<char>>(n, gen_layout_code()),
                      [](const std::vector<char> &v) { return std::string(v.begin(), v.end()); });
}

// Raw slice parameters; clamped into the batch when the case is built (see slice_params).
struct SliceRaw {
  int64_t i, len, offset, tail;
  uint64_t perm;
  int axis_choice;  // bmm: 0..2 the batch of matrices, 3 the rows of each matrix
};

rc::Gen<SliceRaw> gen_slice_raw() {
  return rc::gen::apply(
      [](int64_t i, int64_t len, int64_t o, int64_t tail, uint64_t perm, int axis) { return SliceRaw{i, len, o, tail, perm, axis}; },
      rc::gen::inRange<int64_t>(0, 512), rc::gen::inRange<int64_t>(1, 512), rc::gen::inRange<int64_t>(0, 64),
      rc::gen::inRange<int64_t>(0, 64), rc::gen::inRange<uint64_t>(0, 1u << 30), rc::gen::inRange(0, 4));
}

// Property parameters in terms of the case's actual batch size.
void add_property_params(CaseSpec &c, const SliceRaw &r) {
  if (c.property == "repeat" || c.property == "variant_agree" || c.property == "accuracy") return;
  if (c.op == "bmm") c.params["axis"] = r.axis_choice < 3 ? "matrices" : "rows";
  const int64_t batch = row_batch_axis(c).size;
  const int64_t i = batch == 0 ? 0 : std::min(r.i, batch - 1);
  const int64_t j = batch == 0 ? 0 : std::min(batch, i + r.len);
  c.params["i"] = std::to_string(i);
  c.params["j"] = std::to_string(j);
  if (c.property == "batch_compose") {
    c.params["o"] = std::to_string(r.offset);
    c.params["tail"] = std::to_string(r.tail);
  }
  if (c.property == "permute") c.params["perm"] = std::to_string(r.perm);
}

CaseSpec base_case(const Target &t, std::vector<int64_t> shape, std::string layout, std::string dist, uint64_t seed) {
  CaseSpec c;
  c.op = t.op;
  c.impl = t.impl;
  c.property = t.property;
  c.backend = t.backend;
  c.dtype = t.dtype;
  c.shape = std::move(shape);
  c.layout = std::move(layout);
  c.dist = std::move(dist);
  c.seed = seed;
  return c;
}

rc::Gen<CaseSpec> gen_matmul_case(const Target &t, const SizeLimits &lim) {
  const bool batched = t.op == "bmm";
  const size_t n_inputs = t.op == "addmm" ? 3 : 2;
  return rc::gen::apply(
      [t, batched](int64_t b, int64_t m, int64_t n, int64_t k, std::string layout, std::string dist, uint64_t seed,
                   SliceRaw raw, int bias_rank, int scalars) {
        CaseSpec c = base_case(t, batched ? std::vector<int64_t>{b, m, n, k} : std::vector<int64_t>{m, n, k}, layout, dist, seed);
        if (t.op == "addmm") {
          c.params["bias"] = std::to_string(bias_rank);
          // alpha/beta: 1/1 most of the time, else values that are not powers of two, and beta 0.
          static const double alphas[] = {1.0, 0.75, -1.5, 1.0};
          static const double betas[] = {1.0, 0.5, 1.0, 0.0};
          c.params["alpha"] = double_to_hex(alphas[scalars]);
          c.params["beta"] = double_to_hex(betas[scalars]);
        }
        add_property_params(c, raw);
        return c;
      },
      // bmm: each of the B products is half the size of an mm case.
      gen_dim(1, lim.batch), gen_dim(1, batched ? lim.rows / 2 : lim.rows), gen_dim(0, batched ? lim.cols / 2 : lim.cols),
      gen_dim(0, batched ? lim.reduce / 2 : lim.reduce), gen_layout(n_inputs), gen_dist(),
      rc::gen::inRange<uint64_t>(0, 1ull << 48), gen_slice_raw(), rc::gen::inRange(1, 3), rc::gen::inRange(0, 4));
}

rc::Gen<CaseSpec> gen_reduction_case(const Target &t, const SizeLimits &lim) {
  // rank 2 or 3: the reduced dim up to lim.reduce, the first up to lim.rows, the middle one small.
  return rc::gen::apply(
      [t](int rank, int64_t d0, int64_t d1, int64_t d2, int which, int multi, bool keepdim, bool negative,
          bool h2f, std::string layout, std::string dist, uint64_t seed, SliceRaw raw) {
        std::vector<int64_t> shape = rank == 3 ? std::vector<int64_t>{d0, d1, d2} : std::vector<int64_t>{d0, d2};
        const int reduce_at = which % rank;
        // The reduced dim gets the long extent.
        std::swap(shape[reduce_at], shape[rank - 1]);
        CaseSpec c = base_case(t, shape, layout, dist, seed);
        const int64_t shown = negative ? reduce_at - rank : reduce_at;
        if (t.op == "log_softmax") {
          c.params["dim"] = std::to_string(shown);
          // libtorch's CPU log_softmax refuses half_to_float: such a case would only ever be an error.
          const bool h2f_refused = t.impl == "torch" && t.backend == Backend::cpu;
          if (h2f && t.dtype != at::kFloat && !h2f_refused) c.params["h2f"] = "1";
        } else {
          std::string dims = std::to_string(shown);
          // A second reduced dim, when the rank leaves a batch dim beside it.
          if (multi && rank == 3) dims += "." + std::to_string((reduce_at + 1) % 3);
          c.params["dims"] = dims;
          c.params["keepdim"] = keepdim ? "1" : "0";
        }
        add_property_params(c, raw);
        return c;
      },
      rc::gen::inRange(2, 4), gen_dim(1, lim.rows), gen_dim(1, 17), gen_dim(0, lim.reduce), rc::gen::inRange(0, 3),
      rc::gen::inRange(0, 2), rc::gen::arbitrary<bool>(), rc::gen::arbitrary<bool>(), rc::gen::arbitrary<bool>(), gen_layout(1),
      gen_dist(), rc::gen::inRange<uint64_t>(0, 1ull << 48), gen_slice_raw());
}

// rms_norm {T, H}, silu_and_mul {T, I}, rope {T, H, D}, embedding {T, V, H}: T tokens (the
// batch), one layout code for the float input (the index inputs are contiguous).
rc::Gen<CaseSpec> gen_transformer_op_case(const Target &t, const SizeLimits &lim) {
  return rc::gen::apply(
      [t](int64_t tokens, int64_t width, int64_t heads, int64_t half_dim, int64_t vocab, std::string layout,
          std::string dist, uint64_t seed, SliceRaw raw, int eps_kind) {
        std::vector<int64_t> shape;
        if (t.op == "rope") shape = {tokens, heads, 2 * half_dim};
        else if (t.op == "embedding") shape = {tokens, vocab, width};
        else shape = {tokens, width};
        CaseSpec c = base_case(t, shape, layout, dist, seed);
        if (t.op == "rms_norm" && eps_kind) c.params["eps"] = double_to_hex(eps_kind == 1 ? 1e-5 : 0.0);
        add_property_params(c, raw);
        return c;
      },
      gen_dim(0, lim.rows), gen_dim(1, lim.reduce), gen_dim(1, 9), gen_dim(1, 128), gen_dim(1, 300), gen_layout(1),
      gen_dist(), rc::gen::inRange<uint64_t>(0, 1ull << 48), gen_slice_raw(), rc::gen::inRange(0, 3));
}

}  // namespace

std::string Target::name() const { return op + "/" + impl + "/" + property + "/" + dtype_name(dtype); }

SizeLimits size_limits(Backend b) {
  if (b == Backend::cpu) return {256, 256, 512, 6};
  return {1100, 2100, 2100, 8};  // bounded by the host-side data generation and float64 reference
}

rc::Gen<int64_t> gen_dim(int64_t lo, int64_t hi) {
  std::vector<int64_t> edges;
  if (lo == 0) edges.push_back(0);  // empty dimensions
  for (int64_t e : edge_sizes())
    if (e >= lo && e <= hi) edges.push_back(e);
  // kind 0: any size in range; kind 1: an edge size (ascending, so it shrinks toward small ones).
  const int kinds = edges.empty() ? 1 : 2;
  return rc::gen::apply(
      [edges](int kind, int64_t any, size_t edge) { return kind == 0 ? any : edges[edge]; }, rc::gen::inRange(0, kinds),
      rc::gen::inRange<int64_t>(lo, hi + 1), rc::gen::inRange<size_t>(0, std::max<size_t>(edges.size(), 1)));
}

rc::Gen<CaseSpec> gen_row_case(const Target &t) {
  const SizeLimits lim = size_limits(t.backend);
  if (t.op == "mm" || t.op == "addmm" || t.op == "bmm") return gen_matmul_case(t, lim);
  if (t.op == "rms_norm" || t.op == "silu_and_mul" || t.op == "rope" || t.op == "embedding")
    return gen_transformer_op_case(t, lim);
  return gen_reduction_case(t, lim);
}

}  // namespace detfuzz
