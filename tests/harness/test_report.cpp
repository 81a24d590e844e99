#include "harness/report.h"

#include "harness/remove_tree.h"

#include <gtest/gtest.h>

#include <cstdlib>
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

// summary.json's commit comes from the source tree itself: a folder inside another repository
// (a tarball unpacked in someone's repository) is "unknown", the repository's own top is not.
TEST(Report, GitCommitComesOnlyFromTheSourceTreeItself) {
  if (std::system("git --version >/dev/null 2>&1") != 0) GTEST_SKIP() << "git is not installed";
  const fs::path repo = fresh_dir("detfuzz_git_enclosing");
  fs::create_directories(repo / "unpacked" / "detfuzz");
  const std::string git = "git -C '" + repo.string() + "' ";
  ASSERT_EQ(
      std::system(
          (git + "init -q && " + git + "-c user.name=t -c user.email=t@t commit -q --allow-empty -m init").c_str()),
      0);
  const GitState top = git_state_of(repo);
  EXPECT_EQ(top.commit.size(), 40u) << top.commit;
  const GitState nested = git_state_of(repo / "unpacked" / "detfuzz");
  EXPECT_EQ(nested.commit, "unknown");
  EXPECT_FALSE(nested.dirty);
  EXPECT_EQ(git_state_of(fs::temp_directory_path() / "detfuzz_no_such_tree").commit, "unknown");
  remove_tree(repo.string());
}

}  // namespace
}  // namespace detfuzz
