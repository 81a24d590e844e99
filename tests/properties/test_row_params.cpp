// Property parameters of the row ops as records carry them: out-of-range slices are rejected
// (never clamped), and bmm slices either the batch of matrices or the rows of each matrix.
#include "properties/properties.h"
#include "properties/rows/row_properties.h"

#include <gtest/gtest.h>

#include <stdexcept>

namespace detfuzz {
namespace {

CaseSpec row_case(const std::string &op, const std::string &impl, std::vector<int64_t> shape,
                  std::map<std::string, std::string> params) {
  CaseSpec c;
  c.op = op;
  c.impl = impl;
  c.property = "batch_slice";
  c.dtype = at::kFloat;
  c.shape = std::move(shape);
  c.layout = "cc";
  c.seed = 3;
  c.params = std::move(params);
  return c;
}

// The one-line error names the parameter that does not fit.
void expect_rejected(const CaseSpec &c, const std::string &field) {
  try {
    check_case(c);
    ADD_FAILURE() << "accepted " << c.describe();
  } catch (const std::invalid_argument &e) {
    const std::string what = e.what();
    EXPECT_NE(what.find("parameter " + field + "="), std::string::npos) << what;
    EXPECT_EQ(what.find('\n'), std::string::npos) << what;
  }
}

TEST(RowParams, SliceOutsideTheBatchIsRejectedNotClamped) {
  // mm 4x3x5: a batch of 4 rows.
  expect_rejected(row_case("mm", "invariant", {4, 3, 5}, {{"i", "4"}, {"j", "5"}}), "i");
  expect_rejected(row_case("mm", "invariant", {4, 3, 5}, {{"i", "-1"}, {"j", "2"}}), "i");
  expect_rejected(row_case("mm", "invariant", {4, 3, 5}, {{"i", "1"}, {"j", "9"}}), "j");
  expect_rejected(row_case("mm", "invariant", {4, 3, 5}, {{"i", "2"}, {"j", "2"}}), "j");
  CaseSpec compose = row_case("mm", "invariant", {4, 3, 5}, {{"i", "0"}, {"j", "7"}, {"o", "1"}, {"tail", "0"}});
  compose.property = "batch_compose";
  expect_rejected(compose, "j");
  // In range: checked, and it holds.
  EXPECT_TRUE(check_case(row_case("mm", "invariant", {4, 3, 5}, {{"i", "1"}, {"j", "4"}})).passed());
  expect_rejected(row_case("bmm", "invariant", {2, 6, 3, 5}, {{"axis", "sideways"}, {"i", "0"}, {"j", "1"}}), "axis");
}

TEST(RowParams, BmmSlicesTheBatchOfMatricesByDefault) {
  const BatchAxis matrices = row_batch_axis(row_case("bmm", "invariant", {5, 2, 3, 4}, {}));
  EXPECT_EQ(matrices.size, 5);
  EXPECT_EQ(matrices.out_dim, 0);
  ASSERT_EQ(matrices.inputs.size(), 2u);  // both operands are sliced along dim 0
  const BatchAxis rows = row_batch_axis(row_case("bmm", "invariant", {5, 2, 3, 4}, {{"axis", "rows"}}));
  EXPECT_EQ(rows.size, 2);
  EXPECT_EQ(rows.out_dim, 1);
  // j=5 fits the 5 matrices but not the 2 rows of each.
  EXPECT_TRUE(check_case(row_case("bmm", "invariant", {5, 2, 3, 4}, {{"i", "3"}, {"j", "5"}})).passed());
  expect_rejected(row_case("bmm", "invariant", {5, 2, 3, 4}, {{"axis", "rows"}, {"i", "0"}, {"j", "5"}}), "j");
}

// A batched GEMM whose heuristic looks at the number of matrices is invisible to row slicing and
// caught by slicing the batch of matrices (and by batch_compose and permute over it).
TEST(RowParams, MatrixAxisCatchesABatchCountMutant) {
  const std::vector<int64_t> shape = {4, 6, 9, 40};
  EXPECT_TRUE(
      check_case(row_case("bmm", "mutant-batchsplitk", shape, {{"axis", "rows"}, {"i", "1"}, {"j", "3"}})).passed());
  const Verdict sliced =
      check_case(row_case("bmm", "mutant-batchsplitk", shape, {{"axis", "matrices"}, {"i", "1"}, {"j", "3"}}));
  EXPECT_EQ(sliced.outcome, Verdict::Outcome::fail) << sliced.detail;
  CaseSpec compose = row_case("bmm", "mutant-batchsplitk", {2, 6, 9, 40},
                              {{"axis", "matrices"}, {"i", "0"}, {"j", "1"}, {"o", "2"}, {"tail", "1"}});
  compose.property = "batch_compose";
  EXPECT_EQ(check_case(compose).outcome, Verdict::Outcome::fail);
  // The invariant impl holds on the same cases.
  EXPECT_TRUE(check_case(row_case("bmm", "invariant", shape, {{"axis", "matrices"}, {"i", "1"}, {"j", "3"}})).passed());
}

// A case whose impl throws is recorded with the first line of the message only: libtorch's errors
// carry a backtrace that would swell every record and report (seen with cuDNN's SDPA).
TEST(Verdict, ErrorKeepsTheFirstLine) {
  const Verdict v = Verdict::error("Invalid backend\nException raised from select_sdp_backend\nframe #0: ...");
  EXPECT_EQ(v.outcome, Verdict::Outcome::error);
  EXPECT_EQ(v.detail, "Invalid backend");
  EXPECT_EQ(Verdict::error("one line").detail, "one line");
}

}  // namespace
}  // namespace detfuzz
