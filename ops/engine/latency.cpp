#include "ops/engine/latency.h"

#include <algorithm>
#include <array>
#include <cmath>
#include <limits>
#include <cstdio>
#include <stdexcept>

namespace detfuzz::engine {

namespace {

// Least squares over the columns `cols` of x (normal equations, Gauss-Jordan with partial
// pivoting, columns scaled to a largest value of 1); false when the system is singular.
bool least_squares(const std::vector<std::array<double, 3>> &x, const std::vector<double> &y,
                   const std::vector<int> &cols, std::array<double, 3> *coef) {
  const size_t n = cols.size();
  std::vector<double> scale(n, 0.0);
  for (size_t i = 0; i < n; ++i)
    for (const auto &row : x) scale[i] = std::max(scale[i], std::abs(row[cols[i]]));
  std::vector<std::vector<double>> a(n, std::vector<double>(n + 1, 0.0));
  for (size_t r = 0; r < x.size(); ++r)
    for (size_t i = 0; i < n; ++i) {
      for (size_t j = 0; j < n; ++j) a[i][j] += x[r][cols[i]] / scale[i] * x[r][cols[j]] / scale[j];
      a[i][n] += x[r][cols[i]] / scale[i] * y[r];
    }
  for (size_t i = 0; i < n; ++i) {
    size_t piv = i;
    for (size_t r = i + 1; r < n; ++r)
      if (std::abs(a[r][i]) > std::abs(a[piv][i])) piv = r;
    std::swap(a[i], a[piv]);
    if (std::abs(a[i][i]) < 1e-12) return false;
    for (size_t r = 0; r < n; ++r) {
      if (r == i) continue;
      const double f = a[r][i] / a[i][i];
      for (size_t j = i; j <= n; ++j) a[r][j] -= f * a[i][j];
    }
  }
  *coef = {0, 0, 0};
  for (size_t i = 0; i < n; ++i) (*coef)[cols[i]] = a[i][n] / a[i][i] / scale[i];
  return true;
}

}  // namespace

CostModel fit_cost_model(const std::vector<CalibrationPoint> &points) {
  if (points.empty()) throw std::invalid_argument("fit_cost_model: no calibration points");
  std::vector<std::array<double, 3>> x;
  std::vector<double> y;
  const CalibrationPoint *shortest = &points.front(), *longest = &points.front();
  for (const CalibrationPoint &p : points) {
    if (p.tokens < 1 || !(p.seconds > 0) || !std::isfinite(p.seconds))
      throw std::invalid_argument("fit_cost_model: a point of " + std::to_string(p.tokens) + " tokens and " +
                                  std::to_string(p.seconds) + " s (needs >= 1 token and a positive time)");
    const double t = static_cast<double>(p.tokens);
    x.push_back({1.0, t, t * (t + 1) / 2});
    y.push_back(p.seconds);
    if (p.tokens < shortest->tokens) shortest = &p;
    if (p.tokens > longest->tokens) longest = &p;
  }
  const bool grows = longest->tokens > shortest->tokens && longest->seconds > shortest->seconds;
  std::array<double, 3> best{};
  double best_error = std::numeric_limits<double>::infinity();
  for (int mask = 1; mask < 8; ++mask) {
    if (grows && !(mask & 2)) continue;  // growing times: a per-token term in every candidate
    std::vector<int> cols;
    for (int j = 0; j < 3; ++j)
      if (mask & (1 << j)) cols.push_back(j);
    std::array<double, 3> coef{};
    if (!least_squares(x, y, cols, &coef)) continue;
    bool positive = true;
    for (int j : cols) positive = positive && coef[j] > 0;
    if (!positive) continue;
    double error = 0;
    for (size_t r = 0; r < x.size(); ++r) {
      const double e = coef[0] * x[r][0] + coef[1] * x[r][1] + coef[2] * x[r][2] - y[r];
      error += e * e;
    }
    if (error < best_error) best_error = error, best = coef;
  }
  // Nothing positive at all cannot happen (the per-step mean, or the per-token term alone, is
  // positive for positive times); keep the mean as the clock if it ever did.
  if (!std::isfinite(best_error)) {
    double sum = 0;
    for (double v : y) sum += v;
    best = {sum / static_cast<double>(y.size()), 0, 0};
  }
  CostModel cost;
  cost.step_s = best[0];
  cost.seq_s = 0;
  cost.token_s = best[1];
  cost.pair_s = best[2];
  return cost;
}

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
