#include "harness/gate.h"

#include <nlohmann/json.hpp>

#include <cmath>
#include <cstdio>
#include <fstream>
#include <map>
#include <ostream>
#include <sstream>
#include <stdexcept>
#include <tuple>

namespace detfuzz {
namespace fs = std::filesystem;
namespace {

struct BenchRow {
  std::string key;  // op/impl/dtype M=.. N=.. K=..
  std::string impl, baseline_impl;
  double speedup = NAN;
  bool verified = true;
};

std::vector<std::string> split_csv_line(const std::string &line) {
  std::vector<std::string> out;
  std::stringstream ss(line);
  std::string f;
  while (std::getline(ss, f, ',')) out.push_back(f);
  if (!line.empty() && line.back() == ',') out.emplace_back();
  return out;
}

fs::path bench_csv_of(const fs::path &p) {
  std::error_code ec;
  if (fs::is_directory(p, ec)) return p / "bench.csv";
  return p;
}

// bench.csv as `detfuzz bench` writes it (no quoted fields).
std::map<std::string, BenchRow> read_bench(const fs::path &file) {
  std::ifstream in(file);
  if (!in) throw std::invalid_argument("gate: cannot read " + file.string());
  std::string line;
  std::getline(in, line);
  const auto header = split_csv_line(line);
  std::map<std::string, size_t> col;
  for (size_t i = 0; i < header.size(); ++i) col[header[i]] = i;
  for (const char *need :
       {"op", "impl", "dtype", "M", "N", "K", "baseline_impl", "speedup_vs_cublas", "invariant_verified"})
    if (!col.count(need))
      throw std::invalid_argument("gate: " + file.string() + " is not a bench.csv (no column '" + need + "')");
  std::map<std::string, BenchRow> rows;
  for (int64_t n = 2; std::getline(in, line); ++n) {
    if (line.empty()) continue;
    const auto f = split_csv_line(line);
    if (f.size() != header.size())
      throw std::invalid_argument("gate: " + file.string() + ":" + std::to_string(n) + ": " + std::to_string(f.size()) +
                                  " fields, the header has " + std::to_string(header.size()));
    BenchRow r;
    r.impl = f[col["impl"]];
    r.baseline_impl = f[col["baseline_impl"]];
    r.key = f[col["op"]] + "/" + r.impl + "/" + f[col["dtype"]] + " M=" + f[col["M"]] + " N=" + f[col["N"]] +
            " K=" + f[col["K"]];
    // Attention rows name their page size; pages of 16 (the default, and every row of a bench.csv
    // older than the column) keep the plain key.
    if (col.count("page") && !f[col["page"]].empty() && f[col["page"]] != "16") r.key += " page=" + f[col["page"]];
    // Their KV heads likewise: 8 (the default) keeps the plain key.
    if (col.count("kv_heads") && !f[col["kv_heads"]].empty() && f[col["kv_heads"]] != "8")
      r.key += " kv_heads=" + f[col["kv_heads"]];
    try {
      r.speedup = std::stod(f[col["speedup_vs_cublas"]]);
    } catch (const std::exception &) {
      throw std::invalid_argument("gate: " + file.string() + ":" + std::to_string(n) + ": speedup '" +
                                  f[col["speedup_vs_cublas"]] + "' is not a number");
    }
    r.verified = f[col["invariant_verified"]] != "no";
    // A row timed against several baselines (attention: a copy, FlashAttention-2, the launch
    // floor) is one bench row per baseline: the first keeps the plain key, the others name theirs.
    if (rows.count(r.key)) r.key += " vs " + r.baseline_impl;
    rows[r.key] = r;
  }
  return rows;
}

std::string pct(double v) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%+.1f%%", 100.0 * v);
  return buf;
}

// Must-hold verdict of a fuzz/replay/merge report folder's summary.json.
int gate_summary(const fs::path &dir, std::ostream &log) {
  std::ifstream in(dir / "summary.json");
  nlohmann::json s;
  try {
    in >> s;
  } catch (const std::exception &) {
    throw std::invalid_argument("gate: " + (dir / "summary.json").string() + " is not JSON");
  }
  if (!s.contains("results")) return 0;  // bench or scan: nothing must hold here
  const auto &r = s["results"];
  int64_t failed = r.value("corpus", nlohmann::json::object()).value("must_hold_failures", int64_t{0});
  for (const auto &t : r.value("targets", nlohmann::json::array()))
    if (t.value("expectation", "") == "must-hold" &&
        t.value("failures", int64_t{0}) + t.value("errors", int64_t{0}) > 0) {
      ++failed;
      log << "gate: FAIL must-hold " << t.value("op", "") << "/" << t.value("impl", "") << "/"
          << t.value("property", "") << "/" << t.value("dtype", "") << ": "
          << t.value("failures", int64_t{0}) + t.value("errors", int64_t{0}) << " of " << t.value("cases", int64_t{0})
          << " cases failed" << (t.contains("minimal") ? "; shrunk record: " + t["minimal"].get<std::string>() : "")
          << "\n";
    }
  if (s.value("exit_code", 0) == 1 && failed == 0) {
    failed = 1;
    log << "gate: FAIL " << dir.string() << " exited 1 (a must-hold property failed)\n";
  }
  if (failed == 0)
    log << "gate: " << dir.string() << ": every must-hold property held (" << r.value("cases", int64_t{0})
        << " cases)\n";
  return failed > 0 ? 1 : 0;
}

}  // namespace

int run_gate(const GateConfig &cfg, std::ostream &log) {
  if (cfg.runs.empty())
    throw std::invalid_argument("gate: no run to judge: give --run RUN_DIR (a fuzz, replay or bench report folder)");
  if (!(cfg.max_slowdown >= 0 && cfg.max_slowdown < 1))
    throw std::invalid_argument("gate: --max-slowdown must be in [0, 1)");
  std::map<std::string, BenchRow> baseline;
  if (!cfg.baseline.empty()) baseline = read_bench(bench_csv_of(cfg.baseline));
  int verdict = 0;
  bool compared_speed = false;
  for (const auto &run : cfg.runs) {
    std::error_code ec;
    if (!fs::exists(run, ec)) throw std::invalid_argument("gate: run " + run.string() + " does not exist");
    const bool folder = fs::is_directory(run, ec);
    if (folder && !fs::exists(run / "summary.json") && !fs::exists(run / "bench.csv"))
      throw std::invalid_argument("gate: " + run.string() +
                                  " is not a detfuzz report folder (no summary.json or bench.csv)");
    if (folder && fs::exists(run / "summary.json")) verdict |= gate_summary(run, log);
    const fs::path bench = bench_csv_of(run);
    if (!fs::exists(bench)) continue;
    int64_t compared = 0, slower = 0, only_run = 0, no_speedup = 0;
    for (const auto &[key, row] : read_bench(bench)) {
      if (row.impl == row.baseline_impl) continue;  // the baseline's own row: its speedup is 1
      if (!row.verified) {
        verdict = 1;
        log << "gate: FAIL " << key << ": batch_slice did not hold on the bench's inputs\n";
      }
      if (baseline.empty()) continue;
      const auto it = baseline.find(key);
      if (it == baseline.end()) {
        ++only_run;
        continue;
      }
      // No speedup on one side (its baseline refused the shape): nothing to compare.
      if (std::isnan(row.speedup) || std::isnan(it->second.speedup)) {
        ++no_speedup;
        continue;
      }
      ++compared;
      const double change = row.speedup / it->second.speedup - 1.0;
      if (!(row.speedup >= it->second.speedup * (1.0 - cfg.max_slowdown))) {
        ++slower;
        verdict = 1;
        char line[256];
        std::snprintf(line, sizeof line, "speedup %.3fx, was %.3fx (%s; allowed -%.0f%%)", row.speedup,
                      it->second.speedup, pct(change).c_str(), 100.0 * cfg.max_slowdown);
        log << "gate: FAIL slower " << key << ": " << line << "\n";
      }
    }
    if (!baseline.empty()) {
      compared_speed = true;
      log << "gate: " << bench.string() << ": " << compared << " rows compared with the baseline, " << slower
          << " slower by more than " << 100.0 * cfg.max_slowdown << "%"
          << (only_run ? ", " + std::to_string(only_run) + " rows the baseline lacks (not compared)" : "")
          << (no_speedup ? ", " + std::to_string(no_speedup) + " rows without a speedup (not compared)" : "") << "\n";
    }
  }
  if (!baseline.empty() && !compared_speed)
    log << "gate: note: no run holds a bench.csv, so speed was not compared with the baseline\n";
  log << (verdict == 0 ? "gate: PASS" : "gate: FAIL") << std::endl;
  return verdict;
}

}  // namespace detfuzz
