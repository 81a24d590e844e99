// The engine on the small transformer (ops/graph): prefill steps replay the batch-prefill runner,
// schedule_invariance holds for our kernels on generated cases, the planted split-K mutant is
// caught (tests/cli/test_laps.sh shrinks it through the CLI).
#include "ops/engine/engine.h"
#include "ops/engine/model.h"
#include "ops/engine/workload.h"
#include "properties/laps/laps_properties.h"

#include <gtest/gtest.h>
#include <rapidcheck/gtest.h>

namespace detfuzz::engine {
namespace {

Target target(const std::string &impl) {
  Target t;
  t.op = "laps_engine";
  t.impl = impl;
  t.property = "schedule_invariance";
  t.backend = Backend::cpu;
  t.dtype = at::kBFloat16;
  return t;
}

TEST(LapsEngine, PrefillStepsGoThroughTheGraphRunner) {
  const ModelImpl *impl = find_model_impl("invariant", Backend::cpu);
  ASSERT_NE(impl, nullptr);
  const auto model = impl->make(at::kBFloat16, default_model_shape(Backend::cpu), 3);
  WorkloadConfig w;
  w.requests = 12;
  w.max_len = 600;
  w.short_max = 40;
  w.vocab = model->vocab();
  w.decode_steps = 2;
  EngineConfig c;
  c.policy = Policy::laps;
  c.threshold = 40;
  c.instances = 2;
  c.router.laps = true;
  c.max_prefill_tokens = 600;
  const Trace trace = make_workload(w);
  const EngineResult r = run_trace(trace, c, *model);
  EXPECT_GT(r.stats.graph_steps, 0);
  EXPECT_GT(r.stats.prefill_steps, r.stats.graph_steps);  // an extend of more than 256 tokens fits no bucket: eager
  for (const auto &o : r.outputs) {
    ASSERT_TRUE(o.finished);
    EXPECT_EQ(o.tokens.size(), 3u);
    EXPECT_TRUE(at::isfinite(o.final_logprobs).all().item<bool>());
  }
}

RC_GTEST_PROP(LapsEngine, ScheduleInvarianceHoldsForOurKernels, ()) {
  const CaseSpec c = *gen_laps_case(target("invariant"));
  const Verdict v = check_laps_case(c);
  RC_ASSERT(v.outcome == Verdict::Outcome::pass);
}

TEST(LapsEngine, TheSplitKMutantFailsOnItsShrunkRecord) {
  // Two short prompts batched into one step: bucket bs2xlen16 has 32 token rows, each prompt
  // alone runs in bs1xlen16 (16 rows), so only the batched step splits K. The campaign's shrunk
  // record (tests/cli/test_laps.sh shrinks one through the CLI).
  CaseSpec c;
  c.op = "laps_engine";
  c.impl = "mutant-splitk-from-rows";
  c.property = "schedule_invariance";
  c.dtype = at::kHalf;
  c.shape = default_model_shape(Backend::cpu);
  c.seed = 0;
  c.params = parse_params("len=1.1 dec=0.0 at=0.0 sys=0.0 policy=fifo inst=1 run=2");
  EXPECT_EQ(check_laps_case(c).outcome, Verdict::Outcome::fail);
  c.impl = "invariant";
  EXPECT_EQ(check_laps_case(c).outcome, Verdict::Outcome::pass);
}

}  // namespace
}  // namespace detfuzz::engine
