// The schedule_invariance machinery on test doubles (the transformer's own cases are in
// tests/ops/engine/test_laps_engine.cpp): generated cases are well formed and hold for a model
// whose outputs depend on each sequence's tokens only; a model whose outputs leak the batch
// composition is caught; the variant trace's permutation and aborts; malformed cases.
#include "properties/laps/laps_properties.h"

#include "tests/ops/engine/context_hash_model.h"

#include <gtest/gtest.h>
#include <rapidcheck/gtest.h>

#include <algorithm>

namespace detfuzz {
namespace {

using engine::testing::ContextHashModel;

// The hash model with a planted leak: a step of more than one sequence shifts every output.
class BatchLeakModel : public ContextHashModel {
 public:
  BatchLeakModel() : ContextHashModel(true) {}
};

template <typename Model>
laps_case::ModelFactory factory() {
  return [](const CaseSpec &) { return std::make_unique<Model>(); };
}

Target target() {
  Target t;
  t.op = "laps_engine";
  t.impl = "hash";
  t.property = "schedule_invariance";
  return t;
}

RC_GTEST_PROP(LapsProperty, GeneratedCasesHoldForAPerSequenceModel, ()) {
  const CaseSpec c = *laps_case::gen(target(), {}, 8, 300);
  const Verdict v = laps_case::check(c, factory<ContextHashModel>());
  RC_ASSERT(v.outcome == Verdict::Outcome::pass);
  // The record's text form rebuilds the same case.
  RC_ASSERT(parse_params(c.params_string()) == c.params);
}

TEST(LapsProperty, ABatchLeakIsCaught) {
  int failures = 0;
  for (uint64_t seed = 0; seed < 40; ++seed) {
    const CaseSpec c =
        rc::gen::exec([] { return *laps_case::gen(target(), {}, 8, 300); })(rc::Random(seed), 30).value();
    failures += laps_case::check(c, factory<BatchLeakModel>()).outcome == Verdict::Outcome::fail;
  }
  EXPECT_GT(failures, 5);
}

CaseSpec base_case() {
  CaseSpec c;
  c.op = "laps_engine";
  c.impl = "hash";
  c.property = "schedule_invariance";
  c.params = parse_params(
      "len=20.5.40.7 dec=1.0.2.1 at=0.3.3.9 sys=1.1.0.0 syslen=16 policy=laps thr=10 inst=2 glaps=1 "
      "rthr=10 ivl=1 budget=16 run=2 page=4 reuse=1 win=5 perm=3 abort=2 abort_ms=1");
  return c;
}

TEST(LapsProperty, TheVariantTracePermutesWithinWindowsAndAborts) {
  const CaseSpec c = base_case();
  const engine::Trace base = laps_case::trace(c, 32), v = laps_case::variant_trace(c, base);
  ASSERT_EQ(base.size(), 4u);
  // Requests 0..2 arrive within the first 5 ms window; request 3 alone in the second.
  std::vector<double> a, b;
  for (size_t i = 0; i < 3; ++i) a.push_back(base[i].arrival_s), b.push_back(v[i].arrival_s);
  std::sort(b.begin(), b.end());
  EXPECT_EQ(a, b);
  EXPECT_EQ(v[3].arrival_s, base[3].arrival_s);
  EXPECT_DOUBLE_EQ(v[2].abort_s, v[2].arrival_s + 1e-3);
  EXPECT_LT(base[2].abort_s, 0);
  // Shared system prompt: requests 0 and 1 open with the same 16 tokens (request 1 is all of it).
  EXPECT_TRUE(std::equal(base[1].prompt.begin(), base[1].prompt.end(), base[0].prompt.begin()));
  EXPECT_NE(base[2].prompt[0] == base[0].prompt[0] && base[2].prompt[1] == base[0].prompt[1], true);
  EXPECT_EQ(laps_case::check(c, factory<ContextHashModel>()).outcome, Verdict::Outcome::pass);
  // One instance batching the requests that arrived while it ran its first step.
  CaseSpec batched = c;
  for (const auto &[k, val] : parse_params("inst=1 glaps=0 budget=64 run=4")) batched.params[k] = val;
  EXPECT_EQ(laps_case::check(batched, factory<ContextHashModel>()).outcome, Verdict::Outcome::pass);
  EXPECT_EQ(laps_case::check(batched, factory<BatchLeakModel>()).outcome, Verdict::Outcome::fail);
}

TEST(LapsProperty, MalformedCasesAreRejected) {
  for (const char *bad :
       {"len=", "dec=1.0.2", "policy=lifo", "inst=0", "abort=9 abort_ms=1", "abort=1.3", "len=3.x.1.1",
        "ratio=0x3fe0000000000000", "page=0", "ctok=0xbff0000000000000", "cpair=0x7ff0000000000000"}) {
    CaseSpec c = base_case();
    for (const auto &[k, v] : parse_params(bad)) c.params[k] = v;
    if (std::string(bad) == "len=") c.params.erase("len");
    EXPECT_THROW(laps_case::check(c, factory<ContextHashModel>()), std::invalid_argument) << bad;
  }
}

// detfuzz laps --clock calibrated stores its fitted cost formula in the record's params, so the
// record replays on the same clock.
TEST(LapsProperty, ACalibratedClockTravelsInTheRecord) {
  CaseSpec c = base_case();
  c.params["clock"] = "model";
  c.params["cstep"] = double_to_hex(2e-4);
  c.params["ctok"] = double_to_hex(5e-6);
  c.params["cpair"] = double_to_hex(5e-8);
  c.params["cseq"] = double_to_hex(0.0);
  const engine::EngineConfig e = laps_case::variant_config(c);
  EXPECT_FALSE(e.cost.measured);
  EXPECT_EQ(e.cost.step_s, 2e-4);
  EXPECT_EQ(e.cost.token_s, 5e-6);
  EXPECT_EQ(e.cost.pair_s, 5e-8);
  EXPECT_EQ(e.cost.seq_s, 0.0);
  c.params.erase("ctok");
  EXPECT_EQ(laps_case::variant_config(c).cost.token_s, engine::CostModel{}.token_s)
      << "an absent coefficient keeps the default";
}

}  // namespace
}  // namespace detfuzz
