// KV pages of one engine instance: a block allocator with prefix reuse.
//
// Pages are physical blocks of attention::KVCache (ops/attention/kv_cache.h: pools
// [num_blocks, block_size, H_kv, D], written through set_kv by slot mapping); ids come from
// attention::BlockAllocator. On top of it this class keeps a reference count per page and a
// prefix index: once a prompt's KV is written, each of its full pages is indexed by (the page
// before it, the page's own tokens), so a later prompt that starts with the same tokens points its
// block table at those pages and computes only the rest (a prefill chunk over an existing prefix).
// Keys are exact (no hash collisions): a page matches only when every earlier page matched too.
//
// A released page that is indexed stays cached until its blocks are needed; then the least
// recently released one is evicted, and with it the index entries of pages chained behind it
// (their keys name it as parent, so they could otherwise match a reused id).
#pragma once

#include "ops/attention/kv_cache.h"

#include <cstdint>
#include <map>
#include <optional>
#include <set>
#include <utility>
#include <vector>

namespace detfuzz::engine {

class PrefixBlockManager {
 public:
  // Blocks [0, reserved) are never handed out (the model's own pages, e.g. a graph scratch page).
  PrefixBlockManager(int64_t num_blocks, int64_t page_size, bool reuse, int64_t reserved = 0);

  struct Lease {
    std::vector<int64_t> blocks;  // pages of the whole sequence, in order
    int64_t cached_tokens = 0;    // leading prompt tokens whose KV is already in those pages
  };
  // Pages for a sequence of `total_tokens` tokens that starts with `prompt`: the longest run of
  // indexed full prompt pages (at most prompt.size() - 1 tokens: the last prompt token is always
  // computed, it gives the logits), then fresh pages. nullopt when too few pages are free or
  // evictable; nothing changes then.
  std::optional<Lease> acquire(const std::vector<int32_t> &prompt, int64_t total_tokens);
  // The prompt's KV is written: index its full pages (no-op without reuse).
  void publish(const std::vector<int32_t> &prompt, const std::vector<int64_t> &blocks);
  // The sequence is done with its pages.
  void release(const std::vector<int64_t> &blocks);

  int64_t num_blocks() const { return allocator_.num_blocks(); }
  int64_t page_size() const { return page_size_; }
  int64_t num_free() const { return allocator_.num_free(); }
  int64_t num_cached_idle() const { return static_cast<int64_t>(idle_.size()); }  // indexed, unreferenced
  int64_t num_indexed() const { return static_cast<int64_t>(index_.size()); }
  int64_t ref_count(int64_t block) const { return refs_.at(block); }

 private:
  using Key = std::pair<int64_t, std::vector<int32_t>>;  // (parent page or -1, the page's tokens)
  Key key_of(const std::vector<int32_t> &prompt, int64_t page, int64_t parent) const;
  int64_t take_block();         // a free block, evicting the least recently released cached page if needed
  void unindex(int64_t block);  // drops its key and those of pages chained behind it

  attention::BlockAllocator allocator_;
  int64_t page_size_;
  bool reuse_;
  std::vector<int64_t> refs_;
  std::map<Key, int64_t> index_;
  std::vector<std::optional<Key>> key_;          // per block: its index key when indexed
  std::vector<std::vector<int64_t>> children_;   // per block: indexed pages whose parent it is
  std::set<std::pair<uint64_t, int64_t>> idle_;  // (release tick, block): indexed, refs 0
  std::vector<uint64_t> idle_tick_;
  uint64_t tick_ = 0;
};

}  // namespace detfuzz::engine
