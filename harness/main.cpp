// detfuzz: bitwise determinism fuzzing of inference kernels.
//   detfuzz fuzz     replay the corpus, then generate, check and shrink cases; write a report
//   detfuzz replay   re-run saved records (failures.csv, corpora/, or one --case line)
//   detfuzz list     ops, impls (with expectations), properties
//   detfuzz bench    CUDA kernels vs cuBLAS / torch: bench.csv of medians and speedups
//   detfuzz merge    combine the reports of a sharded campaign's shards into one
//   detfuzz scan     every M where a baseline's rows change bits: scan.csv
//   detfuzz laps     a workload under FIFO and LAPS scheduling: same bits? TTFT table (harness/laps_command.h)
//   detfuzz gate     CI's verdict over report folders: must-hold failures, speed against a stored bench.csv
//   detfuzz report   one self-contained HTML file of report folders (reports/html_report.py)
// Exit codes: 0 every must-hold property held, 1 one failed, 2 usage or environment error.
#include "harness/bench.h"
#include "harness/campaign.h"
#include "harness/cli_common.h"
#include "harness/cpu_threads.h"
#include "harness/device_faults.h"
#include "harness/gate.h"
#include "harness/html_report.h"
#include "harness/junit.h"
#include "harness/laps_command.h"
#include "harness/merge.h"
#include "harness/cli_main.h"
#include "harness/python_hooks.h"
#include "harness/report.h"
#include "harness/sanitize.h"
#include "harness/shard.h"
#include "harness/signals.h"
#include "harness/target_table.h"
#include "harness/workers.h"
#include "ops/torch/batch_invariant_mode.h"
#include "ops/first_line.h"
#ifdef DETFUZZ_WITH_CUDA
#include "ops/device_memory.h"
#endif
#include "properties/properties.h"

#include <ATen/Context.h>
#include <CLI/CLI.hpp>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <iomanip>
#include <iostream>
#include <optional>
#include <fstream>
#include <random>
#include <set>
#include <unistd.h>

namespace detfuzz {
namespace {

namespace fs = std::filesystem;

// The head of every summary.json: what ran, when, and on what (the context block).
// `context`: run_context() taken earlier (a campaign takes it before its first case, while the
// device is known to be usable), or null to take it now.
nlohmann::json tool_summary(const std::string &command_line, const std::string &started,
                            nlohmann::json context = nullptr) {
  return {{"tool", "detfuzz"},  {"version", DETFUZZ_VERSION}, {"command", command_line},
          {"started", started}, {"finished", utc_now()},      {"context", context.is_null() ? run_context() : context}};
}

// The replay options of records made with these kernel libraries, op specs and mode (corpus.h).
void set_replay_options_from(const std::vector<std::string> &libraries, const std::vector<std::string> &specs,
                             const std::string &mode) {
  std::vector<std::string> args = python_replay_options();  // --import first: it registers ops that specs name
  for (const auto &l : libraries) args.insert(args.end(), {"--load", l});
  for (const auto &s : specs) args.insert(args.end(), {"--spec", s});
  if (mode != "native") args.insert(args.end(), {"--mode", mode});
  set_replay_options(args);
}

// --mode: native (libtorch's own kernels behind impl `torch`) or batch-invariant (ours, through
// libtorch's dispatcher, as an engine would run them).
bool parse_mode(const std::string &mode) {
  if (mode == "native") return false;
  if (mode == "batch-invariant") return true;
  if (is_python_mode(mode)) return true;  // a user's Python mode, enabled by prepare_python (python_hooks.h)
  throw UsageError("mode '" + mode + "' (expected native, batch-invariant or MODULE:ENABLE_FN)");
}

void apply_mode(bool batch_invariant) {
  if (batch_invariant && !python_mode_enabled()) enable_batch_invariant_mode();
}

struct FuzzOptions {
  Selection sel;
  std::string mode = "native";
  std::vector<std::string> libraries, specs;
  std::string seed, budget = "60s", shrink_budget = "30s", out, junit, shard;
  int64_t cases = 0;
  int cpu_threads = -1;  // harness/cpu_threads.h
  std::vector<std::string> corpora;
  bool no_corpus = false, no_shrink = false, quiet = false, stop_on_failure = false;
  int workers = 0;                        // fork mode (harness/workers.h); 0: in process
  std::string devices;                    // "all" or "0,1,...": fork mode with one worker per GPU
  std::string case_timeout = "0";         // a duration: fork mode's watchdog, or one process's
  std::string worker, inflight;           // set by a fork-mode parent for its workers
  int gpu_share = 0;                      // likewise: workers sharing this worker's GPU (0 or 1: none)
  std::vector<std::string> skip_targets;  // likewise: targets that crashed an earlier worker
};

// This process's command line, for fork mode's workers.
std::vector<std::string> g_args;

std::string self_exe() {
  const std::string python = python_self_program();  // in Python, /proc/self/exe is the interpreter
  return python.empty() ? fs::read_symlink("/proc/self/exe").string() : python;
}

// The fuzz arguments a fork-mode worker gets: the user's, less those the parent sets per worker.
std::vector<std::string> worker_args() {
  static const std::set<std::string> with_value = {"--workers", "--devices", "--case-timeout", "--out",
                                                   "--seed",    "--budget",  "--cases",        "--junit"};
  static const std::set<std::string> flags = {"--quiet", "--no-corpus"};
  std::vector<std::string> out;
  size_t i = 0;
  while (i < g_args.size() && g_args[i] != "fuzz") ++i;
  for (++i; i < g_args.size(); ++i) {
    const std::string &a = g_args[i];
    const std::string name = a.substr(0, a.find('='));
    if (flags.count(a)) continue;
    if (with_value.count(name)) {
      if (name == a) ++i;  // "--opt value"
      continue;
    }
    out.push_back(a);
  }
  return out;
}

int run_fuzz(FuzzOptions o, const std::string &program, const std::string &command_line) {
  const Backend backend = resolve_backend(o.sel.backend);
  load_user_ops(o.libraries, o.specs);
  register_planted_device_error_hooks(o.libraries);
  set_replay_options_from(o.libraries, o.specs, o.mode);
  o.sel.batch_invariant_mode = parse_mode(o.mode);
  CampaignConfig cfg;
  cfg.targets = select_targets(o.sel, backend);
  cfg.batch_invariant_mode = o.sel.batch_invariant_mode;
  cfg.seed = o.seed.empty() ? std::random_device{}() : parse_seed("--seed", o.seed);
  cfg.budget_s = parse_duration_flag("--budget", o.budget);
  cfg.max_cases = o.cases;
  if (cfg.budget_s == 0 && cfg.max_cases == 0)
    throw UsageError("a campaign needs a budget: --budget > 0 or --cases > 0");
  cfg.shrink = !o.no_shrink;
  cfg.shrink_budget_s = parse_duration_flag("--shrink-budget", o.shrink_budget);
  const double case_timeout = parse_duration_flag("--case-timeout", o.case_timeout);
  cfg.program = program;
  cfg.progress = !o.quiet;
  cfg.stop_on_failure = o.stop_on_failure;
  cfg.shard = resolve_shard(o.shard);
  if (!o.no_corpus) {
    if (o.corpora.empty()) {
      const fs::path dflt = fs::path(DETFUZZ_SOURCE_DIR) / "corpora";
      if (fs::exists(dflt)) cfg.corpora.push_back(dflt);
    }
    for (const auto &c : o.corpora) cfg.corpora.push_back(c);
    for (const auto &c : cfg.corpora) record_files(c);  // fail early on a missing corpus
  }
  const fs::path out = o.out.empty() ? default_report_dir(to_string(backend), cfg.seed) : fs::path(o.out);
  std::vector<int> devices;
  if (!o.devices.empty()) {
    if (backend != Backend::cuda) throw UsageError("--devices needs the CUDA backend (--backend cuda) and a GPU");
    const int count = backend_available(Backend::cuda) ? static_cast<int>(at::getNumGPUs()) : 0;
    if (count == 0) throw UsageError("--devices: no CUDA GPU found");
    if (o.devices == "all") {
      for (int d = 0; d < count; ++d) devices.push_back(d);
    } else {
      for (const auto &d : split_list(o.devices)) {
        int id = -1;
        try {
          id = std::stoi(d);
        } catch (const std::exception &) {
        }
        if (id < 0 || id >= count || std::to_string(id) != d)
          throw UsageError("--devices: '" + d + "' is not a device index below " + std::to_string(count));
        devices.push_back(id);
      }
    }
    if (o.workers > 0 && o.workers != static_cast<int>(devices.size()))
      throw UsageError("--devices runs one worker per GPU: leave out --workers or give it " +
                       std::to_string(devices.size()));
    o.workers = static_cast<int>(devices.size());
  }
  if (o.workers > 0) {
    if (!o.junit.empty()) check_junit_path(o.junit);
    if (fs::exists(out) && !fs::is_empty(out))
      throw UsageError("report folder " + out.string() + " exists and is not empty");
    WorkersConfig w;
    w.self = self_exe();
    w.child_args = worker_args();
    w.workers = o.workers;
    w.devices = devices;
    w.case_timeout_s = case_timeout;
    w.budget_s = cfg.budget_s;
    w.max_cases = cfg.max_cases;
    w.seed = cfg.seed;
    w.corpus = !o.no_corpus;
    w.out = out;
    w.program = program;
    w.command_line = command_line;
    w.junit = o.junit;
    w.backend = to_string(backend);
    w.started = utc_now();
    w.progress = !o.quiet;
    w.crash_shrink_s = o.no_shrink ? 0 : cfg.shrink_budget_s;
    std::cout << "Using configuration: seed=" << cfg.seed << " backend=" << to_string(backend)
              << " budget=" << cfg.budget_s << "s"
              << " targets=" << cfg.targets.size() << " workers=" << o.workers
              << (devices.empty() ? "" : " devices=" + o.devices)
              << (case_timeout > 0 ? " case-timeout=" + o.case_timeout : "") << std::endl;
    install_interrupt_handlers();
    return run_workers(w, std::cout);
  }
  cfg.worker = !o.worker.empty();
  if (cfg.worker) {  // a fork-mode worker: shard `worker` of this campaign's shard
    const Shard w = parse_shard(o.worker, "--worker");
    cfg.shard = {cfg.shard.index + cfg.shard.count * w.index, cfg.shard.count * w.count, cfg.shard.source};
#ifdef DETFUZZ_WITH_CUDA
    // Workers sharing a GPU each keep to an equal part of its memory (ops/device_memory.h says why); 15%
    // is left for their CUDA contexts and libraries' workspaces.
    if (backend == Backend::cuda && o.gpu_share > 1) device_memory::cap_share(0.85 / o.gpu_share);
#endif
  }
  cfg.skip_targets.insert(o.skip_targets.begin(), o.skip_targets.end());
  if (!o.inflight.empty())
    cfg.before_case = [path = o.inflight](const CaseSpec &c) {
      std::ofstream f(path, std::ios::trunc);
      f << record_row(make_record(c, Verdict{})) << "\n";
    };
  if (!o.junit.empty()) check_junit_path(o.junit);
  apply_cpu_threads(o.cpu_threads, backend == Backend::cpu);
  ReportWriter report(out);
  install_interrupt_handlers();  // from here on, SIGINT/SIGTERM end the campaign with a finished report

  std::cout << "Using configuration: seed=" << cfg.seed << " backend=" << to_string(backend)
            << " budget=" << cfg.budget_s << "s" << (cfg.max_cases ? " cases=" + std::to_string(cfg.max_cases) : "")
            << " targets=" << cfg.targets.size()
            << (cfg.shard.count > 1
                    ? " shard=" + std::to_string(cfg.shard.index) + "/" + std::to_string(cfg.shard.count)
                    : "")
            << (case_timeout > 0 && !cfg.worker ? " case-timeout=" + o.case_timeout : "") << std::endl;
  const std::string started = utc_now();
  apply_mode(cfg.batch_invariant_mode);
  // The context is taken before the first case: after a sticky device error the device may not answer.
  const nlohmann::json context = run_context();

  // Ends the run: the report (and JUnit) with the results as they stand, the table, the verdict.
  // `stopped`: why the campaign stopped before its budget (a device fault, a timeout), with its record.
  const auto finish = [&](const CampaignResult &result, int exit_code, const nlohmann::json &stopped) {
    nlohmann::json summary = tool_summary(command_line, started, context);
    summary.update({{"seed", cfg.seed},
                    {"backend", to_string(backend)},
                    {"budget", {{"seconds", cfg.budget_s}, {"cases", cfg.max_cases}}},
                    {"selection", selection_json(o.sel)},
                    {"results", result.to_json()},
                    {"shard", {{"index", cfg.shard.index}, {"count", cfg.shard.count}, {"source", cfg.shard.source}}},
                    {"interrupted", result.interrupted_by != 0},
                    {"exit_code", exit_code}});
    if (!stopped.is_null()) summary["stopped"] = stopped;
    report.finish(summary);
    if (!o.junit.empty())
      write_junit(o.junit, junit_xml(result, {program, to_string(backend), cfg.seed, started, report.path().string()}));
    std::cout << "\n";
    print_target_table(result, std::cout);
    std::cout << "\n"
              << result.cases << " cases in " << std::fixed << std::setprecision(1) << result.elapsed_s
              << "s; report: " << report.path().string() << "\n";
    if (!stopped.is_null()) std::cout << "STOPPED: " << stopped.value("reason_text", std::string()) << "\n";
    std::cout << (result.interrupted_by != 0 ? "INTERRUPTED by signal " + std::to_string(result.interrupted_by) + "; "
                                             : std::string())
              << (result.must_hold_failed() ? "MUST-HOLD PROPERTY FAILED"
                  : stopped.is_null()       ? "every must-hold property held"
                                            : "no must-hold property failed before the stop")
              << std::endl;
  };
  // A crash or timeout record that stopped the run: shrunk in child processes (this process's
  // device, or its main thread, is lost), saved, counted against its target.
  const auto save_stop_record = [&](Record r, Expectation e, CampaignResult &result, double child_timeout_s) {
    if (cfg.shrink && !cfg.worker) {
      const Record shrunk = shrink_crash_in_children(r, self_exe(), child_timeout_s, cfg.shrink_budget_s, std::cout);
      if (shrunk.spec.shape != r.spec.shape || shrunk.spec.params != r.spec.params)
        std::cout << "  repro: " << repro_command(shrunk, program) << std::endl;
      r = shrunk;
    }
    if (!cfg.worker) {  // a fork-mode parent records its workers' crashes itself
      report.add_failure(r);
      account_crash(result, r, e);
    }
    return r;
  };
  const auto run_start = std::chrono::steady_clock::now();
  if (case_timeout > 0 && !cfg.worker) {
    // One process: a case past --case-timeout cannot be taken back from its thread; the
    // watchdog saves the timeout record and the report, then ends the process (exit 1).
    cfg.case_timeout_s = case_timeout;
    cfg.on_case_timeout = [&](const Record &timeout, Expectation e, CampaignResult &so_far) {
      std::cout << (e == Expectation::must_hold ? "TIMEOUT (must-hold) " : "timeout (observed) ") << timeout.spec.op
                << "/" << timeout.spec.impl << "/" << timeout.spec.property << "/" << dtype_name(timeout.spec.dtype)
                << ": " << timeout.detail << "\n  case: " << timeout.spec.describe()
                << "\n  repro: " << repro_command(timeout, program) << std::endl;
      const Record saved = save_stop_record(timeout, e, so_far, case_timeout);
      so_far.interrupted_by = interrupt_signal();
      so_far.elapsed_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - run_start).count();
      finish(so_far, kExitMustHoldFailed,
             {{"reason", "timeout"},
              {"reason_text", "a case ran past --case-timeout " + o.case_timeout +
                                  " and never returned: the campaign cannot go on in this process"},
              {"record", record_row(saved)}});
      std::cout.flush();
      std::_Exit(kExitMustHoldFailed);
    };
  }

  CampaignResult result = run_campaign(cfg, report, std::cout);
  if (result.stopped_by_fault) {
    // A sticky device error: the context cannot run another case. The report says so; a fork-mode
    // worker leaves the crash record to its parent, which starts a fresh worker.
    const Record saved =
        save_stop_record(result.fault, result.fault_expectation, result, case_timeout > 0 ? case_timeout : 30.0);
    const int exit_code =
        cfg.worker ? (result.must_hold_failed() ? kExitMustHoldFailed : kExitOk) : kExitMustHoldFailed;
    finish(result, exit_code,
           {{"reason", "device_fault"},
            {"error", device_error_name(result.fault.detail)},
            {"reason_text", "a sticky device error (" + result.fault.detail + ") followed a case of " +
                                result.fault.spec.op + "/" + result.fault.spec.impl + "/" + result.fault.spec.property +
                                "; no further case can run in this process"},
            {"record", record_row(saved)}});
    // Leave without tearing down libtorch's CUDA state in a poisoned context.
    std::cout.flush();
    std::cerr.flush();
    std::_Exit(exit_code);
  }
  // Interrupted: the report is still finished (summary.json says so); the exit code is the shell's 128 + signal.
  const int exit_code = result.interrupted_by != 0  ? 128 + result.interrupted_by
                        : result.must_hold_failed() ? kExitMustHoldFailed
                                                    : kExitOk;
  finish(result, exit_code, nullptr);
  return exit_code;
}

struct ReplayOptions {
  std::vector<std::string> paths, cases, libraries, specs;
  std::string mode = "native";
  bool expect_reproduce = false;
  int cpu_threads = -1;              // harness/cpu_threads.h
  std::string case_timeout = "10s";  // for crash and timeout records, which run in a child
  std::string sanitize;              // memcheck, racecheck or initcheck: each record under compute-sanitizer
  std::string out;                   // with --sanitize: where sanitize.csv goes
};

// Where replay --sanitize writes sanitize.csv: --out, else the one report folder (a folder with a
// summary.json, or the folder of a failures file in one) the records came from, else nowhere.
std::string sanitize_out_dir(const ReplayOptions &o) {
  fs::path dir;
  if (!o.out.empty()) {
    dir = o.out;
    std::error_code ec;
    fs::create_directories(dir, ec);
    if (ec || !fs::is_directory(dir)) throw UsageError("--out " + o.out + ": cannot create the folder");
  } else if (o.paths.size() == 1 && o.cases.empty()) {
    const fs::path p = o.paths[0];
    const fs::path folder = fs::is_directory(p) ? p : p.parent_path();
    if (fs::exists(folder / "summary.json")) dir = folder;
  }
  if (!dir.empty() && access(dir.c_str(), W_OK) != 0)
    throw UsageError("--out " + dir.string() + ": the folder is not writable");
  return dir.string();
}

int run_replay(const ReplayOptions &o, const std::string &program) {
  const double case_timeout = parse_duration_flag("--case-timeout", o.case_timeout);
  std::string sanitizer;
  if (!o.out.empty() && o.sanitize.empty()) throw UsageError("replay: --out goes with --sanitize");
  if (!o.sanitize.empty()) {
    check_sanitizer_tool(o.sanitize);
    sanitizer = find_compute_sanitizer();
    if (sanitizer.empty())
      throw UsageError("--sanitize " + o.sanitize +
                       ": compute-sanitizer not found (DETFUZZ_COMPUTE_SANITIZER, PATH, $CUDA_HOME/bin, "
                       "/usr/local/cuda/bin); it comes with the CUDA toolkit");
  }
  load_user_ops(o.libraries, o.specs);
  register_planted_device_error_hooks(o.libraries);
  set_replay_options_from(o.libraries, o.specs, o.mode);
  const bool batch_invariant = parse_mode(o.mode);
  std::vector<Record> records;
  for (const auto &p : o.paths)
    for (const auto &f : record_files(p))
      for (auto &r : read_records(f)) records.push_back(std::move(r));
  for (const auto &line : o.cases) records.push_back(parse_record_line(line));
  if (records.empty()) throw UsageError("nothing to replay: give record files or folders, or --case");
  if (!sanitizer.empty())
    return sanitize_records(records, sanitizer, o.sanitize, self_exe(), std::max(120.0, 30 * case_timeout), program,
                            sanitize_out_dir(o), std::cout);
  apply_cpu_threads(o.cpu_threads, std::all_of(records.begin(), records.end(),
                                               [](const Record &r) { return r.spec.backend == Backend::cpu; }));
  apply_mode(batch_invariant);

  int64_t pass = 0, fail = 0, must_fail = 0, skipped = 0, recorded_fail = 0, reproduced_fail = 0, not_reproduced = 0;
  size_t replayed = 0;
  bool poisoned = false;
  for (const Record &r : records) {
    ++replayed;
    if (is_crash_outcome(r.outcome)) {  // run where a crash cannot take this process down
      ++recorded_fail;
      const bool back = replay_crash_in_child(r, self_exe(), case_timeout, std::cout, program) != 0;
      if (back)
        ++reproduced_fail;
      else
        ++not_reproduced;
      std::optional<ImplInfo> impl;
      try {
        impl = lookup_impl(r.spec.op, r.spec.impl, r.spec.backend);
      } catch (const std::invalid_argument &) {  // not resolvable here: held to must-hold
      }
      if (back && (!impl || effective_expectation(*impl, batch_invariant) == Expectation::must_hold))
        ++must_fail, ++fail;
      else
        (back ? fail : pass)++;
      continue;
    }
    ReplayResult rr;
    try {
      rr = replay_record(r, batch_invariant);
    } catch (const std::invalid_argument &e) {
      throw refused_record(r, e);
    } catch (const std::exception &e) {  // e.g. a poisoned device failing the case's data
      rr.verdict = Verdict::error(e.what());
    }
    // A sticky device error after the record: it is the record's crash, and nothing more can run here.
    if (const std::string sticky = rr.skipped ? std::string() : sticky_device_error(r.spec.backend); !sticky.empty()) {
      ++fail;
      if (rr.expectation == Expectation::must_hold) ++must_fail;
      if (is_crash_outcome(r.outcome) || r.outcome == "error") ++recorded_fail, ++reproduced_fail;
      Record crash = make_record(r.spec, Verdict::error(sticky));
      crash.outcome = "crash";
      crash.diff = DiffStats{};
      crash.detail = sticky;
      std::cout << "[crash] " << r.spec.describe() << " (" << to_string(rr.expectation)
                << ")\n  device fault: " << sticky << "\n  repro: " << repro_command(crash, program) << "\n";
      poisoned = true;
      break;
    }
    if (rr.skipped) {
      ++skipped;
      std::cout << "[skipped] " << r.spec.describe() << ": " << rr.skip_reason << "\n";
      continue;
    }
    const bool passed = rr.verdict.passed();
    (passed ? pass : fail)++;
    if (!passed && rr.expectation == Expectation::must_hold) ++must_fail;
    if (r.outcome != "pass") {
      ++recorded_fail;
      if (rr.reproduced) ++reproduced_fail;
    }
    if (!rr.reproduced) ++not_reproduced;
    std::cout << "[" << to_string(rr.verdict.outcome) << "] " << r.spec.describe() << " (" << to_string(rr.expectation)
              << ")\n  " << (rr.verdict.detail.empty() ? rr.verdict.diff.summary() : rr.verdict.detail) << "\n  "
              << (rr.reproduced
                      ? "matches the record bit for bit"
                      : "differs from the record (recorded " + r.outcome + ": " + std::to_string(r.diff.differing) +
                            " differing, first at " + r.diff.first_coords + ")")
              << "\n";
    if (!passed && rr.expectation == Expectation::must_hold)
      std::cout << "  repro: " << repro_command(make_record(r.spec, rr.verdict), program) << "\n";
  }
  std::cout << "\nreplayed " << replayed << " records: " << pass << " pass, " << fail << " fail (" << must_fail
            << " must-hold), " << skipped << " skipped; " << reproduced_fail << " of " << recorded_fail
            << " recorded failures reproduced bit for bit" << std::endl;
  if (poisoned) {
    std::cout << "STOPPED: the device context is poisoned; " << records.size() - replayed
              << " records left unreplayed (replay them in a fresh process)" << std::endl;
    std::cout.flush();
    std::_Exit(kExitMustHoldFailed);
  }
  if (must_fail > 0) return kExitMustHoldFailed;
  if (o.expect_reproduce && not_reproduced > 0) return kExitMustHoldFailed;
  return kExitOk;
}

std::vector<at::ScalarType> parse_dtypes(const std::string &list) {
  std::vector<at::ScalarType> out;
  for (const auto &d : split_list(list)) {
    try {
      out.push_back(dtype_from_string(d));
    } catch (const std::invalid_argument &e) {
      throw UsageError(e.what());
    }
  }
  return out;
}

struct BenchOptions {
  std::string ops = "mm,log_softmax,mean,paged_attention", impls = "invariant", dtypes = "bfloat16,float16,float32",
              shapes, out;
  int repetitions = 5;
};

int run_bench_command(const BenchOptions &o, const std::string &command_line) {
  BenchConfig cfg;
  cfg.ops = split_list(o.ops);
  cfg.impls = split_list(o.impls);
  cfg.dtypes = parse_dtypes(o.dtypes);
  cfg.repetitions = o.repetitions;
  if (!o.shapes.empty()) cfg.shapes = read_bench_shapes(o.shapes);
  cfg.set_batch_invariant_mode = [](bool on) { on ? enable_batch_invariant_mode() : disable_batch_invariant_mode(); };
  plan_bench(cfg);  // a bad selection fails here, before anything is timed
  if (!backend_available(Backend::cuda)) throw UsageError("bench needs a CUDA GPU: none found");
  ReportWriter report(o.out.empty() ? default_report_dir("bench", 0) : fs::path(o.out), false);
  const std::string started = utc_now();
  std::string stopped;
  report.add_file("bench.csv", run_bench(cfg, std::cout, &stopped));
  nlohmann::json summary = tool_summary(command_line, started);
  summary["bench"] = {{"ops", cfg.ops},
                      {"impls", cfg.impls},
                      {"dtypes", split_list(o.dtypes)},
                      {"repetitions", cfg.repetitions},
                      {"shapes", o.shapes.empty() ? "default" : o.shapes}};
  if (!stopped.empty()) summary["bench"]["stopped"] = stopped;
  report.finish(summary);
  std::cout << "report: " << report.path().string() << std::endl;
  if (!stopped.empty()) throw UsageError("bench stopped part way (the rows finished are in the report): " + stopped);
  return kExitOk;
}

struct ScanOptions {
  int64_t n = 4096, k = 4096, max_m = 1024;
  std::string dtypes = "bfloat16", impls = "cublas,cublaslt-noworkspace,torch,invariant", out;
};

int run_scan_command(const ScanOptions &o, const std::string &command_line) {
  ScanConfig cfg;
  cfg.n = o.n;
  cfg.k = o.k;
  cfg.max_m = o.max_m;
  cfg.dtypes = parse_dtypes(o.dtypes);
  cfg.impls = split_list(o.impls);
  if (cfg.n <= 0 || cfg.k <= 0 || cfg.max_m <= 0) throw UsageError("scan needs positive --n, --k and --max-m");
  if (!backend_available(Backend::cuda)) throw UsageError("scan needs a CUDA GPU: none found");
  ReportWriter report(o.out.empty() ? default_report_dir("scan", 0) : fs::path(o.out), false);
  const std::string started = utc_now();
  report.add_file("scan.csv", run_scan(cfg, std::cout));
  nlohmann::json summary = tool_summary(command_line, started);
  summary["scan"] = {
      {"n", cfg.n}, {"k", cfg.k}, {"max_m", cfg.max_m}, {"dtypes", split_list(o.dtypes)}, {"impls", cfg.impls}};
  report.finish(summary);
  std::cout << "report: " << report.path().string() << std::endl;
  return kExitOk;
}

std::string join(const std::vector<at::ScalarType> &v) {
  std::string s;
  for (auto d : v) s += (s.empty() ? "" : ",") + dtype_name(d);
  return s;
}

int run_list(const std::string &what) {
  if (what == "ops" || what == "all") {
    std::cout << "ops and their properties:\n";
    for (const auto &op : all_ops()) {
      std::cout << "  " << std::left << std::setw(16) << op;
      for (const auto &p : properties_for(op)) std::cout << ' ' << p;
      std::cout << "\n";
    }
  }
  if (what == "impls" || what == "all") {
    std::cout << "impls (backend, expectation, dtypes):\n";
    for (const auto &i : all_impls())
      std::cout << "  " << std::left << std::setw(16) << i.op << std::setw(24) << i.impl << std::setw(6)
                << to_string(i.backend) << std::setw(11) << to_string(i.expectation) << std::setw(40) << join(i.dtypes)
                << i.description << "\n";
  }
  if (what == "properties" || what == "all") {
    std::cout << "properties (checked bitwise; accuracy against a float64 reference):\n"
                 "  batch_slice           op(x[i:j]) == op(x)[i:j] for random i<j\n"
                 "  batch_compose         rows keep their bits when other rows change or rows are added\n"
                 "  permute               permuting rows permutes the result\n"
                 "  repeat                two runs (on CUDA: two streams) give the same bits\n"
                 "  variant_agree         another layout of the same values (and on CUDA a graph replay) gives the "
                 "same bits\n"
                 "  accuracy              within a per-dtype bound of a float64 reference\n"
                 "  seq_alone_vs_batched  paged attention: a sequence alone == inside a mixed batch\n"
                 "  block_placement       paged attention: permuted or shared physical pages change nothing\n"
                 "  chunked_prefill       paged attention: a prefill in chunks == in one go\n"
                 "  decode_vs_prefill     paged attention: a decode step == the last row of a prefill\n";
  }
  if (what != "ops" && what != "impls" && what != "properties" && what != "all")
    throw UsageError("list what? '" + what + "' (expected ops, impls, properties or all)");
  return kExitOk;
}

}  // namespace
}  // namespace detfuzz

int detfuzz::cli_main(int argc, char **argv) {
  using namespace detfuzz;
  CLI::App app{
      "detfuzz: proves bit for bit that inference kernels give a row the same result alone as in a batch,\n"
      "and shrinks the cases where they do not. Exit: 0 all must-hold properties held, 1 one failed, 2 usage error."};
  app.require_subcommand(1);
  std::string command_line;
  for (int i = 0; i < argc; ++i) command_line += (i ? " " : "") + std::string(argv[i]);
  g_args.assign(argv, argv + argc);

  // Flags several subcommands share keep one wording and one order (cli_common.h, flag_text).
  namespace ft = flag_text;
  FuzzOptions fo;
  std::string ops, impls, props, dtypes;
  auto *fuzz = app.add_subcommand("fuzz", "Replay the corpus, then fuzz the selected targets and write a report");
  fuzz->add_option("--backend", fo.sel.backend, ft::backend)->default_val("auto");
  fuzz->add_option("--op", ops, ft::ops)->default_str("every op");
  fuzz->add_option("--impl", impls, ft::impls)->default_str("every impl but the mutants");
  fuzz->add_option("--property", props, ft::properties)->default_str("every property of each op");
  fuzz->add_option("--dtype", dtypes, ft::dtypes)->default_str("float32,float16,bfloat16");
  fuzz->add_option("--seed", fo.seed, ft::seed)->default_str("random");
  fuzz->add_option("--budget", fo.budget, ft::budget)->default_val("60s");
  fuzz->add_option("--cases", fo.cases, "stop after this many cases (0: no limit)")->default_val(0);
  fuzz->add_option("--out", fo.out, ft::out)->default_str("reports/<time>-<backend>-seed<seed>");
  fuzz->add_option("--junit", fo.junit,
                   "also write JUnit XML here: a testcase per target, failures with their shrunk record and repro");
  fuzz->add_option("--corpus", fo.corpora, "record files or folders to replay first; repeatable")
      ->default_str("corpora/");
  fuzz->add_flag("--no-corpus", fo.no_corpus, "do not replay any corpus");
  fuzz->add_flag("--no-shrink", fo.no_shrink, "record first failures as found, without shrinking");
  fuzz->add_option("--shrink-budget", fo.shrink_budget, "time allowed to shrink one failure: 30s, 5m or seconds")
      ->default_val("30s");
  fuzz->add_flag("--stop-on-failure", fo.stop_on_failure, "end the campaign at the first failure, once it is shrunk");
  fuzz->add_flag("--quiet", fo.quiet, "no progress lines");
  fuzz->add_option("--shard", fo.shard,
                   "i/n: run shard i of n (targets and corpus records k with k mod n = i); default from "
                   "DETFUZZ_SHARD, JOB_COMPLETION_INDEX+DETFUZZ_SHARD_COUNT or SLURM_ARRAY_TASK_*");
  fuzz->add_option("--workers", fo.workers,
                   "fork mode: run the campaign in N child processes; a crash, device fault or hang of one "
                   "becomes a crash/timeout record and a fresh worker carries on")
      ->check(CLI::Range(0, 1024));
  fuzz->add_option("--devices", fo.devices,
                   "all or 0,1,...: fork mode with one worker per GPU (CUDA_VISIBLE_DEVICES), one merged report");
  fuzz->add_option("--load", fo.libraries, ft::load);
  std::vector<std::string> imports;  // --import, of fuzz, replay or bench (python_hooks.h)
  fuzz->add_option("--import", imports, kImportFlagText);
  fuzz->add_option("--spec", fo.specs, ft::spec);
  fuzz->add_option("--mode", fo.mode, ft::mode)->default_val("native");
  fuzz->add_option("--cpu-threads", fo.cpu_threads, ft::cpu_threads)->check(CLI::Range(0, 1024));
  fuzz->add_option("--case-timeout", fo.case_timeout, ft::case_timeout)->default_val("0");
  fuzz->add_option("--worker", fo.worker, "(internal) i/n: this process is fork-mode worker i of n")->group("");
  fuzz->add_option("--inflight", fo.inflight, "(internal) file to write each case to before checking it")->group("");
  fuzz->add_option("--gpu-share", fo.gpu_share, "(internal) N fork-mode workers share this worker's GPU")->group("");
  fuzz->add_option("--skip-target", fo.skip_targets, "(internal) targets to leave out")->group("");
  fuzz->footer(
      "--case-timeout: with --workers the worker running the case is killed and replaced; in one process a watchdog\n"
      "saves the timeout record and the report, then exits 1. A sticky CUDA error (illegal address, launch failure, a\n"
      "kernel assert) is a crash record of the case that raised it: one process stops there (exit 1, report written),\n"
      "a worker is replaced.");

  ReplayOptions ro;
  auto *replay = app.add_subcommand("replay", "Re-run saved records and say whether each reproduces bit for bit");
  replay->add_option("paths", ro.paths, "record files (failures.csv, corpora/*.csv) or folders of them");
  replay->add_option("--case", ro.cases, "one record line, as printed in a repro command; repeatable");
  replay->add_flag("--expect-reproduce", ro.expect_reproduce,
                   "exit 1 unless every record's outcome and diff come back bit for bit");
  replay->add_option("--sanitize", ro.sanitize,
                     "memcheck, racecheck or initcheck: run each record under compute-sanitizer and "
                     "attach its first report to the record (written to sanitize.csv of the report folder the "
                     "records came from, or of --out)");
  replay->add_option("--out", ro.out, "with --sanitize: the folder for sanitize.csv");
  replay->add_option("--load", ro.libraries, ft::load);
  replay->add_option("--import", imports, kImportFlagText);
  replay->add_option("--spec", ro.specs, ft::spec);
  replay->add_option("--mode", ro.mode, ft::mode)->default_val("native");
  replay->add_option("--cpu-threads", ro.cpu_threads, ft::cpu_threads)->check(CLI::Range(0, 1024));
  replay->add_option("--case-timeout", ro.case_timeout, ft::case_timeout)->default_val("10s");
  replay->footer(
      "Crash and timeout records run in a child process (within --case-timeout), so that the replay survives them.");

  std::string list_what = "all";
  auto *list = app.add_subcommand("list", "List ops, impls (with expectations) and properties");
  list->add_option("what", list_what, "ops, impls, properties or all")->default_val("all");

  BenchOptions bo;
  auto *bench =
      app.add_subcommand("bench", "Time our CUDA kernels against cuBLAS (mm) and torch (reductions); write bench.csv");
  bench->add_option("--op", bo.ops, ft::ops)->default_val(bo.ops);
  bench->add_option("--impl", bo.impls, ft::impls)->default_val(bo.impls);
  bench->add_option("--dtype", bo.dtypes, ft::dtypes)->default_val(bo.dtypes);
  bench->add_option(
      "--shapes", bo.shapes,
      "CSV with header op,M,N,K (attention: and optional page, kv_heads; optional variant: block, shuffled)\n"
      "replacing the default shape set");
  bench->add_option("--repetitions", bo.repetitions, "repetitions per benchmark (the median is kept)")->default_val(5);
  bench->add_option("--out", bo.out, ft::out)->default_str("reports/<time>-bench-seed0");
  bench->add_option("--import", imports, kImportFlagText);
  bench->footer(
      "--impl invariant@PATH forces one matmul path (sm90_persistent, sm90_split, their _64 forms, mma_sync, or a\n"
      "float32 path); invariant@tma, @cp-async, @pingpong, @no-pingpong, @split-per-cta, @split-groups,\n"
      "@whole-rows, @one-consumer, @two-consumers, @merge-kernel force attention's.");

  ScanOptions so;
  std::string merge_out;
  std::vector<std::string> merge_dirs;
  auto *merge =
      app.add_subcommand("merge", "Combine the reports of a sharded campaign's shards (fuzz --shard) into one report");
  merge
      ->add_option("dirs", merge_dirs,
                   "the shards' report folders (without --out: the merged folder, then the shards')")
      ->required();
  merge->add_option("--out", merge_out, ft::out);
  auto *scan = app.add_subcommand(
      "scan", "For one (N, K, dtype), list every M where an impl's rows differ from the smaller product");
  scan->add_option("--impl", so.impls, ft::impls)->default_val(so.impls);
  scan->add_option("--dtype", so.dtypes, ft::dtypes)->default_val(so.dtypes);
  scan->add_option("--n", so.n, "N")->default_val(4096);
  scan->add_option("--k", so.k, "K")->default_val(4096);
  scan->add_option("--max-m", so.max_m, "sweep M from 1 to this")->default_val(1024);
  scan->add_option("--out", so.out, ft::out)->default_str("reports/<time>-scan-seed0");

  LapsOptions lo;
  auto *laps = app.add_subcommand(
      "laps", "Run a mixed workload under FIFO and LAPS scheduling: compare every request's bits, print TTFT");
  laps->add_option("--backend", lo.backend, ft::backend)->default_val("auto");
  laps->add_option("--impl", lo.impl, "the engine model's impl, one (see: detfuzz list impls)")->default_val(lo.impl);
  laps->add_option("--dtype", lo.dtype, "the model's dtype, one")->default_str("the impl's first");
  laps->add_option("--clock", lo.clock,
                   "step durations: model (cost formula), calibrated (the formula fitted to measured forward times), "
                   "measured (each step's wall time), auto (calibrated on CUDA, model on the CPU)")
      ->default_val("auto");
  laps->add_option("--seed", lo.seed, ft::seed)->default_val(1);
  laps->add_option("--requests", lo.requests, "requests in the trace")->default_val(lo.requests);
  laps->add_option("--min-len", lo.min_len, "shortest prompt")->default_val(lo.min_len);
  laps->add_option("--short-max", lo.short_max, "longest prompt of the short share (70%)")->default_val(lo.short_max);
  laps->add_option("--max-len", lo.max_len, "longest prompt")->default_val(lo.max_len);
  laps->add_option("--decode-steps", lo.decode_steps, "greedy tokens after the first")->default_val(lo.decode_steps);
  laps->add_option("--offered-load", lo.load, "arrival rate as a share of the instances' prefill capacity")
      ->default_val(lo.load);
  laps->add_option("--instances", lo.instances, "prefill instances")->default_val(lo.instances);
  laps->add_option("--threshold", lo.threshold, "short/long threshold (queues and router), prompt tokens")
      ->default_val(lo.threshold);
  laps->add_option("--step-tokens", lo.budget, "new tokens per prefill step")->default_val(lo.budget);
  laps->add_option("--budget", lo.budget, "(old name of --step-tokens)")->group("");
  laps->add_option("--max-running", lo.max_running, "sequences an instance holds")->default_val(lo.max_running);
  laps->add_option("--rebalance-interval-ms", lo.rebalance_interval_ms, "router rebalance interval")
      ->default_val(lo.rebalance_interval_ms);
  laps->add_option("--rebalance-ratio", lo.rebalance_ratio, "pending ratio that moves an instance")
      ->default_val(lo.rebalance_ratio);
  laps->add_option("--out", lo.out, ft::out)->default_str("reports/<time>-laps-<backend>-seed<seed>");

  GateConfig gc;
  std::string gate_baseline;
  std::vector<std::string> gate_runs;
  auto *gate = app.add_subcommand(
      "gate", "Exit 1 when a must-hold property failed in a run, or a bench speedup fell against a stored bench.csv");
  gate->add_option("--run", gate_runs, "report folders of the run to judge (fuzz, replay, bench); repeatable")
      ->required();
  gate->add_option("--baseline", gate_baseline,
                   "the stored bench.csv, or a report folder holding one (omit: no speed check)");
  gate->add_option("--max-slowdown", gc.max_slowdown, "largest allowed fall of a speedup, as a fraction")
      ->default_val(0.1);

  HtmlReportOptions ho;
  auto *html =
      app.add_subcommand("report", "Render report folders (fuzz, bench, scan) as one self-contained HTML file");
  html->add_option("runs", ho.runs, "report folders")->required();
  html->add_option("--out", ho.out, "the HTML file to write")->default_str("report.html in the first folder");

  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError &e) {
    if (e.get_exit_code() == 0) return app.exit(e) == 0 ? kExitOk : kExitUsage;  // --help, --help-all, --version
    // Any other: one line, like every other refusal, naming the --help that lists what the command takes.
    std::string command = "detfuzz";
    for (const CLI::App *sub : app.get_subcommands()) command += " " + sub->get_name();
    std::cerr << "detfuzz: error: " << first_line(e.what()) << " (see: " << command << " --help)" << std::endl;
    return kExitUsage;
  }
  try {
    fo.sel.ops = split_list(ops);
    fo.sel.impls = split_list(impls);
    fo.sel.properties = split_list(props);
    fo.sel.dtypes = split_list(dtypes);
    if (*fuzz || *replay || *bench) prepare_python(imports, *fuzz ? fo.mode : *replay ? ro.mode : "native");
    if (*fuzz) return run_fuzz(fo, argv[0], command_line);
    if (*merge) {
      // merge --out DIR SHARDS..., or the positional form merge DIR SHARDS...
      std::vector<std::string> shards = merge_dirs;
      if (merge_out.empty()) {
        if (shards.size() < 2)
          throw UsageError(
              "merge needs the merged folder and at least one shard folder: merge --out DIR SHARD_DIRS...");
        merge_out = shards.front();
        shards.erase(shards.begin());
      }
      return merge_reports(merge_out, {shards.begin(), shards.end()}, command_line);
    }
    if (*replay) return run_replay(ro, argv[0]);
    if (*bench) return run_bench_command(bo, command_line);
    if (*scan) return run_scan_command(so, command_line);
    if (*laps) return run_laps_command(lo, command_line, std::cout);
    if (*gate) {
      gc.baseline = gate_baseline;
      for (const auto &r : gate_runs) gc.runs.emplace_back(r);
      return run_gate(gc, std::cout);
    }
    if (*html) return render_html_report(ho);
    return run_list(list_what);
  } catch (const UsageError &e) {
    std::cerr << "detfuzz: error: " << e.what() << std::endl;
  } catch (const CorpusError &e) {
    std::cerr << "detfuzz: error: " << e.what() << std::endl;
  } catch (const ReportError &e) {
    std::cerr << "detfuzz: error: " << e.what() << std::endl;
  } catch (const std::invalid_argument &e) {
    std::cerr << "detfuzz: error: " << first_line(e.what()) << std::endl;
  } catch (const std::exception &e) {
    std::cerr << "detfuzz: error: " << first_line(e.what()) << std::endl;
  }
  return kExitUsage;
}
