#include "harness/laps_command.h"

#include "harness/cli_common.h"
#include "harness/report.h"
#include "ops/engine/latency.h"
#include "ops/engine/model.h"
#include "properties/laps/laps_properties.h"

#include <chrono>
#include <cmath>
#include <cstdio>
#include <ostream>

namespace detfuzz {
namespace {

using Clock = std::chrono::steady_clock;

// Seconds one instance takes for a prefill step of `tokens` new tokens (one sequence), on the
// clock the runs will use: the cost model's formula, or the model's measured time (best of 3
// after a warm-up).
double full_step_seconds(engine::StepModel &model, const engine::CostModel &cost, int64_t tokens) {
  engine::StepShape shape;
  shape.prefill = true;
  shape.seqs = 1;
  shape.new_tokens = tokens;
  shape.attention_pairs = tokens * (tokens + 1) / 2;
  if (!cost.measured) return cost.seconds(shape, 0);
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

std::string requests_csv(const laps_case::Comparison &r, int64_t threshold) {
  std::string s =
      "id,prompt_tokens,group,arrival_ms,fifo_instance,fifo_ttft_ms,laps_instance,laps_ttft_ms,laps_cached_tokens,"
      "laps_prefill_chunks,tokens_equal,logprobs_bits_equal\n";
  char line[320];
  for (size_t i = 0; i < r.base_trace.size(); ++i) {
    const auto &req = r.base_trace[i];
    const auto &a = r.base.outputs[i], &b = r.variant.outputs[i];
    const bool bits = a.finished && b.finished && bitwise_diff(a.final_logprobs, b.final_logprobs).equal();
    std::snprintf(line, sizeof line, "%lld,%zu,%s,%.3f,%lld,%.3f,%lld,%.3f,%lld,%lld,%d,%d\n", static_cast<long long>(req.id),
                  req.prompt.size(), static_cast<int64_t>(req.prompt.size()) <= threshold ? "short" : "long",
                  req.arrival_s * 1e3, static_cast<long long>(a.instance), (a.first_token_s - req.arrival_s) * 1e3,
                  static_cast<long long>(b.instance), (b.first_token_s - req.arrival_s) * 1e3,
                  static_cast<long long>(b.cached_tokens), static_cast<long long>(b.prefill_chunks),
                  a.tokens == b.tokens ? 1 : 0, bits ? 1 : 0);
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
    throw UsageError("laps: no engine model impl '" + o.impl + "' on " + to_string(backend) + " (known: " + known + ")");
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
  const std::string clock = o.clock == "auto" ? (backend == Backend::cuda ? "measured" : "model") : o.clock;
  if (clock != "model" && clock != "measured") throw UsageError("laps: --clock '" + o.clock + "' (expected auto, model or measured)");
  if (o.requests < 1 || o.min_len < 1 || o.short_max < o.min_len || o.max_len <= o.short_max || o.instances < 1 ||
      o.budget < 1 || o.max_running < 1 || o.decode_steps < 0 || !(o.load > 0) || o.rebalance_ratio < 1 ||
      o.rebalance_interval_ms < 0)
    throw UsageError("laps: every size must be positive, min <= short max < max length, load > 0, ratio >= 1");

  const std::string started = utc_now();
  const auto model = impl->make(dtype, engine::default_model_shape(backend), o.seed);

  // The arrival rate that offers `load` times the instances' prefill capacity.
  engine::CostModel cost;
  cost.measured = clock == "measured";
  const double step_s = full_step_seconds(*model, cost, o.budget);
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
  c.params = parse_params("wl=" + std::to_string(o.seed) + "." + std::to_string(o.requests) + "." + std::to_string(o.min_len) +
                          "." + std::to_string(o.short_max) + "." + std::to_string(o.max_len) + "." + std::to_string(rate) + "." +
                          std::to_string(o.decode_steps) + " base=fifo policy=laps thr=" + std::to_string(o.threshold) +
                          " inst=" + std::to_string(o.instances) + " glaps=1 rthr=" + std::to_string(o.threshold) +
                          " ivl=" + std::to_string(std::llround(o.rebalance_interval_ms)) + " ratio=" + double_to_hex(o.rebalance_ratio) +
                          " budget=" + std::to_string(o.budget) + " run=" + std::to_string(o.max_running) +
                          " page=16 reuse=1 clock=" + clock);

  ReportWriter report(o.out.empty() ? default_report_dir(std::string("laps-") + to_string(backend), o.seed) : std::filesystem::path(o.out));
  log << "Using configuration: seed=" << o.seed << " backend=" << to_string(backend) << " impl=" << o.impl
      << " dtype=" << dtype_name(dtype) << " clock=" << clock << "\n"
      << "workload: " << laps_case::workload(c, model->vocab()).describe() << " (offered load " << o.load
      << " of " << std::llround(capacity) << " prefill tokens/s over " << o.instances << " instances)" << std::endl;
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
    return nlohmann::json{{"steps", s.steps},       {"prefill_steps", s.prefill_steps}, {"decode_steps", s.decode_steps},
                          {"graph_steps", s.graph_steps}, {"reused_tokens", s.reused_tokens},
                          {"chunked_prefills", s.chunked_prefills}, {"simulated_s", s.end_s},
                          {"laps_status", nlohmann::json::parse(s.router.json())}};
  };
  nlohmann::json summary = {{"tool", "detfuzz"},      {"version", DETFUZZ_VERSION}, {"command", command_line},
                            {"started", started},     {"finished", utc_now()},      {"context", run_context()},
                            {"seed", o.seed},         {"backend", to_string(backend)},
                            {"case", record_row(rec)}, {"outcome", to_string(r.verdict.outcome)},
                            {"requests_compared", r.compared}, {"requests_changed_bits", r.bit_changes},
                            {"requests_changed_tokens", r.token_changes}, {"arrival_rate_per_s", rate},
                            {"fifo", stats(r.base.stats)}, {"laps", stats(r.variant.stats)},
                            {"elapsed_s", elapsed},   {"exit_code", exit_code}};
  report.finish(summary);

  log << "\n" << engine::ttft_table(rows) << "\n"
      << "fifo: " << r.base.stats.steps << " steps (" << r.base.stats.graph_steps << " graph replays); laps: "
      << r.variant.stats.steps << " steps (" << r.variant.stats.graph_steps << " graph replays), /laps_status at the end "
      << r.variant.stats.router.json() << "\n"
      << "bits: " << r.compared << " requests compared, " << r.bit_changes << " changed log-probability bits, "
      << r.token_changes << " changed tokens (" << to_string(expect) << ")\n"
      << r.verdict.detail << "\n"
      << "report: " << report.path().string() << " (" << std::fixed << elapsed << " s)\n"
      << (failed ? "MUST-HOLD PROPERTY FAILED" : "schedule_invariance: " + std::string(r.verdict.passed() ? "held" : "failed (observed)"))
      << std::endl;
  if (!r.verdict.passed()) log << "  repro: " << repro_command(rec, "build/detfuzz") << std::endl;
  return exit_code;
}

}  // namespace detfuzz
