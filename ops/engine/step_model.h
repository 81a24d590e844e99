// What the engine asks of a model: one forward step over a ragged batch, KV through the paged
// cache. The engine owns the cache and the block tables; the model writes each new token's K/V at
// its slot and returns, per sequence, the log_softmax of its last new token's logits.
#pragma once

#include "ops/attention/kv_cache.h"

#include <ATen/ATen.h>

#include <cstdint>
#include <vector>

namespace detfuzz::engine {

// One sequence of a step: `tokens` are new (a whole prompt, a prompt chunk, or one decode
// token), at positions context .. context + tokens.size() - 1; `context` tokens of the sequence
// are already in the cache. `blocks` are the sequence's pages, covering every position.
struct SeqWork {
  std::vector<int32_t> tokens;
  int64_t context = 0;
  std::vector<int64_t> blocks;
};

struct StepOutput {
  at::Tensor logprobs;  // [S, vocab] on the CPU, the model's dtype: log_softmax of each last token
  bool graph = false;   // the step replayed a captured graph (else it ran eagerly)
};

class StepModel {
 public:
  virtual ~StepModel() = default;
  virtual int64_t vocab() const = 0;
  // The cache layout the model writes (layers, KV heads, head dim, dtype, device).
  virtual attention::KVCacheConfig cache_config(int64_t num_blocks, int64_t page_size) const = 0;
  // prefill: every sequence is a prompt or a prompt chunk (a graph bucket may serve it); else a
  // decode step (one token per sequence).
  virtual StepOutput run(const std::vector<SeqWork> &batch, attention::KVCache &cache, bool prefill) = 0;
};

}  // namespace detfuzz::engine
