#include "properties/graph/graph_properties.h"
#include "properties/family.h"
#include "properties/graph/graph_bench.h"

#include "ops/graph/pipelines.h"
#include "ops/graph/prefill_runner.h"
#include "properties/attention/attention_properties.h"
#include "properties/data.h"

#include <algorithm>
#include <cmath>
#include <functional>
#include <sstream>
#include <stdexcept>

namespace detfuzz {
namespace {

using graph::Bucket;
using graph::SequenceInput;

// The pipeline the case's impl declares (ops/graph/register.cpp).
const graph::PrefillPipeline &pipeline_of(const std::string &impl) {
  const graph::PrefillPipeline *p = graph::prefill_pipeline(impl);
  if (!p) throw std::invalid_argument("prefill_graph case: unknown impl '" + impl + "'");
  return *p;
}

bool is_runner_impl(const std::string &impl) { return pipeline_of(impl).runner; }

std::vector<int64_t> parse_list(const CaseSpec &c, const std::string &key, const std::string &fallback) {
  const std::string s = c.param(key, fallback);
  std::vector<int64_t> out;
  std::stringstream ss(s);
  std::string part;
  while (std::getline(ss, part, '.')) {
    try {
      size_t used = 0;
      out.push_back(std::stoll(part, &used));
      if (used != part.size()) throw std::invalid_argument("");
    } catch (const std::exception &) {
      throw std::invalid_argument("prefill_graph case: " + key + "='" + s + "' is not integers joined by '.'");
    }
  }
  return out;
}

struct GraphCase {
  graph::ModelConfig config;
  std::vector<int64_t> cached, fresh;
  int64_t page = 16, target = 0;
  std::vector<int64_t> bs_list, len_list;
};

GraphCase parse(const CaseSpec &c) {
  if (c.shape.size() != 7)
    throw std::invalid_argument(
        "prefill_graph case: shape must be vocab x hidden x layers x q_heads x kv_heads x head_dim x mlp, got '" +
        c.shape_string() + "'");
  GraphCase g;
  auto &m = g.config;
  m.vocab = c.shape[0];
  m.hidden = c.shape[1];
  m.layers = c.shape[2];
  m.q_heads = c.shape[3];
  m.kv_heads = c.shape[4];
  m.head_dim = c.shape[5];
  m.mlp = c.shape[6];
  m.dtype = c.dtype;
  m.weight_seed = c.seed;
  try {
    m.validate();
  } catch (const std::exception &e) {
    throw std::invalid_argument(std::string("prefill_graph case: ") + e.what());
  }
  g.cached = parse_list(c, "cached", "");
  g.fresh = parse_list(c, "new", "");
  if (g.fresh.empty() || g.fresh.size() != g.cached.size())
    throw std::invalid_argument("prefill_graph case: cached= and new= must list the same number (>= 1) of sequences");
  for (size_t s = 0; s < g.fresh.size(); ++s)
    if (g.fresh[s] < 1 || g.cached[s] < 0)
      throw std::invalid_argument("prefill_graph case: sequence " + std::to_string(s) +
                                  " has cached=" + std::to_string(g.cached[s]) + " new=" + std::to_string(g.fresh[s]) +
                                  " (needs cached >= 0, new >= 1)");
  g.page = c.param_int("page", 16);
  if (g.page < 1) throw std::invalid_argument("prefill_graph case: page=" + std::to_string(g.page) + " must be >= 1");
  g.bs_list = parse_list(c, "bs", "1.2.4.8");
  g.len_list = parse_list(c, "len", "16.32.64.128.256");
  for (int64_t v : g.bs_list)
    if (v < 1) throw std::invalid_argument("prefill_graph case: bucket batch size " + std::to_string(v) + " < 1");
  for (int64_t v : g.len_list)
    if (v < 1) throw std::invalid_argument("prefill_graph case: bucket length " + std::to_string(v) + " < 1");
  g.target = c.param_int("target", 0);
  if (g.target < 0 || g.target >= static_cast<int64_t>(g.fresh.size()))
    throw std::invalid_argument("prefill_graph case: target=" + std::to_string(g.target) +
                                " is not a sequence index in [0, " + std::to_string(g.fresh.size()) + ")");
  return g;
}

int64_t token(uint64_t seed, int64_t seq, int64_t pos, int64_t vocab) {
  return static_cast<int64_t>(counter_bits(seed, 1000 + static_cast<uint64_t>(seq), static_cast<uint64_t>(pos)) %
                              static_cast<uint64_t>(vocab));
}

// A model, a KV cache holding the chosen sequences' cached prefixes (each written by an eager
// pass of its own), and the batch of their new tokens. Sequence u of the case keeps its tokens
// wherever it sits; pages are handed out in batch order from page 1 (page 0 is scratch).
struct World {
  std::unique_ptr<graph::Model> model;
  std::unique_ptr<attention::KVCache> cache;
  std::vector<SequenceInput> batch;
  std::vector<int64_t> uids;
  int64_t max_blocks = 1;
};

int64_t max_blocks_of(const GraphCase &g) {
  int64_t longest = *std::max_element(g.len_list.begin(), g.len_list.end());
  for (size_t s = 0; s < g.fresh.size(); ++s) longest = std::max(longest, g.cached[s] + g.fresh[s]);
  return (longest + g.page - 1) / g.page;
}

World make_world(const CaseSpec &c, const GraphCase &g, const std::vector<int64_t> &uids, bool torch_kernels = false) {
  World w;
  w.uids = uids;
  w.max_blocks = max_blocks_of(g);
  w.model = std::make_unique<graph::Model>(
      g.config, c.backend, torch_kernels ? graph::torch_kernels(c.backend) : graph::invariant_kernels(c.backend));
  int64_t next_page = 1;
  for (int64_t u : uids) {
    SequenceInput q;
    q.cached = g.cached[u];
    for (int64_t j = 0; j < g.fresh[u]; ++j) q.new_tokens.push_back(token(c.seed, u, q.cached + j, g.config.vocab));
    const int64_t pages = (q.cached + g.fresh[u] + g.page - 1) / g.page;
    for (int64_t p = 0; p < pages; ++p) q.blocks.push_back(next_page++);
    w.batch.push_back(std::move(q));
  }
  w.cache = std::make_unique<attention::KVCache>(w.model->make_cache(next_page, g.page));
  for (size_t i = 0; i < uids.size(); ++i) {
    const SequenceInput &q = w.batch[i];
    if (q.cached == 0) continue;
    SequenceInput prefix;
    for (int64_t p = 0; p < q.cached; ++p) prefix.new_tokens.push_back(token(c.seed, uids[i], p, g.config.vocab));
    prefix.blocks = q.blocks;
    graph::run_eager(*w.model, *w.cache, {prefix}, w.max_blocks);
  }
  return w;
}

graph::RunnerOptions runner_options(const CaseSpec &c, const GraphCase &g, const World &w) {
  graph::RunnerOptions o;
  o.batch_sizes = g.bs_list;
  o.seq_lens = g.len_list;
  o.max_blocks = w.max_blocks;
  o.left_align = pipeline_of(c.impl).left_aligned;
  return o;
}

// Restores `cache`'s pools from `snapshot` in place (the runner's graphs keep the pool pointers).
void restore(attention::KVCache &cache, const attention::KVCache &snapshot) {
  for (int64_t l = 0; l < cache.config().num_layers; ++l) {
    cache.k(l).copy_(snapshot.k(l));
    cache.v(l).copy_(snapshot.v(l));
  }
}

// Every slot's K and V of every layer but the scratch slot, [2 * layers, slots - 1, H_kv, D].
at::Tensor pools_without_scratch(const attention::KVCache &cache) {
  const auto &cfg = cache.config();
  const int64_t slots = cfg.num_blocks * cfg.block_size;
  std::vector<at::Tensor> parts;
  for (int64_t l = 0; l < cfg.num_layers; ++l)
    for (const at::Tensor &pool : {cache.k(l), cache.v(l)})
      parts.push_back(pool.view({slots, cfg.num_kv_heads, cfg.head_dim}).narrow(0, 1, slots - 1));
  return at::stack(parts).cpu();
}

// K and V of the given tokens of a sequence, [2 * layers, tokens, H_kv, D], wherever its pages are.
at::Tensor sequence_kv(const attention::KVCache &cache, const SequenceInput &q, int64_t tokens) {
  const auto &cfg = cache.config();
  const int64_t slots = cfg.num_blocks * cfg.block_size;
  at::Tensor index = at::empty({tokens}, at::kLong);
  for (int64_t p = 0; p < tokens; ++p) index.data_ptr<int64_t>()[p] = graph::token_slot(q.blocks, cfg.block_size, p);
  std::vector<at::Tensor> parts;
  for (int64_t l = 0; l < cfg.num_layers; ++l)
    for (const at::Tensor &pool : {cache.k(l), cache.v(l)})
      parts.push_back(pool.view({slots, cfg.num_kv_heads, cfg.head_dim}).cpu().index_select(0, index));
  return at::stack(parts);
}

std::vector<int64_t> all_uids(const GraphCase &g) {
  std::vector<int64_t> v(g.fresh.size());
  for (size_t i = 0; i < v.size(); ++i) v[i] = static_cast<int64_t>(i);
  return v;
}

Verdict both(Verdict first, const std::function<Verdict()> &second) { return first.passed() ? second() : first; }

// The batch through the impl: the runner (graph, mutant) or an eager path.
graph::RunResult run_impl(const CaseSpec &c, World &w, graph::BatchPrefillGraphRunner *runner,
                          std::optional<Bucket> bucket = std::nullopt) {
  if (runner) return runner->run(w.batch, bucket);
  const graph::PrefillPipeline &p = pipeline_of(c.impl);
  if (!p.through_registry) return graph::run_eager(*w.model, *w.cache, w.batch, w.max_blocks);
  graph::EagerInputs inputs(*w.model, w.max_blocks, p.no_copy);
  return graph::run_eager(*w.model, *w.cache, w.batch, w.max_blocks, &inputs);
}

std::string bucket_text(const graph::RunResult &r) { return r.bucket ? r.bucket->name() : "eager"; }

Verdict replay_vs_eager(const CaseSpec &c, const GraphCase &g) {
  World w = make_world(c, g, all_uids(g));
  const attention::KVCache before = w.cache->clone();
  const graph::RunResult eager = graph::run_eager(*w.model, *w.cache, w.batch, w.max_blocks);
  const at::Tensor eager_pools = pools_without_scratch(*w.cache);
  restore(*w.cache, before);
  graph::BatchPrefillGraphRunner runner(*w.model, *w.cache, runner_options(c, g, w));
  const graph::RunResult replay = runner.run(w.batch);
  const std::string where = " (" + bucket_text(replay) + ")";
  return both(Verdict::from_diff(eager.logprobs, replay.logprobs, "log-probs: replay" + where + " vs eager"), [&] {
    return Verdict::from_diff(eager_pools, pools_without_scratch(*w.cache), "KV pool: replay" + where + " vs eager");
  });
}

Verdict bucket_invariance(const CaseSpec &c, const GraphCase &g) {
  World w = make_world(c, g, all_uids(g));
  const attention::KVCache before = w.cache->clone();
  graph::BatchPrefillGraphRunner runner(*w.model, *w.cache, runner_options(c, g, w));
  const std::vector<Bucket> fits = runner.fitting(w.batch);
  if (fits.size() < 2)
    return Verdict::pass({}, "the batch fits " + std::to_string(fits.size()) + " bucket(s): nothing to compare");
  const graph::RunResult first = runner.run(w.batch, fits.front());
  const at::Tensor first_pools = pools_without_scratch(*w.cache);
  for (size_t i = 1; i < fits.size(); ++i) {
    restore(*w.cache, before);
    const graph::RunResult r = runner.run(w.batch, fits[i]);
    const std::string what = fits[i].name() + " vs " + fits.front().name();
    Verdict v = both(Verdict::from_diff(first.logprobs, r.logprobs, "log-probs: " + what), [&] {
      return Verdict::from_diff(first_pools, pools_without_scratch(*w.cache), "KV pool: " + what);
    });
    if (!v.passed()) return v;
  }
  return Verdict::pass({}, "log-probs and KV equal in " + std::to_string(fits.size()) + " buckets");
}

Verdict padding_invariance(const CaseSpec &c, const GraphCase &g) {
  World w = make_world(c, g, all_uids(g));
  const attention::KVCache before = w.cache->clone();
  const graph::RunResult eager = graph::run_eager(*w.model, *w.cache, w.batch, w.max_blocks);
  restore(*w.cache, before);
  graph::BatchPrefillGraphRunner runner(*w.model, *w.cache, runner_options(c, g, w));
  const std::vector<Bucket> fits = runner.fitting(w.batch);
  if (fits.empty()) return Verdict::pass({}, "the batch fits no bucket: nothing padded");
  // The bucket with the most padding: most token slots, then most dummy sequences.
  const Bucket widest = *std::max_element(fits.begin(), fits.end(), [](const Bucket &a, const Bucket &b) {
    return a.bs * a.seq_len != b.bs * b.seq_len ? a.bs * a.seq_len < b.bs * b.seq_len : a.bs < b.bs;
  });
  const graph::RunResult padded = runner.run(w.batch, widest);
  Verdict v = Verdict::from_diff(eager.logprobs, padded.logprobs, "log-probs: " + widest.name() + " (padded) vs eager");
  if (!v.passed()) return v;
  // No slot but the real new tokens' and the scratch slot may change.
  const auto &cfg = w.cache->config();
  const int64_t slots = cfg.num_blocks * cfg.block_size;
  std::vector<bool> allowed(static_cast<size_t>(slots), false);
  allowed[0] = true;
  for (const auto &q : w.batch)
    for (int64_t j = 0; j < static_cast<int64_t>(q.new_tokens.size()); ++j)
      allowed[static_cast<size_t>(graph::token_slot(q.blocks, cfg.block_size, q.cached + j))] = true;
  for (int64_t l = 0; l < cfg.num_layers; ++l)
    for (int kv = 0; kv < 2; ++kv) {
      const at::Tensor now = (kv ? w.cache->v(l) : w.cache->k(l)).view({slots, -1}).cpu().view(at::kShort);
      const at::Tensor old = (kv ? before.v(l) : before.k(l)).view({slots, -1}).cpu().view(at::kShort);
      const at::Tensor changed = (now != old).any(1);
      const bool *ch = changed.data_ptr<bool>();
      for (int64_t s = 0; s < slots; ++s)
        if (ch[s] && !allowed[static_cast<size_t>(s)]) {
          DiffStats d;
          d.numel = slots;
          d.differing = 1;
          d.first_index = s;
          return Verdict::fail(d, "padded run in " + widest.name() + " wrote " + (kv ? "V" : "K") + " of layer " +
                                      std::to_string(l) + " at slot " + std::to_string(s) +
                                      ", which is neither a real token's slot nor the scratch slot");
        }
    }
  return Verdict::pass({}, "real rows equal eager in " + widest.name() + "; only real and scratch slots written");
}

Verdict seq_alone_vs_batched(const CaseSpec &c, const GraphCase &g) {
  World batched = make_world(c, g, all_uids(g));
  World alone = make_world(c, g, {g.target});
  std::unique_ptr<graph::BatchPrefillGraphRunner> rb, ra;
  if (is_runner_impl(c.impl)) {
    rb =
        std::make_unique<graph::BatchPrefillGraphRunner>(*batched.model, *batched.cache, runner_options(c, g, batched));
    ra = std::make_unique<graph::BatchPrefillGraphRunner>(*alone.model, *alone.cache, runner_options(c, g, alone));
  }
  const graph::RunResult in_batch = run_impl(c, batched, rb.get());
  const graph::RunResult by_itself = run_impl(c, alone, ra.get());
  const SequenceInput &q = batched.batch[g.target];
  const int64_t tokens = q.cached + static_cast<int64_t>(q.new_tokens.size());
  const std::string what = "sequence " + std::to_string(g.target) + " alone (" + bucket_text(by_itself) +
                           ") vs in a batch of " + std::to_string(g.fresh.size()) + " (" + bucket_text(in_batch) + ")";
  return both(Verdict::from_diff(by_itself.logprobs, in_batch.logprobs.narrow(0, g.target, 1), "log-probs: " + what),
              [&] {
                return Verdict::from_diff(sequence_kv(*alone.cache, alone.batch[0], tokens),
                                          sequence_kv(*batched.cache, q, tokens), "K/V: " + what);
              });
}

Verdict registry_agree(const CaseSpec &c, const GraphCase &g) {
  World w = make_world(c, g, all_uids(g));
  const attention::KVCache before = w.cache->clone();
  const graph::RunResult direct = graph::run_eager(*w.model, *w.cache, w.batch, w.max_blocks);
  const at::Tensor direct_pools = pools_without_scratch(*w.cache);
  // Through one registry: first a batch of the first sequence alone (the registry is built for
  // it), then the whole batch (the registry grows, or is reused when it fits).
  restore(*w.cache, before);
  graph::EagerInputs inputs(*w.model, w.max_blocks, pipeline_of(c.impl).no_copy);
  graph::run_eager(*w.model, *w.cache, {w.batch.front()}, w.max_blocks, &inputs);
  restore(*w.cache, before);
  const graph::RunResult via = graph::run_eager(*w.model, *w.cache, w.batch, w.max_blocks, &inputs);
  const std::string what = std::string(inputs.no_copy() ? "no-copy" : "registry") + " vs direct";
  return both(Verdict::from_diff(direct.logprobs, via.logprobs, "log-probs: " + what),
              [&] { return Verdict::from_diff(direct_pools, pools_without_scratch(*w.cache), "KV pool: " + what); });
}

}  // namespace

std::vector<std::string> graph_properties() {
  return {"replay_vs_eager", "bucket_invariance", "padding_invariance", "seq_alone_vs_batched", "registry_agree"};
}

bool graph_property_applies(const std::string &impl, const std::string &property) {
  if (property == "seq_alone_vs_batched") return true;
  const graph::PrefillPipeline *p = graph::prefill_pipeline(impl);
  if (!p) return false;
  if (property == "registry_agree") return p->through_registry;
  return p->runner;
}

// Bytes of the model's weights and of its KV cache over the case's pages (the scratch page too):
// what a case makes before it runs anything, so a record that cannot fit is refused as malformed.
double weights_and_cache_bytes(const GraphCase &g) {
  const auto &m = g.config;
  const auto d = [](int64_t v) { return static_cast<double>(v); };
  const double layer = d(m.hidden) * d((m.q_heads + 2 * m.kv_heads) * m.head_dim) +  // qkv
                       d(m.q_heads * m.head_dim) * d(m.hidden) +                     // o_proj
                       d(m.hidden) * d(2 * m.mlp) + d(m.mlp) * d(m.hidden) +         // gate_up, down
                       2 * d(m.hidden);                                              // the norms
  const double weights = 2 * d(m.vocab) * d(m.hidden) + d(m.layers) * layer + d(m.hidden);
  double pages = 1;
  for (size_t s = 0; s < g.fresh.size(); ++s) pages += std::ceil(d(g.cached[s] + g.fresh[s]) / d(g.page));
  const double cache = 2 * d(m.layers) * pages * d(g.page) * d(m.kv_heads) * d(m.head_dim);
  return static_cast<double>(c10::elementSize(m.dtype)) * (weights + cache);
}

Verdict check_graph_case(const CaseSpec &c) {
  const GraphCase g = parse(c);
  check_tensors_fit(weights_and_cache_bytes(g), device_of(c.backend),
                    "prefill_graph shape " + c.shape_string() + " (" + g.config.describe() + ")");
  if (!find_impl("prefill_graph", c.impl, c.backend))
    throw std::invalid_argument("prefill_graph case: unknown impl '" + c.impl + "' on backend " + to_string(c.backend));
  const auto props = graph_properties();
  if (std::find(props.begin(), props.end(), c.property) == props.end())
    throw std::invalid_argument("prefill_graph case: unknown property '" + c.property + "'");
  if (!graph_property_applies(c.impl, c.property))
    throw std::invalid_argument("prefill_graph case: impl " + c.impl + " is not held to " + c.property);
  if (c.property == "seq_alone_vs_batched" && g.fresh.size() < 2)
    throw std::invalid_argument("prefill_graph case: seq_alone_vs_batched needs at least 2 sequences");
  try {
    if (c.property == "replay_vs_eager") return replay_vs_eager(c, g);
    if (c.property == "bucket_invariance") return bucket_invariance(c, g);
    if (c.property == "padding_invariance") return padding_invariance(c, g);
    if (c.property == "seq_alone_vs_batched") return seq_alone_vs_batched(c, g);
    return registry_agree(c, g);
  } catch (const std::exception &e) {
    return Verdict::error(e.what());
  }
}

rc::Gen<CaseSpec> gen_graph_case(const std::string &impl, const std::string &property, Backend backend,
                                 at::ScalarType dtype) {
  return rc::gen::exec([=] {
    const bool cuda = backend == Backend::cuda;
    CaseSpec c;
    c.op = "prefill_graph";
    c.impl = impl;
    c.property = property;
    c.backend = backend;
    c.dtype = dtype;
    c.layout = "c";
    c.dist = "normal";
    const int64_t head_dim = cuda ? *rc::gen::element<int64_t>(64, 128) : *rc::gen::element<int64_t>(8, 16, 32);
    const int64_t kv_heads = *rc::gen::element<int64_t>(1, 2);
    const int64_t group = *rc::gen::element<int64_t>(1, 2, 4);
    const int64_t hidden = cuda ? *rc::gen::element<int64_t>(64, 128, 256) : *rc::gen::element<int64_t>(16, 32, 48, 64);
    const int64_t vocab = cuda ? *rc::gen::element<int64_t>(128, 1000, 4096) : *rc::gen::element<int64_t>(64, 97, 256);
    const int64_t mlp = cuda ? *rc::gen::element<int64_t>(128, 352, 512) : *rc::gen::element<int64_t>(32, 40, 96);
    const int64_t layers = *rc::gen::inRange<int64_t>(1, 3);
    c.shape = {vocab, hidden, layers, kv_heads * group, kv_heads, head_dim, mlp};
    const int64_t page = *rc::gen::element<int64_t>(16, 8, 1);
    // Buckets: the default set on CUDA; on the CPU lengths up to 64 keep a case to milliseconds.
    const std::vector<int64_t> lens =
        cuda ? std::vector<int64_t>{16, 32, 64, 128, 256} : std::vector<int64_t>{16, 32, 64};
    const int64_t max_new = lens.back(), max_cached = cuda ? 600 : 80;
    struct Draw {
      int64_t kind, cached, fresh;  // kind: 0 decode, 1 chunk over a prefix, 2 new prefill
    };
    const auto seq_gen = rc::gen::exec([=] {
      return Draw{*rc::gen::inRange<int64_t>(0, 3), *rc::gen::inRange<int64_t>(1, max_cached + 1),
                  *rc::gen::inRange<int64_t>(1, max_new + 1)};
    });
    // 1..8 sequences (the largest bucket holds 8); now and then 9, which fits no bucket (eager).
    const int most = *rc::gen::weightedOneOf<int>({{9, rc::gen::just(8)}, {1, rc::gen::just(9)}});
    std::vector<Draw> draws = *rc::gen::resize(most, rc::gen::nonEmpty(rc::gen::container<std::vector<Draw>>(seq_gen)));
    if (draws.size() > static_cast<size_t>(most)) draws.resize(static_cast<size_t>(most));
    if (property == "seq_alone_vs_batched" && draws.size() < 2) draws.push_back(Draw{0, 1, 1});
    std::vector<int64_t> cached, fresh;
    for (const Draw &d : draws) {
      cached.push_back(d.kind == 2 ? 0 : d.cached);
      fresh.push_back(d.kind == 0 ? 1 : d.fresh);
    }
    c.params["cached"] = attention_case::join(cached);
    c.params["new"] = attention_case::join(fresh);
    c.params["page"] = std::to_string(page);
    c.params["bs"] = "1.2.4.8";
    c.params["len"] = attention_case::join(lens);
    if (property == "seq_alone_vs_batched")
      c.params["target"] = std::to_string(*rc::gen::inRange<int64_t>(0, static_cast<int64_t>(draws.size())));
    c.seed = *rc::gen::inRange<uint64_t>(0, uint64_t{1} << 32);
    return c;
  });
}

PropertyFamily graph_family() {
  PropertyFamily f;
  f.name = "graph";
  f.own({"prefill_graph"});
  f.properties = [](const std::string &) { return graph_properties(); };
  f.applies = graph_property_applies;
  f.gen = [](const Target &t) { return gen_graph_case(t.impl, t.property, t.backend, t.dtype); };
  f.check = check_graph_case;
  add_graph_bench(f);
  return f;
}

}  // namespace detfuzz
