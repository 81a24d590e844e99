#include "harness/laps_command.h"

#include "harness/cli_common.h"
#include "harness/report.h"
#include "ops/engine/latency.h"
#include "ops/engine/model.h"
#include "properties/laps/laps_properties.h"

#include <algorithm>
#include <array>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <iomanip>
#include <ostream>
#include <vector>

namespace detfuzz {
namespace {

using Clock = std::chrono::steady_clock;

// Seconds one instance takes for a prefill step of `tokens` new tokens (one sequence) on the
// model itself: the best of 3 after a warm-up.
double measured_step_seconds(engine::StepModel &model, int64_t tokens) {
  std::vector<int32_t> prompt(tokens);
  for (int64_t i = 0; i < tokens; ++i) prompt[i] = static_cast<int32_t>(i % model.vocab());
  engine::prompt_logprobs(model, prompt);
  double best = 1e30;
  for (int rep = 0; rep < 3; ++rep) {
    const auto t0 = Clock::now();
    engine::prompt_logprobs(model, prompt);  // returns host log-probabilities: the device is done
    best = std::min(best, std::chrono::duration<double>(Clock::now() - t0).count());
  }
  return best;
}

engine::StepShape prefill_shape(int64_t tokens) {
  engine::StepShape shape;
  shape.prefill = true;
  shape.seqs = 1;
  shape.new_tokens = tokens;
  shape.attention_pairs = tokens * (tokens + 1) / 2;
  return shape;
}

// The calibrated clock: the cost formula step_s + token_s * tokens + pair_s * attention pairs
// (seq_s = 0) fitted by least squares to measured one-sequence prefill steps of 16 ... max_len
// tokens, with any negative coefficient dropped and the rest refitted. Both schedules then run
// on one deterministic clock built from the model's own forward times.
engine::CostModel calibrated_cost(engine::StepModel &model, int64_t max_len, std::ostream &log) {
  std::vector<int64_t> lens;
  for (int64_t t = 16; t < max_len; t *= 4) lens.push_back(t);
  lens.push_back(max_len);
  std::vector<std::array<double, 3>> x;
  std::vector<double> y;
  log << "calibration (one-sequence prefill, best of 3):";
  for (int64_t t : lens) {
    const engine::StepShape s = prefill_shape(t);
    x.push_back({1.0, static_cast<double>(s.new_tokens), static_cast<double>(s.attention_pairs)});
    y.push_back(measured_step_seconds(model, t));
    log << " " << t << " tokens " << std::setprecision(3) << y.back() * 1e3 << " ms;";
  }
  std::array<bool, 3> use = {true, true, true};
  std::array<double, 3> coef{};
  for (int attempt = 0; attempt < 3; ++attempt) {
    // Normal equations over the used columns (Gauss-Jordan on at most 3 x 3).
    std::vector<int> cols;
    for (int j = 0; j < 3; ++j)
      if (use[j]) cols.push_back(j);
    const size_t n = cols.size();
    std::vector<std::vector<double>> a(n, std::vector<double>(n + 1, 0.0));
    for (size_t r = 0; r < x.size(); ++r)
      for (size_t i = 0; i < n; ++i) {
        for (size_t j = 0; j < n; ++j) a[i][j] += x[r][cols[i]] * x[r][cols[j]];
        a[i][n] += x[r][cols[i]] * y[r];
      }
    for (size_t i = 0; i < n; ++i) {
      size_t piv = i;
      for (size_t r = i + 1; r < n; ++r)
        if (std::abs(a[r][i]) > std::abs(a[piv][i])) piv = r;
      std::swap(a[i], a[piv]);
      if (a[i][i] == 0) continue;
      for (size_t r = 0; r < n; ++r) {
        if (r == i) continue;
        const double f = a[r][i] / a[i][i];
        for (size_t j = i; j <= n; ++j) a[r][j] -= f * a[i][j];
      }
    }
    coef = {0, 0, 0};
    for (size_t i = 0; i < n; ++i) coef[cols[i]] = a[i][i] != 0 ? a[i][n] / a[i][i] : 0.0;
    bool negative = false;
    for (int j = 0; j < 3; ++j)
      if (use[j] && coef[j] < 0) use[j] = false, negative = true;
    if (!negative) break;
  }
  engine::CostModel cost;
  cost.step_s = std::max(0.0, coef[0]);
  cost.seq_s = 0;
  cost.token_s = std::max(0.0, coef[1]);
  cost.pair_s = std::max(0.0, coef[2]);
  log << "\nfitted clock: " << std::setprecision(4) << cost.step_s * 1e3 << " ms per step + " << cost.token_s * 1e6
      << " us per token + " << cost.pair_s * 1e9 << " ns per attention pair" << std::endl;
  return cost;
}

std::string requests_csv(const laps_case::Comparison &r, int64_t threshold) {
  std::string s =
      "id,prompt_tokens,group,arrival_ms,fifo_instance,fifo_ttft_ms,laps_instance,laps_ttft_ms,laps_cached_tokens,"
      "laps_prefill_chunks,tokens_equal,logprobs_bits_equal\n";
  char line[320];
  for (size_t i = 0; i < r.base_trace.size(); ++i) {
    const auto &req = r.base_trace[i];
    const auto &a = r.base.outputs[i], &b = r.variant.outputs[i];
    const bool bits = a.finished && b.finished && bitwise_diff(a.final_logprobs, b.final_logprobs).equal();
    std::snprintf(
        line, sizeof line, "%lld,%zu,%s,%.3f,%lld,%.3f,%lld,%.3f,%lld,%lld,%d,%d\n", static_cast<long long>(req.id),
        req.prompt.size(), static_cast<int64_t>(req.prompt.size()) <= threshold ? "short" : "long", req.arrival_s * 1e3,
        static_cast<long long>(a.instance), (a.first_token_s - req.arrival_s) * 1e3, static_cast<long long>(b.instance),
        (b.first_token_s - req.arrival_s) * 1e3, static_cast<long long>(b.cached_tokens),
        static_cast<long long>(b.prefill_chunks), a.tokens == b.tokens ? 1 : 0, bits ? 1 : 0);
    s += line;
  }
  return s;
}

}  // namespace

int run_laps_command(const LapsOptions &o, const std::string &command_line, std::ostream &log) {
  const Backend backend = resolve_backend(o.backend);
  const engine::ModelImpl *impl = engine::find_model_impl(o.impl, backend);
  if (!impl) {
    std::string known;
    for (const auto &m : engine::model_impls())
      if (m.backend == backend) known += (known.empty() ? "" : ", ") + m.impl;
    throw UsageError("laps: no engine model impl '" + o.impl + "' on " + to_string(backend) + " (known: " + known +
                     ")");
  }
  at::ScalarType dtype = impl->dtypes.front();
  if (!o.dtype.empty()) {
    try {
      dtype = dtype_from_string(o.dtype);
    } catch (const std::invalid_argument &e) {
      throw UsageError(e.what());
    }
    if (std::find(impl->dtypes.begin(), impl->dtypes.end(), dtype) == impl->dtypes.end())
      throw UsageError("laps: impl " + o.impl + " does not take " + o.dtype);
  }
  const std::string clock = o.clock == "auto" ? (backend == Backend::cuda ? "calibrated" : "model") : o.clock;
  if (clock != "model" && clock != "measured" && clock != "calibrated")
    throw UsageError("laps: --clock '" + o.clock + "' (expected auto, model, calibrated or measured)");
  if (o.requests < 1 || o.min_len < 1 || o.short_max < o.min_len || o.max_len <= o.short_max || o.instances < 1 ||
      o.budget < 1 || o.max_running < 1 || o.decode_steps < 0 || !(o.load > 0) || o.rebalance_ratio < 1 ||
      o.rebalance_interval_ms < 0)
    throw UsageError("laps: every size must be positive, min <= short max < max length, load > 0, ratio >= 1");

  const std::string started = utc_now();
  const auto model = impl->make(dtype, engine::default_model_shape(backend), o.seed);

  // The clock, and the arrival rate that offers `load` times the instances' prefill capacity.
  engine::CostModel cost;
  cost.measured = clock == "measured";
  if (clock == "calibrated") cost = calibrated_cost(*model, std::max(o.max_len, o.budget), log);
  const double step_s =
      cost.measured ? measured_step_seconds(*model, o.budget) : cost.seconds(prefill_shape(o.budget), 0);
  engine::WorkloadConfig probe;
  probe.seed = o.seed;
  probe.requests = o.requests;
  probe.min_len = o.min_len;
  probe.short_max = o.short_max;
  probe.max_len = o.max_len;
  probe.vocab = model->vocab();
  double mean_len = 0;
  for (const auto &r : engine::make_workload(probe)) mean_len += static_cast<double>(r.prompt.size());
  mean_len /= static_cast<double>(o.requests);
  const double capacity = static_cast<double>(o.budget) / step_s * static_cast<double>(o.instances);  // tokens/s
  const int64_t rate = std::max<int64_t>(1, std::llround(o.load * capacity / mean_len));

  CaseSpec c;
  c.op = "laps_engine";
  c.impl = o.impl;
  c.property = "schedule_invariance";
  c.backend = backend;
  c.dtype = dtype;
  c.shape = engine::default_model_shape(backend);
  c.layout = "c";
  c.seed = o.seed;
  c.params = parse_params(
      "wl=" + std::to_string(o.seed) + "." + std::to_string(o.requests) + "." + std::to_string(o.min_len) + "." +
      std::to_string(o.short_max) + "." + std::to_string(o.max_len) + "." + std::to_string(rate) + "." +
      std::to_string(o.decode_steps) + " base=fifo policy=laps thr=" + std::to_string(o.threshold) +
      " inst=" + std::to_string(o.instances) + " glaps=1 rthr=" + std::to_string(o.threshold) +
      " ivl=" + std::to_string(std::llround(o.rebalance_interval_ms)) + " ratio=" + double_to_hex(o.rebalance_ratio) +
      " budget=" + std::to_string(o.budget) + " run=" + std::to_string(o.max_running) +
      " page=16 reuse=1 clock=" + std::string(cost.measured ? "measured" : "model") +
      (clock == "calibrated" ? " cstep=" + double_to_hex(cost.step_s) + " cseq=" + double_to_hex(cost.seq_s) +
                                   " ctok=" + double_to_hex(cost.token_s) + " cpair=" + double_to_hex(cost.pair_s)
                             : std::string()));

  ReportWriter report(o.out.empty() ? default_report_dir(std::string("laps-") + to_string(backend), o.seed)
                                    : std::filesystem::path(o.out));
  log << "Using configuration: seed=" << o.seed << " backend=" << to_string(backend) << " impl=" << o.impl
      << " dtype=" << dtype_name(dtype) << " clock=" << clock << "\n"
      << "workload: " << laps_case::workload(c, model->vocab()).describe() << " (offered load " << o.load << " of "
      << std::llround(capacity) << " prefill tokens/s over " << o.instances << " instances)" << std::endl;
  const auto t0 = Clock::now();
  const laps_case::Comparison r = laps_case::compare(c, *model);
  const double elapsed = std::chrono::duration<double>(Clock::now() - t0).count();

  const Expectation expect = impl->expectation;
  const Record rec = make_record(c, r.verdict);
  report.add_case({0, "laps", rec, expect, elapsed * 1e6});
  if (!r.verdict.passed()) report.add_failure(rec);
  std::vector<engine::TtftRow> rows = engine::ttft_rows(r.base_trace, r.base, "fifo", o.threshold);
  for (auto &row : engine::ttft_rows(r.variant_trace, r.variant, "laps", o.threshold)) rows.push_back(row);
  report.add_file("ttft.csv", engine::ttft_csv(rows));
  report.add_file("requests.csv", requests_csv(r, o.threshold));

  const bool failed = !r.verdict.passed() && expect == Expectation::must_hold;
  const int exit_code = failed ? kExitMustHoldFailed : kExitOk;
  auto stats = [](const engine::EngineStats &s) {
    return nlohmann::json{{"steps", s.steps},
                          {"prefill_steps", s.prefill_steps},
                          {"decode_steps", s.decode_steps},
                          {"graph_steps", s.graph_steps},
                          {"reused_tokens", s.reused_tokens},
                          {"chunked_prefills", s.chunked_prefills},
                          {"simulated_s", s.end_s},
                          {"laps_status", nlohmann::json::parse(s.router.json())}};
  };
  nlohmann::json summary = {{"tool", "detfuzz"},
                            {"version", DETFUZZ_VERSION},
                            {"command", command_line},
                            {"started", started},
                            {"finished", utc_now()},
                            {"context", run_context()},
                            {"seed", o.seed},
                            {"backend", to_string(backend)},
                            {"case", record_row(rec)},
                            {"outcome", to_string(r.verdict.outcome)},
                            {"requests_compared", r.compared},
                            {"requests_changed_bits", r.bit_changes},
                            {"requests_changed_tokens", r.token_changes},
                            {"arrival_rate_per_s", rate},
                            {"fifo", stats(r.base.stats)},
                            {"laps", stats(r.variant.stats)},
                            {"elapsed_s", elapsed},
                            {"exit_code", exit_code}};
  report.finish(summary);

  log << "\n"
      << engine::ttft_table(rows) << "\n"
      << "fifo: " << r.base.stats.steps << " steps (" << r.base.stats.graph_steps
      << " graph replays); laps: " << r.variant.stats.steps << " steps (" << r.variant.stats.graph_steps
      << " graph replays), /laps_status at the end " << r.variant.stats.router.json() << "\n"
      << "bits: " << r.compared << " requests compared, " << r.bit_changes << " changed log-probability bits, "
      << r.token_changes << " changed tokens (" << to_string(expect) << ")\n"
      << r.verdict.detail << "\n"
      << "report: " << report.path().string() << " (" << std::fixed << elapsed << " s)\n"
      << (failed ? "MUST-HOLD PROPERTY FAILED"
                 : "schedule_invariance: " + std::string(r.verdict.passed() ? "held" : "failed (observed)"))
      << std::endl;
  if (!r.verdict.passed()) log << "  repro: " << repro_command(rec, "build/detfuzz") << std::endl;
  return exit_code;
}

}  // namespace detfuzz
