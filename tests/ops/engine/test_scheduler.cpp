// The dual-queue rules of seed 001, Feature 2: classification at the threshold, short first with
// fallback to long, head-of-line order within a queue, aborts filtered from both queues; FIFO.
#include "ops/engine/scheduler.h"

#include <gtest/gtest.h>

#include <set>

namespace detfuzz::engine {
namespace {

Request req(int64_t id, size_t len) {
  Request r;
  r.id = id;
  r.prompt.assign(len, 1);
  return r;
}

std::vector<int64_t> ids(const std::vector<const Request *> &batch) {
  std::vector<int64_t> out;
  for (const auto *r : batch) out.push_back(r->id);
  return out;
}

const auto take_all = [](const Request &) { return true; };

TEST(DualQueueScheduler, ThresholdIsInclusiveForShort) {
  DualQueueScheduler s(Policy::laps, 256);
  EXPECT_TRUE(s.is_short(req(0, 256)));
  EXPECT_FALSE(s.is_short(req(1, 257)));
  EXPECT_TRUE(s.is_short(req(2, 1)));
  const Request a = req(0, 256), b = req(1, 257);
  s.add(a);
  s.add(b);
  EXPECT_EQ(s.short_size(), 1u);
  EXPECT_EQ(s.long_size(), 1u);
}

TEST(DualQueueScheduler, ShortQueueBeforeOlderLongRequests) {
  DualQueueScheduler s(Policy::laps, 100);
  const Request l0 = req(0, 500), l1 = req(1, 300), s2 = req(2, 50), s3 = req(3, 100);
  for (const auto *r : {&l0, &l1, &s2, &s3}) s.add(*r);
  EXPECT_EQ(s.waiting(), (std::vector<int64_t>{2, 3, 0, 1}));            // the seed's synced waiting_queue
  EXPECT_EQ(ids(s.next_batch(take_all)), (std::vector<int64_t>{2, 3}));  // a batch of short ones only
  EXPECT_EQ(ids(s.next_batch(take_all)), (std::vector<int64_t>{0, 1}));  // then the long queue
  EXPECT_TRUE(s.empty());
  EXPECT_TRUE(s.next_batch(take_all).empty());
}

TEST(DualQueueScheduler, FallsBackToLongWhenShortYieldsNothing) {
  DualQueueScheduler s(Policy::laps, 100);
  const Request s0 = req(0, 10), l1 = req(1, 200);
  s.add(s0);
  s.add(l1);
  // The short head cannot be admitted (say its pages are not free): the long queue is tried.
  EXPECT_EQ(ids(s.next_batch([](const Request &r) { return r.id != 0; })), (std::vector<int64_t>{1}));
  EXPECT_EQ(s.waiting(), (std::vector<int64_t>{0}));
}

TEST(DualQueueScheduler, ABatchStopsAtTheFirstRefusedRequest) {
  DualQueueScheduler s(Policy::laps, 100);
  const Request a = req(0, 10), b = req(1, 90), c = req(2, 5);
  for (const auto *r : {&a, &b, &c}) s.add(*r);
  int64_t budget = 50;
  auto admit = [&budget](const Request &r) {
    if (static_cast<int64_t>(r.prompt.size()) > budget) return false;
    budget -= static_cast<int64_t>(r.prompt.size());
    return true;
  };
  // c would fit, but it never overtakes b in its own queue.
  EXPECT_EQ(ids(s.next_batch(admit)), (std::vector<int64_t>{0}));
  EXPECT_EQ(s.waiting(), (std::vector<int64_t>{1, 2}));
}

TEST(DualQueueScheduler, AbortsAreFilteredFromBothQueues) {
  DualQueueScheduler s(Policy::laps, 100);
  const Request a = req(0, 10), b = req(1, 900), c = req(2, 20), d = req(3, 700);
  for (const auto *r : {&a, &b, &c, &d}) s.add(*r);
  EXPECT_TRUE(s.abort(0));  // short
  EXPECT_TRUE(s.abort(3));  // long
  EXPECT_FALSE(s.abort(3));
  EXPECT_FALSE(s.abort(42));
  EXPECT_EQ(s.waiting(), (std::vector<int64_t>{2, 1}));
  EXPECT_EQ(ids(s.next_batch(take_all)), (std::vector<int64_t>{2}));
  EXPECT_EQ(ids(s.next_batch(take_all)), (std::vector<int64_t>{1}));
}

TEST(DualQueueScheduler, FifoIsOneQueueInArrivalOrder) {
  DualQueueScheduler s(Policy::fifo, 100);
  const Request l0 = req(0, 500), s1 = req(1, 50), l2 = req(2, 300);
  for (const auto *r : {&l0, &s1, &l2}) s.add(*r);
  EXPECT_EQ(s.long_size(), 0u);
  EXPECT_EQ(ids(s.next_batch(take_all)), (std::vector<int64_t>{0, 1, 2}));
}

TEST(DualQueueScheduler, PolicyNames) {
  EXPECT_EQ(policy_from_string("laps"), Policy::laps);
  EXPECT_EQ(policy_from_string("fifo"), Policy::fifo);
  EXPECT_STREQ(to_string(Policy::laps), "laps");
  EXPECT_THROW(policy_from_string("lifo"), std::invalid_argument);
}

}  // namespace
}  // namespace detfuzz::engine
