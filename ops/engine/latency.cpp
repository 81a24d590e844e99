#include "ops/engine/latency.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <stdexcept>

namespace detfuzz::engine {

double percentile(std::vector<double> sample, double q) {
  if (sample.empty() || !(q > 0 && q <= 100))
    throw std::invalid_argument("percentile: empty sample or q outside (0, 100]");
  std::sort(sample.begin(), sample.end());
  const size_t rank = static_cast<size_t>(std::ceil(q / 100.0 * static_cast<double>(sample.size())));
  return sample[std::max<size_t>(rank, 1) - 1];
}

std::vector<TtftRow> ttft_rows(const Trace &trace, const EngineResult &result, const std::string &schedule,
                               int64_t threshold) {
  std::vector<TtftRow> rows;
  for (const char *group : {"short", "long", "all"}) {
    std::vector<double> ms;
    for (size_t i = 0; i < trace.size(); ++i) {
      const RequestOutput &o = result.outputs[i];
      const bool is_short = static_cast<int64_t>(trace[i].prompt.size()) <= threshold;
      if (!o.finished || (group[0] == 's' && !is_short) || (group[0] == 'l' && is_short)) continue;
      ms.push_back((o.first_token_s - trace[i].arrival_s) * 1e3);
    }
    TtftRow r;
    r.schedule = schedule;
    r.group = group;
    r.requests = static_cast<int64_t>(ms.size());
    if (!ms.empty()) {
      r.p50_ms = percentile(ms, 50);
      r.p99_ms = percentile(ms, 99);
      r.max_ms = *std::max_element(ms.begin(), ms.end());
      double sum = 0;
      for (double v : ms) sum += v;
      r.mean_ms = sum / static_cast<double>(ms.size());
    }
    rows.push_back(r);
  }
  return rows;
}

std::string ttft_csv(const std::vector<TtftRow> &rows) {
  std::string s = "schedule,group,requests,ttft_p50_ms,ttft_p99_ms,ttft_mean_ms,ttft_max_ms\n";
  char line[256];
  for (const auto &r : rows) {
    std::snprintf(line, sizeof line, "%s,%s,%lld,%.3f,%.3f,%.3f,%.3f\n", r.schedule.c_str(), r.group.c_str(),
                  static_cast<long long>(r.requests), r.p50_ms, r.p99_ms, r.mean_ms, r.max_ms);
    s += line;
  }
  return s;
}

std::string ttft_table(const std::vector<TtftRow> &rows) {
  std::string s;
  char line[256];
  std::snprintf(line, sizeof line, "%-28s %-6s %9s %12s %12s %12s\n", "schedule", "group", "requests", "TTFT p50 ms",
                "TTFT p99 ms", "mean ms");
  s += line;
  for (const auto &r : rows) {
    std::snprintf(line, sizeof line, "%-28s %-6s %9lld %12.1f %12.1f %12.1f\n", r.schedule.c_str(), r.group.c_str(),
                  static_cast<long long>(r.requests), r.p50_ms, r.p99_ms, r.mean_ms);
    s += line;
  }
  return s;
}

}  // namespace detfuzz::engine
