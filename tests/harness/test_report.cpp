#include "harness/report.h"

#include "harness/remove_tree.h"

#include <gtest/gtest.h>

#include <fstream>

namespace detfuzz {
namespace {

namespace fs = std::filesystem;

fs::path fresh_dir(const std::string &name) {
  const fs::path p = fs::temp_directory_path() / name;
  remove_tree(p.string());
  return p;
}

TEST(Report, FinishWritesTheFolderAtomically) {
  const fs::path out = fresh_dir("detfuzz_report_ok");
  {
    ReportWriter w(out);
    EXPECT_FALSE(fs::exists(out)) << "nothing under the final name before finish()";
    Record r;
    r.spec.op = "mm";
    r.spec.impl = "invariant";
    r.spec.property = "repeat";
    r.spec.shape = {1, 2, 3};
    w.add_case({0, "fuzz", r, Expectation::must_hold, 12.5});
    w.add_file("bench.csv", "op,impl\n");
    w.finish({{"context", run_context()}});
  }
  EXPECT_TRUE(fs::exists(out / "cases.csv"));
  EXPECT_TRUE(fs::exists(out / "failures.csv"));
  EXPECT_TRUE(fs::exists(out / "bench.csv"));
  std::ifstream s(out / "summary.json");
  const auto j = nlohmann::json::parse(s);
  EXPECT_TRUE(j["context"].contains("libtorch"));
  EXPECT_TRUE(j["context"]["env"].contains("CUBLAS_WORKSPACE_CONFIG"));
  for (const auto &e : fs::directory_iterator(out.parent_path()))
    EXPECT_EQ(e.path().filename().string().find("detfuzz_report_ok.partial"), std::string::npos);
  remove_tree(out.string());
}

TEST(Report, AnUnfinishedReportLeavesNothingBehind) {
  const fs::path out = fresh_dir("detfuzz_report_unfinished");
  { ReportWriter w(out); }
  EXPECT_FALSE(fs::exists(out));
  for (const auto &e : fs::directory_iterator(out.parent_path()))
    EXPECT_EQ(e.path().filename().string().find("detfuzz_report_unfinished.partial"), std::string::npos);
}

TEST(Report, RefusesANonEmptyOrUnwritableFolder) {
  const fs::path out = fresh_dir("detfuzz_report_full");
  fs::create_directories(out);
  std::ofstream(out / "keep.txt") << "x";
  EXPECT_THROW(ReportWriter w(out), ReportError);
  EXPECT_TRUE(fs::exists(out / "keep.txt"));
  remove_tree(out.string());
  EXPECT_THROW(ReportWriter w("/proc/detfuzz/report"), ReportError);
}

}  // namespace
}  // namespace detfuzz
