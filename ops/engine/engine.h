// The trace-driven engine: N simulated prefill instances behind the LAPS router, each with its
// own waiting queue (FIFO or LAPS dual queue), KV cache and prefix-reusing block manager, all
// running one shared model (StepModel).
//
// Time is simulated. Events are processed in time order (at equal times: step completions,
// then aborts, then arrivals in (time, id) order, then idle instances start steps in index order),
// so a run is a pure function of the trace, the config and the cost model: a property case
// replays exactly. A step's forward runs when the step starts; its duration comes from the cost
// model (a formula, or the step's measured wall time on the GPU), and its tokens count as ready
// when it ends: that is when time-to-first-token is read.
//
// An instance's step (SGLang's prefill-first loop):
//   1. a prefill batch: the chunked request in progress first (its next chunk), then requests from
//      the scheduler while the token budget, the KV pages (reserved up front for prompt + decode
//      tokens, minus reused prefix pages) and max_running allow; a prompt longer than the budget
//      left is chunked (one chunked request per instance at a time);
//   2. else a decode batch of every sequence that has tokens left to generate;
//   3. else idle.
// Greedy decoding: the next token is the first index of the largest log-probability.
#pragma once

#include "ops/engine/block_manager.h"
#include "ops/engine/request.h"
#include "ops/engine/router.h"
#include "ops/engine/scheduler.h"
#include "ops/engine/step_model.h"

#include <string>
#include <vector>

namespace detfuzz::engine {

struct StepShape {
  bool prefill = false, graph = false;
  int64_t seqs = 0, new_tokens = 0;
  int64_t attention_pairs = 0;  // sum over sequences of new tokens x keys they see
};

// The simulated duration of a step: step_s + seq_s * seqs + token_s * new_tokens + pair_s *
// attention_pairs, or (measured) the step's wall time. The defaults are of the order of an 8B
// model's prefill on one Hopper GPU; they shape the latency model's table on the CPU only.
struct CostModel {
  bool measured = false;
  double step_s = 4e-3, seq_s = 5e-5, token_s = 6e-5, pair_s = 4e-9;
  double seconds(const StepShape &s, double wall_s) const;
};

struct EngineConfig {
  Policy policy = Policy::fifo;  // each instance's waiting queue
  int64_t threshold = 256;       // the dual queue's short/long threshold (prompt tokens)
  int64_t instances = 1;
  RouterConfig router;  // router.laps: dynamic short/long groups (needs >= 2 instances)
  int64_t page_size = 16;
  int64_t blocks_per_instance = 0;  // 0: enough for every request of the trace at once
  bool prefix_reuse = true;
  int64_t max_prefill_tokens = 512;  // new tokens per prefill step; longer prompts are chunked
  int64_t max_running = 16;          // sequences an instance holds (prefilling or decoding)
  CostModel cost;
  std::string describe() const;  // one line
};

struct EngineStats {
  int64_t steps = 0, prefill_steps = 0, decode_steps = 0, graph_steps = 0;
  int64_t reused_tokens = 0, chunked_prefills = 0, aborted = 0;
  double end_s = 0;
  RouterStatus router;
};

struct EngineResult {
  std::vector<RequestOutput> outputs;  // in trace order
  EngineStats stats;
};

// Throws std::invalid_argument for a malformed trace (duplicate ids, empty prompt, negative
// decode steps) or config; the model's own errors propagate.
EngineResult run_trace(const Trace &trace, const EngineConfig &config, StepModel &model);

// The first index of the largest value of a [vocab] row (NaNs never win).
int32_t greedy_token(const at::Tensor &logprobs_row);

}  // namespace detfuzz::engine
