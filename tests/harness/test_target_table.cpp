#include "harness/target_table.h"

#include <gtest/gtest.h>

#include <sstream>
#include <string>
#include <vector>

namespace detfuzz {
namespace {

std::vector<std::string> lines_of(const std::string &text) {
  std::vector<std::string> out;
  std::stringstream ss(text);
  for (std::string l; std::getline(ss, l);) out.push_back(l);
  return out;
}

// A long target name (a plugin op) must not run into the expectation column, and every number
// column must end where its header ends.
TEST(TargetTable, ColumnsAreAsWideAsTheLongestName) {
  CampaignResult r;
  TargetStats a{{"mm", "invariant", "batch_slice", Backend::cpu, at::kFloat, Expectation::must_hold}};
  a.cases = 120;
  a.seconds = 0.4;
  TargetStats b{{"example::splitk_mm", "plugin:libdetfuzz_example_kernels", "batch_slice", Backend::cpu, at::kHalf,
                 Expectation::observed}};
  b.cases = 7;
  b.failures = 3;
  b.max_ulp = UINT64_MAX;
  b.seconds = 2;
  TargetStats idle{
      {"bmm", "invariant", "permute", Backend::cpu, at::kFloat, Expectation::must_hold}};  // no cases: not shown
  r.targets = {a, b, idle};
  std::ostringstream os;
  print_target_table(r, os);
  const auto lines = lines_of(os.str());
  ASSERT_EQ(lines.size(), 3u) << os.str();
  const std::string &head = lines[0];
  const size_t expect_col = head.find("expect");
  ASSERT_NE(expect_col, std::string::npos);
  EXPECT_GT(expect_col, b.target.name().size()) << "the name column is narrower than the longest name";
  EXPECT_EQ(lines[1].substr(expect_col, 9), "must-hold");
  EXPECT_EQ(lines[2].substr(expect_col, 8), "observed");
  EXPECT_EQ(lines[2].compare(0, b.target.name().size(), b.target.name()), 0);
  // Right-aligned numbers: each line ends with its cases/s under the header's last column.
  for (size_t i = 1; i < lines.size(); ++i) EXPECT_EQ(lines[i].size(), head.size()) << lines[i];
  EXPECT_EQ(lines[1].substr(lines[1].size() - 3), "300");  // 120 cases in 0.4 s
  EXPECT_NE(lines[2].find("inf"), std::string::npos);
  EXPECT_NE(lines[2].find("42.9%"), std::string::npos);
}

}  // namespace
}  // namespace detfuzz
