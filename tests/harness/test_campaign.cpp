// End-to-end campaigns on the CPU backend: planted mutants are caught and shrunk, the invariant
// impls hold, libtorch's CPU mm is caught, and every shrunk record replays bit for bit.
#include "harness/campaign.h"
#include "properties/rows/row_properties.h"

#include "harness/remove_tree.h"

#include <gtest/gtest.h>

#include <chrono>
#include <sstream>
#include <thread>

namespace detfuzz {
namespace {

namespace fs = std::filesystem;

struct CampaignRun {
  CampaignResult result;
  std::string log;
};

CampaignRun fuzz(const std::vector<Target> &targets, double budget_s, int64_t max_cases, bool stop_on_failure,
                 uint64_t seed = 7) {
  static int counter = 0;
  const fs::path out = fs::temp_directory_path() / ("detfuzz_campaign_" + std::to_string(counter++));
  remove_tree(out.string());
  CampaignConfig cfg;
  cfg.seed = seed;
  cfg.budget_s = budget_s;
  cfg.max_cases = max_cases;
  cfg.targets = targets;
  cfg.progress = false;
  cfg.stop_on_failure = stop_on_failure;
  cfg.shrink_budget_s = 20;
  std::ostringstream log;
  ReportWriter report(out);
  CampaignRun run{run_campaign(cfg, report, log), ""};
  report.finish(run.result.to_json());
  run.log = log.str();
  remove_tree(out.string());
  return run;
}

Target target(const std::string &op, const std::string &impl, const std::string &property,
              at::ScalarType dtype = at::kFloat) {
  const ImplInfo *i = find_impl(op, impl, Backend::cpu);
  EXPECT_NE(i, nullptr) << op << "/" << impl;
  return {op, impl, property, Backend::cpu, dtype, i ? i->expectation : Expectation::must_hold};
}

struct MutantCase {
  std::string impl, op;
};

class MutantIsCaught : public ::testing::TestWithParam<MutantCase> {};

TEST_P(MutantIsCaught, WithinThirtySecondsAndShrunkToASmallReplayableCase) {
  const auto &m = GetParam();
  const auto t0 = std::chrono::steady_clock::now();
  const CampaignRun run =
      fuzz({target(m.op, m.impl, "batch_slice"), target(m.op, m.impl, "batch_compose")}, 30, 0, true);
  const double found_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  const TargetStats *hit = nullptr;
  for (const auto &s : run.result.targets)
    if (s.has_minimal) hit = &s;
  ASSERT_NE(hit, nullptr) << m.impl << " on " << m.op << " was not caught in 30 s\n" << run.log;
  EXPECT_LT(found_s, 30 + 20 + 5) << "caught and shrunk within the 30 s fuzz budget plus the shrink budget";
  EXPECT_TRUE(run.result.must_hold_failed());
  EXPECT_GT(hit->shrink_steps, 0) << run.log;
  EXPECT_GT(hit->shrink_seconds, 0.0) << "shrinking took time of its own";
  const nlohmann::json summary = run.result.to_json();  // held: a range-for over a temporary's member dangles
  for (const auto &t : summary["targets"]) EXPECT_TRUE(t.contains("shrink_seconds")) << t.dump();
  // Shrunk: the batch is small and so is every other extent.
  const CaseSpec &c = hit->minimal.spec;
  const int64_t batch = row_batch_axis(c).size;
  EXPECT_LE(batch, 40) << c.describe();
  int64_t numel = 1;
  for (auto s : c.shape) numel *= std::max<int64_t>(s, 1);
  EXPECT_LE(numel, 40 * 600) << c.describe();
  EXPECT_EQ(c.layout.find_first_not_of('c'), std::string::npos) << "layout shrinks to contiguous: " << c.describe();
  // The saved record replays bit for bit.
  const ReplayResult rr = replay_record(hit->minimal);
  EXPECT_FALSE(rr.verdict.passed());
  EXPECT_TRUE(rr.reproduced) << hit->minimal.detail << " vs " << rr.verdict.detail;
}

INSTANTIATE_TEST_SUITE_P(CpuMutants, MutantIsCaught,
                         ::testing::Values(MutantCase{"mutant-splitk", "mm"}, MutantCase{"mutant-splitk", "addmm"},
                                           MutantCase{"mutant-splitk", "bmm"}, MutantCase{"mutant-blocksize", "mm"},
                                           MutantCase{"mutant-blocksize", "bmm"},
                                           MutantCase{"mutant-roworder", "log_softmax"},
                                           MutantCase{"mutant-roworder", "mean"},
                                           MutantCase{"mutant-neighbour", "log_softmax"},
                                           MutantCase{"mutant-neighbour", "mean"}),
                         [](const auto &info) {
                           std::string n = info.param.impl + "_" + info.param.op;
                           for (auto &ch : n)
                             if (ch == '-') ch = '_';
                           return n;
                         });

TEST(Campaign, InvariantImplsHoldEveryRowProperty) {
  std::vector<Target> targets;
  for (const auto &op : builtin_row_ops())
    for (const auto &p : row_properties())
      for (auto dtype : {at::kFloat, at::kBFloat16, at::kHalf}) targets.push_back(target(op, "invariant", p, dtype));
  const CampaignRun run = fuzz(targets, 60, 1200, false, 11);
  EXPECT_FALSE(run.result.must_hold_failed()) << run.log;
  EXPECT_GE(run.result.cases, targets.size()) << "every target ran";
  for (const auto &s : run.result.targets) EXPECT_EQ(s.failures + s.errors, 0) << s.target.name() << "\n" << run.log;
}

TEST(Campaign, LibtorchCpuMmIsCaughtAndReplaysBitForBit) {
  const CampaignRun run = fuzz({target("mm", "torch", "batch_slice")}, 30, 0, true, 3);
  const TargetStats &s = run.result.targets.at(0);
  ASSERT_TRUE(s.has_minimal) << "libtorch CPU mm showed no batch_slice difference in 30 s\n" << run.log;
  EXPECT_FALSE(run.result.must_hold_failed()) << "torch is observed: its failures do not fail the run";
  const ReplayResult rr = replay_record(s.minimal);
  EXPECT_EQ(rr.expectation, Expectation::observed);
  EXPECT_TRUE(rr.reproduced) << s.minimal.detail << " vs " << rr.verdict.detail;
  EXPECT_NE(run.log.find("repro: detfuzz replay --case '"), std::string::npos) << run.log;
}

TEST(Campaign, ABudgetOfCasesIsRespectedAndRepeatsWithTheSeed) {
  const std::vector<Target> t = {target("mean", "invariant", "batch_slice"), target("mm", "invariant", "permute")};
  const CampaignRun a = fuzz(t, 0, 25, false, 99), b = fuzz(t, 0, 25, false, 99);
  EXPECT_EQ(a.result.cases, 25);
  EXPECT_EQ(b.result.cases, 25);
  // Everything but the timings repeats.
  const auto untimed = [](nlohmann::json targets) {
    for (auto &t : targets) {
      t.erase("seconds");
      t.erase("shrink_seconds");
      t.erase("cases_per_s");
    }
    return targets.dump();
  };
  EXPECT_EQ(untimed(a.result.to_json()["targets"]), untimed(b.result.to_json()["targets"]));
}

// A timed campaign visits every target early even when one target's cases take long: its first
// rounds are of 1, 2, 4, ... cases, and the next round goes to the target with the least time.
TEST(Campaign, ASlowTargetCannotSpendATimedBudgetBeforeTheOthersRun) {
  std::vector<Target> targets = {target("mm", "torch", "batch_slice")};  // slowed down below
  for (const auto &p : row_properties())
    for (auto dtype : {at::kFloat, at::kBFloat16}) targets.push_back(target("mean", "invariant", p, dtype));
  const fs::path out = fs::temp_directory_path() / "detfuzz_campaign_slow_target";
  remove_tree(out.string());
  CampaignConfig cfg;
  cfg.seed = 5;
  cfg.budget_s = 3;
  cfg.targets = targets;
  cfg.progress = false;
  cfg.shrink = false;
  cfg.before_case = [](const CaseSpec &c) {
    if (c.impl == "torch") std::this_thread::sleep_for(std::chrono::milliseconds(400));
  };
  std::ostringstream log;
  ReportWriter report(out);
  const CampaignResult r = run_campaign(cfg, report, log);
  report.finish(r.to_json());
  remove_tree(out.string());
  // Rounds of 10 would have spent 4 s on the slow target's first round alone.
  for (const auto &s : r.targets) EXPECT_GE(s.cases, 1) << s.target.name() << " never ran\n" << log.str();
  EXPECT_LE(r.targets.at(0).cases, 7) << "the slow target took more than its share";
}

}  // namespace
}  // namespace detfuzz
