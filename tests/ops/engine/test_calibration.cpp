// The calibrated clock's fit (engine::fit_cost_model) on synthetic timings: the measured times of
// one-sequence prefills grow with the prompt, so the fitted clock must grow with it too, with a
// per-token cost above zero, and never fall as a prompt grows.
#include "ops/engine/latency.h"

#include <gtest/gtest.h>

#include <functional>
#include <stdexcept>
#include <vector>

using namespace detfuzz::engine;

namespace {

const std::vector<int64_t> kLens = {16, 32, 64, 128, 256, 512, 1024, 2048, 4096};

std::vector<CalibrationPoint> timings(const std::function<double(double)> &seconds_of) {
  std::vector<CalibrationPoint> points;
  for (int64_t t : kLens) points.push_back({t, seconds_of(static_cast<double>(t))});
  return points;
}

double pairs(double t) { return t * (t + 1) / 2; }

double clock_at(const CostModel &c, int64_t tokens) {
  StepShape s;
  s.prefill = true;
  s.seqs = 1;
  s.new_tokens = tokens;
  s.attention_pairs = tokens * (tokens + 1) / 2;
  return c.seconds(s, 0);
}

void expect_monotone_with_a_token_cost(const CostModel &c, const char *what) {
  EXPECT_GE(c.step_s, 0) << what;
  EXPECT_GT(c.token_s, 0) << what << ": the measured times grow, the fitted per-token cost is zero";
  EXPECT_GE(c.pair_s, 0) << what;
  EXPECT_EQ(c.seq_s, 0) << what;
  for (size_t i = 1; i < kLens.size(); ++i)
    EXPECT_GT(clock_at(c, kLens[i]), clock_at(c, kLens[i - 1])) << what << ": the clock falls at " << kLens[i];
}

TEST(LatencyFit, RecoversALinearClock) {
  const CostModel c = fit_cost_model(timings([](double t) { return 2e-4 + 1e-6 * t; }));
  EXPECT_NEAR(c.step_s, 2e-4, 1e-9);
  EXPECT_NEAR(c.token_s, 1e-6, 1e-12);
  EXPECT_NEAR(c.pair_s, 0, 1e-15);
  expect_monotone_with_a_token_cost(c, "linear");
}

TEST(LatencyFit, RecoversAQuadraticClockWithAllThreeTerms) {
  const CostModel c = fit_cost_model(timings([](double t) { return 3e-4 + 5e-7 * t + 2e-11 * pairs(t); }));
  EXPECT_NEAR(c.step_s, 3e-4, 1e-8);
  EXPECT_NEAR(c.token_s, 5e-7, 1e-10);
  EXPECT_NEAR(c.pair_s, 2e-11, 1e-14);
  expect_monotone_with_a_token_cost(c, "quadratic");
}

// Times that grow everywhere, but whose exact formula has a negative per-token term: a fit that
// drops a negative term and refits the rest ends with per-step and per-pair costs only, and the
// per-token cost zero. The fit must keep a positive per-token term.
TEST(LatencyFit, GrowingTimesNeverFitAZeroPerTokenCost) {
  const auto points = timings([](double t) { return 1e-3 - 1e-9 * t + 1e-10 * pairs(t); });
  for (size_t i = 1; i < points.size(); ++i) ASSERT_GT(points[i].seconds, points[i - 1].seconds);
  expect_monotone_with_a_token_cost(fit_cost_model(points), "convex");
}

// A launch-bound small model, warm: short prompts replay a graph bucket in about 0.1 ms, prompts
// past the buckets run eager from about 0.7 ms, and the time grows slowly after.
TEST(LatencyFit, LaunchBoundWarmTimingsGiveAGrowingClock) {
  const std::vector<CalibrationPoint> points = {{16, 0.10e-3},   {32, 0.10e-3},   {64, 0.11e-3},
                                                {128, 0.11e-3},  {256, 0.12e-3},  {512, 0.70e-3},
                                                {1024, 0.76e-3}, {2048, 0.83e-3}, {4096, 0.97e-3}};
  expect_monotone_with_a_token_cost(fit_cost_model(points), "launch-bound");
}

// Times that do not grow (each short prompt timed with a graph capture in it) may fit no growth,
// but never a falling clock.
TEST(LatencyFit, TimesThatDoNotGrowStillFitANonNegativeClock) {
  const CostModel c = fit_cost_model({{16, 2.28e-3}, {64, 2.18e-3}, {256, 2.23e-3}, {1024, 0.763e-3}, {4096, 0.97e-3}});
  EXPECT_GT(c.step_s + c.token_s + c.pair_s, 0);
  EXPECT_GE(c.step_s, 0);
  EXPECT_GE(c.token_s, 0);
  EXPECT_GE(c.pair_s, 0);
}

TEST(LatencyFit, MalformedPointsAreRejected) {
  EXPECT_THROW(fit_cost_model({}), std::invalid_argument);
  EXPECT_THROW(fit_cost_model({{0, 1e-3}}), std::invalid_argument);
  EXPECT_THROW(fit_cost_model({{16, 0.0}}), std::invalid_argument);
  EXPECT_THROW(fit_cost_model({{16, -1e-3}, {64, 1e-3}}), std::invalid_argument);
}

}  // namespace
