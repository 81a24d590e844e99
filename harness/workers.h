// Fork mode (`detfuzz fuzz --workers N`), after libFuzzer's: the campaign runs in N child
// processes of this binary, worker i taking shard i of N of the targets and corpus records (within
// the campaign's own --shard). Each writes its own report; the parent merges them into one
// (harness/merge.h). Before checking a case a worker writes it to an "in flight" file, so when a
// worker dies (a signal: a segfault, an abort, a CUDA error that kills the process) or stops
// making progress for --case-timeout seconds (the parent kills it), the parent turns that case
// into a record with outcome `crash` or `timeout`, prints it with its repro command, and starts a
// fresh worker for the same shard with the time left (a new seed, no corpus, the crashed targets
// left out). Crash records go to failures.csv and crashes.csv of the merged report; a crash of a
// must-hold target fails the campaign (exit 1); at the end each crash record is shrunk in child
// processes (shrink_crash_in_children). SIGINT/SIGTERM are passed on to the workers,
// whose reports are then merged as usual. With --devices, worker i runs on GPU devices[i] alone
// and the merged summary's `workers.devices` says which worker had which GPU.
//
// A worker whose case left a sticky device error (harness/device_faults.h) stops at once: it
// writes its report with a `stopped` block naming the error and the case, and exits; the parent
// keeps that report, records the case as a `crash` (its detail the error) and starts a fresh
// worker, whose process has a fresh CUDA context. A hung worker is killed and left to die without
// holding the others up (a process with a kernel in flight ends once the driver has torn its
// context down), and replaced. However many workers crashed or hung, the run ends with a merged
// report and summary.json (`workers.crashes`, `workers.hung`, `workers.device_faults`).
#pragma once

#include "harness/corpus.h"

#include <cstdint>
#include <filesystem>
#include <iosfwd>
#include <string>
#include <vector>

namespace detfuzz {

struct WorkersConfig {
  std::string self;  // this binary (/proc/self/exe)
  std::vector<std::string>
      child_args;  // the fuzz arguments every worker gets (no --workers, --out, --seed, --budget, --cases)
  int workers = 1;
  // One worker per GPU when set (`--devices`): worker i sees only devices[i] (CUDA_VISIBLE_DEVICES).
  std::vector<int> devices;
  double case_timeout_s = 0;  // 0: no watchdog
  double budget_s = 60;
  int64_t max_cases = 0;  // split among the workers
  uint64_t seed = 1;
  bool corpus = true;  // the first generation of workers replays the corpus
  std::filesystem::path out;
  std::filesystem::path junit;   // empty: no JUnit file; else written from the merged report, crashes as failures
  std::string backend, started;  // for the JUnit suite
  std::string program, command_line;
  bool progress = true;
  // Crash shrinking: each crash or timeout record is shrunk in child processes for up to this
  // many seconds (0: not shrunk); see shrink_crash_in_children.
  double crash_shrink_s = 30;
};

// Returns the campaign's exit code (0, 1, 2, or 128 + signal when interrupted).
int run_workers(const WorkersConfig &cfg, std::ostream &log);

// Replays a crash or timeout record in a child process (`self replay --case ...`) and says how
// the child ended. Returns 1 when the crash or timeout came back, 0 when the case now completes.
int replay_crash_in_child(const Record &r, const std::string &self, double timeout_s, std::ostream &log,
                          const std::string &program);

// Shrinks a crash or timeout record without risking this process: the size search of
// harness/minimize.h, each candidate run in a child (`self replay`, with the replay options of
// corpus.h); a candidate is kept when its child ends the same way (the same signal, the same
// sticky device error, or no result within timeout_s for a timeout), until no size can be lowered
// or `budget_s` is spent. A child that completes is not the same end; one that rejects the record
// (exit 2) is a malformed candidate. Returns the smallest record found (r itself when none), its
// detail saying what it was shrunk from; a crash that does not come back alone in a fresh
// process is returned as recorded, its detail saying so.
Record shrink_crash_in_children(const Record &r, const std::string &self, double timeout_s, double budget_s,
                                std::ostream &log);

}  // namespace detfuzz
