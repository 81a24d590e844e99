#include "harness/merge.h"

#include "harness/cli_common.h"
#include "harness/report.h"

#include <nlohmann/json.hpp>

#include <fstream>
#include <sstream>

namespace detfuzz {
namespace fs = std::filesystem;
namespace {

std::vector<std::string> read_lines(const fs::path &p) {
  std::ifstream f(p);
  if (!f) throw UsageError("cannot read " + p.string() + ": not a finished detfuzz fuzz report");
  std::vector<std::string> lines;
  for (std::string line; std::getline(f, line);) lines.push_back(line);
  if (lines.empty()) throw UsageError(p.string() + " has no header");
  return lines;
}

}  // namespace

int merge_reports(const fs::path &out, const std::vector<fs::path> &shards, const std::string &command_line) {
  if (shards.empty()) throw UsageError("merge needs at least one shard report folder");
  std::string cases_header, failures_header;
  std::ostringstream cases, failures;
  nlohmann::json per_shard = nlohmann::json::array(), targets = nlohmann::json::array();
  int64_t case_count = 0, rows = 0;
  double elapsed = 0;
  bool interrupted = false, must_hold_failed = false;
  nlohmann::json corpus = {{"replayed", 0}, {"skipped", 0}, {"must_hold_failures", 0}, {"observed_failures", 0}};
  for (const auto &dir : shards) {
    std::ifstream sf(dir / "summary.json");
    if (!sf)
      throw UsageError("cannot read " + (dir / "summary.json").string() + ": not a finished detfuzz fuzz report");
    nlohmann::json s;
    try {
      s = nlohmann::json::parse(sf);
    } catch (const nlohmann::json::exception &e) {
      throw UsageError((dir / "summary.json").string() + " is not JSON: " + e.what());
    }
    if (!s.contains("results") || !s["results"].contains("targets"))
      throw UsageError((dir / "summary.json").string() + " is not the summary of a fuzz campaign");
    const auto c = read_lines(dir / "cases.csv"), f = read_lines(dir / "failures.csv");
    if (cases_header.empty()) cases_header = c[0], failures_header = f[0];
    if (c[0] != cases_header || f[0] != failures_header)
      throw UsageError(dir.string() + ": its CSV columns differ from the first shard's (another detfuzz version?)");
    for (size_t i = 1; i < c.size(); ++i) {  // renumber the first column, the running case index
      const auto comma = c[i].find(',');
      cases << rows++ << (comma == std::string::npos ? "" : c[i].substr(comma)) << '\n';
    }
    for (size_t i = 1; i < f.size(); ++i) failures << f[i] << '\n';
    const auto &r = s["results"];
    case_count += r.value("cases", int64_t{0});
    elapsed = std::max(elapsed, r.value("elapsed_s", 0.0));
    for (auto &[k, v] : corpus.items()) v = v.get<int64_t>() + r["corpus"].value(k, int64_t{0});
    for (const auto &t : r["targets"]) targets.push_back(t);
    interrupted = interrupted || s.value("interrupted", false);
    must_hold_failed =
        must_hold_failed || s.value("exit_code", 0) == 1 || r["corpus"].value("must_hold_failures", 0) > 0;
    for (const auto &t : r["targets"])
      if (t.value("expectation", "") == "must-hold" && (t.value("failures", 0) > 0 || t.value("errors", 0) > 0))
        must_hold_failed = true;
    s["report"] = dir.string();
    per_shard.push_back(s);
  }
  const int exit_code = must_hold_failed ? 1 : 0;
  ReportWriter report(out, false);
  report.add_file("cases.csv", cases_header + "\n" + cases.str());
  report.add_file("failures.csv", failures_header + "\n" + failures.str());
  report.finish({{"tool", "detfuzz"},
                 {"command", command_line},
                 {"merged_shards", shards.size()},
                 {"results", {{"cases", case_count}, {"elapsed_s", elapsed}, {"corpus", corpus}, {"targets", targets}}},
                 {"interrupted", interrupted},
                 {"exit_code", exit_code},
                 {"shards", per_shard}});
  return exit_code;
}

}  // namespace detfuzz
