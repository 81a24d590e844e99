#include "properties/attention/attention_properties.h"
#include "properties/attention/attention_bench.h"
#include "properties/family.h"

#include "properties/counter_data.h"
#include "properties/data.h"
#include "properties/streams.h"

#include "ops/attention/dispatcher_impl.h"
#include "ops/attention/kv_cache.h"
#include "ops/attention/paged_attention.h"

#include <algorithm>
#include <cmath>
#include <optional>
#include <sstream>
#include <stdexcept>

namespace detfuzz {
namespace attention_case {

namespace {

std::vector<int64_t> parse_lengths(const CaseSpec &c, const std::string &key) {
  const std::string s = c.param(key);
  if (s.empty()) throw std::invalid_argument("paged_attention case: missing parameter " + key + "=");
  std::vector<int64_t> out;
  std::stringstream ss(s);
  std::string part;
  while (std::getline(ss, part, '.')) {
    if (part.empty() || part.find_first_not_of("0123456789") != std::string::npos || part.size() > 9)
      throw std::invalid_argument("paged_attention case: " + key + "='" + s +
                                  "' is not non-negative integers joined by '.'");
    out.push_back(std::stoll(part));
  }
  return out;
}

}  // namespace

std::string join(const std::vector<int64_t> &v) {
  std::string s;
  for (size_t i = 0; i < v.size(); ++i) s += (i ? "." : "") + std::to_string(v[i]);
  return s;
}

float value(uint64_t seed, uint64_t tensor, uint64_t index) {
  return keyed_value(counter_data::tensor_key(seed, tensor), index);
}

float keyed_value(uint64_t key, uint64_t index) { return counter_data::irwin_hall_value(key, index); }

Geometry geometry(const CaseSpec &c) {
  if (c.shape.size() != 4)
    throw std::invalid_argument("paged_attention case: shape must be {H_q, H_kv, D, page_size}, got " +
                                c.shape_string());
  Geometry g{c.shape[0], c.shape[1], c.shape[2], c.shape[3]};
  if (g.h_q <= 0 || g.h_kv <= 0 || g.head_dim <= 0 || g.page_size <= 0 || g.h_q % g.h_kv != 0)
    throw std::invalid_argument("paged_attention case: shape " + c.shape_string() +
                                " needs positive sizes and H_q a multiple of H_kv");
  return g;
}

std::vector<Seq> sequences(const CaseSpec &c) {
  const auto q = parse_lengths(c, "q"), kv = parse_lengths(c, "kv");
  if (q.size() != kv.size() || q.empty())
    throw std::invalid_argument("paged_attention case: q= and kv= must list the same number (>0) of sequences");
  std::vector<Seq> out;
  for (size_t i = 0; i < q.size(); ++i) {
    if (q[i] < 1 || q[i] > kv[i])
      throw std::invalid_argument("paged_attention case: sequence " + std::to_string(i) + " has q=" +
                                  std::to_string(q[i]) + " kv=" + std::to_string(kv[i]) + " (need 1 <= q <= kv)");
    out.push_back({static_cast<int64_t>(i), q[i], kv[i], 0});
  }
  return out;
}

SequenceRows::SequenceRows(const CaseSpec &c)
    : seed_(c.seed), width_{0, 0, 0}, dtype_(c.dtype), device_(device_of(c.backend)) {
  const Geometry g = geometry(c);
  width_[0] = g.h_q * g.head_dim;
  width_[1] = width_[2] = g.h_kv * g.head_dim;
}

at::Tensor SequenceRows::rows(int64_t uid, int which, int64_t from, int64_t to) {
  Made &m = made_[{uid, which}];
  if (!m.rows.defined() || from < m.from || to > m.to) {
    // Make the union of what was asked so far (a check asks for its largest batch first).
    const int64_t lo = m.rows.defined() ? std::min(from, m.from) : from,
                  hi = m.rows.defined() ? std::max(to, m.to) : to;
    const uint64_t key = counter_data::tensor_key(seed_, 3 * static_cast<uint64_t>(uid) + static_cast<uint64_t>(which));
    std::vector<uint64_t> keys(static_cast<size_t>(hi - lo), key), first;
    first.reserve(keys.size());
    for (int64_t pos = lo; pos < hi; ++pos) first.push_back(static_cast<uint64_t>(pos * width_[which]));
    m = {lo, hi, keyed_rows(keys, first, width_[which], device_).to(dtype_)};
  }
  return m.rows.slice(0, from - m.from, to - m.from);
}

Batch build(const CaseSpec &c, const std::vector<Seq> &seqs, int64_t place_seed, int64_t extra_pages,
            bool share_physical, SequenceRows *rows) {
  using namespace attention;
  const Geometry g = geometry(c);
  const int64_t BS = g.page_size, D = g.head_dim;
  const int64_t S = static_cast<int64_t>(seqs.size());
  std::vector<int64_t> pages(S);
  int64_t needed = 0, max_pages = 1;
  for (int64_t i = 0; i < S; ++i) {
    pages[i] = (seqs[i].kv_len + BS - 1) / BS;
    max_pages = std::max(max_pages, pages[i]);
    needed += pages[i] - (share_physical && i > 0 ? seqs[i].share_pages : 0);
  }
  const int64_t num_blocks = std::max<int64_t>(1, needed + extra_pages);

  // Physical pages: the allocator's order, or a seeded shuffle of the whole pool.
  BlockAllocator alloc(num_blocks);
  std::vector<int64_t> order = alloc.allocate(num_blocks);
  if (place_seed != 0) {
    uint64_t h = splitmix64(static_cast<uint64_t>(place_seed) ^ 0x5bd1e995ull);
    for (int64_t i = num_blocks - 1; i > 0; --i) {
      h = splitmix64(h);
      std::swap(order[i], order[static_cast<int64_t>(h % static_cast<uint64_t>(i + 1))]);
    }
  }
  size_t next = 0;
  std::vector<std::vector<int64_t>> blocks(S);
  for (int64_t i = 0; i < S; ++i)
    for (int64_t j = 0; j < pages[i]; ++j)
      blocks[i].push_back(share_physical && i > 0 && j < seqs[i].share_pages ? blocks[0][j] : order[next++]);

  // Tokens: every cached token of every sequence (a shared page is written once, by sequence 0),
  // as runs of rows of one sequence's K and V; the query rows are each sequence's last q_len.
  SequenceRows own(c);
  SequenceRows &data = rows ? *rows : own;
  int64_t tokens = 0, t_q = 0;
  for (int64_t i = 0; i < S; ++i) {
    tokens += seqs[i].kv_len - (share_physical && i > 0 ? seqs[i].share_pages * BS : 0);
    t_q += seqs[i].q_len;
  }
  auto slots = at::empty({tokens}, at::kLong);
  int64_t *sp = slots.data_ptr<int64_t>();
  std::vector<at::Tensor> k_runs, v_runs, q_runs;
  int64_t t = 0, r = 0;
  Batch b;
  for (int64_t i = 0; i < S; ++i) {
    const Seq &s = seqs[i];
    // A shared prefix holds sequence 0's tokens (stored again unless share_physical).
    const int64_t prefix = i > 0 ? std::min(s.kv_len, s.share_pages * BS) : 0;
    auto run = [&](int64_t uid, int64_t from, int64_t to) {
      if (from >= to) return;
      for (int64_t pos = from; pos < to; ++pos) sp[t++] = slot_of(blocks[i], BS, pos);
      k_runs.push_back(data.rows(uid, 1, from, to));
      v_runs.push_back(data.rows(uid, 2, from, to));
    };
    if (!share_physical) run(seqs[0].uid, 0, prefix);
    run(s.uid, prefix, s.kv_len);
    b.row_begin.push_back(r);
    q_runs.push_back(data.rows(s.uid, 0, s.kv_len - s.q_len, s.kv_len));
    r += s.q_len;
  }
  const at::Device dev = device_of(c.backend);
  const at::Tensor kh = at::cat(k_runs, 0).view({tokens, g.h_kv, D});
  const at::Tensor vh = at::cat(v_runs, 0).view({tokens, g.h_kv, D});
  const at::Tensor qh = at::cat(q_runs, 0).view({t_q, g.h_q, D});
  b.row_begin.push_back(r);

  KVCacheConfig cfg;
  cfg.num_blocks = num_blocks;
  cfg.block_size = BS;
  cfg.num_kv_heads = g.h_kv;
  cfg.head_dim = D;
  cfg.dtype = c.dtype;
  cfg.device = dev;
  KVCache cache(cfg);
  cache.set_kv(0, slots, kh, vh);
  std::vector<int64_t> ql, kl;
  for (const auto &s : seqs) {
    ql.push_back(s.q_len);
    kl.push_back(s.kv_len);
  }
  const AttnMetadata meta = make_metadata(ql, kl, blocks, max_pages, dev);
  b.args.tensors = {qh, cache.k(0), cache.v(0), meta.cu_seqlens_q, meta.seq_lens_kv, meta.block_table};
  b.args.alpha = c.param_double("alpha", 0.0);
  b.num_blocks = num_blocks;
  return b;
}

}  // namespace attention_case

using namespace attention_case;

std::vector<std::string> attention_properties() {
  return {"seq_alone_vs_batched", "block_placement", "chunked_prefill", "decode_vs_prefill", "repeat", "accuracy"};
}

namespace {

at::Tensor rows(const at::Tensor &out, const Batch &b, int64_t seq, int64_t from = 0, int64_t count = -1) {
  const int64_t begin = b.row_begin[seq] + from;
  const int64_t end = count < 0 ? b.row_begin[seq + 1] : begin + count;
  return out.slice(0, begin, end);  // left where it is: CUDA rows are compared on the device
}

double dtype_eps(at::ScalarType t) { return t == at::kBFloat16 ? 0x1.0p-7 : t == at::kHalf ? 0x1.0p-10 : 0x1.0p-20; }

// The impl's output against the float64 reference: every element within 2 eps (|ref| + 1), eps
// from dtype_eps (the output's own rounding to bf16 or fp16 costs eps / 2 of that).
Verdict accuracy_verdict(const at::Tensor &out, const at::Tensor &ref, at::ScalarType dtype) {
  if (out.sizes() != ref.sizes() || out.scalar_type() != dtype) {
    std::ostringstream d;
    d << "accuracy: output " << out.sizes() << " " << out.scalar_type() << ", expected " << ref.sizes() << " " << dtype;
    return Verdict::fail({}, d.str());
  }
  const auto o = out.to(at::kCPU).to(at::kDouble).contiguous().view(-1);
  const auto e = ref.to(at::kCPU).contiguous().view(-1);
  const double *op = o.data_ptr<double>(), *ep = e.data_ptr<double>();
  const double eps = dtype_eps(dtype);
  double worst = -1, worst_err = 0, worst_bound = 0;
  int64_t worst_i = -1;
  for (int64_t i = 0; i < o.numel(); ++i) {
    const double err = std::abs(op[i] - ep[i]), bound = 2 * eps * (std::abs(ep[i]) + 1.0);
    const double ratio = std::isfinite(err) ? err / bound : INFINITY;
    if (ratio > worst) worst = ratio, worst_err = err, worst_bound = bound, worst_i = i;
  }
  std::ostringstream d;
  d << "accuracy vs the float64 reference over " << o.numel() << " elements: worst |out-ref| " << worst_err << " at "
    << worst_i << " (bound " << worst_bound << ")";
  return worst <= 1.0 ? Verdict::pass({}, d.str()) : Verdict::fail({}, d.str());
}

void require(bool ok, const std::string &what) {
  if (!ok) throw std::invalid_argument("paged_attention case: " + what);
}

// Ours and the baselines from the registry; a qualified name (NS::name) is a user's operator.
std::optional<ImplInfo> attention_impl(const std::string &impl, Backend backend) {
  if (const ImplInfo *i = find_impl("paged_attention", impl, backend)) return *i;
  return paged_attention_dispatcher_impl(impl, backend);
}

}  // namespace

Verdict check_attention_case(const CaseSpec &c) {
  const std::optional<ImplInfo> impl = attention_impl(c.impl, c.backend);
  if (!impl)
    throw std::invalid_argument("paged_attention case: no impl '" + c.impl + "' on backend " + to_string(c.backend));
  if (!impl->supports(c.dtype))
    throw std::invalid_argument("paged_attention case: impl " + c.impl + " does not take " + dtype_name(c.dtype));
  const auto props = attention_properties();
  require(std::find(props.begin(), props.end(), c.property) != props.end(), "unknown property '" + c.property + "'");
  const Geometry g = geometry(c);
  std::vector<Seq> seqs = sequences(c);
  const int64_t S = static_cast<int64_t>(seqs.size());
  const int64_t target = c.param_int("target", 0);
  require(target >= 0 && target < S, "target=" + std::to_string(target) + " out of range");
  const int64_t place = c.param_int("place", 0), extra = c.param_int("pool", 0);
  require(extra >= 0 && extra <= (1 << 20), "pool=" + std::to_string(extra) + " out of range");
  // Q rows and the pages of K and V (the pool's extra pages too), before anything is made.
  double kv_tokens = static_cast<double>(extra) * static_cast<double>(g.page_size), q_rows = 0;
  for (const Seq &s : seqs) {
    kv_tokens +=
        std::ceil(static_cast<double>(s.kv_len) / static_cast<double>(g.page_size)) * static_cast<double>(g.page_size);
    q_rows += static_cast<double>(s.q_len);
  }
  const double element = static_cast<double>(c10::elementSize(c.dtype));
  check_tensors_fit(element * static_cast<double>(g.head_dim) *
                        (q_rows * static_cast<double>(g.h_q) + 2 * kv_tokens * static_cast<double>(g.h_kv)),
                    device_of(c.backend), "paged_attention shape " + c.shape_string() + " with kv=" + c.param("kv"));

  try {
    SequenceRows data(c);  // every build below takes its sequences' rows from here
    auto run = [&](const Batch &b) { return impl->run(b.args); };
    const Seq &tg = seqs[target];
    if (c.property == "seq_alone_vs_batched") {
      const Batch all = build(c, seqs, place, extra, false, &data);
      const Batch alone = build(c, {tg}, place, extra, false, &data);
      return Verdict::from_diff(rows(run(alone), alone, 0), rows(run(all), all, target),
                                "sequence " + std::to_string(target) + " alone vs in a batch of " + std::to_string(S));
    }
    if (c.property == "block_placement") {
      const int64_t share = c.param_int("share", 0), place2 = c.param_int("place2", 0);
      require(share >= 0, "share must be >= 0");
      for (int64_t i = 1; i < S; ++i)
        seqs[i].share_pages =
            std::min({share, seqs[0].kv_len / geometry(c).page_size, seqs[i].kv_len / geometry(c).page_size});
      const Batch a = build(c, seqs, place, extra, false, &data);
      const Batch b = build(c, seqs, place2, extra, true, &data);
      return Verdict::from_diff(run(a), run(b),
                                "whole batch, placement " + std::to_string(place) + " vs " + std::to_string(place2) +
                                    " with " + std::to_string(share) + " shared prefix pages");
    }
    if (c.property == "chunked_prefill") {
      const std::vector<int64_t> chunks = parse_lengths(c, "chunks");
      int64_t sum = 0;
      for (int64_t x : chunks) {
        require(x >= 1, "chunk sizes must be >= 1");
        sum += x;
      }
      require(sum == tg.q_len, "chunks= sum to " + std::to_string(sum) + ", target q is " + std::to_string(tg.q_len));
      const Batch whole = build(c, seqs, place, extra, false, &data);
      const at::Tensor expected = rows(run(whole), whole, target);
      std::vector<at::Tensor> parts;
      int64_t done = 0;
      for (int64_t x : chunks) {
        std::vector<Seq> step = seqs;
        step[target].q_len = x;
        step[target].kv_len = tg.kv_len - tg.q_len + done + x;
        const Batch b = build(c, step, place, extra, false, &data);
        parts.push_back(rows(run(b), b, target));
        done += x;
      }
      return Verdict::from_diff(expected, at::cat(parts, 0),
                                "target rows in one go vs in " + std::to_string(chunks.size()) + " chunks");
    }
    if (c.property == "decode_vs_prefill") {
      const Batch whole = build(c, seqs, place, extra, false, &data);
      const at::Tensor expected = rows(run(whole), whole, target, tg.q_len - 1, 1);
      std::vector<Seq> step = seqs;
      step[target].q_len = 1;
      const Batch dec = build(c, step, place, extra, false, &data);
      return Verdict::from_diff(expected, rows(run(dec), dec, target),
                                "last row of a " + std::to_string(tg.q_len) + "-row prefill vs a decode step over " +
                                    std::to_string(tg.kv_len) + " tokens");
    }
    if (c.property == "repeat") {
      const Batch b = build(c, seqs, place, extra, false, &data);
      return second_run_agrees(
          c.backend, run(b), [&] { return run(b); }, "two runs of the same batch");
    }
    // accuracy
    const Batch b = build(c, seqs, place, extra, false, &data);
    const auto &t = b.args.tensors;
    const at::Tensor ref = attention::paged_attention_reference_f64(t[0], t[1], t[2], t[3], t[4], t[5], b.args.alpha);
    return accuracy_verdict(run(b), ref, c.dtype);
  } catch (const std::invalid_argument &) {
    throw;
  } catch (const std::exception &e) {
    return Verdict::error(std::string(c.impl) + " threw: " + e.what());
  }
}

// ---------------------------------------------------------------------------------------------
// Generators. Everything is drawn through rc::gen::inRange / element / weightedOneOf inside
// gen::exec, so RapidCheck shrinks counts and lengths toward small values and indices toward 0.

namespace {

struct Limits {
  int64_t max_kv, max_q, max_others, pair_budget, max_pool_elems;
};

rc::Gen<int64_t> length_gen(int64_t page, int64_t max_len) {
  std::vector<int64_t> edges;
  for (int64_t v :
       {int64_t{1}, page - 1, page, page + 1, 2 * page, 2 * page + 1, attention::kKvTile - 1, attention::kKvTile,
        attention::kKvTile + 1, attention::kKvSplit - 1, attention::kKvSplit, attention::kKvSplit + 1,
        2 * attention::kKvSplit - 1, 2 * attention::kKvSplit, 2 * attention::kKvSplit + 1})
    if (v >= 1 && v <= max_len && std::find(edges.begin(), edges.end(), v) == edges.end()) edges.push_back(v);
  return rc::gen::weightedOneOf<int64_t>(
      {{3, rc::gen::inRange<int64_t>(1, max_len + 1)}, {2, rc::gen::elementOf(edges)}});
}

}  // namespace

rc::Gen<CaseSpec> gen_attention_case(const std::string &impl, const std::string &property, Backend backend,
                                     at::ScalarType dtype) {
  return rc::gen::exec([=] {
    const bool cuda = backend == Backend::cuda;
    const Limits lim = cuda ? Limits{2048, 256, 64, 40000, 1 << 23} : Limits{600, 48, 64, 12000, 1 << 20};
    CaseSpec c;
    c.op = "paged_attention";
    c.impl = impl;
    c.property = property;
    c.backend = backend;
    c.dtype = dtype;
    c.layout = "c";
    c.dist = "normal";

    const int64_t page = *rc::gen::element<int64_t>(16, 1, 64);
    const int64_t d = cuda ? *rc::gen::element<int64_t>(128, 64, 256) : *rc::gen::element<int64_t>(64, 128);
    const int64_t h_kv = cuda ? *rc::gen::element<int64_t>(1, 2, 4) : *rc::gen::element<int64_t>(1, 2);
    const int64_t group = cuda ? *rc::gen::inRange<int64_t>(1, 9) : *rc::gen::element<int64_t>(1, 2, 4);
    c.shape = {h_kv * group, h_kv, d, page};

    // A sequence is drawn as (kv, kind, q draw); the others come as a RapidCheck container, so
    // shrinking removes sequences one by one (and shortens each) instead of only cutting the tail.
    struct Draw {
      int64_t kv, kind, q;  // kind: 0 decode, 1 prefill chunk, 2 full prefill
    };
    const auto seq_gen = rc::gen::exec([page, lim] {
      const int64_t k = *length_gen(page, lim.max_kv);
      return Draw{k, *rc::gen::inRange<int64_t>(0, 3), *rc::gen::inRange<int64_t>(1, lim.max_q + 1)};
    });
    const Draw target_draw = *seq_gen;
    // seq_alone_vs_batched needs company; the other properties also run on a lone sequence.
    const int min_others = property == "seq_alone_vs_batched" ? 1 : 0;
    auto others_gen = [&](int most) {
      auto g = rc::gen::resize(most, rc::gen::container<std::vector<Draw>>(seq_gen));
      return min_others ? rc::gen::nonEmpty(g) : g;
    };
    const std::vector<Draw> others = *rc::gen::weightedOneOf<std::vector<Draw>>(
        {{4, others_gen(7)}, {1, others_gen(static_cast<int>(lim.max_others))}});

    // Query lengths from the draws, the target first; then keep a CPU case to milliseconds by
    // capping q so that sum(q * kv) stays within the budget.
    const bool needs_rows = property == "chunked_prefill" || property == "decode_vs_prefill";
    int64_t budget = lim.pair_budget;
    std::vector<int64_t> q, kv;
    auto add_seq = [&](const Draw &dr, bool is_target) {
      // Once the budget is spent, later sequences are cut short too (a decode costs kv pairs).
      const int64_t k = is_target ? dr.kv : std::min(dr.kv, std::max<int64_t>(1, budget));
      int64_t ql = dr.kind == 0 ? 1 : dr.kind == 2 ? k : std::min(dr.q, k);
      ql = std::max<int64_t>(1, std::min(ql, std::max<int64_t>(1, budget) / k));
      if (is_target && needs_rows && k >= 2) ql = std::max<int64_t>(ql, 2);
      budget -= ql * k;
      q.push_back(ql);
      kv.push_back(k);
    };
    add_seq(target_draw, true);
    for (const auto &dr : others) add_seq(dr, false);
    const int64_t n_others = static_cast<int64_t>(others.size());
    // The target's place in the batch: rotate it to a random index.
    const int64_t target = *rc::gen::inRange<int64_t>(0, n_others + 1);
    std::rotate(q.begin(), q.end() - target, q.end());
    std::rotate(kv.begin(), kv.end() - target, kv.end());
    c.params["q"] = attention_case::join(q);
    c.params["kv"] = attention_case::join(kv);
    c.params["target"] = std::to_string(target);
    // A quarter of the cases keep the allocator's order (place 0: a sequence's pages consecutive,
    // which the Hopper kernel boxes whole by TMA), the others a shuffled pool.
    c.params["place"] = std::to_string(*rc::gen::inRange<int64_t>(0, 4) == 0 ? 0 : *rc::gen::inRange<int64_t>(1, 1000));
    const int64_t page_elems = page * h_kv * d;
    const int64_t max_extra = std::max<int64_t>(0, std::min<int64_t>(1024, lim.max_pool_elems / page_elems));
    c.params["pool"] = std::to_string(*rc::gen::inRange<int64_t>(0, max_extra + 1));
    if (property == "block_placement") {
      c.params["place2"] = std::to_string(*rc::gen::inRange<int64_t>(1, 1000));
      c.params["share"] = std::to_string(*rc::gen::inRange<int64_t>(0, 8));
    }
    if (property == "chunked_prefill") {
      const int64_t tq = q[target];
      std::vector<int64_t> chunks;
      int64_t left = tq;
      while (left > 0) {
        const int64_t x = *rc::gen::inRange<int64_t>(1, left + 1);
        chunks.push_back(x);
        left -= x;
      }
      c.params["chunks"] = attention_case::join(chunks);
    }
    c.seed = *rc::gen::inRange<uint64_t>(0, uint64_t{1} << 32);
    return c;
  });
}

PropertyFamily attention_family() {
  PropertyFamily f;
  f.name = "attention";
  f.own({"paged_attention"});
  f.properties = [](const std::string &) { return attention_properties(); };
  f.gen = [](const Target &t) { return gen_attention_case(t.impl, t.property, t.backend, t.dtype); };
  f.impl = [](const std::string &, const std::string &impl, Backend backend) { return attention_impl(impl, backend); };
  f.check = check_attention_case;
  add_attention_bench(f);
  return f;
}

}  // namespace detfuzz
