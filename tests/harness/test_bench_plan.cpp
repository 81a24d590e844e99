#include "harness/bench.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <initializer_list>
#include <fstream>
#include <stdexcept>
#include <string>

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
#ifdef DETFUZZ_WITH_CUDA
    EXPECT_NE(std::string(e.what()).find("'no-such-impl'"), std::string::npos) << e.what();
#else
    EXPECT_NE(std::string(e.what()).find("built without CUDA"), std::string::npos) << e.what();  // no CUDA impl at all
#endif
  }
}

// A shape file's rows of a family's own kind (prefill_graph, whose kind is also its op's name)
// go to that family's bench, never to the row-op bench, which has no definition to time them by.
TEST(BenchPlan, FamilyRowsAreNotRowShapes) {
  BenchConfig cfg;
  cfg.ops = {"prefill_graph"};
  cfg.impls = {"invariant"};
  cfg.shapes = {
      {"prefill_graph", 8, 16, 0, 16}, {"paged_attention_decode", 16, 4096, 128, 16}, {"mm", 8, 4096, 4096, 16}};
  EXPECT_TRUE(plan_bench(cfg).row_shapes.empty());
  cfg.ops = {"mm", "prefill_graph"};
  const BenchPlan plan = plan_bench(cfg);
  ASSERT_EQ(plan.row_shapes.size(), 1u);
  EXPECT_EQ(plan.row_shapes[0].op, "mm");
  cfg.shapes.clear();  // the default set: the selected row ops' shapes only
  for (const auto &s : plan_bench(cfg).row_shapes) EXPECT_EQ(s.op, "mm");
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

// `invariant@tma`, `invariant@cp-async`, `invariant@pingpong` and `invariant@no-pingpong` time the Hopper attention
// kernels with their K/V loads or consumer turns forced: paged attention only.
TEST(BenchPlan, ForcedAttentionLoadImpls) {
#ifndef DETFUZZ_WITH_CUDA
  GTEST_SKIP() << "built without CUDA: there are no CUDA impls to plan";
#else
  BenchConfig cfg;
  cfg.ops = {"mm", "paged_attention"};
  cfg.impls = {"invariant@tma", "invariant@cp-async", "invariant@pingpong", "invariant@no-pingpong"};
  const BenchPlan plan = plan_bench(cfg);
  EXPECT_TRUE(plan.times("paged_attention", "invariant@pingpong"));
  EXPECT_TRUE(plan.times("paged_attention", "invariant@tma"));
  EXPECT_TRUE(plan.times("paged_attention", "invariant@cp-async"));
  EXPECT_FALSE(plan.times("mm", "invariant@tma"));
  cfg.impls = {"invariant@cp_async"};
  EXPECT_THROW(plan_bench(cfg), std::invalid_argument);
#endif
}

// A shape file may name attention shapes (K is the head dim; a prefill row is one sequence);
// anything else is a one-line error naming the file and line.
// The end-of-run summary states the matmul targets' classes: all shapes, M <= 32 (with the lowest
// and the count below 1.0x) and M >= 128; other ops get the overall geomean only.
TEST(BenchSummary, GeomeansByClassOfM) {
  std::map<std::string, std::vector<SpeedupSample>> s;
  s["mm/invariant/bfloat16"] = {{1, 2.0}, {32, 0.5}, {64, 1.0}, {128, 0.25}, {8192, 1.0}};
  s["log_softmax/invariant/float32"] = {{1024, 0.8}, {4096, 0.8}};
  const std::string text = speedup_summary(s);
  EXPECT_NE(
      text.find("  mm/invariant/bfloat16: 0.758x over 5 shapes; M <= 32: 1.000x (lowest 0.500x, 1 of 2 below 1.0x); "
                "M >= 128: 0.500x (lowest 0.250x)\n"),
      std::string::npos)
      << text;
  EXPECT_NE(text.find("  log_softmax/invariant/float32: 0.800x over 2 shapes\n"), std::string::npos) << text;
  EXPECT_EQ(text.find("log_softmax/invariant/float32: 0.800x over 2 shapes;"), std::string::npos) << text;
}

// The shape files ci/ keeps for attention A/Bs read, and the decode grid (the rows of the decode
// target against FlashAttention-2's decode: batches 1-16 at 512-4k keys) is whole.
TEST(BenchShapes, TheShapeFilesInCiRead) {
  const std::string ci = std::string(DETFUZZ_SOURCE_DIR) + "/ci/";
  for (const char *file : {"attention-pages.csv", "attention-pingpong.csv", "attention-decode-grid.csv"})
    EXPECT_FALSE(read_bench_shapes(ci + file).empty()) << file;
  const auto grid = read_bench_shapes(ci + "attention-decode-grid.csv");
  for (int64_t batch : {1, 2, 4, 8, 12, 16})
    for (int64_t keys : {512, 1024, 2048, 4096})
      EXPECT_EQ(std::count_if(grid.begin(), grid.end(),
                              [&](const BenchShape &s) {
                                return s.op == "paged_attention_decode" && s.m == batch && s.n == keys &&
                                       s.variant.empty();
                              }),
                1)
          << batch << " x " << keys;
  EXPECT_EQ(std::count_if(grid.begin(), grid.end(), [](const BenchShape &s) { return s.variant == "shuffled"; }), 3);
}

TEST(BenchShapes, ReadsAttentionRows) {
  const auto path = (std::filesystem::temp_directory_path() / "detfuzz-bench-shapes.csv").string();
  auto write = [&](const std::string &body) { std::ofstream(path) << "op,M,N,K\n" << body; };
  write("mm,8,4096,4096\npaged_attention_decode,16,4096,128\npaged_attention_prefill,1,8192,64\n");
  const auto shapes = read_bench_shapes(path);
  ASSERT_EQ(shapes.size(), 3u);
  EXPECT_EQ(shapes[1].op, "paged_attention_decode");
  EXPECT_EQ(shapes[1].m, 16);
  EXPECT_EQ(shapes[1].n, 4096);
  EXPECT_EQ(shapes[1].k, 128);
  EXPECT_EQ(shapes[2].k, 64);
  EXPECT_EQ(shapes[2].page, 16);  // no page column: vLLM's pages of 16
  std::ofstream(path) << "op,M,N,K,page\npaged_attention_prefill,1,8192,128,64\npaged_attention_decode,16,4096,128,1\n";
  const auto paged = read_bench_shapes(path);
  ASSERT_EQ(paged.size(), 2u);
  EXPECT_EQ(paged[0].page, 64);
  EXPECT_EQ(paged[1].page, 1);
  std::ofstream(path) << "op,M,N,K,page\npaged_attention_prefill,1,8192,128,0\n";
  EXPECT_THROW(read_bench_shapes(path), std::invalid_argument);
  EXPECT_EQ(paged[0].kv_heads, 0);  // no kv_heads column: the bench's GQA default
  std::ofstream(path) << "op,M,N,K,page,kv_heads\npaged_attention_prefill,1,8192,128,16,32\n"
                      << "paged_attention_decode,16,4096,128,16,1\n";
  const auto heads = read_bench_shapes(path);
  ASSERT_EQ(heads.size(), 2u);
  EXPECT_EQ(heads[0].kv_heads, 32);  // MHA
  EXPECT_EQ(heads[1].kv_heads, 1);   // MQA
  // Each row of `bad`, under `header`, is refused with one line that holds `why`.
  auto expect_refused = [&](const char *header, std::initializer_list<const char *> bad, const std::string &why) {
    for (const char *row : bad) {
      std::ofstream(path) << header << row;
      try {
        read_bench_shapes(path);
        ADD_FAILURE() << "accepted " << row;
      } catch (const std::invalid_argument &e) {
        EXPECT_NE(std::string(e.what()).find(why), std::string::npos) << e.what();
        EXPECT_EQ(std::string(e.what()).find('\n'), std::string::npos) << e.what();
      }
    }
  };
  expect_refused("op,M,N,K,page,kv_heads\n",
                 {"paged_attention_prefill,1,8192,128,16,3\n", "paged_attention_prefill,1,8192,128,16,64\n",
                  "paged_attention_decode,16,4096,128,16,-8\n"},
                 "kv_heads must divide the 32 query heads");
  std::ofstream(path) << "op,M,N,K,page,kv_heads,variant\npaged_attention_decode,16,4096,128,16,8,shuffled\n"
                      << "scaled_mm,16,4096,4096,,,block\nmm,16,4096,4096,,,\n";
  const auto variants = read_bench_shapes(path);
  ASSERT_EQ(variants.size(), 3u);
  EXPECT_EQ(variants[0].label(), "paged_attention_decode[shuffled]");
  EXPECT_EQ(variants[1].label(), "scaled_mm[block]");
  EXPECT_EQ(variants[2].label(), "mm");
  expect_refused("op,M,N,K,page,kv_heads,variant\n",
                 {"paged_attention_decode,16,4096,128,16,8,block\n", "mm,16,4096,4096,,,block\n",
                  "paged_attention_prefill,1,1024,128,16,8,Shuffled\n"},
                 "no variant '");
  expect_refused("op,M,N,K\n",
                 {"paged_attention_decode,16,4096,96\n", "paged_attention_prefill,2,1024,128\n",
                  "paged_attention,1,1024,128\n", "paged_attention_decode,0,4096,128\n"},
                 path + ":2: ");
  std::filesystem::remove(path);
}

}  // namespace
}  // namespace detfuzz
