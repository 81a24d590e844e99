#include "harness/campaign.h"

#include "harness/signals.h"
#include "properties/properties.h"

#include <rapidcheck.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <limits>
#include <iostream>

namespace detfuzz {
namespace fs = std::filesystem;
namespace {

using Clock = std::chrono::steady_clock;

double seconds_since(Clock::time_point t) { return std::chrono::duration<double>(Clock::now() - t).count(); }

uint64_t mix(uint64_t a, uint64_t b) {
  uint64_t x = a * 0x9e3779b97f4a7c15ull + b + 0x632be59bd9b4e019ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

// Checks a case, turning a malformed (generated) case into an error verdict instead of an exception.
Verdict check_guarded(const CaseSpec &c) {
  try {
    return check_case(c);
  } catch (const std::invalid_argument &e) {
    return Verdict::error(std::string("malformed case: ") + e.what());
  }
}

void note_failure(TargetStats &s, const Verdict &v) {
  if (v.outcome == Verdict::Outcome::error) ++s.errors; else ++s.failures;
  s.max_ulp = std::max(s.max_ulp, v.diff.max_ulp);
  if (v.diff.max_abs_diff > s.max_abs_diff || std::isnan(v.diff.max_abs_diff)) s.max_abs_diff = v.diff.max_abs_diff;
}

class Progress {
 public:
  Progress(std::ostream &log, bool enabled, double budget_s) : log_(log), enabled_(enabled), budget_s_(budget_s) {}
  void tick(const CampaignResult &r, Clock::time_point start, bool force = false) {
    const double t = seconds_since(start);
    // Every 2 s, and once at the end unless a line was just printed.
    if (!enabled_ || t - last_ < (force ? 0.1 : 2.0)) return;
    last_ = t;
    int64_t must = 0, observed = 0;
    for (const auto &s : r.targets)
      (s.target.expectation == Expectation::must_hold ? must : observed) += s.failures + s.errors;
    char line[200];
    std::snprintf(line, sizeof line, "[%6.1fs] %lld cases, %.0f cases/s | failures: %lld must-hold, %lld observed", t,
                  static_cast<long long>(r.cases), t > 0 ? r.cases / t : 0.0, static_cast<long long>(must),
                  static_cast<long long>(observed));
    log_ << line;
    if (budget_s_ > 0) log_ << " | " << static_cast<int>(std::max(0.0, budget_s_ - t) + 0.5) << "s left";
    log_ << std::endl;
  }

 private:
  std::ostream &log_;
  bool enabled_;
  double budget_s_;
  double last_ = -1;  // seconds at the last line printed
};

bool selected(const CampaignConfig &cfg, const CaseSpec &c) {
  return std::any_of(cfg.targets.begin(), cfg.targets.end(), [&](const Target &t) {
    return t.backend == c.backend && t.op == c.op && t.impl == c.impl;
  });
}

void replay_corpus(const CampaignConfig &cfg, ReportWriter &report, CampaignResult &result, std::ostream &log, int64_t &index) {
  int64_t files = 0;
  size_t record_number = 0;
  for (const auto &root : cfg.corpora) {
    for (const auto &file : record_files(root)) {
      ++files;
      for (const Record &rec : read_records(file)) {
        if (interrupt_signal() != 0) return;
        if (!cfg.shard.takes(record_number++)) continue;  // another shard's record
        if (!selected(cfg, rec.spec) || !backend_available(rec.spec.backend)) {
          ++result.corpus_skipped;
          continue;
        }
        if (cfg.before_case) cfg.before_case(rec.spec);
        const ReplayResult rr = replay_record(rec, cfg.batch_invariant_mode);
        ++result.corpus_replayed;
        const Record now = make_record(rec.spec, rr.verdict);
        report.add_case({index++, "corpus", now, rr.expectation, rr.elapsed_us});
        if (rr.verdict.passed()) continue;
        report.add_failure(now);
        if (rr.expectation == Expectation::must_hold) {
          ++result.corpus_must_hold_failures;
          log << "corpus: MUST-HOLD FAILURE " << rec.spec.describe() << ": " << rr.verdict.detail << "\n  repro: "
              << repro_command(now, cfg.program) << "\n";
        } else {
          ++result.corpus_observed_failures;
        }
      }
    }
  }
  if (!cfg.corpora.empty())
    log << "corpus: replayed " << result.corpus_replayed << " records from " << files << " files (" << result.corpus_skipped
        << " for other targets or backends skipped): " << result.corpus_must_hold_failures << " must-hold failures, "
        << result.corpus_observed_failures << " observed failures" << std::endl;
}

// RapidCheck reports through a listener; the campaign keeps its own log, so this one is silent
// (the default global listener would print RapidCheck reproduce strings at exit, which our
// records replace).
struct SilentListener : rc::detail::TestListener {
  void onTestCaseFinished(const rc::detail::CaseDescription &) override {}
  void onShrinkTried(const rc::detail::CaseDescription &, bool) override {}
  void onTestFinished(const rc::detail::TestMetadata &, const rc::detail::TestResult &) override {}
};

// RapidCheck prints its own (unused) random seed when it first loads its configuration; load it
// once with stderr muted so that the only "Using configuration" line is the campaign's.
void load_rapidcheck_config_quietly() {
  std::streambuf *saved = std::cerr.rdbuf(nullptr);
  rc::detail::configuration();
  std::cerr.rdbuf(saved);
}

// The RapidCheck run of one round of one target.
class Round {
 public:
  Round(const CampaignConfig &cfg, TargetStats &stats, ReportWriter &report, CampaignResult &result, int64_t &index,
        const std::function<bool()> &out_of_budget)
      : cfg_(cfg), stats_(stats), report_(report), result_(result), index_(index), out_of_budget_(out_of_budget) {}

  // Returns true when the round found (and shrank) the target's first failure. `cases` is the
  // round's number of cases.
  bool run(uint64_t rc_seed, int cases) {
    const Target &t = stats_.target;
    const rc::Gen<CaseSpec> gen = gen_case(t);
    auto property = [&, gen] {
      const CaseSpec c = *gen;
      if (shrinking_) return shrink_step(c);
      if (out_of_budget_()) RC_DISCARD("budget spent");
      if (cfg_.before_case) cfg_.before_case(c);
      const auto start = Clock::now();
      const Verdict v = check_guarded(c);
      const double us = seconds_since(start) * 1e6;
      ++stats_.cases;
      ++result_.cases;
      const Record rec = make_record(c, v);
      report_.add_case({index_++, "fuzz", rec, t.expectation, us});
      if (v.passed()) return;
      note_failure(stats_, v);
      if (stats_.has_minimal || !cfg_.shrink) {
        if (!stats_.has_minimal) keep_minimal(rec);
        return;
      }
      shrinking_ = true;
      shrink_started_ = Clock::now();
      shrink_deadline_ = Clock::now() + std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(cfg_.shrink_budget_s));
      last_failure_ = rec;
      RC_FAIL(v.detail);
    };
    rc::detail::TestParams params;
    params.seed = rc_seed;
    params.maxSuccess = cases;
    params.maxSize = 100;
    params.maxDiscardRatio = 1;  // discards only happen once the budget is spent
    rc::detail::TestMetadata meta;
    meta.id = meta.description = t.name();
    SilentListener listener;
    const auto started = Clock::now();
    rc::detail::checkProperty(rc::detail::toProperty(property), meta, params, listener);
    // Everything after the first failure's RC_FAIL is shrinking.
    const double total = seconds_since(started);
    const double shrink = shrinking_ ? seconds_since(shrink_started_) : 0.0;
    stats_.seconds += total - shrink;
    stats_.shrink_seconds += shrink;
    if (!shrinking_) return false;
    keep_minimal(last_failure_);
    return true;
  }

 private:
  void shrink_step(const CaseSpec &c) {
    // Out of shrink time, or interrupted: accept no further shrinks.
    if (Clock::now() > shrink_deadline_ || interrupt_signal() != 0) return;
    ++stats_.shrink_steps;
    if (cfg_.before_case) cfg_.before_case(c);
    const Verdict v = check_guarded(c);
    if (v.passed()) return;
    last_failure_ = make_record(c, v);
    RC_FAIL(v.detail);
  }

  void keep_minimal(const Record &r) {
    stats_.has_minimal = true;
    stats_.minimal = r;
    report_.add_failure(r);
  }

  const CampaignConfig &cfg_;
  TargetStats &stats_;
  ReportWriter &report_;
  CampaignResult &result_;
  int64_t &index_;
  const std::function<bool()> &out_of_budget_;
  bool shrinking_ = false;
  Clock::time_point shrink_started_, shrink_deadline_;
  Record last_failure_;
};

std::string ulp_text(uint64_t u) { return u == std::numeric_limits<uint64_t>::max() ? "inf" : std::to_string(u); }

}  // namespace

bool CampaignResult::must_hold_failed() const {
  if (corpus_must_hold_failures > 0) return true;
  return std::any_of(targets.begin(), targets.end(), [](const TargetStats &s) {
    return s.target.expectation == Expectation::must_hold && (s.failures > 0 || s.errors > 0);
  });
}

nlohmann::json CampaignResult::to_json() const {
  nlohmann::json j;
  j["cases"] = cases;
  j["elapsed_s"] = elapsed_s;
  j["corpus"] = {{"replayed", corpus_replayed},
                 {"skipped", corpus_skipped},
                 {"must_hold_failures", corpus_must_hold_failures},
                 {"observed_failures", corpus_observed_failures}};
  nlohmann::json ts = nlohmann::json::array();
  for (const auto &s : targets) {
    nlohmann::json t = {{"op", s.target.op},
                        {"impl", s.target.impl},
                        {"property", s.target.property},
                        {"backend", to_string(s.target.backend)},
                        {"dtype", dtype_name(s.target.dtype)},
                        {"expectation", to_string(s.target.expectation)},
                        {"cases", s.cases},
                        {"failures", s.failures},
                        {"errors", s.errors},
                        {"failure_rate", s.cases ? double(s.failures + s.errors) / s.cases : 0.0},
                        {"max_ulp", ulp_text(s.max_ulp)},
                        {"max_abs_diff", s.max_abs_diff},
                        {"shrink_steps", s.shrink_steps},
                        {"shrink_seconds", s.shrink_seconds},
                        {"seconds", s.seconds},
                        {"cases_per_s", s.cases_per_s()}};
    if (s.has_minimal) t["minimal"] = record_row(s.minimal);
    ts.push_back(t);
  }
  j["targets"] = ts;
  return j;
}

bool backend_available(Backend b) { return b == Backend::cpu || at::hasCUDA(); }

Expectation effective_expectation(const ImplInfo &impl, bool batch_invariant_mode) {
  const bool aten_op = impl.op.rfind("aten::", 0) == 0 || impl.op.find("::") == std::string::npos;
  if (batch_invariant_mode && impl.impl == "torch" && aten_op && impl.op != "paged_attention") return Expectation::must_hold;
  return impl.expectation;
}

ReplayResult replay_record(const Record &r, bool batch_invariant_mode) {
  ReplayResult rr;
  const CaseSpec &c = r.spec;
  const std::optional<ImplInfo> impl = lookup_impl(c.op, c.impl, c.backend);
  if (!impl) {
    if (c.backend == Backend::cuda && !backend_available(Backend::cuda)) {
      rr.skipped = true;
      rr.skip_reason = "needs a CUDA GPU (this build or machine has none)";
      return rr;
    }
    throw std::invalid_argument("record names no known impl: op '" + c.op + "', impl '" + c.impl + "', backend " + to_string(c.backend));
  }
  const auto props = properties_for(c.op);
  if (std::find(props.begin(), props.end(), c.property) == props.end())
    throw std::invalid_argument("record names property '" + c.property + "', which op " + c.op + " does not have");
  rr.expectation = effective_expectation(*impl, batch_invariant_mode);
  if (!backend_available(c.backend)) {
    rr.skipped = true;
    rr.skip_reason = "needs a CUDA GPU: none found";
    return rr;
  }
  const auto start = Clock::now();
  rr.verdict = check_case(c);
  rr.elapsed_us = seconds_since(start) * 1e6;
  rr.reproduced = to_string(rr.verdict.outcome) == r.outcome && (r.outcome != "fail" || same_diff(rr.verdict.diff, r.diff));
  return rr;
}

CampaignResult run_campaign(const CampaignConfig &cfg, ReportWriter &report, std::ostream &log) {
  load_rapidcheck_config_quietly();
  CampaignResult result;
  const auto start = Clock::now();
  int64_t index = 0;
  replay_corpus(cfg, report, result, log, index);

  // A target keeps its index in the full list (in its rounds' seeds) whichever shard runs it.
  std::vector<size_t> global_index;
  for (size_t k = 0; k < cfg.targets.size(); ++k)
    if (cfg.shard.takes(k) && !cfg.skip_targets.count(cfg.targets[k].name())) {
      TargetStats stats;
      stats.target = cfg.targets[k];
      result.targets.push_back(std::move(stats));
      global_index.push_back(k);
    }
  Progress progress(log, cfg.progress, cfg.budget_s);
  bool stop = false;
  const std::function<bool()> out_of_budget = [&] {
    return stop || interrupt_signal() != 0 || (cfg.budget_s > 0 && seconds_since(start) >= cfg.budget_s) || (cfg.max_cases > 0 && result.cases >= cfg.max_cases);
  };
  // Which target runs its next round: in turn when the budget counts cases (the cases checked
  // then depend only on the seed and the budget), else the one that has had the least time so far
  // (ties to the first), so that slow targets (attention, graph replay) cannot crowd out the rest
  // of a timed campaign. A target's k-th round has the same seed either way (its size differs).
  const bool time_fair = cfg.max_cases == 0;
  std::vector<uint64_t> rounds(result.targets.size(), 0);
  for (size_t turn = 0; !result.targets.empty() && !out_of_budget(); ++turn) {
    size_t k = turn % result.targets.size();
    if (time_fair)
      for (size_t j = 0; j < result.targets.size(); ++j) {
        const auto spent = [&](size_t i) { return result.targets[i].seconds + result.targets[i].shrink_seconds; };
        if (spent(j) < spent(k) || (spent(j) == spent(k) && j < k)) k = j;
      }
    TargetStats &stats = result.targets[k];
    Round r(cfg, stats, report, result, index, out_of_budget);
    // Timed campaigns start each target with rounds of 1, 2, 4, ... cases up to cases_per_round:
    // a target whose cases take seconds (a baseline planning every new shape) then costs one case,
    // not a full round, before every other target has had its first turn.
    const int cases = time_fair ? static_cast<int>(std::min<uint64_t>(cfg.cases_per_round, uint64_t(1) << std::min<uint64_t>(rounds[k], 20)))
                                : cfg.cases_per_round;
    if (r.run(mix(mix(cfg.seed, global_index[k]), rounds[k]++), cases)) {
      const bool must = stats.target.expectation == Expectation::must_hold;
      log << (must ? "FAILURE (must-hold) " : "failure (observed) ") << stats.target.name() << ", shrunk in " << stats.shrink_steps
          << " steps to: " << stats.minimal.spec.describe() << "\n  " << stats.minimal.detail << "\n  repro: "
          << repro_command(stats.minimal, cfg.program) << std::endl;
      stop = cfg.stop_on_failure;
    }
    progress.tick(result, start);
  }
  result.elapsed_s = seconds_since(start);
  result.interrupted_by = interrupt_signal();
  progress.tick(result, start, true);
  return result;
}

}  // namespace detfuzz
