// The size search after RapidCheck's shrink (harness/minimize.h): each size lowered alone while the
// same failure holds, to a local minimum. Planted bugs of known minimum must be recorded at it:
// synthetic failures, the CPU mutants whose trigger is a size (ops/cpu/mutants.cpp: the trigger size
// exactly, the sizes whose effect depends on the data at a local minimum), and a plugin op whose
// failure does not depend on the data (tests/plugins/planted_faults.cpp: exactly).
#include "harness/campaign.h"
#include "harness/cli_common.h"
#include "harness/minimize.h"
#include "properties/properties.h"
#include "tests/support/first_failure.h"

#include <gtest/gtest.h>

namespace detfuzz {
namespace {

TEST(LowerValues, FromTheLowBoundUpToOneBelow) {
  EXPECT_EQ(lower_values(52, 1), (std::vector<int64_t>{1, 27, 40, 46, 49, 51}));
  EXPECT_EQ(lower_values(2, 1), (std::vector<int64_t>{1}));
  EXPECT_EQ(lower_values(5, 3), (std::vector<int64_t>{3, 4}));
  EXPECT_TRUE(lower_values(1, 1).empty());
  EXPECT_TRUE(lower_values(0, 1).empty());
}

CaseSpec spec(std::vector<int64_t> shape, std::map<std::string, std::string> params = {}) {
  CaseSpec c;
  c.op = "mm";
  c.impl = "invariant";
  c.property = "batch_slice";
  c.shape = std::move(shape);
  c.params = std::move(params);
  return c;
}

int64_t p(const CaseSpec &c, const char *k) { return std::stoll(c.params.at(k)); }

// A failure that needs M >= 17, K >= 3 and the slice [i, j) inside the batch, i.e. the split-K
// mutant's trigger, whatever the data.
TEST(MinimizeCase, LowersEverySizeToTheKnownMinimum) {
  const auto trial = [](const CaseSpec &c) {
    if (p(c, "j") > c.shape[0] || p(c, "i") >= p(c, "j")) return Trial::malformed;
    return c.shape[0] >= 17 && c.shape[2] >= 3 ? Trial::same : Trial::different;
  };
  const MinimizeResult r =
      minimize_case(spec({52, 10, 5}, {{"i", "30"}, {"j", "41"}, {"dim", "1"}}), trial, [] { return false; });
  EXPECT_EQ(r.spec.shape, (std::vector<int64_t>{17, 1, 3}));
  EXPECT_EQ(r.spec.params.at("i"), "0");
  EXPECT_EQ(r.spec.params.at("j"), "1");
  EXPECT_EQ(r.spec.params.at("dim"), "1") << "attributes are left alone";
  EXPECT_FALSE(r.stopped);
  // A local minimum: no size lowers by one with the failure kept.
  for (const SizeRef &s : lowerable_sizes(r.spec)) {
    const int64_t v = size_value(r.spec, s);
    if (v > size_low_bound(r.spec, s)) EXPECT_NE(trial(with_size(r.spec, s, v - 1)), Trial::same) << s.name(r.spec);
  }
}

// A batch dimension that j pins: lowering it alone leaves a malformed case, so the slice is
// clamped into it (here the failure needs the slice to reach the batch's end).
TEST(MinimizeCase, ClampsTheSliceIntoALoweredBatch) {
  const auto trial = [](const CaseSpec &c) {
    if (p(c, "j") > c.shape[0] || p(c, "i") >= p(c, "j")) return Trial::malformed;
    return p(c, "j") == c.shape[0] && c.shape[0] >= 4 ? Trial::same : Trial::different;
  };
  const MinimizeResult r = minimize_case(spec({20, 3}, {{"i", "5"}, {"j", "20"}}), trial, [] { return false; });
  EXPECT_EQ(r.spec.shape, (std::vector<int64_t>{4, 1}));
  EXPECT_EQ(p(r.spec, "j"), 4);
  EXPECT_EQ(p(r.spec, "i"), 0);
}

TEST(MinimizeCase, ListParametersAreLoweredAnItemAtATime) {
  CaseSpec c = spec({4}, {{"kv", "40.7.90"}, {"place", "123"}});
  const auto trial = [](const CaseSpec &x) {  // fails while the third sequence has >= 33 keys
    return size_value(x, {SizeRef::Kind::item, 2, "kv"}) >= 33 ? Trial::same : Trial::different;
  };
  const MinimizeResult r = minimize_case(c, trial, [] { return false; });
  EXPECT_EQ(r.spec.params.at("kv"), "1.1.33");
  EXPECT_EQ(r.spec.params.at("place"), "123");
  EXPECT_EQ(r.spec.shape, (std::vector<int64_t>{1}));
}

TEST(MinimizeCase, StopsWhenAsked) {
  int trials = 0;
  const MinimizeResult r = minimize_case(
      spec({64, 64, 64}),
      [&](const CaseSpec &) {
        ++trials;
        return Trial::same;
      },
      [&] { return trials >= 2; });
  EXPECT_TRUE(r.stopped);
  EXPECT_EQ(trials, 2);
}

TEST(ErrorSignature, IgnoresTheNumbers) {
  EXPECT_EQ(error_signature("shapes [5, 3] and [4, 2] cannot be multiplied"),
            error_signature("shapes [1, 3] and [7, 2] cannot be multiplied"));
  EXPECT_NE(error_signature("a"), error_signature("b"));
}

// Campaigns on the CPU backend, shrinking on: the first failure's record.
Record first_failure(const Target &t, uint64_t seed, double budget_s = 60) {
  return campaign_first_failure(t, seed, budget_s, 30);
}

Target cpu_target(const std::string &op, const std::string &impl, const std::string &property) {
  const std::optional<ImplInfo> i = lookup_impl(op, impl, Backend::cpu);
  EXPECT_TRUE(i.has_value()) << op << "/" << impl;
  return {op, impl, property, Backend::cpu, at::kFloat, i ? i->expectation : Expectation::must_hold};
}

// The record is a local minimum: no size of it, lowered by one (with the slice clamped where it
// must be), fails the same way.
void expect_local_minimum(const Record &r) {
  for (const SizeRef &s : lowerable_sizes(r.spec)) {
    const int64_t v = size_value(r.spec, s);
    if (v <= size_low_bound(r.spec, s)) continue;
    CaseSpec c = with_size(r.spec, s, v - 1);
    Verdict verdict;
    try {
      verdict = check_case(c);
    } catch (const std::invalid_argument &) {
      continue;  // malformed
    }
    EXPECT_NE(to_string(verdict.outcome), r.outcome)
        << s.name(r.spec) << " lowers to " << v - 1 << " with the failure kept: " << r.spec.describe();
  }
}

TEST(MinimalRecords, SplitKMutantIsRecordedAtSeventeenRows) {
  // mutant-splitk splits K from M = 17 on: a smaller M can never fail, and M = 17 fails with the
  // same rows' data as any larger M (rows are generated in order).
  for (uint64_t seed : {1, 2, 3}) {
    const Record r = first_failure(cpu_target("mm", "mutant-splitk", "batch_slice"), seed);
    ASSERT_EQ(r.spec.shape.size(), 3u);
    EXPECT_EQ(r.spec.shape[0], 17) << r.spec.describe();
    expect_local_minimum(r);
  }
}

TEST(MinimalRecords, BatchSplitKMutantIsRecordedAtThreeMatrices) {
  const Record r = first_failure(cpu_target("bmm", "mutant-batchsplitk", "batch_slice"), 4);
  ASSERT_EQ(r.spec.shape.size(), 4u);
  EXPECT_EQ(r.spec.shape[0], 3) << r.spec.describe();
  expect_local_minimum(r);
}

// Which sizes matter past the trigger depends on the data here: the record is a local minimum.
TEST(MinimalRecords, RowOrderMutantsRecordIsALocalMinimum) {
  expect_local_minimum(first_failure(cpu_target("mean", "mutant-roworder", "batch_slice"), 5));
  expect_local_minimum(first_failure(cpu_target("log_softmax", "mutant-roworder", "batch_compose"), 6));
}

// A plugin op whose planted failure needs M >= 9, K >= 4 and N >= 2, whatever the data: the
// record is exactly 9x2x4 with the smallest slice.
class PlantedPlugin : public ::testing::Test {
 protected:
  static void SetUpTestSuite() { load_user_ops({DETFUZZ_PLANTED_FAULTS_LIB}, {DETFUZZ_PLANTED_FAULTS_SPEC}); }
};

TEST_F(PlantedPlugin, BatchSliceRecordIsTheKnownMinimum) {
  for (uint64_t seed : {1, 2}) {
    const Record r = first_failure(cpu_target("detfuzz_planted::known_min_mm", "torch", "batch_slice"), seed);
    EXPECT_EQ(r.spec.shape, (std::vector<int64_t>{9, 2, 4})) << r.spec.describe();
    EXPECT_EQ(r.spec.param("i"), "0") << r.spec.describe();
    EXPECT_EQ(r.spec.param("j"), "1") << r.spec.describe();
    EXPECT_EQ(r.outcome, "fail");
  }
}

// batch_compose compares op(x)[i:j] with the rows placed at offset o of a new batch of
// o + (j - i) + tail rows: the failure needs exactly one of the two batches at 9 rows or more, so
// it has two minima, the batch x at 9 rows (tail 0) or the new batch at 9 (x of 1 row, tail 8).
TEST_F(PlantedPlugin, BatchComposeRecordIsAKnownMinimum) {
  for (uint64_t seed : {3, 4}) {
    const Record r = first_failure(cpu_target("detfuzz_planted::known_min_mm", "torch", "batch_compose"), seed);
    ASSERT_EQ(r.spec.shape.size(), 3u) << r.spec.describe();
    EXPECT_EQ(r.spec.shape[1], 2) << r.spec.describe();
    EXPECT_EQ(r.spec.shape[2], 4) << r.spec.describe();
    EXPECT_EQ(r.spec.param("i"), "0") << r.spec.describe();
    EXPECT_EQ(r.spec.param("j"), "1") << r.spec.describe();
    EXPECT_EQ(r.spec.param("o"), "0") << r.spec.describe();
    const bool batch_at_9 = r.spec.shape[0] == 9 && r.spec.param("tail") == "0";
    const bool new_batch_at_9 = r.spec.shape[0] == 1 && r.spec.param("tail") == "8";
    EXPECT_TRUE(batch_at_9 || new_batch_at_9) << r.spec.describe();
  }
}

}  // namespace
}  // namespace detfuzz
