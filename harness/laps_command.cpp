#include "harness/laps_command.h"

#include "harness/cli_common.h"
#include "harness/report.h"
#include "ops/engine/latency.h"
#include "ops/engine/model.h"
#include "properties/bench_timing.h"
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

// Seconds a warm instance takes for a prefill step of `tokens` new tokens (one sequence, from an
// empty cache): the median of 7 runs on one instance after 2 warm-up runs. The first run of a
// prompt that fits a graph bucket captures the bucket's CUDA graph (its warm-up forwards and the
// capture: milliseconds); timing a fresh instance per run, as the clock once did, put that capture
// into every short prompt's time and made them measure slower than long eager ones. `cold_s`
// (optional) gets the first run's time on the fresh instance.
double measured_step_seconds(engine::StepModel &model, int64_t tokens, double *cold_s = nullptr) {
  const int64_t page = 16, pages = (tokens + page - 1) / page, reserved = model.reserved_pages();
  const auto instance = model.instance(pages + reserved, page, pages);
  engine::SeqWork w;
  for (int64_t i = 0; i < tokens; ++i) w.tokens.push_back(static_cast<int32_t>(i % model.vocab()));
  for (int64_t b = 0; b < pages; ++b) w.blocks.push_back(reserved + b);
  // Each run writes the same keys to the same slots from context 0: every run is the same step.
  const auto timed = [&] {
    const auto t0 = Clock::now();
    instance->run({w}, true);  // returns host log-probabilities: the device is done
    return std::chrono::duration<double>(Clock::now() - t0).count();
  };
  const double cold = timed();
  if (cold_s) *cold_s = cold;
  timed();
  std::vector<double> runs;
  for (int rep = 0; rep < 7; ++rep) runs.push_back(timed());
  return engine::percentile(runs, 50);
}

engine::StepShape prefill_shape(int64_t tokens) {
  engine::StepShape shape;
  shape.prefill = true;
  shape.seqs = 1;
  shape.new_tokens = tokens;
  shape.attention_pairs = tokens * (tokens + 1) / 2;
  return shape;
}

// The calibrated clock: the cost formula fitted (engine::fit_cost_model: per step, per token, per
// attention pair, every coefficient >= 0) to warm one-sequence prefill steps of 16, 32, ...
// max_len tokens. Both schedules then run on one deterministic clock built from the model's own
// forward times.
engine::CostModel calibrated_cost(engine::StepModel &model, int64_t max_len, std::ostream &log) {
  std::vector<int64_t> lens;
  for (int64_t t = 16; t < max_len; t *= 2) lens.push_back(t);
  lens.push_back(max_len);
  std::vector<engine::CalibrationPoint> points;
  log << "calibration (one-sequence prefill, median of 7 warm runs; the first run of a fresh instance in brackets):";
  for (int64_t t : lens) {
    double cold = 0;
    points.push_back({t, measured_step_seconds(model, t, &cold)});
    log << " " << t << " tokens " << std::setprecision(3) << points.back().seconds * 1e3 << " ms (" << cold * 1e3
        << ");";
  }
  const engine::CostModel cost = engine::fit_cost_model(points);
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

  // The comparison LAPS is for, on one line: short requests' TTFT under each policy, long beside.
  const auto p50_p99 = [&](const std::string &schedule, const std::string &group) {
    for (const auto &row : rows)
      if (row.schedule == schedule && row.group == group)
        return fmt(row.p50_ms, "%.1f") + " / " + fmt(row.p99_ms, "%.1f");
    return std::string("-");
  };
  log << "\n"
      << engine::ttft_table(rows) << "TTFT p50 / p99 ms at load " << o.load << " (" << clock
      << " clock): short requests FIFO " << p50_p99("fifo", "short") << ", LAPS " << p50_p99("laps", "short")
      << "; long requests FIFO " << p50_p99("fifo", "long") << ", LAPS " << p50_p99("laps", "long") << "\n"
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
