#include "harness/sanitize.h"

#include "harness/cli_common.h"

#include <fcntl.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <csignal>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <ostream>
#include <sstream>
#include <thread>

extern char **environ;

namespace detfuzz {
namespace fs = std::filesystem;
namespace {

bool executable(const fs::path &p) { return !p.empty() && access(p.c_str(), X_OK) == 0 && !fs::is_directory(p); }

std::string trim(const std::string &s) {
  const size_t a = s.find_first_not_of(" \t\r");
  if (a == std::string::npos) return "";
  return s.substr(a, s.find_last_not_of(" \t\r") - a + 1);
}

}  // namespace

void check_sanitizer_tool(const std::string &tool) {
  if (tool != "memcheck" && tool != "racecheck" && tool != "initcheck")
    throw UsageError("--sanitize '" + tool + "' (expected memcheck, racecheck or initcheck)");
}

std::string find_compute_sanitizer() {
  // DETFUZZ_COMPUTE_SANITIZER names the executable (a wrapper, another install); set but not
  // executable, there is none.
  if (const char *named = std::getenv("DETFUZZ_COMPUTE_SANITIZER"))
    return executable(named) ? std::string(named) : std::string();
  if (const char *path = std::getenv("PATH")) {
    std::stringstream ss(path);
    for (std::string dir; std::getline(ss, dir, ':');)
      if (!dir.empty() && executable(fs::path(dir) / "compute-sanitizer"))
        return (fs::path(dir) / "compute-sanitizer").string();
  }
  for (const char *var : {"CUDA_HOME", "CUDA_PATH"})
    if (const char *home = std::getenv(var); home && executable(fs::path(home) / "bin" / "compute-sanitizer"))
      return (fs::path(home) / "bin" / "compute-sanitizer").string();
  if (executable("/usr/local/cuda/bin/compute-sanitizer")) return "/usr/local/cuda/bin/compute-sanitizer";
  return "";
}

std::string first_sanitizer_report(const std::string &output) {
  // Reports are blocks of lines "========= <text>", the first line flush after the prefix, the
  // rest indented; a bare "=========" ends a block. The banner and the summary are not reports.
  std::stringstream ss(output);
  std::string report;
  bool in_report = false;
  const std::string prefix = "=========";
  for (std::string line; std::getline(ss, line);) {
    if (line.rfind(prefix, 0) != 0) continue;
    const std::string rest = line.substr(prefix.size());
    const std::string text = trim(rest);
    if (!in_report) {
      if (text.empty() || text.rfind("COMPUTE-SANITIZER", 0) == 0 || text.rfind("ERROR SUMMARY", 0) == 0 ||
          text.rfind("LEAK SUMMARY", 0) == 0 || text.rfind("RACECHECK SUMMARY", 0) == 0 || rest.rfind("  ", 0) == 0)
        continue;
      report = text;
      in_report = true;
      continue;
    }
    if (text.empty() || text.rfind("Saved host backtrace", 0) == 0 || text.rfind("Host Frame", 0) == 0 ||
        text.rfind("Device Frame", 0) == 0 || text.rfind("ERROR SUMMARY", 0) == 0)
      break;
    if (rest.rfind("  ", 0) != 0) break;  // the next report's first line
    report += "; " + text;
  }
  return report;
}

int sanitize_records(const std::vector<Record> &records, const std::string &sanitizer, const std::string &tool,
                     const std::string &self, double timeout_s, const std::string &program, const std::string &out_dir,
                     std::ostream &log) {
  int found = 0;
  std::vector<Record> annotated_records;
  const fs::path out_file = fs::temp_directory_path() / ("detfuzz-sanitize-" + std::to_string(getpid()) + ".log");
  for (const Record &r : records) {
    Record as_run = r;
    as_run.outcome = "error";  // the target replays it in its own process, as an ordinary case
    as_run.detail.clear();
    std::vector<std::string> argv = {sanitizer, "--tool", tool,     "--print-limit",   "10",
                                     self,      "replay", "--case", record_row(as_run)};
    argv.insert(argv.end(), replay_options().begin(), replay_options().end());
    posix_spawn_file_actions_t actions;
    posix_spawn_file_actions_init(&actions);
    posix_spawn_file_actions_addopen(&actions, 1, out_file.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    posix_spawn_file_actions_adddup2(&actions, 1, 2);
    std::vector<char *> args;
    for (auto &a : argv) args.push_back(a.data());
    args.push_back(nullptr);
    pid_t pid = 0;
    const int rc = posix_spawn(&pid, sanitizer.c_str(), &actions, nullptr, args.data(), environ);
    posix_spawn_file_actions_destroy(&actions);
    if (rc != 0) throw UsageError("--sanitize: cannot start " + sanitizer + ": " + std::strerror(rc));
    const auto start = std::chrono::steady_clock::now();
    bool timed_out = false;
    for (int status = 0; waitpid(pid, &status, WNOHANG) != pid;) {
      if (std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count() > timeout_s) {
        kill(pid, SIGKILL);
        waitpid(pid, nullptr, 0);
        timed_out = true;
        break;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
    }
    std::stringstream text;
    text << std::ifstream(out_file).rdbuf();
    const std::string first = first_sanitizer_report(text.str());
    log << "[sanitize " << tool << "] " << r.spec.describe() << "\n  ";
    if (first.empty()) {
      log << (timed_out
                  ? "no result within " + std::to_string(static_cast<int>(timeout_s)) + " s under compute-sanitizer"
                  : "compute-sanitizer " + tool + " reported no error")
          << "\n";
      continue;
    }
    ++found;
    Record annotated = r;
    annotated.detail = (r.detail.empty() ? "" : r.detail + "; ") + "compute-sanitizer " + tool + ": " + first;
    annotated_records.push_back(annotated);
    log << "first report: " << first << "\n  record: " << record_row(annotated)
        << "\n  repro: " << repro_command(r, program) << " --sanitize " << tool << "\n";
  }
  fs::remove(out_file);
  log << "\nsanitized " << records.size() << " records with compute-sanitizer " << tool << ": " << found
      << " with an error report" << std::endl;
  if (!out_dir.empty()) {
    const fs::path path = fs::path(out_dir) / "sanitize.csv", partial = fs::path(out_dir) / "sanitize.csv.partial";
    {
      std::ofstream f(partial);
      f << record_header() << "\n";
      for (const Record &r : annotated_records) f << record_row(r) << "\n";
      if (!f) throw UsageError("--sanitize: cannot write " + partial.string());
    }
    std::error_code ec;
    fs::rename(partial, path, ec);
    if (ec) throw UsageError("--sanitize: cannot write " + path.string() + ": " + ec.message());
    log << "records with a report: " << path.string() << std::endl;
  }
  return found > 0 ? 1 : 0;
}

}  // namespace detfuzz
