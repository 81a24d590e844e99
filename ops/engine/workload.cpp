#include "ops/engine/workload.h"

#include "ops/counter_rng.h"

#include <cmath>
#include <sstream>
#include <stdexcept>

namespace detfuzz::engine {
namespace {

// Uniform in [0, 1) keyed by (seed, stream, index). The index enters by xor, not by the add of
// counter_bits: every saved trace was drawn that way.
double uniform(uint64_t seed, uint64_t stream, uint64_t index) {
  return counter_unit(splitmix64(tensor_key(seed, stream) ^ index));
}

}  // namespace

std::string WorkloadConfig::describe() const {
  std::ostringstream o;
  o << requests << " requests, prompts " << min_len << "-" << max_len << " tokens (" << short_share * 100
    << "% <= " << short_max << "), " << rate << " req/s, " << decode_steps << " decode steps, seed " << seed;
  return o.str();
}

Trace make_workload(const WorkloadConfig &c) {
  if (c.requests < 1 || c.min_len < 1 || c.short_max < c.min_len || c.max_len <= c.short_max || c.vocab < 2 ||
      !(c.rate > 0) || c.decode_steps < 0 || c.short_share < 0 || c.short_share > 1 || c.shared_len < 0 ||
      c.shared_prompts < 1)
    throw std::invalid_argument("workload: impossible parameters (" + c.describe() + ")");
  enum Stream : uint64_t { kind, length, gap, shared, which, token };
  Trace trace;
  double t = 0;
  for (int64_t i = 0; i < c.requests; ++i) {
    const uint64_t u = static_cast<uint64_t>(i);
    const bool is_short = uniform(c.seed, kind, u) < c.short_share;
    const double lo = is_short ? c.min_len : c.short_max + 1, hi = is_short ? c.short_max : c.max_len;
    const int64_t len = std::min<int64_t>(
        static_cast<int64_t>(std::exp(std::log(lo) + uniform(c.seed, length, u) * (std::log(hi + 1) - std::log(lo)))),
        static_cast<int64_t>(hi));
    Request r;
    r.id = i;
    r.decode_steps = c.decode_steps;
    t += -std::log(1 - uniform(c.seed, gap, u)) / c.rate;
    r.arrival_s = t;
    const bool with_system = uniform(c.seed, shared, u) < c.shared_share;
    const uint64_t system = static_cast<uint64_t>(uniform(c.seed, which, u) * static_cast<double>(c.shared_prompts));
    for (int64_t p = 0; p < len; ++p) {
      const bool from_system = with_system && p < c.shared_len;
      const uint64_t h = from_system
                             ? splitmix64(splitmix64(c.seed ^ 0x5157e3ull) ^ (system << 32 | static_cast<uint64_t>(p)))
                             : splitmix64(splitmix64(c.seed ^ token) ^ (u << 32 | static_cast<uint64_t>(p)));
      r.prompt.push_back(static_cast<int32_t>(h % static_cast<uint64_t>(c.vocab)));
    }
    trace.push_back(std::move(r));
  }
  return trace;
}

}  // namespace detfuzz::engine
