#include "harness/campaign.h"

#include "harness/device_faults.h"
#include "harness/minimize.h"
#include "harness/signals.h"
#include "properties/properties.h"

#include <rapidcheck.h>

#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <limits>
#include <iostream>
#include <mutex>
#include <sstream>
#include <thread>

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
Verdict check_guarded(const CaseSpec &c, bool *malformed = nullptr) {
  try {
    return check_case(c);
  } catch (const std::invalid_argument &e) {
    if (malformed) *malformed = true;
    return Verdict::error(std::string("malformed case: ") + e.what());
  }
}

// A thread that watches the case in flight: one running past the timeout calls `expire` (with
// the lock held, so that the main thread, should the case still return, waits at end()).
class Watchdog {
 public:
  using Expire = std::function<void(const CaseSpec &, Expectation, const std::string &source, double age_s)>;
  Watchdog(double timeout_s, Expire expire) : timeout_s_(timeout_s), expire_(std::move(expire)) {
    if (timeout_s_ > 0 && expire_) thread_ = std::thread([this] { loop(); });
  }
  ~Watchdog() {
    {
      std::lock_guard<std::mutex> lock(mu_);
      quit_ = true;
    }
    cv_.notify_all();
    if (thread_.joinable()) thread_.join();
  }
  void begin(const CaseSpec &c, Expectation e, const std::string &source) {
    if (!thread_.joinable()) return;
    std::lock_guard<std::mutex> lock(mu_);
    case_ = c;
    expectation_ = e;
    source_ = source;
    since_ = Clock::now();
    busy_ = true;
  }
  void end() {
    if (!thread_.joinable()) return;
    std::lock_guard<std::mutex> lock(mu_);
    busy_ = false;
  }

 private:
  void loop() {
    std::unique_lock<std::mutex> lock(mu_);
    while (!quit_) {
      cv_.wait_for(lock, std::chrono::milliseconds(50));
      if (quit_ || !busy_) continue;
      const double age = seconds_since(since_);
      if (age <= timeout_s_) continue;
      expire_(case_, expectation_, source_, age);  // ends the process
      for (;;) std::this_thread::sleep_for(std::chrono::hours(1));
    }
  }

  double timeout_s_;
  Expire expire_;
  std::thread thread_;
  std::mutex mu_;
  std::condition_variable cv_;
  bool quit_ = false, busy_ = false;
  CaseSpec case_;
  Expectation expectation_ = Expectation::must_hold;
  std::string source_;
  Clock::time_point since_;
};

// Runs every case of the campaign (corpus, fuzz, shrink): the in-flight hook, the watchdog, the
// check, and after it the device's state. A sticky device error becomes the case's crash record,
// written to cases.csv, and the runner refuses every later case.
class CaseRunner {
 public:
  struct Checked {
    Verdict verdict;
    bool malformed = false;
    bool fault = false;  // a sticky device error followed this case: the campaign stops
    double us = 0;
  };

  CaseRunner(const CampaignConfig &cfg, ReportWriter &report, CampaignResult &result, std::ostream &log, int64_t &index)
      : cfg_(cfg),
        report_(report),
        result_(result),
        log_(log),
        index_(index),
        watchdog_(cfg.case_timeout_s,
                  cfg.on_case_timeout
                      ? Watchdog::Expire([this](const CaseSpec &c, Expectation e, const std::string &source,
                                                double age) { expire(c, e, source, age); })
                      : Watchdog::Expire()) {}

  bool faulted() const { return result_.stopped_by_fault; }

  Checked check(const CaseSpec &c, const std::string &source, Expectation e) {
    Checked k;
    if (cfg_.before_case) cfg_.before_case(c);
    watchdog_.begin(c, e, source);
    const auto start = Clock::now();
    try {
      k.verdict = check_guarded(c, &k.malformed);
    } catch (const std::exception &ex) {  // e.g. a poisoned context failing the case's data or diff
      k.verdict = Verdict::error(ex.what());
    }
    const std::string sticky = sticky_device_error(c.backend);
    k.us = seconds_since(start) * 1e6;
    watchdog_.end();
    if (!sticky.empty()) {
      k.fault = true;
      stop_on_fault(c, sticky, source, e, k.us);
    }
    return k;
  }

  // A corpus record: replay_record's checks, in the same window.
  ReplayResult replay(const Record &rec, bool *fault) {
    if (cfg_.before_case) cfg_.before_case(rec.spec);
    const std::optional<ImplInfo> impl = lookup_impl(rec.spec.op, rec.spec.impl, rec.spec.backend);
    const Expectation e = impl ? effective_expectation(*impl, cfg_.batch_invariant_mode) : Expectation::must_hold;
    watchdog_.begin(rec.spec, e, "corpus");
    ReplayResult rr;
    try {
      rr = replay_record(rec, cfg_.batch_invariant_mode);
    } catch (const std::invalid_argument &e) {  // a malformed record: a usage error, as before
      watchdog_.end();
      throw refused_record(rec, e);
    } catch (const std::exception &ex) {  // e.g. a poisoned context failing the case's data or diff
      rr.expectation = e;
      rr.verdict = Verdict::error(ex.what());
    }
    const std::string sticky = sticky_device_error(rec.spec.backend);
    watchdog_.end();
    *fault = !sticky.empty();
    if (*fault) stop_on_fault(rec.spec, sticky, "corpus", rr.expectation, rr.elapsed_us);
    return rr;
  }

 private:
  void stop_on_fault(const CaseSpec &c, const std::string &sticky, const std::string &source, Expectation e,
                     double us) {
    Record r = make_record(c, Verdict::error(sticky));
    r.outcome = "crash";
    r.diff = DiffStats{};
    r.detail = sticky;
    report_.add_case({index_++, source, r, e, us});
    result_.stopped_by_fault = true;
    result_.fault = r;
    result_.fault_expectation = e;
    log_ << (e == Expectation::must_hold ? "CRASH (must-hold) " : "crash (observed) ") << c.op << "/" << c.impl << "/"
         << c.property << "/" << dtype_name(c.dtype) << ": " << sticky << "\n  case: " << c.describe()
         << "\n  the device context is poisoned: no further case runs in this process\n  repro: "
         << repro_command(r, cfg_.program) << std::endl;
  }

  void expire(const CaseSpec &c, Expectation e, const std::string &source, double age) {
    Record r = make_record(c, Verdict{});
    r.outcome = "timeout";
    std::ostringstream why;
    why.precision(3);
    why << "no result after " << age << " s (--case-timeout " << cfg_.case_timeout_s << "s)";
    r.detail = why.str();
    report_.add_case({index_++, source, r, e, age * 1e6});
    // The case counts as checked, in its target when it is a fuzz or shrink case.
    ++result_.cases;
    const std::string name = c.op + "/" + c.impl + "/" + c.property + "/" + dtype_name(c.dtype);
    for (auto &s : result_.targets)
      if (s.target.name() == name) ++s.cases;
    cfg_.on_case_timeout(r, e, result_);
  }

  const CampaignConfig &cfg_;
  ReportWriter &report_;
  CampaignResult &result_;
  std::ostream &log_;
  int64_t &index_;
  Watchdog watchdog_;
};

void note_failure(TargetStats &s, const Verdict &v) {
  if (v.outcome == Verdict::Outcome::error)
    ++s.errors;
  else
    ++s.failures;
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
  return std::any_of(cfg.targets.begin(), cfg.targets.end(),
                     [&](const Target &t) { return t.backend == c.backend && t.op == c.op && t.impl == c.impl; });
}

void replay_corpus(const CampaignConfig &cfg, CaseRunner &runner, ReportWriter &report, CampaignResult &result,
                   std::ostream &log, int64_t &index) {
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
        bool fault = false;
        const ReplayResult rr = runner.replay(rec, &fault);
        ++result.corpus_replayed;
        if (fault) return;
        const Record now = make_record(rec.spec, rr.verdict);
        report.add_case({index++, "corpus", now, rr.expectation, rr.elapsed_us});
        if (rr.verdict.passed()) continue;
        report.add_failure(now);
        if (rr.expectation == Expectation::must_hold) {
          ++result.corpus_must_hold_failures;
          log << "corpus: MUST-HOLD FAILURE " << rec.spec.describe() << ": " << rr.verdict.detail
              << "\n  repro: " << repro_command(now, cfg.program) << "\n";
        } else {
          ++result.corpus_observed_failures;
        }
      }
    }
  }
  if (!cfg.corpora.empty())
    log << "corpus: replayed " << result.corpus_replayed << " records from " << files << " files ("
        << result.corpus_skipped << " for other targets or backends skipped): " << result.corpus_must_hold_failures
        << " must-hold failures, " << result.corpus_observed_failures << " observed failures" << std::endl;
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

// Whether a candidate's verdict is the failure being minimised: the same outcome, and for an
// error the same message but for its numbers.
bool same_failure(const Verdict &v, const Verdict &want) {
  if (v.outcome != want.outcome) return false;
  return v.outcome != Verdict::Outcome::error || error_signature(v.detail) == error_signature(want.detail);
}

// The RapidCheck run of one round of one target.
class Round {
 public:
  Round(const CampaignConfig &cfg, CaseRunner &runner, TargetStats &stats, ReportWriter &report, CampaignResult &result,
        int64_t &index, const std::function<bool()> &out_of_budget)
      : cfg_(cfg),
        runner_(runner),
        stats_(stats),
        report_(report),
        result_(result),
        index_(index),
        out_of_budget_(out_of_budget) {}

  // Returns true when the round found (and shrank) the target's first failure. `cases` is the
  // round's number of cases.
  bool run(uint64_t rc_seed, int cases) {
    const Target &t = stats_.target;
    const rc::Gen<CaseSpec> gen = gen_case(t);
    auto property = [&, gen] {
      const CaseSpec c = *gen;
      if (shrinking_) return shrink_step(c);
      if (out_of_budget_()) RC_DISCARD("budget spent");
      const CaseRunner::Checked k = runner_.check(c, "fuzz", t.expectation);
      ++stats_.cases;
      ++result_.cases;
      if (k.fault) RC_DISCARD("the device context is poisoned");
      const Verdict &v = k.verdict;
      const Record rec = make_record(c, v);
      report_.add_case({index_++, "fuzz", rec, t.expectation, k.us});
      if (v.passed()) return;
      note_failure(stats_, v);
      if (stats_.has_minimal || !cfg_.shrink) {
        if (!stats_.has_minimal) keep_minimal(rec);
        return;
      }
      shrinking_ = true;
      shrink_started_ = Clock::now();
      // RapidCheck's shrink gets three quarters of the budget; the size search (minimize) the rest,
      // and whatever RapidCheck left.
      const auto budget = std::chrono::duration<double>(cfg_.shrink_budget_s);
      rc_deadline_ = shrink_started_ + std::chrono::duration_cast<Clock::duration>(budget * 0.75);
      shrink_deadline_ = shrink_started_ + std::chrono::duration_cast<Clock::duration>(budget);
      last_failure_ = rec;
      last_verdict_ = v;
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
    if (shrinking_ && !runner_.faulted()) minimize_sizes();
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
    // Out of shrink time, interrupted, or the device is poisoned: accept no further shrinks.
    if (Clock::now() > rc_deadline_ || interrupt_signal() != 0 || runner_.faulted()) return;
    ++stats_.shrink_steps;
    const CaseRunner::Checked k = runner_.check(c, "shrink", stats_.target.expectation);
    if (k.fault || k.verdict.passed()) return;
    last_failure_ = make_record(c, k.verdict);
    last_verdict_ = k.verdict;
    RC_FAIL(k.verdict.detail);
  }

  // Lowers each size of RapidCheck's minimal case alone while the same failure holds.
  void minimize_sizes() {
    const Verdict want = last_verdict_;
    Verdict kept = want;
    const auto trial = [&](const CaseSpec &c) {
      ++stats_.shrink_steps;
      const CaseRunner::Checked k = runner_.check(c, "shrink", stats_.target.expectation);
      if (k.fault) return Trial::different;
      if (k.malformed) return Trial::malformed;
      if (!same_failure(k.verdict, want)) return Trial::different;
      kept = k.verdict;
      return Trial::same;
    };
    const auto stop = [&] { return Clock::now() > shrink_deadline_ || interrupt_signal() != 0 || runner_.faulted(); };
    const MinimizeResult m = minimize_case(last_failure_.spec, trial, stop);
    if (m.lowered > 0) last_failure_ = make_record(m.spec, kept);
  }

  void keep_minimal(const Record &r) {
    stats_.has_minimal = true;
    stats_.minimal = r;
    report_.add_failure(r);
  }

  const CampaignConfig &cfg_;
  CaseRunner &runner_;
  TargetStats &stats_;
  ReportWriter &report_;
  CampaignResult &result_;
  int64_t &index_;
  const std::function<bool()> &out_of_budget_;
  bool shrinking_ = false;
  Clock::time_point shrink_started_, rc_deadline_, shrink_deadline_;
  Record last_failure_;
  Verdict last_verdict_;
};

std::string ulp_text(uint64_t u) { return u == std::numeric_limits<uint64_t>::max() ? "inf" : std::to_string(u); }

}  // namespace

void account_crash(CampaignResult &r, const Record &crash, Expectation expectation) {
  const std::string name =
      crash.spec.op + "/" + crash.spec.impl + "/" + crash.spec.property + "/" + dtype_name(crash.spec.dtype);
  auto it =
      std::find_if(r.targets.begin(), r.targets.end(), [&](const TargetStats &s) { return s.target.name() == name; });
  if (it == r.targets.end()) {
    TargetStats s;
    s.target = {crash.spec.op, crash.spec.impl, crash.spec.property, crash.spec.backend, crash.spec.dtype, expectation};
    r.targets.push_back(s);
    it = r.targets.end() - 1;
  }
  ++it->failures;
  if (!it->has_minimal) {
    it->has_minimal = true;
    it->minimal = crash;
  }
}

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
  // The mode overrides aten ops in the dispatcher: an impl that calls through it runs our kernels.
  if (batch_invariant_mode && impl.through_dispatcher) return Expectation::must_hold;
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
    throw std::invalid_argument("record names no known impl: op '" + c.op + "', impl '" + c.impl + "', backend " +
                                to_string(c.backend));
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
  rr.reproduced =
      to_string(rr.verdict.outcome) == r.outcome && (r.outcome != "fail" || same_diff(rr.verdict.diff, r.diff));
  return rr;
}

CampaignResult run_campaign(const CampaignConfig &cfg, ReportWriter &report, std::ostream &log) {
  load_rapidcheck_config_quietly();
  CampaignResult result;
  const auto start = Clock::now();
  int64_t index = 0;
  CaseRunner runner(cfg, report, result, log, index);
  replay_corpus(cfg, runner, report, result, log, index);

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
    return stop || runner.faulted() || interrupt_signal() != 0 ||
           (cfg.budget_s > 0 && seconds_since(start) >= cfg.budget_s) ||
           (cfg.max_cases > 0 && result.cases >= cfg.max_cases);
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
    Round r(cfg, runner, stats, report, result, index, out_of_budget);
    // Timed campaigns start each target with rounds of 1, 2, 4, ... cases up to cases_per_round:
    // a target whose cases take seconds (a baseline planning every new shape) then costs one case,
    // not a full round, before every other target has had its first turn.
    const int cases = time_fair ? static_cast<int>(std::min<uint64_t>(cfg.cases_per_round,
                                                                      uint64_t(1) << std::min<uint64_t>(rounds[k], 20)))
                                : cfg.cases_per_round;
    if (r.run(mix(mix(cfg.seed, global_index[k]), rounds[k]++), cases)) {
      const bool must = stats.target.expectation == Expectation::must_hold;
      log << (must ? "FAILURE (must-hold) " : "failure (observed) ") << stats.target.name() << ", shrunk in "
          << stats.shrink_steps << " steps to: " << stats.minimal.spec.describe() << "\n  " << stats.minimal.detail
          << "\n  repro: " << repro_command(stats.minimal, cfg.program) << std::endl;
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
