// A run's report folder: cases.csv (a row per case), failures.csv (replayable records, minimal
// after shrinking), bench.csv where timed, summary.json with a context block. Everything is
// written into a sibling folder "<out>.partial-<pid>" and renamed into place by finish(), so an
// interrupted or failed run never leaves a half-written report under the requested name.
#pragma once

#include "harness/corpus.h"

#include <nlohmann/json.hpp>

#include <filesystem>
#include <fstream>
#include <stdexcept>
#include <string>

namespace detfuzz {

// An output folder that cannot be used; what() is one line.
struct ReportError : std::runtime_error {
  using std::runtime_error::runtime_error;
};

struct CaseRow {
  int64_t index = 0;
  std::string source;  // fuzz | corpus | replay
  Record record;
  Expectation expectation = Expectation::must_hold;
  double elapsed_us = 0;
};

class ReportWriter {
 public:
  // Throws ReportError when `out` exists and is not empty, or its parent cannot be written.
  // Without `with_cases` (bench, scan) there is no cases.csv or failures.csv.
  explicit ReportWriter(std::filesystem::path out, bool with_cases = true);
  ~ReportWriter();  // an unfinished report's partial folder is removed
  ReportWriter(const ReportWriter &) = delete;
  ReportWriter &operator=(const ReportWriter &) = delete;

  void add_case(const CaseRow &row);
  void add_failure(const Record &r);
  // Another file of the report (bench.csv, scan.csv): written whole at finish().
  void add_file(const std::string &name, const std::string &content);
  void finish(const nlohmann::json &summary);  // writes summary.json, renames into place
  const std::filesystem::path &path() const { return out_; }

 private:
  std::filesystem::path out_, partial_;
  std::ofstream cases_, failures_;
  std::vector<std::pair<std::string, std::string>> extra_files_;
  bool finished_ = false;
};

// The git commit of a source tree: "unknown" (and not dirty) unless `source_dir` is the top of a
// git work tree itself; an enclosing repository's commit is not this tree's.
struct GitState {
  std::string commit = "unknown";
  bool dirty = false;
};
GitState git_state_of(const std::filesystem::path &source_dir);

// The context block of summary.json: device, versions, git commit, determinism-relevant env.
nlohmann::json run_context();

// "reports/20261121T051500Z-cpu-seed1234": the default output folder of a run.
std::filesystem::path default_report_dir(const std::string &kind, uint64_t seed);

}  // namespace detfuzz
