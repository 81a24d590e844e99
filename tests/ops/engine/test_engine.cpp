// The engine's loop on the context-hash test double: every request's tokens and final
// log-probabilities equal the oracle under FIFO and LAPS, any instance count, chunking, prefix
// reuse and eviction; aborts; the latency effect LAPS exists for; malformed traces.
#include "context_hash_model.h"

#include "ops/engine/engine.h"
#include "ops/engine/latency.h"
#include "ops/engine/workload.h"

#include <gtest/gtest.h>

namespace detfuzz::engine {
namespace {

using testing::ContextHashModel;
using testing::oracle;

Trace small_trace(uint64_t seed, int64_t n) {
  WorkloadConfig w;
  w.seed = seed;
  w.requests = n;
  w.min_len = 9;
  w.short_max = 40;
  w.max_len = 150;
  w.rate = 200;
  w.decode_steps = 3;
  w.vocab = testing::kHashVocab;
  w.shared_share = 0.5;
  w.shared_len = 8;
  w.shared_prompts = 2;
  return make_workload(w);
}

void expect_oracle(const Trace &trace, const EngineResult &r, const std::string &what) {
  ASSERT_EQ(r.outputs.size(), trace.size());
  for (size_t i = 0; i < trace.size(); ++i) {
    const RequestOutput &o = r.outputs[i];
    if (trace[i].abort_s >= 0 && !o.finished) continue;
    ASSERT_TRUE(o.finished) << what << ": request " << trace[i].id;
    const auto e = oracle(trace[i].prompt, trace[i].decode_steps);
    EXPECT_EQ(o.tokens, e.tokens) << what << ": request " << trace[i].id;
    EXPECT_TRUE(at::equal(o.final_logprobs, e.final_logprobs)) << what << ": request " << trace[i].id;
  }
}

std::vector<EngineConfig> schedules() {
  std::vector<EngineConfig> out;
  for (Policy p : {Policy::fifo, Policy::laps})
    for (int64_t n : {1, 2, 3})
      for (int64_t budget : {16, 64, 1000}) {
        EngineConfig c;
        c.policy = p;
        c.threshold = 32;
        c.instances = n;
        c.router.laps = p == Policy::laps;
        c.router.threshold = 32;
        c.router.rebalance_interval_s = 0.01;
        c.router.rebalance_ratio = 1.5;
        c.page_size = 4;
        c.max_prefill_tokens = budget;
        c.max_running = 4;
        c.blocks_per_instance = budget == 64 ? 60 : 0;  // a small pool: prefix pages are evicted
        out.push_back(c);
      }
  return out;
}

TEST(Engine, EveryScheduleGivesTheOracleOutputs) {
  const Trace trace = small_trace(7, 40);
  int64_t reused = 0, chunked = 0, rebalanced = 0;
  for (const EngineConfig &c : schedules()) {
    ContextHashModel model;
    const EngineResult r = run_trace(trace, c, model);
    expect_oracle(trace, r, c.describe());
    reused += r.stats.reused_tokens;
    chunked += r.stats.chunked_prefills;
    rebalanced += r.stats.router.rebalances;
    EXPECT_EQ(r.stats.router.short_pending + r.stats.router.long_pending, 0) << c.describe();
  }
  // The trace exercised what it is meant to.
  EXPECT_GT(reused, 0);
  EXPECT_GT(chunked, 0);
  EXPECT_GT(rebalanced, 0);
}

TEST(Engine, AbortsRemoveRequestsAndLeaveOthersAlone) {
  Trace trace = small_trace(3, 30);
  for (size_t i = 0; i < trace.size(); i += 3) trace[i].abort_s = trace[i].arrival_s + 0.002 * (i % 4);
  trace[1].abort_s = 1e9;  // after it finished: no effect
  for (const EngineConfig &c : schedules()) {
    ContextHashModel model;
    const EngineResult r = run_trace(trace, c, model);
    expect_oracle(trace, r, c.describe());
    EXPECT_TRUE(r.outputs[0].finished == false) << c.describe();  // aborted on arrival
    EXPECT_TRUE(r.outputs[1].finished);
    EXPECT_EQ(r.stats.router.short_pending + r.stats.router.long_pending, 0) << c.describe();
  }
}

TEST(Engine, LapsServesShortPromptsBeforeQueuedLongOnes) {
  // Two long prompts, then a short one, all waiting when the instance starts.
  Trace trace;
  for (int64_t i = 0; i < 3; ++i) {
    Request r;
    r.id = i;
    r.prompt.assign(i < 2 ? 400 : 20, static_cast<int32_t>(i + 1));
    r.decode_steps = 1;
    trace.push_back(r);
  }
  double ttft[2];
  for (Policy p : {Policy::fifo, Policy::laps}) {
    EngineConfig c;
    c.policy = p;
    c.threshold = 64;
    c.max_prefill_tokens = 128;
    ContextHashModel model;
    const EngineResult r = run_trace(trace, c, model);
    expect_oracle(trace, r, c.describe());
    ttft[p == Policy::laps] = r.outputs[2].first_token_s - trace[2].arrival_s;
  }
  EXPECT_LT(ttft[1] * 3, ttft[0]);  // FIFO: behind 800 tokens of chunked prefill
}

TEST(Engine, MalformedTracesAreRejected) {
  ContextHashModel model;
  Trace t = small_trace(1, 3);
  t[1].id = t[0].id;
  EXPECT_THROW(run_trace(t, EngineConfig{}, model), std::invalid_argument);
  t = small_trace(1, 3);
  t[2].prompt.clear();
  EXPECT_THROW(run_trace(t, EngineConfig{}, model), std::invalid_argument);
  t = small_trace(1, 3);
  EngineConfig c;
  c.blocks_per_instance = 1;
  EXPECT_THROW(run_trace(t, c, model), std::invalid_argument);
}

TEST(Latency, NearestRankPercentilesAndRows) {
  EXPECT_EQ(percentile({5, 1, 3, 2, 4}, 50), 3);
  EXPECT_EQ(percentile({5, 1, 3, 2, 4}, 99), 5);
  EXPECT_EQ(percentile({7}, 1), 7);
  EXPECT_THROW(percentile({}, 50), std::invalid_argument);
  const Trace trace = small_trace(5, 20);
  ContextHashModel model;
  const EngineResult r = run_trace(trace, EngineConfig{}, model);
  const auto rows = ttft_rows(trace, r, "fifo", 40);
  ASSERT_EQ(rows.size(), 3u);
  EXPECT_EQ(rows[0].requests + rows[1].requests, rows[2].requests);
  EXPECT_EQ(rows[2].requests, 20);
  EXPECT_GT(rows[2].p50_ms, 0);
  EXPECT_LE(rows[2].p50_ms, rows[2].p99_ms);
  EXPECT_EQ(ttft_csv(rows).substr(0, 16), "schedule,group,r");
}

TEST(Workload, RebuildsTheSameTraceAndMixesLengths) {
  WorkloadConfig w;
  w.requests = 500;
  const Trace a = make_workload(w), b = make_workload(w);
  ASSERT_EQ(a.size(), 500u);
  int64_t shorts = 0, longest = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    EXPECT_EQ(a[i].prompt, b[i].prompt);
    EXPECT_EQ(a[i].arrival_s, b[i].arrival_s);
    const int64_t len = static_cast<int64_t>(a[i].prompt.size());
    EXPECT_GE(len, 16);
    EXPECT_LE(len, 4096);
    shorts += len <= 256;
    longest = std::max(longest, len);
    if (i) EXPECT_GE(a[i].arrival_s, a[i - 1].arrival_s);
  }
  EXPECT_GT(shorts, 300);
  EXPECT_LT(shorts, 400);
  EXPECT_GT(longest, 2048);
  w.max_len = 10;
  EXPECT_THROW(make_workload(w), std::invalid_argument);
}

}  // namespace
}  // namespace detfuzz::engine

namespace detfuzz::engine {
namespace {

// The latency model on the default mixed workload (the hash double stands in for the model: the
// clock is the cost formula, so only the schedule matters): LAPS cuts the short requests' tail
// TTFT (no short prompt waits behind a long one; the median may rise a little, as the short group
// has half the instances).
TEST(Latency, LapsCutsShortRequestTtftOnTheMixedWorkload) {
  WorkloadConfig w;
  w.requests = 600;
  w.vocab = testing::kHashVocab;
  w.rate = 40;
  const Trace trace = make_workload(w);
  std::vector<TtftRow> rows;
  for (Policy p : {Policy::fifo, Policy::laps}) {
    EngineConfig c;
    c.policy = p;
    c.instances = 4;
    c.router.laps = p == Policy::laps;
    c.router.rebalance_interval_s = 0.5;
    c.max_prefill_tokens = 4096;
    c.max_running = 32;
    ContextHashModel model;
    const EngineResult r = run_trace(trace, c, model);
    for (const auto &row : ttft_rows(trace, r, to_string(p), 256)) rows.push_back(row);
  }
  std::printf("%s", ttft_table(rows).c_str());
  EXPECT_LT(rows[3].p99_ms * 2, rows[0].p99_ms);
  EXPECT_LT(rows[3].mean_ms, rows[0].mean_ms);
}

}  // namespace
}  // namespace detfuzz::engine
