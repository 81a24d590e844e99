// Sticky device errors and hangs in one process, driven on the CPU by the planted-fault library
// (tests/plugins/planted_faults.cpp): its sticky_rows "poisons the device" at 7 rows, and every
// later call of its ops fails, as in a CUDA context after an illegal address; hang_rows never
// returns at 13 rows. The campaign must name the case that raised the error (a `crash` record, its
// detail the error's name), record no innocent case as an error, and stop; its watchdog must end a
// campaign whose case never returns.
#include "harness/campaign.h"
#include "harness/cli_common.h"
#include "harness/device_faults.h"
#include "harness/remove_tree.h"
#include "properties/properties.h"

#include <gtest/gtest.h>

#include <dlfcn.h>

#include <cstdlib>
#include <fstream>
#include <sstream>

namespace detfuzz {
namespace {

namespace fs = std::filesystem;

class PlantedFaults : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    load_user_ops({DETFUZZ_PLANTED_FAULTS_LIB}, {DETFUZZ_PLANTED_FAULTS_SPEC});
    register_planted_device_error_hooks({DETFUZZ_PLANTED_FAULTS_LIB});
  }
  void SetUp() override { reset(); }
  void TearDown() override { reset(); }
  static void reset() {
    void *h = dlopen(DETFUZZ_PLANTED_FAULTS_LIB, RTLD_NOW | RTLD_NOLOAD);
    ASSERT_NE(h, nullptr);
    auto *fn = reinterpret_cast<void (*)()>(dlsym(h, "detfuzz_planted_reset"));
    ASSERT_NE(fn, nullptr);
    fn();
  }
  static Target target(const std::string &op, const std::string &property) {
    return {op, "torch", property, Backend::cpu, at::kFloat, Expectation::must_hold};
  }
};

std::vector<std::vector<std::string>> csv_rows(const fs::path &p) {
  std::vector<std::vector<std::string>> rows;
  std::ifstream in(p);
  std::string line;
  std::getline(in, line);  // header
  while (std::getline(in, line)) {
    std::vector<std::string> cells;
    std::string cell;
    bool quoted = false;
    for (char ch : line) {
      if (ch == '"')
        quoted = !quoted;
      else if (ch == ',' && !quoted)
        cells.push_back(cell), cell.clear();
      else
        cell += ch;
    }
    cells.push_back(cell);
    rows.push_back(cells);
  }
  return rows;
}

TEST_F(PlantedFaults, HealthyUntilTheFaultThenSticky) {
  EXPECT_EQ(sticky_device_error(Backend::cpu), "");
  CaseSpec c;
  c.op = "detfuzz_planted::sticky_rows";
  c.impl = "torch";
  c.property = "repeat";
  c.layout = "c";
  c.shape = {7, 2};
  const Verdict v = check_case(c);
  EXPECT_EQ(v.outcome, Verdict::Outcome::error) << v.detail;
  EXPECT_EQ(device_error_name(sticky_device_error(Backend::cpu)), "cudaErrorIllegalAddress");
  c.shape = {3, 2};  // every later call fails too
  EXPECT_EQ(check_case(c).outcome, Verdict::Outcome::error);
}

TEST_F(PlantedFaults, CampaignStopsAtTheCaseThatRaisedTheStickyError) {
  const fs::path out = fs::temp_directory_path() / ("detfuzz_faults_" + std::to_string(getpid()));
  remove_tree(out.string());
  CampaignConfig cfg;
  cfg.seed = 3;
  cfg.budget_s = 60;
  cfg.targets = {target("detfuzz_planted::sticky_rows", "repeat"),
                 target("detfuzz_planted::sticky_rows", "batch_slice")};
  cfg.progress = false;
  std::ostringstream log;
  ReportWriter report(out);
  CampaignResult r = run_campaign(cfg, report, log);
  ASSERT_TRUE(r.stopped_by_fault) << log.str();
  EXPECT_LT(r.elapsed_s, 30) << "stopped at the fault, not at the end of the budget";
  EXPECT_EQ(r.fault.outcome, "crash");
  EXPECT_EQ(device_error_name(r.fault.detail), "cudaErrorIllegalAddress") << r.fault.detail;
  // The faulting case called the op on 7 rows: the whole batch, or (batch_slice) the slice.
  const CaseSpec &c = r.fault.spec;
  const int64_t j = c.param_int("j", 0), i = c.param_int("i", 0);
  EXPECT_TRUE(c.shape.at(0) == 7 || j - i == 7) << c.describe();
  // No innocent case was recorded as an error or a failure, and nothing ran after the fault.
  for (const auto &s : r.targets) EXPECT_EQ(s.failures + s.errors, 0) << s.target.name();
  EXPECT_NE(log.str().find("CRASH (must-hold) detfuzz_planted::sticky_rows/torch/"), std::string::npos) << log.str();
  report.add_failure(r.fault);
  account_crash(r, r.fault, r.fault_expectation);
  EXPECT_TRUE(r.must_hold_failed());
  report.finish(r.to_json());
  const auto rows = csv_rows(out / "cases.csv");
  ASSERT_FALSE(rows.empty());
  size_t outcome_col = 0;
  {
    std::ifstream in(out / "cases.csv");
    std::string header;
    std::getline(in, header);
    std::stringstream hs(header);
    size_t k = 0;
    for (std::string h; std::getline(hs, h, ','); ++k)
      if (h == "outcome") outcome_col = k;
  }
  ASSERT_GT(outcome_col, 0u);
  for (size_t k = 0; k + 1 < rows.size(); ++k) EXPECT_EQ(rows[k].at(outcome_col), "pass") << "case " << k;
  EXPECT_EQ(rows.back().at(outcome_col), "crash") << "the last case is the fault";
  EXPECT_EQ(static_cast<int64_t>(rows.size()), r.cases);
  remove_tree(out.string());
}

TEST_F(PlantedFaults, WatchdogEndsACampaignWhoseCaseNeverReturns) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  EXPECT_EXIT(
      {
        const fs::path out = fs::temp_directory_path() / ("detfuzz_hang_" + std::to_string(getpid()));
        remove_tree(out.string());
        CampaignConfig cfg;
        cfg.seed = 5;
        cfg.budget_s = 120;
        cfg.targets = {target("detfuzz_planted::hang_rows", "repeat")};
        cfg.progress = false;
        cfg.case_timeout_s = 1;
        cfg.on_case_timeout = [](const Record &timeout, Expectation, CampaignResult &so_far) {
          const bool right = timeout.outcome == "timeout" && timeout.spec.shape.at(0) == 13 && so_far.cases >= 0 &&
                             timeout.detail.find("no result after") != std::string::npos;
          std::_Exit(right ? 7 : 8);
        };
        std::ostringstream log;
        ReportWriter report(out);
        run_campaign(cfg, report, log);
        std::_Exit(9);  // the campaign returned: the watchdog never fired
      },
      ::testing::ExitedWithCode(7), "");
}

}  // namespace
}  // namespace detfuzz
