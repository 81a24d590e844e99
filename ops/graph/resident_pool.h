// Reuse, across the cases of one process, of what a prefill_graph case builds (issue 11): the
// model (weights redrawn in place for each case's seed), the KV cache (pools refilled in place
// with the NaN pattern a new cache starts with) and the batch-prefill runner with the buckets it
// has captured. On CUDA a captured graph keeps the pointers of the weights, the pools and the
// registry's buffers; every reset here writes in place, so a graph captured in an earlier case
// replays the current case's data: what an engine does, which captures once and replays forever.
//
// A case leases a Resident for its configuration (Spec) and gives it back when its lease ends;
// a case that needs two worlds (seq_alone_vs_batched) holds two leases. acquire() resets the
// resident before handing it out, so a case's bits never depend on the cases before it (the
// reuse test replays a case after others and requires the same bits). A lease ended by an
// exception destroys its resident instead of pooling it: a failed capture leaves nothing behind.
// The pool keeps at most `capacity` idle residents and drops the least recently used.
#pragma once

#include "ops/graph/prefill_runner.h"

#include <cstddef>
#include <list>
#include <memory>
#include <optional>

namespace detfuzz::graph {

class ResidentPool {
 public:
  // What a case needs. Residents match when everything but config.weight_seed agrees; a request
  // without a runner takes any matching resident (leaving its runner alone), and a request with
  // one takes a resident whose runner has the same options, or none yet (one is made).
  struct Spec {
    ModelConfig config;
    Backend backend = Backend::cpu;
    int64_t num_blocks = 1, block_size = 16;  // the KV cache's pages (page 0 is the runner's scratch)
    std::optional<RunnerOptions> runner;
  };

  class Resident {
   public:
    const Model &model() const { return model_; }
    attention::KVCache &cache() { return cache_; }
    BatchPrefillGraphRunner *runner() { return runner_.get(); }

   private:
    friend class ResidentPool;
    Resident(const Spec &spec);
    Spec spec_;
    Model model_;
    attention::KVCache cache_;
    std::unique_ptr<BatchPrefillGraphRunner> runner_;  // declared last: destroyed first
  };

  class Lease {
   public:
    Lease(ResidentPool &pool, std::unique_ptr<Resident> resident);
    Lease(Lease &&) = default;
    Lease &operator=(Lease &&) = delete;
    ~Lease();
    Resident &operator*() const { return *resident_; }
    Resident *operator->() const { return resident_.get(); }

   private:
    ResidentPool *pool_;
    std::unique_ptr<Resident> resident_;
    int exceptions_at_start_;
  };

  explicit ResidentPool(size_t capacity) : capacity_(capacity) {}
  // A resident for `spec`, reset for its weight seed: pooled when one matches, else new.
  Lease acquire(const Spec &spec);
  void clear() { idle_.clear(); }
  size_t idle() const { return idle_.size(); }
  int64_t reused() const { return reused_; }  // acquisitions served from the pool

 private:
  void give_back(std::unique_ptr<Resident> r);
  size_t capacity_;
  std::list<std::unique_ptr<Resident>> idle_;  // most recently given back first
  int64_t reused_ = 0;
};

// The process's pool, used by the prefill_graph properties.
ResidentPool &resident_pool();

}  // namespace detfuzz::graph
