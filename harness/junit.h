// JUnit XML of a campaign, for CI systems (GitHub Actions, GitLab, Jenkins, Buildkite read it).
// One <testcase> per target, classname "detfuzz.<backend>.<op>.<impl>", name "<property>/<dtype>":
//   - a must-hold target that failed carries a <failure> (or an <error> when the impl threw)
//     whose text is the shrunk record (the failures.csv row) and its repro command;
//   - an observed target (a baseline) never fails the suite: what it showed goes to <system-out>;
//   - a target that ran no case is <skipped>.
// The corpus replay is one more testcase, `corpus`, failing when a must-hold record failed.
#pragma once

#include "harness/campaign.h"

#include <filesystem>
#include <string>

namespace detfuzz {

struct JunitContext {
  std::string program = "detfuzz";  // how repro commands name the binary
  std::string backend;              // "cpu" | "cuda": the suite's name is detfuzz.<backend>
  uint64_t seed = 0;
  std::string timestamp;   // ISO 8601, the start of the run
  std::string report_dir;  // where failures.csv lives
};

std::string junit_xml(const CampaignResult &r, const JunitContext &ctx);

// Refuses (ReportError) a path whose folder cannot be written, before a campaign starts.
void check_junit_path(const std::filesystem::path &path);
// Writes the file through a temporary sibling renamed into place; throws ReportError.
void write_junit(const std::filesystem::path &path, const std::string &xml);

}  // namespace detfuzz
