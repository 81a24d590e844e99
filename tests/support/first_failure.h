// One campaign on one target, shrinking on and stopping at the first failure, in a report folder
// of its own that is removed afterwards: the shrunk record of that failure. A target that holds is
// a test failure (and an empty record). Tests that check where a planted bug's record lands use it.
#pragma once

#include "harness/campaign.h"
#include "harness/remove_tree.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <sstream>
#include <string>

namespace detfuzz {

inline Record campaign_first_failure(const Target &t, uint64_t seed, double budget_s, double shrink_budget_s) {
  static int counter = 0;
  const std::filesystem::path out =
      std::filesystem::temp_directory_path() /
      ("detfuzz_first_failure_" + std::to_string(getpid()) + "_" + std::to_string(counter++));
  remove_tree(out.string());
  CampaignConfig cfg;
  cfg.seed = seed;
  cfg.budget_s = budget_s;
  cfg.targets = {t};
  cfg.progress = false;
  cfg.stop_on_failure = true;
  cfg.shrink_budget_s = shrink_budget_s;
  std::ostringstream log;
  ReportWriter report(out);
  const CampaignResult r = run_campaign(cfg, report, log);
  report.finish(r.to_json());
  remove_tree(out.string());
  EXPECT_TRUE(r.targets.at(0).has_minimal) << t.name() << " was not caught\n" << log.str();
  return r.targets.at(0).has_minimal ? r.targets.at(0).minimal : Record{};
}

}  // namespace detfuzz
