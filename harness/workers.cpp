#include "harness/workers.h"

#include "harness/device_faults.h"
#include "harness/junit.h"
#include "harness/merge.h"
#include "harness/minimize.h"
#include "harness/report.h"
#include "harness/remove_tree.h"
#include "harness/signals.h"
#include "ops/registry.h"
#include "properties/properties.h"

#include <nlohmann/json.hpp>

#include <fcntl.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <csignal>
#include <cstring>
#include <fstream>
#include <optional>
#include <iomanip>
#include <ostream>
#include <set>
#include <sstream>
#include <stdexcept>
#include <thread>

extern char **environ;

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

// Starts `argv` with stdout and stderr to `log_file` (and, when `cuda_device` >= 0,
// CUDA_VISIBLE_DEVICES set to it); throws on failure.
pid_t spawn(const std::vector<std::string> &argv, const fs::path &log_file, int cuda_device = -1) {
  std::vector<std::string> env_strings;
  for (char **e = environ; *e; ++e)
    if (cuda_device < 0 || std::strncmp(*e, "CUDA_VISIBLE_DEVICES=", 21) != 0) env_strings.push_back(*e);
  if (cuda_device >= 0) env_strings.push_back("CUDA_VISIBLE_DEVICES=" + std::to_string(cuda_device));
  std::vector<char *> env;
  for (auto &e : env_strings) env.push_back(e.data());
  env.push_back(nullptr);
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_addopen(&actions, 1, log_file.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
  posix_spawn_file_actions_adddup2(&actions, 1, 2);
  std::vector<char *> args;
  for (const auto &a : argv) args.push_back(const_cast<char *>(a.c_str()));
  args.push_back(nullptr);
  pid_t pid = 0;
  const int rc = posix_spawn(&pid, argv[0].c_str(), &actions, nullptr, args.data(), env.data());
  posix_spawn_file_actions_destroy(&actions);
  if (rc != 0) throw std::runtime_error("fuzz --workers: cannot start " + argv[0] + ": " + std::strerror(rc));
  return pid;
}

std::string signal_text(int sig) {
  const char *name = sigabbrev_np(sig);
  return "signal " + std::to_string(sig) + (name ? std::string(" (SIG") + name + ")" : std::string());
}

// How a finished child ended: empty for a normal campaign exit (0, 1, 130, 143), else why it crashed.
std::string abnormal_end(int status) {
  if (WIFSIGNALED(status)) return "killed by " + signal_text(WTERMSIG(status));
  if (WIFEXITED(status)) {
    const int code = WEXITSTATUS(status);
    if (code == 0 || code == 1 || code == 130 || code == 143) return "";
    return "exited with code " + std::to_string(code);
  }
  return "ended with status " + std::to_string(status);
}

std::string read_file(const fs::path &p) {
  std::ifstream in(p);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

std::string tail_lines(const fs::path &p, int n) {
  std::vector<std::string> lines;
  std::ifstream in(p);
  for (std::string l; std::getline(in, l);) lines.push_back(l);
  std::string out;
  for (size_t i = lines.size() > static_cast<size_t>(n) ? lines.size() - n : 0; i < lines.size(); ++i)
    out += "  | " + lines[i] + "\n";
  return out;
}

std::string target_name(const CaseSpec &c) {
  return c.op + "/" + c.impl + "/" + c.property + "/" + dtype_name(c.dtype);
}

bool must_hold(const CaseSpec &c) {
  std::optional<ImplInfo> impl;
  try {
    impl = lookup_impl(c.op, c.impl, c.backend);
  } catch (const std::invalid_argument &) {  // an impl this process cannot resolve: held to must-hold
  }
  return !impl || impl->expectation == Expectation::must_hold;
}

struct Worker {
  int index = 0, generation = 0;
  pid_t pid = -1;
  bool running = false;
  fs::path dir, inflight, log;
};

// Cases written so far by a running worker (its partial report's cases.csv, header excluded).
int64_t cases_so_far(const Worker &w) {
  int64_t n = 0;
  for (const auto &e : fs::directory_iterator(w.dir.parent_path())) {
    const std::string name = e.path().filename().string();
    if (name.rfind(w.dir.filename().string(), 0) != 0) continue;
    std::ifstream in(e.path() / "cases.csv");
    for (std::string l; std::getline(in, l);) ++n;
    if (n > 0) --n;
  }
  return n;
}

// The merged report as a CampaignResult (for JUnit), each crash or timeout counted as a failure
// of its target whose record, when it has none yet, is the crash record.
CampaignResult merged_result(const nlohmann::json &summary, const std::vector<Record> &crashes) {
  CampaignResult res;
  const auto &r = summary["results"];
  res.cases = r.value("cases", int64_t{0});
  res.elapsed_s = r.value("elapsed_s", 0.0);
  res.corpus_replayed = r["corpus"].value("replayed", int64_t{0});
  res.corpus_skipped = r["corpus"].value("skipped", int64_t{0});
  res.corpus_must_hold_failures = r["corpus"].value("must_hold_failures", int64_t{0});
  res.corpus_observed_failures = r["corpus"].value("observed_failures", int64_t{0});
  for (const auto &t : r["targets"]) {
    TargetStats s;
    s.target = {t["op"],
                t["impl"],
                t["property"],
                backend_from_string(t["backend"]),
                dtype_from_string(t["dtype"]),
                t["expectation"] == "must-hold" ? Expectation::must_hold : Expectation::observed};
    s.cases = t.value("cases", int64_t{0});
    s.failures = t.value("failures", int64_t{0});
    s.errors = t.value("errors", int64_t{0});
    s.seconds = t.value("seconds", 0.0);
    if (t.contains("minimal")) {
      s.has_minimal = true;
      s.minimal = parse_record_line(t["minimal"].get<std::string>());
    }
    res.targets.push_back(s);
  }
  for (const auto &c : crashes) {
    auto it = std::find_if(res.targets.begin(), res.targets.end(),
                           [&](const TargetStats &s) { return s.target.name() == target_name(c.spec); });
    if (it == res.targets.end()) {
      TargetStats s;
      s.target = {c.spec.op,      c.spec.impl,  c.spec.property,
                  c.spec.backend, c.spec.dtype, must_hold(c.spec) ? Expectation::must_hold : Expectation::observed};
      res.targets.push_back(s);
      it = res.targets.end() - 1;
    }
    ++it->cases;
    ++it->failures;
    if (!it->has_minimal) {
      it->has_minimal = true;
      it->minimal = c;
    }
  }
  return res;
}

// How a record's replay in a child ended.
struct ChildEnd {
  enum Kind { completed, rejected, crashed, timed_out } kind;
  std::string how;  // crashed: abnormal_end's text, or "device fault <name>"
};

// The rest of the first line of `log` that starts with `prefix`, or nullopt.
std::optional<std::string> line_after(const fs::path &log, const std::string &prefix) {
  std::ifstream in(log);
  for (std::string l; std::getline(in, l);)
    if (l.rfind(prefix, 0) == 0) return l.substr(prefix.size());
  return std::nullopt;
}

// The sticky device error a replay printed ("  device fault: <name>: ..."), or "".
std::string device_fault_in_log(const fs::path &log) {
  const auto rest = line_after(log, "  device fault: ");
  return rest ? device_error_name(*rest) : "";
}

// Whether a replay's log holds its closing line ("replayed N records: ...", harness/main.cpp).
bool replay_finished_in_log(const fs::path &log) { return line_after(log, "replayed ").has_value(); }

ChildEnd run_record_in_child(const Record &r, const std::string &self, double timeout_s, const fs::path &child_log) {
  Record as_run = r;
  as_run.outcome = "error";  // the child replays it as an ordinary case
  as_run.detail.clear();
  std::vector<std::string> argv = {self, "replay", "--case", record_row(as_run)};
  argv.insert(argv.end(), replay_options().begin(), replay_options().end());
  const pid_t pid = spawn(argv, child_log);
  const auto start = Clock::now();
  for (;;) {
    int status = 0;
    if (waitpid(pid, &status, WNOHANG) == pid) {
      if (WIFEXITED(status) && WEXITSTATUS(status) == 2) return {ChildEnd::rejected, "exited with code 2"};
      const std::string how = abnormal_end(status);
      if (!how.empty()) return {ChildEnd::crashed, how};
      // A sticky device error: the child stopped with the case's crash (exit 1).
      if (const std::string fault = device_fault_in_log(child_log); !fault.empty())
        return {ChildEnd::crashed, "device fault " + fault};
      // A replay's own exit code before its closing line: the case called exit().
      if (!replay_finished_in_log(child_log))
        return {ChildEnd::crashed,
                "exited with code " + std::to_string(WEXITSTATUS(status)) + " before its replay finished"};
      return {ChildEnd::completed, ""};
    }
    if (timeout_s > 0 && seconds_since(start) > timeout_s) {
      kill(pid, SIGKILL);
      waitpid(pid, nullptr, 0);
      return {ChildEnd::timed_out, "timeout"};
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
}

// The summary.json of a finished worker report, or null.
nlohmann::json worker_summary(const fs::path &dir) {
  try {
    return nlohmann::json::parse(read_file(dir / "summary.json"));
  } catch (const std::exception &) {
    return nullptr;
  }
}

}  // namespace

int run_workers(const WorkersConfig &cfg, std::ostream &log) {
  if (cfg.workers < 1) throw std::invalid_argument("fuzz --workers must be >= 1");
  if (!cfg.devices.empty() && static_cast<int>(cfg.devices.size()) != cfg.workers)
    throw std::invalid_argument("fuzz --devices: one worker per device");
  const fs::path root = fs::path(cfg.out.string() + ".workers-" + std::to_string(getpid()));
  fs::create_directories(root);
  const auto start = Clock::now();
  std::vector<Worker> slots(cfg.workers);
  std::vector<fs::path> finished;
  std::vector<Record> crashes;
  std::set<std::string> crashed_targets;
  std::vector<pid_t> dying;  // killed workers not yet reaped (a process with a kernel in flight can take a while to go)
  int forwarded = 0, hung = 0, faulted = 0;

  auto launch = [&](Worker &w) {
    const std::string tag = "w" + std::to_string(w.index) + "-g" + std::to_string(w.generation);
    w.dir = root / tag;
    w.inflight = root / (tag + ".inflight");
    w.log = root / (tag + ".log");
    double budget = cfg.budget_s;
    if (budget > 0) budget = std::max(1.0, budget - seconds_since(start));
    std::vector<std::string> argv = {cfg.self, "fuzz"};
    argv.insert(argv.end(), cfg.child_args.begin(), cfg.child_args.end());
    std::ostringstream b;
    b << std::fixed << std::setprecision(3) << budget << "s";
    argv.insert(argv.end(),
                {"--out", w.dir.string(), "--budget", budget > 0 ? b.str() : "0", "--quiet", "--worker",
                 std::to_string(w.index) + "/" + std::to_string(cfg.workers), "--inflight", w.inflight.string(),
                 "--seed", std::to_string(w.generation == 0 ? cfg.seed : mix(cfg.seed, w.generation))});
    if (cfg.max_cases > 0)
      argv.insert(argv.end(),
                  {"--cases", std::to_string(std::max<int64_t>(
                                  1, cfg.max_cases / cfg.workers + (w.index < cfg.max_cases % cfg.workers)))});
    if (!cfg.corpus || w.generation > 0) argv.push_back("--no-corpus");
    // Without --devices every worker shares the visible GPUs: each keeps to its part of their memory.
    if (cfg.devices.empty() && cfg.workers > 1) argv.insert(argv.end(), {"--gpu-share", std::to_string(cfg.workers)});
    for (const auto &t : crashed_targets) argv.insert(argv.end(), {"--skip-target", t});
    w.pid = spawn(argv, w.log, cfg.devices.empty() ? -1 : cfg.devices[w.index]);
    w.running = true;
  };

  auto note_crash = [&](Record r) {
    crashes.push_back(r);
    crashed_targets.insert(target_name(r.spec));
    log << (must_hold(r.spec) ? "CRASH (must-hold) " : "crash (observed) ") << target_name(r.spec) << ": " << r.outcome
        << ", " << r.detail << "\n  case: " << r.spec.describe() << "\n  repro: " << repro_command(r, cfg.program)
        << std::endl;
  };

  auto record_crash = [&](Worker &w, const std::string &outcome, const std::string &why) {
    const std::string line = read_file(w.inflight);
    if (line.find_first_not_of(" \r\n") == std::string::npos) {
      log << "worker " << w.index << " " << why << " outside any case (start-up or report writing); its log:\n"
          << tail_lines(w.log, 8);
      return;
    }
    Record r = parse_record_line(line.substr(0, line.find('\n')));
    r.outcome = outcome;
    r.diff = DiffStats{};
    r.detail = "worker " + std::to_string(w.index) + " " + why;
    note_crash(r);
  };

  for (auto &w : slots) {
    w.index = static_cast<int>(&w - slots.data());
    launch(w);
  }
  double last_progress = 0;
  for (;;) {
    bool any = false;
    if (const int sig = interrupt_signal(); sig != 0 && forwarded == 0) {
      forwarded = sig;
      for (auto &w : slots)
        if (w.running) kill(w.pid, sig);
    }
    dying.erase(std::remove_if(dying.begin(), dying.end(), [](pid_t p) { return waitpid(p, nullptr, WNOHANG) != 0; }),
                dying.end());
    for (auto &w : slots) {
      if (!w.running) continue;
      int status = 0;
      const pid_t r = waitpid(w.pid, &status, WNOHANG);
      if (r == w.pid) {
        w.running = false;
        std::string why = abnormal_end(status);
        // A campaign's own exit code without its report: something in the case called exit() (a
        // user's op, a library's fatal-error path, a sanitizer's report), a crash like a signal.
        const nlohmann::json ws = why.empty() ? worker_summary(w.dir) : nlohmann::json();
        if (why.empty() && !ws.is_object())
          why = "exited with code " + std::to_string(WEXITSTATUS(status)) + " without finishing its report";
        if (why.empty()) {
          finished.push_back(w.dir);
          // A worker that stopped at a sticky device error: its report is kept, its crash recorded,
          // and a fresh process (a fresh context) takes the shard on.
          if (!ws.contains("stopped") || ws["stopped"].value("reason", "") != "device_fault") continue;
          Record crash = parse_record_line(ws["stopped"].value("record", ""));
          crash.detail = "worker " + std::to_string(w.index) + " stopped: " + crash.detail;
          ++faulted;
          note_crash(crash);
        } else if (WIFEXITED(status) && WEXITSTATUS(status) == 2) {  // a usage error: every worker would hit it
          log << "fuzz --workers: worker " << w.index << " stopped with a usage error:\n" << tail_lines(w.log, 5);
          for (auto &o : slots)
            if (o.running) kill(o.pid, SIGKILL), waitpid(o.pid, nullptr, 0), o.running = false;
          remove_tree(root.string());
          return 2;
        } else {
          record_crash(w, "crash", why);
        }
      } else if (cfg.case_timeout_s > 0) {
        std::error_code ec;
        const auto mtime = fs::last_write_time(w.inflight, ec);
        if (ec || fs::file_size(w.inflight, ec) == 0) {
          any = true;
          continue;
        }
        const double age = std::chrono::duration<double>(fs::file_time_type::clock::now() - mtime).count();
        if (age <= cfg.case_timeout_s) {
          any = true;
          continue;
        }
        // Killed and left to die: a process with a GPU kernel in flight ends when the driver has
        // torn its context down, and the other workers are not held up meanwhile.
        kill(w.pid, SIGKILL);
        dying.push_back(w.pid);
        w.running = false;
        ++hung;
        std::ostringstream why;
        why << "made no progress for " << std::setprecision(3) << age << " s (--case-timeout " << cfg.case_timeout_s
            << "s)";
        record_crash(w, "timeout", why.str());
      } else {
        any = true;
        continue;
      }
      // A fresh worker for the same shard, unless the campaign is ending.
      const bool time_left = cfg.budget_s == 0 || seconds_since(start) < cfg.budget_s;
      if (forwarded == 0 && time_left) {
        ++w.generation;
        launch(w);
        any = true;
      }
    }
    if (!any) break;
    const double t = seconds_since(start);
    if (cfg.progress && t - last_progress >= 2.0) {
      last_progress = t;
      int64_t cases = 0;
      for (const auto &w : slots)
        if (w.running) cases += cases_so_far(w);
      log << "[" << std::fixed << std::setprecision(1) << std::setw(6) << t << "s] " << cfg.workers << " workers, "
          << cases << " cases in the running workers, " << crashes.size() << " crashes";
      if (cfg.budget_s > 0) log << " | " << static_cast<int>(std::max(0.0, cfg.budget_s - t) + 0.5) << "s left";
      log << std::endl;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  // Killed workers are reaped before the report is written (at most a minute: a process stuck in
  // the driver is left behind, said so).
  for (const auto until = Clock::now() + std::chrono::seconds(60); !dying.empty() && Clock::now() < until;) {
    dying.erase(std::remove_if(dying.begin(), dying.end(), [](pid_t p) { return waitpid(p, nullptr, WNOHANG) != 0; }),
                dying.end());
    if (!dying.empty()) std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  for (pid_t p : dying)
    log << "fuzz --workers: killed worker process " << p << " has not ended after 60 s; not waited for" << std::endl;

  // Every worker hung or crashed before finishing a report: the run still ends with one, made of
  // the crash records alone.
  if (finished.empty()) {
    log << "fuzz --workers: no worker finished a report (" << crashes.size() << " crashes or timeouts); "
        << "the merged report holds the crash records alone" << std::endl;
    const fs::path none = root / "none";
    ReportWriter empty(none);
    empty.finish({{"tool", "detfuzz"},
                  {"results",
                   {{"cases", 0},
                    {"elapsed_s", seconds_since(start)},
                    {"corpus", {{"replayed", 0}, {"skipped", 0}, {"must_hold_failures", 0}, {"observed_failures", 0}}},
                    {"targets", nlohmann::json::array()}}},
                  {"interrupted", forwarded != 0},
                  {"exit_code", 0}});
    finished.push_back(none);
  }
  // Each crash shrunk in children while no signal asked the campaign to stop.
  if (forwarded == 0 && cfg.crash_shrink_s > 0)
    for (auto &r : crashes) {
      const Record shrunk = shrink_crash_in_children(
          r, cfg.self, r.outcome == "timeout" ? std::max(1.0, cfg.case_timeout_s) : 30.0, cfg.crash_shrink_s, log);
      if (shrunk.detail != r.detail) log << "  repro: " << repro_command(shrunk, cfg.program) << std::endl;
      r = shrunk;
      if (interrupt_signal() != 0) break;
    }
  int code = merge_reports(cfg.out, finished, cfg.command_line);
  // The crash records join the merged report's failures, and the summary says what crashed.
  bool crash_must_hold = false;
  {
    std::ofstream failures(cfg.out / "failures.csv", std::ios::app);
    std::ofstream crash_csv(cfg.out / "crashes.csv");
    crash_csv << record_header() << "\n";
    for (const auto &r : crashes) {
      failures << record_row(r) << "\n";
      crash_csv << record_row(r) << "\n";
      crash_must_hold = crash_must_hold || must_hold(r.spec);
    }
  }
  nlohmann::json summary = nlohmann::json::parse(read_file(cfg.out / "summary.json"));
  nlohmann::json crash_list = nlohmann::json::array();
  for (const auto &r : crashes)
    crash_list.push_back({{"target", target_name(r.spec)},
                          {"outcome", r.outcome},
                          {"must_hold", must_hold(r.spec)},
                          {"detail", r.detail},
                          {"record", record_row(r)}});
  if (crash_must_hold && code == 0) code = 1;
  if (forwarded) code = 128 + forwarded;
  summary["workers"] = {{"count", cfg.workers},
                        {"case_timeout_s", cfg.case_timeout_s},
                        {"crashes", crash_list},
                        {"hung", hung},
                        {"device_faults", faulted}};
  if (!cfg.devices.empty()) summary["workers"]["devices"] = cfg.devices;  // worker i ran on devices[i]
  summary["interrupted"] = forwarded != 0;
  summary["exit_code"] = code;
  std::ofstream(cfg.out / "summary.json") << summary.dump(2) << "\n";
  if (!cfg.junit.empty())
    write_junit(cfg.junit, junit_xml(merged_result(summary, crashes),
                                     {cfg.program, cfg.backend, cfg.seed, cfg.started, cfg.out.string()}));
  remove_tree(root.string());
  log << "\n"
      << cfg.workers << " workers; " << crashes.size() << " crashes or timeouts; merged report: " << cfg.out.string()
      << "\n"
      << (forwarded ? "INTERRUPTED by signal " + std::to_string(forwarded) + "; " : std::string())
      << (code == 0 ? "every must-hold property held" : "MUST-HOLD PROPERTY FAILED") << std::endl;
  return code;
}

int replay_crash_in_child(const Record &r, const std::string &self, double timeout_s, std::ostream &log,
                          const std::string &program) {
  const fs::path child_log = fs::temp_directory_path() / ("detfuzz-replay-" + std::to_string(getpid()) + ".log");
  const ChildEnd end = run_record_in_child(r, self, timeout_s, child_log);
  const std::string tail = tail_lines(child_log, 4);
  fs::remove(child_log);
  log << "[" << r.outcome << "] " << r.spec.describe() << "\n  recorded: " << r.detail << "\n  ";
  if (end.kind == ChildEnd::crashed || end.kind == ChildEnd::timed_out) {
    log << "reproduced in a child: "
        << (end.kind == ChildEnd::timed_out ? "no result after " + std::to_string(timeout_s) + " s" : end.how)
        << "\n  repro: " << repro_command(r, program) << "\n";
    return 1;
  }
  log << (end.kind == ChildEnd::rejected ? "did not reproduce: the child rejected the record\n"
                                         : "did not reproduce: the case completed in a child\n")
      << tail;
  return 0;
}

Record shrink_crash_in_children(const Record &r, const std::string &self, double timeout_s, double budget_s,
                                std::ostream &log) {
  const auto start = Clock::now();
  const fs::path child_log = fs::temp_directory_path() / ("detfuzz-shrink-" + std::to_string(getpid()) + ".log");
  const bool timeout_record = r.outcome == "timeout";
  // The end to reproduce: a timeout, or the crash's own signal or device fault (learnt from the first run).
  std::string wanted;
  if (!timeout_record) {
    const ChildEnd first = run_record_in_child(r, self, timeout_s, child_log);
    if (first.kind != ChildEnd::crashed) {
      fs::remove(child_log);
      log << "  " << target_name(r.spec) << ": the case does not crash alone in a fresh process ("
          << (first.kind == ChildEnd::timed_out  ? "no result within " + std::to_string(timeout_s) + " s"
              : first.kind == ChildEnd::rejected ? "the child rejected it"
                                                 : "it completed")
          << "): kept as recorded" << std::endl;
      Record kept = r;
      kept.detail += "; did not crash when replayed alone in a fresh process";
      return kept;
    }
    wanted = first.how;
  }
  const auto trial = [&](const CaseSpec &c) {
    Record x = r;
    x.spec = c;
    const ChildEnd e = run_record_in_child(x, self, timeout_s, child_log);
    if (e.kind == ChildEnd::rejected) return Trial::malformed;
    const bool same = timeout_record ? e.kind == ChildEnd::timed_out : e.kind == ChildEnd::crashed && e.how == wanted;
    return same ? Trial::same : Trial::different;
  };
  const auto stop = [&] { return seconds_since(start) >= budget_s || interrupt_signal() != 0; };
  const MinimizeResult m = minimize_case(r.spec, trial, stop);
  fs::remove(child_log);
  Record best = r;
  if (m.lowered > 0) {
    best.spec = m.spec;
    const auto sizes = [](const CaseSpec &c) {
      return c.shape_string() + (c.params.empty() ? "" : " " + c.params_string());
    };
    best.detail = r.detail + "; shrunk from " + sizes(r.spec) + " in " + std::to_string(m.trials) + " child runs" +
                  (m.stopped ? " (out of shrink time)" : "");
    log << "shrunk " << target_name(r.spec) << " (" << r.outcome << ") from " << sizes(r.spec) << " to "
        << sizes(best.spec) << " in " << m.trials << " child runs" << std::endl;
  }
  return best;
}

}  // namespace detfuzz
