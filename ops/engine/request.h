// Requests, traces and per-request outputs of the trace-driven engine (ops/engine).
//
// A request is a prompt of token ids and a number of greedy decode steps. It arrives at a time
// (simulated seconds) and may be aborted at a later one. Its output is the stream of token ids it
// generated (the first from its prefill, one more per decode step) and the log-probabilities of
// the step that produced its last token, kept as a tensor so that they can be compared bit for bit.
#pragma once

#include <ATen/ATen.h>

#include <cstdint>
#include <vector>

namespace detfuzz::engine {

struct Request {
  int64_t id = 0;               // unique within a trace; outputs are indexed by it
  std::vector<int32_t> prompt;  // at least one token
  int64_t decode_steps = 0;     // greedy tokens generated after the prefill's token
  double arrival_s = 0;         // when it reaches the router
  double abort_s = -1;          // when it is aborted (< 0: never)
};

using Trace = std::vector<Request>;

struct RequestOutput {
  bool finished = false;        // false: aborted (or never served)
  std::vector<int32_t> tokens;  // 1 + decode_steps ids when finished
  at::Tensor final_logprobs;    // [vocab] log_softmax of the last step's logits (model dtype, CPU)
  int64_t instance = -1;        // where the router sent it
  int64_t cached_tokens = 0;    // prompt tokens whose KV came from the prefix cache
  int64_t prefill_chunks = 0;   // steps its prompt took
  double first_token_s = -1;    // simulated time its first token was ready
  double finish_s = -1;
};

}  // namespace detfuzz::engine
