#include "properties/rows/row_cases.h"

#include <algorithm>

namespace detfuzz::row_cases {

rc::Gen<std::string> gen_dist() {
  return shrinking_choice<std::string>({{5, "normal"}, {2, "uniform"}, {1, "linspace"}, {1, "wide"}, {1, "special"}});
}

namespace {
rc::Gen<char> gen_layout_code() { return shrinking_choice<char>({{6, 'c'}, {2, 't'}, {1, 'p'}, {1, 'g'}}); }
}  // namespace

rc::Gen<std::string> gen_layout(size_t n) {
  return rc::gen::map(rc::gen::container<std::vector<char>>(n, gen_layout_code()),
                      [](const std::vector<char> &v) { return std::string(v.begin(), v.end()); });
}

rc::Gen<SliceRaw> gen_slice_raw() {
  return rc::gen::apply([](int64_t i, int64_t len, int64_t o, int64_t tail, uint64_t perm,
                           int axis) { return SliceRaw{i, len, o, tail, perm, axis}; },
                        rc::gen::inRange<int64_t>(0, 512), rc::gen::inRange<int64_t>(1, 512),
                        rc::gen::inRange<int64_t>(0, 64), rc::gen::inRange<int64_t>(0, 64),
                        rc::gen::inRange<uint64_t>(0, 1u << 30), rc::gen::inRange(0, 4));
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

bool needs_batch(const std::string &property) {
  return property == "batch_slice" || property == "batch_compose" || property == "permute";
}

void add_property_params(CaseSpec &c, const SliceRaw &r, const OpDef &def) {
  if (!needs_batch(c.property)) return;
  if (def.pick_batch_axis) def.pick_batch_axis(c, r.axis_choice);
  const int64_t batch = def.batch_axis(c).size;
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

namespace {
const OpDef &def_of(const Target &t) {
  const OpDef *d = find_op_def(t.op);
  if (!d) throw std::invalid_argument("unknown op '" + t.op + "'");
  return *d;
}
}  // namespace

rc::Gen<CaseSpec> gen_matmul(const Target &t, const MatmulKind &kind) {
  const SizeLimits lim = size_limits(t.backend);
  const OpDef def = def_of(t);
  const bool batched = kind.batched;
  return rc::gen::apply(
      [t, kind, def](int64_t b, int64_t m, int64_t n, int64_t k, std::string layout, std::string dist, uint64_t seed,
                     SliceRaw raw, int bias_rank, int scalars) {
        CaseSpec c = base_case(t, kind.batched ? std::vector<int64_t>{b, m, n, k} : std::vector<int64_t>{m, n, k},
                               layout, dist, seed);
        if (kind.attributes) kind.attributes(c, bias_rank, scalars);
        add_property_params(c, raw, def);
        return c;
      },
      // bmm: each of the B products is half the size of an mm case.
      gen_dim(1, lim.batch), gen_dim(1, batched ? lim.rows / 2 : lim.rows),
      gen_dim(0, batched ? lim.cols / 2 : lim.cols), gen_dim(0, batched ? lim.reduce / 2 : lim.reduce),
      gen_layout(kind.inputs), gen_dist(), rc::gen::inRange<uint64_t>(0, 1ull << 48), gen_slice_raw(),
      rc::gen::inRange(1, 3), rc::gen::inRange(0, 4));
}

rc::Gen<CaseSpec> gen_reduction(const Target &t, std::function<void(CaseSpec &, const ReductionDraw &)> attributes) {
  const SizeLimits lim = size_limits(t.backend);
  const OpDef def = def_of(t);
  // rank 2 or 3: the reduced dim up to lim.reduce, the first up to lim.rows, the middle one small.
  return rc::gen::apply(
      [t, attributes, def](int rank, int64_t d0, int64_t d1, int64_t d2, int which, int multi, bool keepdim,
                           bool negative, bool h2f, std::string layout, std::string dist, uint64_t seed, SliceRaw raw) {
        std::vector<int64_t> shape = rank == 3 ? std::vector<int64_t>{d0, d1, d2} : std::vector<int64_t>{d0, d2};
        const int reduce_at = which % rank;
        // The reduced dim gets the long extent.
        std::swap(shape[reduce_at], shape[rank - 1]);
        CaseSpec c = base_case(t, shape, layout, dist, seed);
        const int64_t shown = negative ? reduce_at - rank : reduce_at;
        attributes(c, ReductionDraw{rank, reduce_at, shown, multi != 0, keepdim, h2f});
        add_property_params(c, raw, def);
        return c;
      },
      rc::gen::inRange(2, 4), gen_dim(1, lim.rows), gen_dim(1, 17), gen_dim(0, lim.reduce), rc::gen::inRange(0, 3),
      rc::gen::inRange(0, 2), rc::gen::arbitrary<bool>(), rc::gen::arbitrary<bool>(), rc::gen::arbitrary<bool>(),
      gen_layout(1), gen_dist(), rc::gen::inRange<uint64_t>(0, 1ull << 48), gen_slice_raw());
}

rc::Gen<CaseSpec> gen_tokens(const Target &t, std::function<std::vector<int64_t>(const TokenDraw &)> shape,
                             std::function<void(CaseSpec &, const TokenDraw &)> attributes) {
  const SizeLimits lim = size_limits(t.backend);
  const OpDef def = def_of(t);
  return rc::gen::apply(
      [t, shape, attributes, def](int64_t tokens, int64_t width, int64_t heads, int64_t half_dim, int64_t vocab,
                                  std::string layout, std::string dist, uint64_t seed, SliceRaw raw, int eps_kind) {
        const TokenDraw d{tokens, width, heads, half_dim, vocab, eps_kind};
        CaseSpec c = base_case(t, shape(d), layout, dist, seed);
        if (attributes) attributes(c, d);
        add_property_params(c, raw, def);
        return c;
      },
      gen_dim(0, lim.rows), gen_dim(1, lim.reduce), gen_dim(1, 9), gen_dim(1, 128), gen_dim(1, 300), gen_layout(1),
      gen_dist(), rc::gen::inRange<uint64_t>(0, 1ull << 48), gen_slice_raw(), rc::gen::inRange(0, 3));
}

}  // namespace detfuzz::row_cases
