// Reuse of models, KV caches and runners across cases (ops/graph/resident_pool.h; the suites are
// named PrefillRunnerReuse* so that ci/gpu-check graph runs them): a case run
// through a reused resident, after other cases, gives the bits it gives on fresh objects, at the
// level of the runner's outputs and of the prefill_graph properties' verdicts. On the CPU the
// runner runs its static-shape forward where CUDA replays; the gpu-labelled test replays graphs
// captured in an earlier case.
#include "ops/graph/resident_pool.h"
#include "properties/graph/graph_properties.h"

#include "ops/counter_rng.h"

#include <ATen/Parallel.h>
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <stdexcept>

#ifdef DETFUZZ_WITH_CUDA
#include <ATen/cuda/CUDAContext.h>
#endif

using namespace detfuzz;
using namespace detfuzz::graph;

namespace {

bool same_bits(const at::Tensor &a, const at::Tensor &b) {
  if (!a.sizes().equals(b.sizes()) || a.scalar_type() != b.scalar_type()) return false;
  const at::Tensor ac = a.cpu().contiguous(), bc = b.cpu().contiguous();
  return std::memcmp(ac.data_ptr(), bc.data_ptr(), ac.nbytes()) == 0;
}

ResidentPool::Spec spec_for(Backend backend, uint64_t seed) {
  ResidentPool::Spec s;
  s.config.vocab = 64;
  s.config.hidden = 32;
  s.config.layers = 2;
  s.config.q_heads = 4;
  s.config.kv_heads = 2;
  s.config.head_dim = backend == Backend::cuda ? 64 : 16;
  s.config.mlp = 48;
  s.config.weight_seed = seed;
  s.backend = backend;
  s.num_blocks = 8;
  s.block_size = 16;
  RunnerOptions o;
  o.max_blocks = 4;
  o.batch_sizes = {2, 4};
  o.seq_lens = {16, 32};
  s.runner = o;
  return s;
}

struct Outcome {
  at::Tensor logprobs;
  std::vector<at::Tensor> pools;  // K and V of every layer
};

// A cached prefix of `cached` tokens (eager), then a batch through the runner.
Outcome run_case(const Model &model, attention::KVCache &cache, BatchPrefillGraphRunner &runner, int64_t token,
                 int64_t cached) {
  run_eager(model, cache, {{std::vector<int64_t>(static_cast<size_t>(cached), token), 0, {2, 3}}}, 4);
  Outcome o;
  o.logprobs = runner.run({{{1, 2, 3, token}, 0, {1}}, {{token, 7}, cached, {2, 3}}, {{9}, 0, {4}}}).logprobs;
  for (int64_t l = 0; l < cache.config().num_layers; ++l) {
    o.pools.push_back(cache.k(l).clone());
    o.pools.push_back(cache.v(l).clone());
  }
  return o;
}

Outcome run_fresh(const ResidentPool::Spec &s, int64_t token, int64_t cached) {
  const Model model(s.config, s.backend, invariant_kernels(s.backend));
  attention::KVCache cache = model.make_cache(s.num_blocks, s.block_size);
  BatchPrefillGraphRunner runner(model, cache, *s.runner);
  return run_case(model, cache, runner, token, cached);
}

Outcome run_pooled(ResidentPool &pool, const ResidentPool::Spec &s, int64_t token, int64_t cached) {
  ResidentPool::Lease r = pool.acquire(s);
  return run_case(r->model(), r->cache(), *r->runner(), token, cached);
}

void expect_same(const Outcome &a, const Outcome &b, const std::string &what) {
  EXPECT_TRUE(same_bits(a.logprobs, b.logprobs)) << what << ": log-probs";
  ASSERT_EQ(a.pools.size(), b.pools.size());
  for (size_t i = 0; i < a.pools.size(); ++i) EXPECT_TRUE(same_bits(a.pools[i], b.pools[i])) << what << ": pool " << i;
}

void reused_resident_gives_fresh_bits(Backend backend) {
  ResidentPool pool(4);
  const ResidentPool::Spec x = spec_for(backend, 11), y = spec_for(backend, 12);
  const Outcome fresh = run_fresh(x, 5, 20);
  expect_same(fresh, run_pooled(pool, x, 5, 20), "X on a new resident");
  // Y leaves other weights, other buffer contents and K/V in slots X never writes (its longer
  // prefix) in the same resident.
  const Outcome y_fresh = run_fresh(y, 6, 28);
  expect_same(y_fresh, run_pooled(pool, y, 6, 28), "Y after X");
  EXPECT_EQ(pool.reused(), 1);
  expect_same(fresh, run_pooled(pool, x, 5, 20), "X after Y");
  EXPECT_EQ(pool.reused(), 2);
  EXPECT_EQ(pool.idle(), 1u) << "one resident served all three";
}

TEST(PrefillRunnerReuse, AReusedResidentGivesTheBitsOfFreshObjects) { reused_resident_gives_fresh_bits(Backend::cpu); }

TEST(PrefillRunnerReuse, MatchesOnShapesAndRunnerNotOnSeed) {
  ResidentPool pool(2);
  const ResidentPool::Spec x = spec_for(Backend::cpu, 1);
  { ResidentPool::Lease a = pool.acquire(x), b = pool.acquire(x); }  // two worlds of one case
  EXPECT_EQ(pool.idle(), 2u);
  ResidentPool::Spec eager = x;
  eager.runner.reset();
  { ResidentPool::Lease e = pool.acquire(eager); }  // an eager case takes a resident with a runner
  EXPECT_EQ(pool.reused(), 1);
  ResidentPool::Spec mutant = x;
  mutant.runner->left_align = true;
  ResidentPool::Spec wider = x;
  wider.num_blocks = 16;
  { ResidentPool::Lease m = pool.acquire(mutant), w = pool.acquire(wider); }  // other runner, other pools
  EXPECT_EQ(pool.reused(), 1);
  EXPECT_EQ(pool.idle(), 2u) << "the least recently used resident was dropped";
  const size_t idle = pool.idle();
  try {
    ResidentPool::Lease l = pool.acquire(x);
    throw std::runtime_error("the case failed");
  } catch (const std::runtime_error &) {
  }
  EXPECT_EQ(pool.idle(), idle) << "a lease ended by an exception does not go back";
}

// The properties' verdicts through the process's pool: case X alone, then Y, then X again
// (reusing X's resident) give the same verdict down to the first differing bits. The mutant's
// failing verdict carries a diff; padding_invariance's compares every slot of the pools.
TEST(PrefillRunnerReuse, PropertyVerdictsDoNotDependOnTheCasesBefore) {
  CaseSpec x;
  x.op = "prefill_graph";
  x.backend = Backend::cpu;
  x.dtype = at::kBFloat16;
  x.shape = {64, 32, 2, 4, 2, 16, 48};
  x.seed = 3;
  x.params = {{"cached", "0.20.5"}, {"new", "5.3.1"}, {"page", "8"}, {"bs", "1.2.4"}, {"len", "16.32"}, {"target", "1"}};
  CaseSpec y = x;
  y.seed = 4;
  y.params["cached"] = "7.0.9";
  y.params["new"] = "1.12.2";
  for (const auto &[impl, property] : std::vector<std::pair<std::string, std::string>>{
           {"mutant-left-aligned", "replay_vs_eager"},
           {"graph", "bucket_invariance"},
           {"graph", "padding_invariance"},
           {"graph", "seq_alone_vs_batched"},
           {"eager-registry", "registry_agree"}}) {
    x.impl = y.impl = impl;
    x.property = y.property = property;
    resident_pool().clear();
    const Verdict first = check_graph_case(x);
    const int64_t reused_before = resident_pool().reused();
    check_graph_case(y);
    const Verdict again = check_graph_case(x);
    const std::string what = impl + "/" + property;
    EXPECT_GT(resident_pool().reused(), reused_before) << what << ": X ran on a reused resident";
    EXPECT_EQ(first.outcome, again.outcome) << what;
    EXPECT_EQ(first.detail, again.detail) << what;
    EXPECT_EQ(first.diff.numel, again.diff.numel) << what;
    EXPECT_EQ(first.diff.differing, again.diff.differing) << what;
    EXPECT_EQ(first.diff.first_index, again.diff.first_index) << what;
    EXPECT_EQ(first.diff.expected_bits, again.diff.expected_bits) << what;
    EXPECT_EQ(first.diff.actual_bits, again.diff.actual_bits) << what;
    if (impl == "mutant-left-aligned") EXPECT_FALSE(first.passed()) << "the mutant is caught";
    else EXPECT_TRUE(first.passed()) << what << ": " << first.detail;
  }
}

// The weights a resident is redrawn with: element e of tensor t is counter_bits(seed, t, e) made
// uniform in float64 and rounded by ATen's float64 -> dtype conversion, whatever the thread count.
TEST(PrefillRunnerReuse, WeightsAreTheCounterDrawRoundedOnceByAten) {
  ModelConfig c = spec_for(Backend::cpu, 0).config;
  c.vocab = 3000;  // a tensor of several parallel chunks
  const auto reference = [&](const at::Tensor &got, uint64_t tensor, bool norm, double scale) {
    at::Tensor v = at::empty(got.sizes(), at::kDouble);
    for (int64_t e = 0; e < v.numel(); ++e) {
      const double u = 2.0 * counter_unit(counter_bits(c.weight_seed, tensor, static_cast<uint64_t>(e))) - 1.0;
      v.data_ptr<double>()[e] = norm ? 1.0 + 0.25 * u : scale * u;
    }
    return v.to(c.dtype);
  };
  const int threads = at::get_num_threads();
  for (at::ScalarType dt : {at::kBFloat16, at::kHalf})
    for (uint64_t seed : {0ull, 7ull, 0xfedcba9876543210ull}) {
      c.dtype = dt;
      c.weight_seed = seed;
      at::set_num_threads(1);
      const ModelWeights one = make_weights(c, at::kCPU);
      at::set_num_threads(4);
      const ModelWeights four = make_weights(c, at::kCPU);
      const double in_h = 1.0 / std::sqrt(static_cast<double>(c.hidden));
      EXPECT_TRUE(same_bits(one.embed, reference(one.embed, 0, false, 1.0))) << dt << " seed " << seed;
      EXPECT_TRUE(same_bits(one.lm_head, reference(one.lm_head, 2, false, in_h))) << dt << " seed " << seed;
      EXPECT_TRUE(same_bits(one.final_norm, reference(one.final_norm, 1, true, 0))) << dt << " seed " << seed;
      EXPECT_TRUE(same_bits(one.layers[1].gate_up, reference(one.layers[1].gate_up, 10 + 8 + 4, false, in_h)));
      EXPECT_TRUE(same_bits(one.embed, four.embed) && same_bits(one.lm_head, four.lm_head)) << "thread count";
    }
  at::set_num_threads(threads);
}

#ifdef DETFUZZ_WITH_CUDA
TEST(PrefillRunnerReuseCuda, GraphsCapturedInAnEarlierCaseReplayTheBitsOfFreshOnes) {
  if (!at::cuda::is_available()) GTEST_SKIP() << "needs a CUDA GPU: none found";
  reused_resident_gives_fresh_bits(Backend::cuda);
}
#endif

}  // namespace
