// The router rules of seed 001, Feature 3: the initial split, classification by estimated
// tokens, least-loaded routing within a group, pending counters, and rebalancing (time-gated, at
// most one instance per interval, ratio strictly exceeded, at least one instance per group).
#include "ops/engine/router.h"

#include <gtest/gtest.h>

namespace detfuzz::engine {
namespace {

Request req(int64_t id, size_t len) {
  Request r;
  r.id = id;
  r.prompt.assign(len, 3);
  return r;
}

RouterConfig laps(int64_t threshold = 100, double interval = 5, double ratio = 2) {
  RouterConfig c;
  c.laps = true;
  c.threshold = threshold;
  c.rebalance_interval_s = interval;
  c.rebalance_ratio = ratio;
  return c;
}

TEST(LapsRouter, FirstHalfShortSecondHalfLong) {
  EXPECT_EQ(LapsRouter(4, laps()).status().short_group, (std::vector<int64_t>{0, 1}));
  EXPECT_EQ(LapsRouter(4, laps()).status().long_group, (std::vector<int64_t>{2, 3}));
  EXPECT_EQ(LapsRouter(5, laps()).status().short_group, (std::vector<int64_t>{0, 1}));
  EXPECT_EQ(LapsRouter(5, laps()).status().long_group, (std::vector<int64_t>{2, 3, 4}));
}

TEST(LapsRouter, OneInstanceDisablesLaps) {
  LapsRouter r(1, laps());
  EXPECT_FALSE(r.enabled());
  EXPECT_EQ(r.route(req(0, 5000), 0).instance, 0);
  EXPECT_FALSE(r.status().enabled);
}

TEST(LapsRouter, ClassifiesByEstimatedTokens) {
  LapsRouter r(2, laps(100));
  EXPECT_EQ(r.classify(req(0, 100)), Group::short_group);
  EXPECT_EQ(r.classify(req(0, 101)), Group::long_group);
  EXPECT_EQ(LapsRouter::estimate_prompt_tokens(req(0, 77)), 77);
}

TEST(LapsRouter, LeastLoadedInstanceOfTheGroupAndPendingCounters) {
  LapsRouter r(4, laps(100, 1e9));
  const auto a = r.route(req(0, 10), 0), b = r.route(req(1, 10), 0), c = r.route(req(2, 10), 0);
  EXPECT_EQ(a.instance, 0);
  EXPECT_EQ(b.instance, 1);
  EXPECT_EQ(c.instance, 0);  // both loaded once: the lowest index
  const auto d = r.route(req(3, 1000), 0);
  EXPECT_EQ(d.instance, 2);
  EXPECT_EQ(d.group, Group::long_group);
  EXPECT_EQ(r.status().short_pending, 3);
  EXPECT_EQ(r.status().long_pending, 1);
  r.done(a);
  r.done(d);
  EXPECT_EQ(r.status().short_pending, 2);
  EXPECT_EQ(r.status().long_pending, 0);
  EXPECT_EQ(r.load(0), 1);
  EXPECT_EQ(r.route(req(4, 10), 0).instance, 0);  // 0 and 1 both at one again
  EXPECT_THROW(r.done(d), c10::Error);            // instance 2 has nothing pending
}

TEST(LapsRouter, RebalanceMovesOneInstancePerIntervalTowardTheBusyGroup) {
  LapsRouter r(6, laps(100, 5.0, 2.0));
  for (int i = 0; i < 7; ++i) r.route(req(i, 10), 1.0);  // no check yet: 1 s < 5 s since start
  EXPECT_EQ(r.status().short_group.size(), 3u);
  // short 7 > long 0 * 2: one long instance moves at the first check after the interval.
  EXPECT_TRUE(r.maybe_rebalance(5.0));
  EXPECT_EQ(r.status().short_group.size(), 4u);
  EXPECT_EQ(r.status().long_group, (std::vector<int64_t>{3, 4}));  // the idle one with the highest index left
  EXPECT_FALSE(r.maybe_rebalance(9.0));                            // within the interval: nothing
  EXPECT_TRUE(r.maybe_rebalance(10.0));
  EXPECT_EQ(r.status().long_group, (std::vector<int64_t>{3}));
  EXPECT_FALSE(r.maybe_rebalance(20.0));  // the long group keeps its last instance
  EXPECT_EQ(r.status().long_group, (std::vector<int64_t>{3}));
  EXPECT_EQ(r.status().rebalances, 2);
}

TEST(LapsRouter, RebalanceNeedsTheRatioStrictlyExceeded) {
  LapsRouter r(4, laps(100, 1.0, 2.0));
  for (int i = 0; i < 2; ++i) r.route(req(i, 1000), 0);     // long 2
  for (int i = 0; i < 4; ++i) r.route(req(10 + i, 10), 0);  // short 4 = 2 * 2
  EXPECT_FALSE(r.maybe_rebalance(1.0));
  r.route(req(20, 10), 0);  // short 5 > 4
  EXPECT_TRUE(r.maybe_rebalance(2.0));
  EXPECT_EQ(r.status().short_group, (std::vector<int64_t>{0, 1, 3}));
}

TEST(LapsRouter, RebalanceTowardTheLongGroup) {
  LapsRouter r(4, laps(100, 1.0, 1.5));
  for (int i = 0; i < 4; ++i) r.route(req(i, 1000), 0);
  r.route(req(9, 10), 0);
  EXPECT_TRUE(r.maybe_rebalance(1.0));  // long 4 > short 1 * 1.5
  EXPECT_EQ(r.status().short_group, (std::vector<int64_t>{0}));
  EXPECT_EQ(r.status().long_group, (std::vector<int64_t>{1, 2, 3}));
  EXPECT_FALSE(r.maybe_rebalance(3.0));  // the short group keeps one
}

TEST(LapsRouter, RouteChecksTheRebalanceFirst) {
  LapsRouter r(2, laps(100, 1.0, 2.0));
  EXPECT_EQ(r.route(req(0, 10), 0.5).instance, 0);
  // At t = 1 the check runs before routing, but 1 pending short vs 0 long cannot move the long
  // group's only instance: a long request still goes to instance 1.
  EXPECT_EQ(r.route(req(1, 500), 1.0).instance, 1);
}

TEST(LapsRouter, StatusIsTheSeedsLapsStatus) {
  LapsRouter r(3, laps(256));
  r.route(req(0, 1000), 0);
  EXPECT_EQ(r.status().json(),
            "{\"enabled\":true,\"threshold\":256,\"short_group\":[0],\"long_group\":[1,2],\"short_pending\":0,"
            "\"long_pending\":1,\"rebalances\":0}");
}

TEST(LapsRouter, LeastLoadedOverAllInstancesWhenLapsIsOff) {
  RouterConfig c = laps();
  c.laps = false;
  LapsRouter r(3, c);
  EXPECT_EQ(r.route(req(0, 1000), 0).instance, 0);
  EXPECT_EQ(r.route(req(1, 10), 0).instance, 1);
  EXPECT_EQ(r.route(req(2, 10), 0).instance, 2);
  EXPECT_EQ(r.route(req(3, 10), 0).instance, 0);
}

}  // namespace
}  // namespace detfuzz::engine
