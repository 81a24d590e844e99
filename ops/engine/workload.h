// Traces for the latency model and the GPU check: a seeded mixed workload, rebuilt bit for bit
// from its parameters on any machine (the counter-based generator of ops/counter_rng.h, no global RNG).
//
// Prompt lengths: a `short_share` of requests draw log-uniformly from [min_len, short_max], the
// rest from (short_max, max_len]. Arrivals: a Poisson process of `rate` requests per second.
// Token ids are uniform in [0, vocab); a `shared_share` of requests open with one of a few
// system prompts (`shared_len` tokens; a shorter prompt is all system prompt), so the prefix
// cache has something to reuse.
#pragma once

#include "ops/engine/request.h"

#include <string>

namespace detfuzz::engine {

struct WorkloadConfig {
  uint64_t seed = 1;
  int64_t requests = 1000;
  int64_t min_len = 16, short_max = 256, max_len = 4096;
  double short_share = 0.7;
  double rate = 50;  // requests per second
  int64_t decode_steps = 4;
  int64_t vocab = 256;
  double shared_share = 0.3;
  int64_t shared_len = 64, shared_prompts = 4;
  std::string describe() const;
};

Trace make_workload(const WorkloadConfig &c);  // throws std::invalid_argument for impossible parameters

}  // namespace detfuzz::engine
