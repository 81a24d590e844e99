// The KV page manager: page counts, prefix reuse (full pages only, never the last prompt token,
// exact chains), reference counts, eviction of the least recently released cached page with the
// pages chained behind it, and a refused acquire that changes nothing.
#include "ops/engine/block_manager.h"

#include <gtest/gtest.h>

#include <numeric>
#include <set>

namespace detfuzz::engine {
namespace {

std::vector<int32_t> tokens(int64_t n, int32_t first = 0) {
  std::vector<int32_t> t(n);
  std::iota(t.begin(), t.end(), first);
  return t;
}

TEST(PrefixBlockManager, FreshPagesForPromptAndDecodeTokens) {
  PrefixBlockManager m(10, 4, true);
  const auto lease = m.acquire(tokens(9), 9 + 3);  // 12 tokens: 3 pages
  ASSERT_TRUE(lease);
  EXPECT_EQ(lease->blocks.size(), 3u);
  EXPECT_EQ(lease->cached_tokens, 0);
  EXPECT_EQ(m.num_free(), 7);
  m.release(lease->blocks);
  EXPECT_EQ(m.num_free(), 10);  // nothing was published: every page is free again
}

TEST(PrefixBlockManager, ReusesPublishedFullPagesButNeverTheLastPromptToken) {
  PrefixBlockManager m(20, 4, true);
  const auto a = m.acquire(tokens(10), 10);
  m.publish(tokens(10), a->blocks);  // pages 0 and 1 are full
  EXPECT_EQ(m.num_indexed(), 2);
  // Same first 8 tokens, longer: both pages reused.
  const auto b = m.acquire(tokens(12), 12);
  EXPECT_EQ(b->cached_tokens, 8);
  EXPECT_EQ(std::vector<int64_t>(b->blocks.begin(), b->blocks.begin() + 2),
            std::vector<int64_t>(a->blocks.begin(), a->blocks.begin() + 2));
  EXPECT_EQ(m.ref_count(a->blocks[0]), 2);
  // Exactly the 8 cached tokens: only the first page, so the 8th token is computed again.
  const auto c = m.acquire(tokens(8), 8);
  EXPECT_EQ(c->cached_tokens, 4);
  EXPECT_NE(c->blocks[1], a->blocks[1]);
}

TEST(PrefixBlockManager, AMatchNeedsEveryEarlierPageToMatch) {
  PrefixBlockManager m(20, 4, true);
  auto p = tokens(9);
  const auto a = m.acquire(p, 9);
  m.publish(p, a->blocks);
  auto q = p;
  q[1] = 99;  // page 0 differs, page 1 has the same tokens
  EXPECT_EQ(m.acquire(q, 9)->cached_tokens, 0);
  auto r = p;
  r[5] = 99;  // page 1 differs
  EXPECT_EQ(m.acquire(r, 9)->cached_tokens, 4);
}

TEST(PrefixBlockManager, NoReuseWhenDisabled) {
  PrefixBlockManager m(20, 4, false);
  const auto a = m.acquire(tokens(10), 10);
  m.publish(tokens(10), a->blocks);
  EXPECT_EQ(m.num_indexed(), 0);
  EXPECT_EQ(m.acquire(tokens(10), 10)->cached_tokens, 0);
}

TEST(PrefixBlockManager, ReleasedCachedPagesStayUntilEvicted) {
  PrefixBlockManager m(4, 4, true);
  const auto a = m.acquire(tokens(9), 9);  // 3 pages, 2 full
  m.publish(tokens(9), a->blocks);
  m.release(a->blocks);
  EXPECT_EQ(m.num_free(), 2);  // the partial page is free, the two full ones stay cached
  EXPECT_EQ(m.num_cached_idle(), 2);
  const auto b = m.acquire(tokens(9), 9);  // reuses both, needs one fresh
  EXPECT_EQ(b->cached_tokens, 8);
  EXPECT_EQ(m.num_cached_idle(), 0);
  m.release(b->blocks);
  // A different prompt of 4 pages: evicts both cached pages (and drops their index entries).
  const auto c = m.acquire(tokens(16, 100), 16);
  ASSERT_TRUE(c);
  EXPECT_EQ(m.num_indexed(), 0);
  EXPECT_EQ(m.num_free(), 0);
  m.release(c->blocks);
  EXPECT_EQ(m.acquire(tokens(9), 9)->cached_tokens, 0);
}

TEST(PrefixBlockManager, EvictingAPageDropsThePagesChainedBehindIt) {
  PrefixBlockManager m(5, 2, true);
  const auto p = tokens(7);  // pages 0..2 full
  const auto a = m.acquire(p, 7);
  m.publish(p, a->blocks);
  m.release(a->blocks);
  EXPECT_EQ(m.num_cached_idle(), 3);
  EXPECT_EQ(m.num_free(), 2);
  // Needs 3 pages: 2 free, then the least recently released cached page: page 0 went first, and
  // its chained pages 1 and 2 lose their index entries with it (they are free again).
  const auto b = m.acquire(tokens(6, 50), 6);
  ASSERT_TRUE(b);
  EXPECT_EQ(m.num_indexed(), 0);
  EXPECT_EQ(m.num_free(), 2);
}

TEST(PrefixBlockManager, ARefusedAcquireChangesNothing) {
  PrefixBlockManager m(3, 4, true);
  const auto a = m.acquire(tokens(9), 9);
  m.publish(tokens(9), a->blocks);
  EXPECT_FALSE(m.acquire(tokens(9), 13));  // would reuse 2 and need 2 fresh: 0 free
  EXPECT_EQ(m.ref_count(a->blocks[0]), 1);
  EXPECT_EQ(m.num_free(), 0);
  m.release(a->blocks);
  EXPECT_TRUE(m.acquire(tokens(9), 12));  // 2 reused + 1 fresh
}

TEST(PrefixBlockManager, ReleasingAPageNotHeldIsAnError) {
  PrefixBlockManager m(3, 4, true);
  const auto a = m.acquire(tokens(3), 3);
  m.release(a->blocks);
  EXPECT_THROW(m.release(a->blocks), c10::Error);
}

}  // namespace
}  // namespace detfuzz::engine

namespace detfuzz::engine {
namespace {

TEST(PrefixBlockManager, ReservedBlocksAreNeverHandedOut) {
  PrefixBlockManager m(6, 4, true, 2);
  EXPECT_EQ(m.num_free(), 4);
  const auto a = m.acquire(std::vector<int32_t>(16, 1), 16);
  ASSERT_TRUE(a);
  for (int64_t b : a->blocks) EXPECT_GE(b, 2);
  EXPECT_FALSE(m.acquire(std::vector<int32_t>(1, 1), 1));
}

}  // namespace
}  // namespace detfuzz::engine
