// `detfuzz laps`: a seeded mixed workload run under FIFO and under LAPS (dual queues + router
// groups) on the engine, compared request by request bit for bit (the schedule_invariance case
// with base=fifo), and the latency model's time-to-first-token table, FIFO against LAPS.
// Writes a report folder: cases.csv (the case, replayable), ttft.csv, requests.csv, summary.json.
#pragma once

#include <cstdint>
#include <iosfwd>
#include <string>

namespace detfuzz {

struct LapsOptions {
  std::string backend = "auto", impl = "invariant", dtype, clock = "auto", out;
  uint64_t seed = 1;
  int64_t requests = 1000, min_len = 16, short_max = 256, max_len = 4096, decode_steps = 4;
  double load = 0.9;  // offered load: the arrival rate as a share of the instances' prefill capacity
  int64_t instances = 4, threshold = 256, budget = 4096, max_running = 32;
  double rebalance_interval_ms = 500, rebalance_ratio = 2.0;
};

// Exit 0 when every request kept its bits (or the impl is observed), 1 when a must-hold impl
// changed bits; throws UsageError for bad options.
int run_laps_command(const LapsOptions &o, const std::string &command_line, std::ostream &log);

}  // namespace detfuzz
