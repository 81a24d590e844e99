// What the engine asks of a model. A StepModel holds the weights; each engine instance (one
// simulated prefill server) gets its own ModelInstance, which owns that server's paged KV cache
// and whatever the model keeps per cache (the graph runner's captured buckets). The engine owns
// the block tables; a step writes each new token's K/V at its slot and returns, per sequence, the
// log_softmax of its last new token's logits.
#pragma once

#include <ATen/ATen.h>

#include <cstdint>
#include <memory>
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
  at::Tensor logprobs;  // [S, vocab] on the CPU: log_softmax of each sequence's last new token
  bool graph = false;   // the step ran in a graph bucket: a CUDA graph replay (on the CPU the
                        // bucket's static-shape forward over the runner's buffers); else eager
};

class ModelInstance {
 public:
  virtual ~ModelInstance() = default;
  // prefill: every sequence is a prompt or a prompt chunk (a graph bucket may serve it); else a
  // decode step (one token per sequence).
  virtual StepOutput run(const std::vector<SeqWork> &batch, bool prefill) = 0;
};

class StepModel {
 public:
  virtual ~StepModel() = default;
  virtual int64_t vocab() const = 0;
  // Page ids [0, reserved_pages()) belong to the model (the graph runner's scratch page): the
  // engine never hands them to a sequence.
  virtual int64_t reserved_pages() const { return 0; }
  // A server's instance with a cache of `num_pages` pages of `page_size` tokens (reserved ones
  // included); no sequence will hold more than `max_seq_pages` pages.
  virtual std::unique_ptr<ModelInstance> instance(int64_t num_pages, int64_t page_size, int64_t max_seq_pages) = 0;
};

}  // namespace detfuzz::engine
