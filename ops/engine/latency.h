// The latency model: time-to-first-token of a trace's requests under a schedule, read from the
// engine's simulated clock (the cost model's step durations on the CPU, measured step times on
// the GPU). TTFT = first token ready - arrival, for finished requests only.
#pragma once

#include "ops/engine/engine.h"

#include <string>
#include <vector>

namespace detfuzz::engine {

struct TtftRow {
  std::string schedule;  // a label: "fifo", "laps", ...
  std::string group;     // "short" (prompt <= threshold), "long", "all"
  int64_t requests = 0;
  double p50_ms = 0, p99_ms = 0, mean_ms = 0, max_ms = 0;
};

// One point of a clock's calibration: a one-sequence prefill step of `tokens` new tokens (from an
// empty cache) and the seconds it took.
struct CalibrationPoint {
  int64_t tokens = 0;
  double seconds = 0;
};

// The calibrated clock: CostModel's step_s + token_s * tokens + pair_s * attention pairs (seq_s =
// 0; a point's pairs are tokens * (tokens + 1) / 2) fitted by least squares with every coefficient
// >= 0, so the clock never falls as a prompt grows: of the fits over each subset of the three
// terms whose coefficients all come out positive, the one of least squared error. When the
// measured time grows from the shortest prompt to the longest, only fits with a per-token term
// count (every token costs its matmuls; a fit of per-step and per-pair terms alone would put
// a 256-token prefill at nearly the cost of a 16-token one). Throws std::invalid_argument for no
// points, a non-positive token count or a time that is not positive and finite.
CostModel fit_cost_model(const std::vector<CalibrationPoint> &points);

// Nearest-rank percentile (q in (0, 100]) of a non-empty sample.
double percentile(std::vector<double> sample, double q);

// Rows for short, long and all requests of one run.
std::vector<TtftRow> ttft_rows(const Trace &trace, const EngineResult &result, const std::string &schedule,
                               int64_t threshold);

// CSV with header schedule,group,requests,ttft_p50_ms,ttft_p99_ms,ttft_mean_ms,ttft_max_ms.
std::string ttft_csv(const std::vector<TtftRow> &rows);
// The same as an aligned text table.
std::string ttft_table(const std::vector<TtftRow> &rows);

}  // namespace detfuzz::engine
