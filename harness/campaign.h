// The campaign runner. A campaign replays the corpus first (like libFuzzer and AFL++), then
// fuzzes its targets a RapidCheck run of a few cases at a time, until its time or case budget is
// spent: the next run goes to the target with the least time spent so far (a case budget keeps
// them in turn instead, so that its cases depend on the seed alone). A target's first failure is shrunk by RapidCheck to a minimal
// case, saved as one replayable record and printed with a copy-pastable repro command; later
// failures of the same target are counted (how often, and by how much) but not shrunk again.
// After RapidCheck's shrink, each size of the case is lowered alone while the same failure holds
// (harness/minimize.h), so that the record is a local minimum in every size.
//
// After every case the device's state is checked (harness/device_faults.h): a sticky error is
// named against that case as a `crash` record and the campaign stops, since no further case can
// run in a poisoned context; the caller shrinks the record in child processes, saves it and writes
// the report. With a case timeout a watchdog thread ends a campaign whose case never returns.
#pragma once

#include "harness/report.h"
#include "harness/shard.h"
#include "properties/generators.h"

#include <filesystem>
#include <functional>
#include <iosfwd>
#include <set>
#include <string>
#include <vector>

namespace detfuzz {

struct CampaignResult;

struct CampaignConfig {
  uint64_t seed = 1;
  double budget_s = 60;   // 0: no time limit (then max_cases must be set)
  int64_t max_cases = 0;  // 0: no case limit
  std::vector<Target> targets;
  std::vector<std::filesystem::path>
      corpora;  // replayed first; records not matching the targets' (backend, op, impl) are skipped
  bool shrink = true;
  double shrink_budget_s = 30;  // per failure
  int cases_per_round = 10;
  std::string program = "detfuzz";  // how repro commands name the binary
  bool progress = true;
  bool stop_on_failure = false;       // end the campaign once a failure has been found (and shrunk)
  bool batch_invariant_mode = false;  // corpus records of impl `torch` are then must-hold
  Shard shard;                        // this campaign's share of the targets and corpus records (harness/shard.h)
  std::set<std::string>
      skip_targets;  // target names left out (a fork-mode worker's crashed targets); indices unchanged
  // Called with each case just before it is checked (corpus, fuzz and shrink cases): a fork-mode
  // worker writes it where the parent finds it if the check crashes or hangs.
  std::function<void(const CaseSpec &)> before_case;
  // A fork-mode worker: a device fault stops the campaign, and the parent records the crash.
  bool worker = false;
  // Longest a case may run in this process (0: no watchdog). Past it, a watchdog thread calls
  // on_case_timeout with the timeout record (outcome `timeout`), the case's expectation and the
  // results so far, while the main thread is still inside the case: it must end the process.
  double case_timeout_s = 0;
  std::function<void(const Record &timeout, Expectation expectation, CampaignResult &so_far)> on_case_timeout;
};

struct TargetStats {
  Target target;
  int64_t cases = 0, failures = 0, errors = 0, shrink_steps = 0;
  double seconds = 0;         // wall time spent generating and checking this target's cases (not shrinking)
  double shrink_seconds = 0;  // wall time spent shrinking its first failure
  double cases_per_s() const { return seconds > 0 ? cases / seconds : 0.0; }
  uint64_t max_ulp = 0;
  double max_abs_diff = 0;
  bool has_minimal = false;
  Record minimal;  // the shrunk first failure
};

struct CampaignResult {
  std::vector<TargetStats> targets;
  int64_t corpus_replayed = 0, corpus_skipped = 0, corpus_must_hold_failures = 0, corpus_observed_failures = 0;
  int64_t cases = 0;
  double elapsed_s = 0;
  int interrupted_by = 0;  // SIGINT or SIGTERM when the campaign stopped early on one, else 0
  // Set when a sticky device error stopped the campaign: the crash record of the case that raised
  // it (outcome `crash`, detail the error) and that case's expectation. Not yet in failures.csv
  // nor counted in the targets: the caller shrinks it first (account_crash).
  bool stopped_by_fault = false;
  Record fault;
  Expectation fault_expectation = Expectation::must_hold;
  bool must_hold_failed() const;
  nlohmann::json to_json() const;
};

// Counts a crash or timeout record as a failure of its target (the target is added when the
// results have none of that name); the record becomes the target's minimal one when it has none.
void account_crash(CampaignResult &r, const Record &crash, Expectation expectation);

// Runs the campaign, writing cases and failures into `report` and progress/results to `log`.
CampaignResult run_campaign(const CampaignConfig &config, ReportWriter &report, std::ostream &log);

// Replays one record: checks its case again and says how the outcome compares with the record.
struct ReplayResult {
  Verdict verdict;
  Expectation expectation = Expectation::must_hold;
  bool skipped = false;  // e.g. a CUDA record on a machine with no GPU
  std::string skip_reason;
  bool reproduced = false;  // the recorded outcome and diff came back bit for bit
  double elapsed_us = 0;
};
bool backend_available(Backend b);
// An impl's expectation, except that with the batch-invariant mode on, impl `torch` of the aten
// ops (our row ops and the built-in aten:: specs) runs our kernels and so must hold.
Expectation effective_expectation(const ImplInfo &impl, bool batch_invariant_mode);
// Throws std::invalid_argument when the record names an unknown op, impl or property.
ReplayResult replay_record(const Record &r, bool batch_invariant_mode = false);

}  // namespace detfuzz
