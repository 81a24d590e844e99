#include "harness/bench.h"

#include <gtest/gtest.h>

#include <stdexcept>

namespace detfuzz {
namespace {

// A bad selection is refused before anything is timed; an impl that only some ops have is
// skipped for the others, with a note, instead of stopping the bench part way.
TEST(BenchPlan, ValidatesTheWholeSelectionFirst) {
  BenchConfig cfg;
  cfg.ops = {"mm", "conv9d"};
  EXPECT_THROW(plan_bench(cfg), std::invalid_argument);
  cfg.ops = {"mm", "log_softmax"};
  cfg.impls = {"invariant", "no-such-impl"};
  try {
    plan_bench(cfg);
    ADD_FAILURE() << "an unknown impl was accepted";
  } catch (const std::invalid_argument &e) {
    EXPECT_NE(std::string(e.what()).find("'no-such-impl'"), std::string::npos) << e.what();
  }
}

TEST(BenchPlan, SkipsOpsLackingAnImpl) {
#ifndef DETFUZZ_WITH_CUDA
  GTEST_SKIP() << "built without CUDA: there are no CUDA impls to plan";
#else
  BenchConfig cfg;
  cfg.ops = {"mm", "log_softmax", "mean", "paged_attention"};
  cfg.impls = {"invariant", "cublaslt-noworkspace"};
  const BenchPlan plan = plan_bench(cfg);
  EXPECT_TRUE(plan.times("mm", "invariant"));
  EXPECT_TRUE(plan.times("mm", "cublaslt-noworkspace"));
  EXPECT_TRUE(plan.times("log_softmax", "invariant"));
  EXPECT_TRUE(plan.times("paged_attention", "invariant"));
  EXPECT_FALSE(plan.times("log_softmax", "cublaslt-noworkspace"));
  EXPECT_FALSE(plan.times("paged_attention", "cublaslt-noworkspace"));
  ASSERT_EQ(plan.notes.size(), 3u);  // log_softmax, mean and paged_attention lack it
  EXPECT_NE(plan.notes[0].find("log_softmax/cublaslt-noworkspace"), std::string::npos) << plan.notes[0];
#endif
}

// The dispatcher row (at::mm with the batch-invariant mode on) exists only for mm, and only when
// the caller can switch the mode; the pinned cuBLASLt baseline is a plain mm/addmm/bmm impl.
TEST(BenchPlan, DispatchRowNeedsTheModeHook) {
#ifndef DETFUZZ_WITH_CUDA
  GTEST_SKIP() << "built without CUDA: there are no CUDA impls to plan";
#else
  BenchConfig cfg;
  cfg.ops = {"mm", "log_softmax"};
  cfg.impls = {"invariant", kDispatchImpl, "cublaslt-pinned"};
  EXPECT_THROW(plan_bench(cfg), std::invalid_argument);  // no hook: invariant-dispatch times nothing
  cfg.set_batch_invariant_mode = [](bool) {};
  const BenchPlan plan = plan_bench(cfg);
  EXPECT_TRUE(plan.times("mm", kDispatchImpl));
  EXPECT_FALSE(plan.times("log_softmax", kDispatchImpl));
  EXPECT_TRUE(plan.times("mm", "cublaslt-pinned"));
  EXPECT_FALSE(plan.times("log_softmax", "cublaslt-pinned"));
#endif
}

// `invariant@PATH` times one forced matmul path: mm only, and only a path the kernels know.
TEST(BenchPlan, ForcedMatmulPathImpls) {
#ifndef DETFUZZ_WITH_CUDA
  GTEST_SKIP() << "built without CUDA: there are no CUDA impls to plan";
#else
  BenchConfig cfg;
  cfg.ops = {"mm", "log_softmax"};
  cfg.impls = {"invariant@sm90_split_64", "invariant@cluster-32x128"};
  const BenchPlan plan = plan_bench(cfg);
  EXPECT_TRUE(plan.times("mm", "invariant@sm90_split_64"));
  EXPECT_TRUE(plan.times("mm", "invariant@cluster-32x128"));
  EXPECT_FALSE(plan.times("log_softmax", "invariant@sm90_split_64"));
  for (const char *bad : {"invariant@no_such_path", "cublas@sm90_split", "invariant@"}) {
    cfg.impls = {bad};
    EXPECT_THROW(plan_bench(cfg), std::invalid_argument) << bad;
  }
#endif
}

}  // namespace
}  // namespace detfuzz
