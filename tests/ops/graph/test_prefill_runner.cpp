// The batch-prefill graph runner on the CPU (the same runner logic as on CUDA, with the bucket's
// static-shape forward where CUDA replays a graph): bucket choice, right alignment, dummy slots,
// the eager fallback, and the graph properties run by RapidCheck, the left-aligned mutant caught.
// On CUDA (gpu label): the same properties through captured graphs, and the mutant caught there.
#include "ops/graph/prefill_runner.h"
#include "properties/graph/graph_properties.h"

#include <gtest/gtest.h>
#include <rapidcheck.h>

#ifdef DETFUZZ_WITH_CUDA
#include <ATen/cuda/CUDAContext.h>
#endif

using namespace detfuzz;
using namespace detfuzz::graph;

namespace {

ModelConfig tiny_config() {
  ModelConfig c;
  c.vocab = 64;
  c.hidden = 32;
  c.layers = 2;
  c.q_heads = 4;
  c.kv_heads = 2;
  c.head_dim = 16;
  c.mlp = 48;
  return c;
}

bool bitwise_equal(const at::Tensor &a, const at::Tensor &b) {
  if (!a.sizes().equals(b.sizes()) || a.scalar_type() != b.scalar_type()) return false;
  const at::Tensor ac = a.cpu().contiguous(), bc = b.cpu().contiguous();
  return std::memcmp(ac.data_ptr(), bc.data_ptr(), ac.nbytes()) == 0;
}

// A prefill of 5, a chunk of 3 over 20 cached tokens, a decode after 17: pages from 1.
std::vector<SequenceInput> mixed_batch() {
  return {{{1, 2, 3, 4, 5}, 0, {1}}, {{6, 7, 8}, 20, {2, 3}}, {{9}, 17, {4, 5}}};
}

TEST(PrefillRunner, ChoosesTheSmallestBucketThatFits) {
  const Model m(tiny_config(), Backend::cpu, invariant_kernels(Backend::cpu));
  attention::KVCache cache = m.make_cache(8, 16);
  RunnerOptions o;
  o.max_blocks = 16;
  BatchPrefillGraphRunner r(m, cache, o);
  const auto fits = r.fitting(mixed_batch());
  ASSERT_FALSE(fits.empty());
  EXPECT_EQ(fits.front(), (Bucket{4, 16}));  // 3 sequences, longest extend 5: 64 token slots
  for (const Bucket &b : fits) EXPECT_TRUE(b.bs >= 3 && b.seq_len >= 5);
  EXPECT_EQ(fits.size(), 10u);  // bs 4 and 8, every length
}

TEST(PrefillRunner, RightAlignsRealTokensAndPadsWithDummySlots) {
  const Model m(tiny_config(), Backend::cpu, invariant_kernels(Backend::cpu));
  attention::KVCache cache = m.make_cache(8, 16);
  RunnerOptions o;
  o.max_blocks = 4;
  o.seq_lens = {16, 32, 64};  // the block table holds 64 tokens
  BatchPrefillGraphRunner r(m, cache, o);
  const ForwardBatch p = r.padded_batch(mixed_batch(), {4, 16});
  const int64_t *ids = p.input_ids->data_ptr<int64_t>(), *pos = p.positions->data_ptr<int64_t>();
  const int64_t *loc = p.out_cache_loc->data_ptr<int64_t>();
  // Sequence 1 (3 new tokens after 20 cached) ends its slot: rows 29..31, positions 20..22.
  EXPECT_EQ(ids[29], 6);
  EXPECT_EQ(ids[31], 8);
  EXPECT_EQ(pos[29], 20);
  EXPECT_EQ(loc[29], 3 * 16 + 4);  // position 20 of pages {2, 3}: page 3, offset 4
  EXPECT_EQ(loc[16], 0) << "padding writes the scratch slot";
  EXPECT_EQ(p.cu_seqlens_q->data_ptr<int32_t>()[2], 32);
  EXPECT_EQ(p.seq_lens->data_ptr<int32_t>()[1], 23);
  EXPECT_EQ(p.seq_lens->data_ptr<int32_t>()[3], 1) << "a dummy slot has one key";
  EXPECT_EQ(p.block_table->data_ptr<int32_t>()[3 * 4], 0) << "a dummy slot's row is the scratch page";
  RunnerOptions left = o;
  left.left_align = true;
  BatchPrefillGraphRunner lr(m, cache, left);
  EXPECT_EQ(lr.padded_batch(mixed_batch(), {4, 16}).input_ids->data_ptr<int64_t>()[16], 6);
}

TEST(PrefillRunner, CpuRunnerGivesTheEagerBitsAndFallsBackWhenNothingFits) {
  const Model m(tiny_config(), Backend::cpu, invariant_kernels(Backend::cpu));
  attention::KVCache cache = m.make_cache(8, 16);
  // The cached prefixes first, each in an eager pass of its own.
  run_eager(m, cache, {{std::vector<int64_t>(20, 11), 0, {2, 3}}}, 4);
  run_eager(m, cache, {{std::vector<int64_t>(17, 12), 0, {4, 5}}}, 4);
  const attention::KVCache before = cache.clone();
  const RunResult eager = run_eager(m, cache, mixed_batch(), 4);
  attention::KVCache graph_cache = before.clone();
  RunnerOptions o;
  o.max_blocks = 4;
  o.seq_lens = {16, 32, 64};
  BatchPrefillGraphRunner r(m, graph_cache, o);
  const RunResult replay = r.run(mixed_batch());
  ASSERT_TRUE(replay.bucket.has_value());
  EXPECT_TRUE(bitwise_equal(eager.logprobs, replay.logprobs));
  for (int64_t l = 0; l < 2; ++l)  // every slot but the scratch slot
    EXPECT_TRUE(bitwise_equal(cache.k(l).view({-1, 2, 16}).narrow(0, 1, 127),
                              graph_cache.k(l).view({-1, 2, 16}).narrow(0, 1, 127)));
  // An extend of 300 fits no bucket: eager, and the result says so.
  std::vector<SequenceInput> longer = {{std::vector<int64_t>(300, 1), 0, {1, 2, 3, 4, 5, 6, 7}}};
  attention::KVCache big = m.make_cache(16, 64);
  RunnerOptions ob;
  ob.max_blocks = 8;
  BatchPrefillGraphRunner rb(m, big, ob);
  const RunResult fallback = rb.run(longer);
  EXPECT_FALSE(fallback.bucket.has_value());
  EXPECT_NE(fallback.note.find("no bucket fits"), std::string::npos) << fallback.note;
  EXPECT_THROW(r.run(mixed_batch(), Bucket{1, 16}), c10::Error) << "a bucket too small is an error";
  EXPECT_THROW(r.run({{{1}, 0, {0}}}), c10::Error) << "page 0 is the scratch page";
}

// capture_all takes the largest bucket first (most token slots, then most sequences), after any
// bucket already captured on first use.
TEST(PrefillRunner, CaptureAllTakesTheLargestBucketFirst) {
  const Model m(tiny_config(), Backend::cpu, invariant_kernels(Backend::cpu));
  attention::KVCache cache = m.make_cache(8, 16);
  RunnerOptions o;
  o.max_blocks = 4;
  o.batch_sizes = {1, 2};
  o.seq_lens = {16, 32};
  BatchPrefillGraphRunner r(m, cache, o);
  r.run({{{1, 2, 3}, 0, {1}}});  // bs1xlen16, on first use
  r.capture_all();
  const std::vector<Bucket> expected = {{1, 16}, {2, 32}, {2, 16}, {1, 32}};
  EXPECT_EQ(r.capture_order(), expected);
  r.capture_all();  // nothing left to capture
  EXPECT_EQ(r.capture_order().size(), 4u);
  EXPECT_EQ(r.graph_pool_bytes(), 0) << "no CUDA graph on the CPU";
}

// Runs a graph property for `impl` as a named RapidCheck property; returns whether it held.
bool holds(const std::string &impl, const std::string &property, Backend backend, at::ScalarType dtype, int cases,
           std::optional<CaseSpec> *failing = nullptr) {
  std::optional<CaseSpec> last;
  auto body = [&] {
    const CaseSpec c = *gen_graph_case(impl, property, backend, dtype);
    const Verdict v = check_graph_case(c);
    if (!v.passed()) last = c;
    RC_LOG() << c.describe() << "\n" << to_string(v.outcome) << ": " << v.detail << "\n";
    RC_ASSERT(v.passed());
  };
  rc::detail::TestParams params = rc::detail::configuration().testParams;
  params.maxSuccess = cases;
  params.seed = 17;
  params.maxSize = 40;
  rc::detail::TestMetadata meta;
  meta.id = "prefill_graph/" + std::string(to_string(backend)) + "/" + impl + "/" + property;
  const auto result = rc::detail::checkProperty(rc::detail::toProperty(body), meta, params);
  if (failing) *failing = last;
  return result.is<rc::detail::SuccessResult>();
}

TEST(PrefillGraphProperties, HoldOnTheCpu) {
  for (const auto &prop : {"replay_vs_eager", "bucket_invariance", "padding_invariance", "seq_alone_vs_batched"})
    EXPECT_TRUE(holds("graph", prop, Backend::cpu, at::kBFloat16, 12)) << prop;
  EXPECT_TRUE(holds("eager", "seq_alone_vs_batched", Backend::cpu, at::kHalf, 12));
  EXPECT_TRUE(holds("eager-registry", "registry_agree", Backend::cpu, at::kBFloat16, 12));
  EXPECT_TRUE(holds("eager-no-copy", "registry_agree", Backend::cpu, at::kHalf, 12));
}

TEST(PrefillGraphProperties, LeftAlignedMutantIsCaughtAndShrunk) {
  std::optional<CaseSpec> shrunk;
  EXPECT_FALSE(holds("mutant-left-aligned", "replay_vs_eager", Backend::cpu, at::kBFloat16, 50, &shrunk));
  ASSERT_TRUE(shrunk.has_value());
  // Shrunk to a single short sequence.
  EXPECT_EQ(shrunk->param("new").find('.'), std::string::npos) << shrunk->describe();
  EXPECT_FALSE(check_graph_case(*shrunk).passed()) << "the shrunk record reproduces";
}

TEST(PrefillGraphProperties, MalformedCasesAreRejected) {
  CaseSpec c;
  c.op = "prefill_graph";
  c.impl = "graph";
  c.property = "replay_vs_eager";
  c.dtype = at::kBFloat16;
  c.shape = {64, 32, 1, 2, 1, 16, 48};
  c.params = {{"cached", "0.3"}, {"new", "2.1"}, {"page", "16"}, {"bs", "1.2"}, {"len", "16"}};
  EXPECT_TRUE(check_graph_case(c).passed()) << check_graph_case(c).detail;
  CaseSpec bad = c;
  bad.params["new"] = "1.x";
  EXPECT_THROW(check_graph_case(bad), std::invalid_argument);
  bad = c;
  bad.shape.pop_back();
  EXPECT_THROW(check_graph_case(bad), std::invalid_argument);
  bad = c;
  bad.impl = "eager";
  EXPECT_THROW(check_graph_case(bad), std::invalid_argument) << "eager is not held to replay_vs_eager";
}

#ifdef DETFUZZ_WITH_CUDA
#define NEED_GPU() \
  if (!at::cuda::is_available()) GTEST_SKIP() << "needs a CUDA GPU: none found"

TEST(PrefillGraphCuda, GraphPropertiesHoldThroughCapturedGraphs) {
  NEED_GPU();
  for (at::ScalarType dt : {at::kBFloat16, at::kHalf})
    for (const auto &prop : {"replay_vs_eager", "bucket_invariance", "padding_invariance", "seq_alone_vs_batched"})
      EXPECT_TRUE(holds("graph", prop, Backend::cuda, dt, 8)) << prop;
  EXPECT_TRUE(holds("eager-registry", "registry_agree", Backend::cuda, at::kBFloat16, 8));
}

// Every bucket captured largest first into one shared pool gives the bits of graphs with a pool
// each, in every bucket, and holds less memory.
TEST(PrefillGraphCuda, OneSharedPoolGivesTheSameBitsInLessMemory) {
  NEED_GPU();
  ModelConfig config = tiny_config();
  config.head_dim = 64;
  const Model m(config, Backend::cuda, invariant_kernels(Backend::cuda));
  const std::vector<SequenceInput> batch = {{{1, 2, 3}, 0, {1}}, {{4, 5}, 0, {2}}};
  std::vector<at::Tensor> logprobs[2];
  int64_t pool_bytes[2] = {0, 0};
  for (int shared = 0; shared < 2; ++shared) {
    attention::KVCache cache = m.make_cache(8, 16);
    RunnerOptions o;
    o.max_blocks = 4;
    o.batch_sizes = {2, 4};
    o.seq_lens = {16, 32, 64};
    o.shared_pool = shared == 1;
    BatchPrefillGraphRunner r(m, cache, o);
    r.capture_all();
    EXPECT_EQ(r.capture_order().front(), (Bucket{4, 64}));
    pool_bytes[shared] = r.graph_pool_bytes();
    for (const Bucket &b : r.fitting(batch)) {
      const RunResult res = r.run(batch, b);
      EXPECT_TRUE(res.used_graph);
      logprobs[shared].push_back(res.logprobs);
    }
  }
  ASSERT_EQ(logprobs[0].size(), 6u);
  ASSERT_EQ(logprobs[1].size(), 6u);
  for (size_t i = 0; i < logprobs[0].size(); ++i) {
    EXPECT_TRUE(bitwise_equal(logprobs[0][i], logprobs[1][i])) << "bucket " << i;
    EXPECT_TRUE(bitwise_equal(logprobs[1][0], logprobs[1][i])) << "bucket " << i;
  }
  EXPECT_GT(pool_bytes[0], 0);
  EXPECT_GT(pool_bytes[1], 0);
  EXPECT_LT(pool_bytes[1], pool_bytes[0]) << "one shared pool against a pool per bucket";
}

TEST(PrefillGraphCuda, ReplayUsesAGraphAndLeftAlignedIsCaught) {
  NEED_GPU();
  ModelConfig config = tiny_config();
  config.head_dim = 64;  // the fused kernel takes 64, 128 and 256
  const Model m(config, Backend::cuda, invariant_kernels(Backend::cuda));
  attention::KVCache cache = m.make_cache(8, 16);
  RunnerOptions o;
  o.max_blocks = 4;
  o.batch_sizes = {4};
  o.seq_lens = {16};
  BatchPrefillGraphRunner r(m, cache, o);
  const RunResult res = r.run({{{1, 2, 3}, 0, {1}}, {{4}, 0, {2}}});
  EXPECT_TRUE(res.used_graph);
  std::optional<CaseSpec> shrunk;
  EXPECT_FALSE(holds("mutant-left-aligned", "replay_vs_eager", Backend::cuda, at::kBFloat16, 30, &shrunk));
}
#endif

}  // namespace
