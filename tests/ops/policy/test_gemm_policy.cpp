// The matmul launch rules (ops/cuda/gemm_policy.h) on the CPU: the path each rule picks for named
// shapes, on an H100's 132 SMs, where the kernels' design notes and the measurements in
// docs/perf/matmul.md say which path should win; and the rules' edges and monotonicity.
#include "ops/cuda/gemm_policy.h"

#include <gtest/gtest.h>

#include <cstdint>
#include <map>
#include <stdexcept>

namespace detfuzz::cuda_kernels {
namespace {

using namespace gemm_policy;

constexpr int kH100Sms = 132;

GemmShape shape(int64_t M, int64_t N, int64_t K, int64_t batch = 1, int sms = kH100Sms) {
  return {M, N, K, batch, sms};
}

// Co-resident clusters of the 16-bit split kernel on an H100 (one CTA per SM; a cluster fits in
// one GPC): 30 of 4 and 15 of 8, as the kernel's design note says; the other sizes in proportion.
int64_t h100_clusters(int /*consumers*/, int chunks) {
  static const std::map<int, int64_t> n = {{2, 64}, {3, 40}, {4, 30}, {5, 24}, {6, 20}, {7, 16}, {8, 15}};
  return n.at(chunks);
}
// For paths where the rule must not ask the device.
int64_t never_asked(int, int) { throw std::logic_error("the cluster capacity was asked"); }

Sm90Kernel automatic(const GemmShape &s, bool c_storable = true) {
  return sm90_kernel(s, GemmPath::automatic, c_storable, h100_clusters);
}

TEST(KChunks, KnownSplits) {
  const struct {
    int64_t K, size;
    int count;
  } cases[] = {{1, 1, 1},       {64, 64, 1},     {1024, 1024, 1},  {1025, 576, 2},    {2048, 1024, 2},
               {4096, 1024, 4}, {8192, 1024, 8}, {14336, 1792, 8}, {100000, 12544, 8}};
  for (const auto &c : cases) {
    const KChunks k = k_chunks(c.K);
    EXPECT_EQ(k.size, c.size) << "K = " << c.K;
    EXPECT_EQ(k.count, c.count) << "K = " << c.K;
  }
  EXPECT_EQ(k_chunks(0).count, 1);  // no K: one empty chunk of size 1
  EXPECT_EQ(k_chunks(0).size, 1);
}

TEST(KChunks, CoverKInWholeStepsAtMostEightChunks) {
  for (int64_t K = 1; K <= 40000; K += K < 2100 ? 1 : 61) {
    const KChunks k = k_chunks(K);
    ASSERT_GE(k.count, 1);
    ASSERT_LE(k.count, kMaxKChunks);
    ASSERT_LT((k.count - 1) * k.size, K) << K;  // the last chunk is not empty
    ASSERT_GE(k.count * k.size, K) << K;
    if (k.count > 1) {
      ASSERT_EQ(k.size % 64, 0) << K;  // every kernel's K step divides a chunk
    }
    if (K <= kMinKChunk) {
      ASSERT_EQ(k.count, 1) << K;
    }
  }
}

TEST(GemmTiles, CountsAndWaves) {
  EXPECT_EQ(tile_count(shape(8, 128256, 4096), 64, 256), 501);
  EXPECT_EQ(tile_count(shape(129, 129, 64, 3), 128, 128), 2 * 2 * 3);
  EXPECT_EQ(tile_count(shape(0, 100, 64), 64, 64), 0);
  EXPECT_EQ(waves(0, 132), 0);
  EXPECT_EQ(waves(132, 132), 1);
  EXPECT_EQ(waves(133, 132), 2);
}

TEST(Sm90Runs, HopperKernelOnlyWhereItCanRun) {
  auto hopper = [] { return true; };
  auto ampere = [] { return false; };
  auto unasked = []() -> bool { throw std::logic_error("the device was asked"); };
  EXPECT_TRUE(sm90_runs(GemmPath::automatic, 4096, hopper));
  EXPECT_FALSE(sm90_runs(GemmPath::automatic, 4096, ampere));
  EXPECT_FALSE(sm90_runs(GemmPath::automatic, 0, hopper));  // K = 0: the mma.sync way
  EXPECT_FALSE(sm90_runs(GemmPath::mma_sync, 4096, unasked));
  EXPECT_TRUE(sm90_runs(GemmPath::sm90_split, 4096, unasked));  // forced: checked before
  EXPECT_FALSE(sm90_runs(GemmPath::sm90_persistent, 0, unasked));
}

// Decode over a vocabulary: 64 x 256 tiles alone fill the 132 SMs (501 tiles) in 4 waves, half
// the 8 of 64 x 128 tiles.
TEST(Sm90Kernel, DecodeOverTheVocabularyTakesSideBySideTiles) {
  EXPECT_TRUE(side_by_side_pays(shape(8, 128256, 4096)));
  EXPECT_EQ(automatic(shape(8, 128256, 4096)), Sm90Kernel::persistent_64x256);
  EXPECT_EQ(automatic(shape(32, 128256, 4096)), Sm90Kernel::persistent_64x256);
  EXPECT_EQ(automatic(shape(1, 128256, 4096)), Sm90Kernel::persistent_64x256);
  // N = 14336: 56 tiles of 64 x 256 do not fill the SMs; 112 of 64 x 128 tiles.
  EXPECT_FALSE(side_by_side_pays(shape(8, 14336, 4096)));
  EXPECT_EQ(automatic(shape(8, 14336, 4096)), Sm90Kernel::persistent_64x128);
}

TEST(Sm90Launch, The64RowKernelsLaunchAsProgrammaticDependents) {
  for (Sm90Kernel k : {Sm90Kernel::persistent_64x64, Sm90Kernel::persistent_64x128, Sm90Kernel::split_64x128})
    EXPECT_TRUE(programmatic_launch_pays(k));
  for (Sm90Kernel k : {Sm90Kernel::persistent_64x256, Sm90Kernel::persistent_128x128, Sm90Kernel::split_128x128,
                       Sm90Kernel::persistent_128x128_staged, Sm90Kernel::persistent_128x192_staged,
                       Sm90Kernel::paired_128x192_staged, Sm90Kernel::persistent_128x256_staged})
    EXPECT_FALSE(programmatic_launch_pays(k));
  // A forward's products at 16 tokens run 64-row kernels, at 512 tokens 128-row ones.
  EXPECT_TRUE(programmatic_launch_pays(automatic(shape(16, 4096, 4096))));
  EXPECT_FALSE(programmatic_launch_pays(automatic(shape(512, 4096, 4096))));
}

// M = 128, N = 1024, K = 8192: 8 chunks. 64 x 64 tiles (32, one wave) cost 8 half-chunks; the
// 64-row split runs 16 clusters of 8 in two waves of 15 (12 half-chunks). The split rule once
// weighed the 64 x 128 tiles instead (16 half-chunks) and took that slower split. The 128-row
// split runs 8 clusters of 8 in one wave (6 half-chunks): it runs.
TEST(Sm90Kernel, MidMNarrowNTakesThe128RowSplitWhereItIsOneWave) {
  const GemmShape s = shape(128, 1024, 8192);
  EXPECT_TRUE(sm90_narrow_pays(s));
  EXPECT_TRUE(sm90_half_width_pays(s));
  EXPECT_FALSE(split_pays(s, 1, true, 15));
  EXPECT_TRUE(split_pays(s, 1, false, 15));  // against 64 x 128 tiles it would
  EXPECT_TRUE(split_pays(s, 2, true, 15));
  EXPECT_EQ(automatic(s), Sm90Kernel::split_128x128);
  EXPECT_EQ(automatic(shape(128, 1024, 14336)), Sm90Kernel::split_128x128);
  // N = 2048 or M = 256: 16 clusters of 8, two waves (12 half-chunks): the 64 x 64 tiles.
  EXPECT_EQ(automatic(shape(128, 2048, 8192)), Sm90Kernel::persistent_64x64);
  EXPECT_EQ(automatic(shape(256, 1024, 8192)), Sm90Kernel::persistent_64x64);
}

// Decode with N = 1024 and K = 8192 keeps the split: 8 clusters of 8 fit in one wave.
TEST(Sm90Kernel, DecodeNarrowNLongKKeepsTheSplit) {
  EXPECT_EQ(automatic(shape(8, 1024, 8192)), Sm90Kernel::split_64x128);
  EXPECT_EQ(automatic(shape(1, 1024, 8192)), Sm90Kernel::split_64x128);
  // K <= 1024 is one chunk: nothing to split, and no capacity asked.
  EXPECT_EQ(sm90_kernel(shape(8, 1024, 1024), GemmPath::automatic, true, never_asked), Sm90Kernel::persistent_64x64);
}

// M = 128, N = 4096, K = 14336: 128-row tiles would be 32 CTAs on 132 SMs; 64-row ones stream B
// with twice the CTAs (and 64 x 64 tiles with four times).
TEST(Sm90Kernel, MidMTakes64RowTilesWhere128RowOnesLeaveHalfTheSmsIdle) {
  EXPECT_TRUE(sm90_narrow_pays(shape(128, 4096, 14336)));
  EXPECT_EQ(automatic(shape(128, 4096, 14336)), Sm90Kernel::persistent_64x64);
  // M = 128, N = 14336: 112 128-row tiles, most SMs busy: 128-row tiles, staged.
  EXPECT_FALSE(sm90_narrow_pays(shape(128, 14336, 4096)));
  EXPECT_EQ(automatic(shape(128, 14336, 4096)), Sm90Kernel::persistent_128x128_staged);
}

// Large M: the tile width whose waves cost least, a tile costing its work in 128 x 128 tiles over its
// kernel's speed: 192 columns 1.5 (1.44 where N >= 32768), 256 columns 1.88; ties to the narrower.
TEST(Sm90Kernel, LargeMTakesTheWidthWhoseWavesCostLeast) {
  // M = 2048, N = 128256: 8016 tiles of 256 in 61 waves (114.7), 10688 of 192 in 81 (116.6), 16032 of 128
  // in 122.
  EXPECT_EQ(wide_tile_n(shape(2048, 128256, 4096)), 256);
  EXPECT_EQ(automatic(shape(2048, 128256, 4096)), Sm90Kernel::persistent_128x256_staged);
  // M = 8192, N = 128256: 243 waves (456.8), 324 (466.6), 486.
  EXPECT_EQ(wide_tile_n(shape(8192, 128256, 4096)), 256);
  // M = 512, N = 6144: 128 tiles of 192 in one wave (1.5), 96 of 256 in one (1.88), 192 of 128 in 2.
  EXPECT_EQ(wide_tile_n(shape(512, 6144, 4096)), 192);
  EXPECT_EQ(automatic(shape(512, 6144, 4096)), Sm90Kernel::persistent_128x192_staged);
  // M = 8192, N = 4096: 1024 tiles of 256 in 8 waves (15.0), 1408 of 192 in 11 (16.5), 2048 of 128 in 16.
  EXPECT_EQ(wide_tile_n(shape(8192, 4096, 14336)), 256);
  // M = 8192, N = 14336: 28 waves (52.6), 37 (55.5), 55.
  EXPECT_EQ(wide_tile_n(shape(8192, 14336, 4096)), 256);
  EXPECT_EQ(automatic(shape(8192, 14336, 4096)), Sm90Kernel::persistent_128x256_staged);
  // M = 512, N = 4096: 64 tiles of 256 leave half the SMs idle; 128 of 128 in one wave.
  EXPECT_EQ(wide_tile_n(shape(512, 4096, 4096)), 128);
  EXPECT_EQ(automatic(shape(512, 4096, 4096)), Sm90Kernel::persistent_128x128_staged);
  // M = 2048, N = 1024: 128 tiles of 128 in one wave against 64 of 256.
  EXPECT_EQ(wide_tile_n(shape(2048, 1024, 8192)), 128);
  // Where TMA cannot store C: the register-store 128 x 128 tiles, whatever else would pay.
  EXPECT_EQ(automatic(shape(2048, 128256, 4096), false), Sm90Kernel::persistent_128x128);
  EXPECT_EQ(automatic(shape(4096, 4096, 4096), false), Sm90Kernel::persistent_128x128);
}

// The 192-wide tiles run in clusters of two sharing B where a tile has many K steps or B is far
// wider than L2, at M >= 2048 (at M = 512 the pairs were slower); the 256-wide ones never (their
// pairs were 1-3% slower wherever measured).
TEST(Sm90Kernel, WideTilesPairUpForLongKOrWideNAtLargeM) {
  EXPECT_TRUE(paired_tiles_pay(shape(2048, 4096, 14336)));
  // M = 2048, N = 4352, K = 14336: 17 columns of 256 (272 tiles, 3 waves: 5.64) against 23 of 192
  // (368, 3 waves: 4.5) and 34 of 128 (544, 5 waves).
  EXPECT_EQ(wide_tile_n(shape(2048, 4352, 14336)), 192);
  EXPECT_EQ(automatic(shape(2048, 4352, 14336)), Sm90Kernel::paired_128x192_staged);
  EXPECT_EQ(automatic(shape(8192, 4096, 14336)), Sm90Kernel::persistent_128x256_staged);
  EXPECT_EQ(automatic(shape(8192, 128256, 4096)), Sm90Kernel::persistent_128x256_staged);
  EXPECT_FALSE(paired_tiles_pay(shape(8192, 14336, 4096)));
  EXPECT_FALSE(paired_tiles_pay(shape(512, 128256, 4096)));
  // M = 512, N = 128256: 16 waves of 256 (30.1) against 21 of 192 (30.2) and 31 of 128.
  EXPECT_EQ(automatic(shape(512, 128256, 4096)), Sm90Kernel::persistent_128x256_staged);
}

TEST(Sm90Kernel, TileHeightFollowsMAt64Rows) {
  EXPECT_TRUE(sm90_narrow_pays(shape(64, 128256, 4096)));
  EXPECT_FALSE(sm90_narrow_pays(shape(65, 128256, 4096)));
  EXPECT_EQ(automatic(shape(64, 128256, 4096)), Sm90Kernel::persistent_64x256);
  // 1002 tiles of 128 x 128 in 8 waves; 668 of 128 x 192 in 6 (8.64); 501 of 128 x 256 in 4 (7.52).
  EXPECT_EQ(automatic(shape(65, 128256, 4096)), Sm90Kernel::persistent_128x256_staged);
}

// A forced path runs as forced, whatever the shape, without asking the device.
TEST(Sm90Kernel, ForcedPathsMapToTheirKernels) {
  const GemmShape s = shape(8, 128256, 4096);
  auto forced = [&](GemmPath p, bool c_storable = true) { return sm90_kernel(s, p, c_storable, never_asked); };
  EXPECT_EQ(forced(GemmPath::sm90_persistent), Sm90Kernel::persistent_128x128_staged);
  EXPECT_EQ(forced(GemmPath::sm90_persistent, false), Sm90Kernel::persistent_128x128);
  EXPECT_EQ(forced(GemmPath::sm90_split), Sm90Kernel::split_128x128);
  EXPECT_EQ(forced(GemmPath::sm90_persistent_64), Sm90Kernel::persistent_64x128);
  EXPECT_EQ(forced(GemmPath::sm90_split_64), Sm90Kernel::split_64x128);
  EXPECT_EQ(forced(GemmPath::sm90_persistent_64x64), Sm90Kernel::persistent_64x64);
  EXPECT_EQ(forced(GemmPath::sm90_persistent_128x192), Sm90Kernel::persistent_128x192_staged);
  EXPECT_EQ(forced(GemmPath::sm90_persistent_128x192, false), Sm90Kernel::persistent_128x128);
  EXPECT_EQ(forced(GemmPath::sm90_persistent_64x256), Sm90Kernel::persistent_64x256);
  EXPECT_EQ(forced(GemmPath::sm90_paired_128x192), Sm90Kernel::paired_128x192_staged);
  EXPECT_EQ(forced(GemmPath::sm90_paired_128x192, false), Sm90Kernel::persistent_128x128);
  EXPECT_EQ(forced(GemmPath::sm90_persistent_128x256), Sm90Kernel::persistent_128x256_staged);
  EXPECT_EQ(forced(GemmPath::sm90_persistent_128x256, false), Sm90Kernel::persistent_128x128);
  // Forced on a shape the automatic choice sends elsewhere (M = 4096): the same kernels.
  EXPECT_EQ(sm90_kernel(shape(4096, 4096, 4096), GemmPath::sm90_split_64, true, never_asked), Sm90Kernel::split_64x128);
  EXPECT_EQ(sm90_kernel(shape(4096, 4096, 4096), GemmPath::sm90_persistent_64x256, true, never_asked),
            Sm90Kernel::persistent_64x256);
}

// More co-resident clusters never turn a split into a persistent launch, and the split is never
// taken with one chunk.
TEST(Sm90Kernel, SplitIsMonotoneInClusterCapacity) {
  for (int64_t M : {1, 8, 32, 64, 100, 128, 256, 512})
    for (int64_t N : {256, 1024, 4096, 14336})
      for (int64_t K : {512, 2048, 4096, 8192, 14336})
        for (int consumers : {1, 2}) {
          const GemmShape s = shape(M, N, K);
          bool split_before = false;
          for (int64_t clusters = 1; clusters <= 66; ++clusters) {
            const bool split = split_pays(s, consumers, false, clusters) || split_pays(s, consumers, true, clusters);
            if (split_before) {
              ASSERT_TRUE(split) << M << " " << N << " " << K << " at " << clusters;
            }
            split_before = split_pays(s, consumers, false, clusters) && split_pays(s, consumers, true, clusters);
          }
          const Sm90Kernel k = automatic(s);
          if (k_chunks(K).count == 1) {
            ASSERT_TRUE(k != Sm90Kernel::split_64x128 && k != Sm90Kernel::split_128x128);
          }
        }
}

// The 64-row choices shrink as N grows: once 128-row tiles fill half the SMs they stay taken, and
// 64 x 64 tiles only while 64 x 128 ones leave half the SMs idle.
TEST(Sm90Kernel, NarrowTilesOnlyWhileTheSmsWouldIdle) {
  for (int64_t M : {65, 128, 192, 256}) {
    bool narrow_before = true;
    for (int64_t N = 64; N <= 65536; N += 64) {
      const bool narrow = sm90_narrow_pays(shape(M, N, 4096));
      ASSERT_TRUE(narrow_before || !narrow) << "M = " << M << ", N = " << N;
      narrow_before = narrow;
    }
  }
  for (int64_t N = 64; N <= 65536; N += 64) {
    const GemmShape s = shape(8, N, 4096);
    ASSERT_EQ(sm90_half_width_pays(s), 2 * ((N + 127) / 128) <= kH100Sms) << N;
  }
  // Fewer SMs: the same shape stops being narrow (H100 PCIe's 114, an H20's 78).
  EXPECT_TRUE(sm90_narrow_pays(shape(128, 8192, 4096, 1, 132)));
  EXPECT_FALSE(sm90_narrow_pays(shape(128, 8192, 4096, 1, 78)));
}

// ---- float32 ----

// An H100 as the float32 rules see it: sm_90 cluster code, room for the 256 x 128 tile, and the
// column stream's co-resident clusters (two CTAs per SM: 62 of 4, 30 of 8).
struct FakeDevice {
  bool clusters = true, tall = true;
  int stream_clusters_asked = 0, tall_asked = 0;
  bool cluster_capable() const { return clusters; }
  bool tall_fits() {
    ++tall_asked;
    return tall;
  }
  int stream_clusters(int size) {
    ++stream_clusters_asked;
    static const std::map<int, int> n = {{2, 124}, {3, 82}, {4, 62}, {5, 48}, {6, 40}, {7, 34}, {8, 30}};
    return n.at(size);
  }
};

F32Path f32(const GemmShape &s, bool with_workspace, FakeDevice d = {}) { return f32_auto_path(s, with_workspace, d); }

TEST(F32Path, ColumnStreamForDecodeAndSmallM) {
  // M = 8, N = 4096, K = 14336: 32 clusters of 8 do not fit at once (30): the split form.
  EXPECT_EQ(f32(shape(8, 4096, 14336), true), F32Path::column_stream_split);
  // M = 32, N = K = 4096: one wave, but packed two CTAs deep: the split form.
  EXPECT_EQ(f32(shape(32, 4096, 4096), true), F32Path::column_stream_split);
  EXPECT_EQ(f32(shape(32, 4096, 14336), true), F32Path::column_stream_split);
  // M = 1, N = 6144: the clusters spread over the SMs; the split's second launch is pure cost.
  EXPECT_EQ(f32(shape(1, 6144, 4096), true), F32Path::column_stream);
  // No workspace: the clusters.
  EXPECT_EQ(f32(shape(8, 4096, 14336), false), F32Path::column_stream);
  EXPECT_EQ(f32(shape(32, 4096, 4096), false), F32Path::column_stream);
  // 9-16 rows: the 32 x 128 tiles.
  EXPECT_EQ(f32(shape(16, 4096, 4096), true), F32Path::split_small);
  EXPECT_EQ(f32(shape(9, 4096, 4096), true), F32Path::split_small);
}

TEST(F32Path, StreamSplitRule) {
  auto clusters = [](int size) { return size == 4 ? 62 : size == 8 ? 30 : 100; };
  EXPECT_FALSE(f32_stream_split_pays(shape(8, 4096, 1024), [](int) -> int { throw std::logic_error("asked"); }));
  // More CTAs than two waves: not asked either.
  EXPECT_FALSE(f32_stream_split_pays(shape(8, 65536, 4096), [](int) -> int { throw std::logic_error("asked"); }));
  EXPECT_TRUE(f32_stream_split_pays(shape(8, 4096, 14336), clusters));
  EXPECT_TRUE(f32_stream_split_pays(shape(32, 4096, 4096), clusters));
  EXPECT_FALSE(f32_stream_split_pays(shape(1, 6144, 4096), clusters));
  EXPECT_EQ(f32_stream_rows(1), 1);
  EXPECT_EQ(f32_stream_rows(3), 4);
  EXPECT_EQ(f32_stream_rows(9), 8);
  EXPECT_EQ(f32_stream_groups(8), 1);
  EXPECT_EQ(f32_stream_groups(16), 2);
  EXPECT_EQ(f32_stream_groups(17), 4);
  EXPECT_EQ(f32_stream_ctas(shape(32, 4096, 4096)), 32 * 4);
  EXPECT_TRUE(f32_stream_fits(shape(8, 4096, 4096)));
  EXPECT_FALSE(f32_stream_fits(shape(8, 4096, int64_t{INT_MAX} - 16)));
}

TEST(F32Path, LargeMTakesTheTallTilesWhereTheyFillTheSms) {
  EXPECT_EQ(f32(shape(2048, 4096, 4096), true), F32Path::persistent_tall);
  EXPECT_EQ(f32(shape(8192, 4096, 4096), false), F32Path::persistent_tall);
  FakeDevice small_smem;
  small_smem.tall = false;
  EXPECT_NE(f32(shape(2048, 4096, 4096), true, small_smem), F32Path::persistent_tall);
  // 1024 rows x 1024 columns: 32 tall tiles for 132 SMs.
  EXPECT_NE(f32(shape(1024, 1024, 4096), true), F32Path::persistent_tall);
  // M = 512: half-empty waves.
  EXPECT_NE(f32(shape(512, 4096, 4096), true), F32Path::persistent_tall);
}

TEST(F32Path, SplitTilesWithAWorkspace) {
  EXPECT_EQ(f32(shape(512, 4096, 4096), true), F32Path::split_large);
  EXPECT_EQ(f32(shape(128, 4096, 4096), true), F32Path::split_large);
  EXPECT_EQ(f32(shape(512, 1024, 8192), true), F32Path::split_large);
  // M = 33-128: the column stream's split form where the large (tile, chunk) CTAs keep under 9/10
  // of the SMs' time busy: 64 CTAs on 132 SMs (N = 1024, K = 8192), 192 (N = 6144: two on 60 SMs),
  // 448 (N = 14336: 85%); not 128 (N = 4096) or 256 (K = 14336) or 4008 (N = 128256).
  EXPECT_EQ(f32(shape(128, 1024, 8192), true), F32Path::column_stream_split);
  EXPECT_EQ(f32(shape(128, 6144, 4096), true), F32Path::column_stream_split);
  EXPECT_EQ(f32(shape(128, 14336, 4096), true), F32Path::column_stream_split);
  EXPECT_EQ(f32(shape(64, 1024, 8192), true), F32Path::column_stream_split);
  EXPECT_EQ(f32(shape(128, 4096, 14336), true), F32Path::split_large);
  EXPECT_EQ(f32(shape(128, 128256, 4096), true), F32Path::split_large);
  // Above 128 rows the large split stays; without a workspace there is no split form.
  EXPECT_EQ(f32(shape(129, 1024, 8192), true), F32Path::split_large);
  EXPECT_NE(f32(shape(128, 1024, 8192), false), F32Path::column_stream_split);
  // M = 512, N = 128256 would take 1 GiB of workspace: a path without one.
  EXPECT_GT(f32_split_workspace_bytes(shape(512, 128256, 4096)), kSplitWorkspaceCap);
  EXPECT_EQ(f32(shape(512, 128256, 4096), true), f32(shape(512, 128256, 4096), false));
  EXPECT_EQ(f32_split_workspace_bytes(shape(3, 5, 2048, 2)), 2 * 2 * 3 * 8 * 4);
}

TEST(F32Path, WithoutAWorkspacePersistentOrClusters) {
  // 128 tiles on 132 SMs, 4 chunks: 4 against 4, a tie with few SMs idle: persistent.
  EXPECT_EQ(f32(shape(512, 4096, 4096), false), F32Path::persistent_large);
  // 448 tiles: 16 chunk times persistent against 14 in clusters.
  EXPECT_EQ(f32(shape(512, 14336, 4096), false), F32Path::cluster_large);
  // 112 tiles leave more than 1/8 of the SMs idle: the tie goes to the clusters.
  EXPECT_EQ(f32(shape(128, 14336, 4096), false), F32Path::cluster_large);
  // 32 x 128 tiles between 3/4 of a wave and a wave (M > 32: 120 tiles), or from 3/4 of a wave up
  // (M <= 32: 112 tiles at M = 16; 1002 at M = 32, N = 128256 past the column stream's M).
  EXPECT_EQ(f32(shape(64, 7680, 4096), false), F32Path::persistent_small);
  EXPECT_EQ(f32(shape(16, 14336, 4096), false), F32Path::persistent_small);
  EXPECT_EQ(f32(shape(12, 128256, 4096), false), F32Path::persistent_small);
  // Below 3/4 of a wave (M = 33, N = 4096: 64 small tiles): clusters, and of the small tiles, since
  // the large ones' 128 (tile, chunk) CTAs would not fill the 132 SMs.
  EXPECT_EQ(f32(shape(33, 4096, 4096), false), F32Path::cluster_small);
}

TEST(F32Path, WithoutClustersNeitherClustersNorTheStream) {
  FakeDevice ampere;
  ampere.clusters = false;
  ampere.tall = false;
  // M = 8, N = 14336 and M = 32, N = 128256: small persistent tiles, 3/4 of a wave or more.
  EXPECT_EQ(f32(shape(8, 14336, 4096), false, ampere), F32Path::persistent_small);
  EXPECT_EQ(f32(shape(32, 128256, 4096), false, ampere), F32Path::persistent_small);
  for (int64_t M : {1, 8, 16, 31, 32, 33, 100, 128, 512, 1024, 4096})
    for (int64_t N : {128, 1024, 4096, 14336, 128256})
      for (bool ws : {false, true}) {
        const F32Path p = f32(shape(M, N, 4096), ws, ampere);
        ASSERT_TRUE(p != F32Path::cluster_large && p != F32Path::cluster_small && p != F32Path::column_stream &&
                    p != F32Path::column_stream_split && p != F32Path::persistent_tall)
            << M << " x " << N;
        if (!ws) {
          ASSERT_TRUE(p != F32Path::split_large && p != F32Path::split_small) << M << " x " << N;
        }
      }
}

// The device is asked only where the choice needs it: the stream's cluster count only for a split
// form the caller could pay for, the tall tile's fit only from 1024 rows.
TEST(F32Path, AsksTheDeviceOnlyWhereTheRuleNeedsIt) {
  FakeDevice d;
  f32_auto_path(shape(8, 4096, 14336), false, d);
  EXPECT_EQ(d.stream_clusters_asked, 0);
  f32_auto_path(shape(8, 4096, 14336), true, d);
  EXPECT_EQ(d.stream_clusters_asked, 1);
  f32_auto_path(shape(512, 4096, 4096), true, d);
  EXPECT_EQ(d.tall_asked, 0);
  f32_auto_path(shape(2048, 4096, 4096), true, d);
  EXPECT_EQ(d.tall_asked, 1);
}

}  // namespace
}  // namespace detfuzz::cuda_kernels
