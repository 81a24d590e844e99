#include "ops/engine/block_manager.h"

#include <c10/util/Exception.h>

#include <algorithm>

namespace detfuzz::engine {

PrefixBlockManager::PrefixBlockManager(int64_t num_blocks, int64_t page_size, bool reuse, int64_t reserved)
    : allocator_(num_blocks),
      page_size_(page_size),
      reuse_(reuse),
      refs_(num_blocks, 0),
      key_(num_blocks),
      children_(num_blocks),
      idle_tick_(num_blocks, 0) {
  TORCH_CHECK(page_size > 0, "PrefixBlockManager: page_size must be positive, got ", page_size);
  TORCH_CHECK(reserved >= 0 && reserved <= num_blocks, "PrefixBlockManager: cannot reserve ", reserved, " of ",
              num_blocks, " blocks");
  for (int64_t b : allocator_.allocate(reserved)) refs_[b] = 1;  // the allocator hands out 0, 1, ... first
}

PrefixBlockManager::Key PrefixBlockManager::key_of(const std::vector<int32_t> &prompt, int64_t page,
                                                   int64_t parent) const {
  const auto begin = prompt.begin() + page * page_size_;
  return {parent, std::vector<int32_t>(begin, begin + page_size_)};
}

std::optional<PrefixBlockManager::Lease> PrefixBlockManager::acquire(const std::vector<int32_t> &prompt,
                                                                     int64_t total_tokens) {
  TORCH_CHECK(!prompt.empty() && total_tokens >= static_cast<int64_t>(prompt.size()),
              "PrefixBlockManager::acquire: a sequence of ", total_tokens, " tokens cannot hold a prompt of ",
              prompt.size());
  std::vector<int64_t> matched;
  if (reuse_) {
    const int64_t reusable_pages = (static_cast<int64_t>(prompt.size()) - 1) / page_size_;
    for (int64_t j = 0; j < reusable_pages; ++j) {
      const auto it = index_.find(key_of(prompt, j, matched.empty() ? -1 : matched.back()));
      if (it == index_.end()) break;
      matched.push_back(it->second);
    }
  }
  const int64_t pages = (total_tokens + page_size_ - 1) / page_size_;
  const int64_t fresh = pages - static_cast<int64_t>(matched.size());
  int64_t matched_idle = 0;
  for (int64_t b : matched) matched_idle += refs_[b] == 0;
  if (fresh > allocator_.num_free() + num_cached_idle() - matched_idle) return std::nullopt;

  Lease lease;
  for (int64_t b : matched) {
    if (refs_[b]++ == 0) idle_.erase({idle_tick_[b], b});
    lease.blocks.push_back(b);
  }
  lease.cached_tokens = static_cast<int64_t>(matched.size()) * page_size_;
  for (int64_t j = 0; j < fresh; ++j) {
    const int64_t b = take_block();
    refs_[b] = 1;
    lease.blocks.push_back(b);
  }
  return lease;
}

int64_t PrefixBlockManager::take_block() {
  if (allocator_.num_free() == 0) {
    TORCH_CHECK(!idle_.empty(), "PrefixBlockManager: no block free or evictable");
    unindex(idle_.begin()->second);  // the least recently released cached page (and its chain)
  }
  return allocator_.allocate();
}

void PrefixBlockManager::unindex(int64_t block) {
  if (!key_[block]) return;
  index_.erase(*key_[block]);
  const int64_t parent = key_[block]->first;
  if (parent >= 0) {
    auto &siblings = children_[parent];
    siblings.erase(std::find(siblings.begin(), siblings.end(), block));
  }
  key_[block].reset();
  const std::vector<int64_t> chained = children_[block];
  for (int64_t c : chained) unindex(c);
  if (refs_[block] == 0) {
    idle_.erase({idle_tick_[block], block});
    allocator_.free(block);
  }
}

void PrefixBlockManager::publish(const std::vector<int32_t> &prompt, const std::vector<int64_t> &blocks) {
  if (!reuse_) return;
  const int64_t full = static_cast<int64_t>(prompt.size()) / page_size_;
  TORCH_CHECK(static_cast<int64_t>(blocks.size()) >= full, "PrefixBlockManager::publish: ", blocks.size(),
              " pages for a prompt of ", full, " full pages");
  for (int64_t j = 0; j < full; ++j) {
    const int64_t b = blocks[j];
    Key k = key_of(prompt, j, j == 0 ? -1 : blocks[j - 1]);
    const auto it = index_.find(k);
    if (it != index_.end()) {
      if (it->second == b) continue;  // a page this prompt reused
      return;                         // the same tokens were published on other pages first: keep that chain
    }
    if (key_[b]) return;  // cannot happen for a prompt's own pages; never index a page twice
    if (j > 0) children_[blocks[j - 1]].push_back(b);
    key_[b] = k;
    index_.emplace(std::move(k), b);
  }
}

void PrefixBlockManager::release(const std::vector<int64_t> &blocks) {
  for (int64_t b : blocks) {
    TORCH_CHECK(b >= 0 && b < num_blocks() && refs_[b] > 0, "PrefixBlockManager::release: block ", b, " is not held");
    if (--refs_[b] > 0) continue;
    if (key_[b]) {
      idle_tick_[b] = ++tick_;
      idle_.insert({idle_tick_[b], b});
    } else {
      allocator_.free(b);
    }
  }
}

}  // namespace detfuzz::engine
