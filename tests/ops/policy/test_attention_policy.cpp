// The paged-attention launch rules (ops/attention/attention_policy.h) on the CPU: the grid, the
// schedule, the splits per CTA and the Hopper kernel's K/V loads for named batches on an H100's
// 132 SMs, as the measurements in docs/perf/attention.md chose them; and the rules' edges.
#include "ops/attention/attention_policy.h"

#include <gtest/gtest.h>

#include <cstdint>
#include <stdexcept>
#include <vector>

namespace detfuzz::attention {
namespace {

using namespace attention_policy;

constexpr int64_t kH100Sms = 132;
// How many times an SM's share of DRAM bandwidth one CTA pulls: H100 (3.35 TB/s) and H200 (4.8 TB/s).
const double kH100Pull = cta_pull_over_sm_share(3352.0, kH100Sms), kH200Pull = cta_pull_over_sm_share(4800.0, 132);

// A batch as the kernel's metadata: query offsets and kv lengths.
struct Batch {
  std::vector<int32_t> cu_q{0}, kv_len;
  Batch &add(int32_t q_len, int32_t kv, int count = 1) {
    for (int i = 0; i < count; ++i) {
      cu_q.push_back(cu_q.back() + q_len);
      kv_len.push_back(kv);
    }
    return *this;
  }
};

// 32 query heads, 8 KV heads (GQA group 4: 16 query rows per tile), 256-key splits.
KvGrid llama_grid(const Batch &b) { return kv_grid(b.cu_q, b.kv_len, 4, 256); }

TEST(KvGrid, DecodeBatch) {
  const KvGrid g = llama_grid(Batch().add(1, 4096, 16));
  EXPECT_EQ(g.q_tiles, 1);
  EXPECT_EQ(g.max_splits, 16);
  EXPECT_EQ(g.full_tiles, 0);  // 4 live (row, head) pairs per tile
  EXPECT_EQ(g.tile_splits, std::vector<int64_t>(16, 16));
}

TEST(KvGrid, PrefillCountsEachTilesVisibleSplits) {
  const KvGrid g = llama_grid(Batch().add(1024, 1024));
  EXPECT_EQ(g.q_tiles, 64);
  EXPECT_EQ(g.max_splits, 4);
  EXPECT_EQ(g.full_tiles, 64);
  ASSERT_EQ(g.tile_splits.size(), 64u);
  EXPECT_EQ(g.tile_splits[0], 1);   // rows 0..15 see keys 0..15
  EXPECT_EQ(g.tile_splits[15], 1);  // rows 240..255: keys up to 255
  EXPECT_EQ(g.tile_splits[16], 2);  // rows 256..271: key 256 starts split 1
  EXPECT_EQ(g.tile_splits[63], 4);
  // A chunk of 100 new tokens after 3000 cached: its last tile (4 rows) sees all 3100 keys.
  const KvGrid chunk = llama_grid(Batch().add(100, 3100));
  EXPECT_EQ(chunk.q_tiles, 7);
  EXPECT_EQ(chunk.full_tiles, 6);  // 6 tiles of 16 rows (64 pairs); the last has 4 rows (16 pairs)
  EXPECT_EQ(chunk.tile_splits.back(), 13);
}

TEST(KvGrid, EmptyBatchesStillLaunchOneTile) {
  const KvGrid g = llama_grid(Batch().add(0, 0, 3));
  EXPECT_EQ(g.q_tiles, 1);
  EXPECT_EQ(g.max_splits, 1);
  EXPECT_TRUE(g.tile_splits.empty());
  EXPECT_EQ(attention_rows_per_tile(1), 64);
  EXPECT_EQ(attention_rows_per_tile(8), 8);
  // No GQA: a tile holds 64 rows of one head.
  EXPECT_EQ(kv_grid(Batch().add(65, 65).cu_q, Batch().add(65, 65).kv_len, 1, 256).q_tiles, 2);
}

// whole_rows once the full query tiles alone give every SM two CTAs (prefill); decode takes
// splits; head dim 256 never takes whole_rows.
TEST(Schedule, WholeRowsForPrefillSplitsForDecode) {
  const KvGrid prefill = llama_grid(Batch().add(8192, 8192));
  EXPECT_TRUE(whole_rows_pays(128, prefill.full_tiles, 8, kH100Sms));
  EXPECT_FALSE(whole_rows_pays(256, prefill.full_tiles, 8, kH100Sms));
  const KvGrid decode = llama_grid(Batch().add(1, 32768, 64));
  EXPECT_FALSE(whole_rows_pays(128, decode.full_tiles, 8, kH100Sms));
  // The threshold: 2 CTAs per SM of full tiles (33 tiles x 8 KV heads = 264 = 2 x 132).
  EXPECT_TRUE(whole_rows_pays(128, 33, 8, kH100Sms));
  EXPECT_FALSE(whole_rows_pays(128, 32, 8, kH100Sms));
  // split_groups on the wgmma kernel with 64-key softmax steps; split_per_cta otherwise.
  EXPECT_TRUE(split_groups_pays(true, 64));
  EXPECT_FALSE(split_groups_pays(true, 32));
  EXPECT_FALSE(split_groups_pays(false, 64));
  // Small TMA boxes for split_groups in one wave of CTAs whose consumers walk 2 splits or more,
  // where a CTA pulls more than its SM's share of the bandwidth (the H100, not the H200).
  EXPECT_TRUE(small_box_tma_pays(true, 2, 128, kH100Sms, kH100Pull));   // batch 1 at 16k
  EXPECT_TRUE(small_box_tma_pays(true, 8, 128, kH100Sms, kH100Pull));   // batch 16 at 4k
  EXPECT_FALSE(small_box_tma_pays(true, 8, 512, kH100Sms, kH100Pull));  // batch 64 at 4k: four waves
  EXPECT_FALSE(small_box_tma_pays(true, 1, 8, kH100Sms, kH100Pull));    // batch 1 at 512: a split per consumer
  EXPECT_FALSE(small_box_tma_pays(false, 8, 128, kH100Sms, kH100Pull));
  EXPECT_FALSE(small_box_tma_pays(true, 2, 128, 132, kH200Pull));  // the H200: cp.async at batch 1 at 16k
  EXPECT_FALSE(small_box_tma_pays(true, 8, 128, 132, kH200Pull));  // and at batch 16 at 4k
  // And for whole_rows decode in nearly full waves whose rows walk 4 splits or more.
  EXPECT_TRUE(whole_rows_small_box_tma_pays(true, 16, 128, kH100Sms));    // batch 16 at 4k
  EXPECT_TRUE(whole_rows_small_box_tma_pays(true, 4, 128, kH100Sms));     // batch 16 at 1k
  EXPECT_TRUE(whole_rows_small_box_tma_pays(true, 16, 512, kH100Sms));    // batch 64: 4 waves of 128+
  EXPECT_FALSE(whole_rows_small_box_tma_pays(true, 16, 2048, kH100Sms));  // batch 256: 16 waves
  EXPECT_FALSE(whole_rows_small_box_tma_pays(true, 2, 128, kH100Sms));    // batch 16 at 512
  EXPECT_FALSE(whole_rows_small_box_tma_pays(true, 16, 96, kH100Sms));    // batch 12: 96 CTAs
  EXPECT_FALSE(whole_rows_small_box_tma_pays(true, 16, 192, kH100Sms));   // 192 of 2 x 132
  EXPECT_FALSE(whole_rows_small_box_tma_pays(false, 16, 128, kH100Sms));  // prefill or split schedules
  // One consumer per split_groups CTA where two-consumer CTAs would fill under half the SMs.
  EXPECT_EQ(split_group_consumers(true, 8, kH100Sms), 1);   // batch 1 at 512: 16 CTAs, not 8
  EXPECT_EQ(split_group_consumers(true, 64, kH100Sms), 1);  // batch 1 at 4k: 128 CTAs, not 64
  EXPECT_EQ(split_group_consumers(true, 66, kH100Sms), 1);  // the threshold: 132 CTAs
  EXPECT_EQ(split_group_consumers(true, 67, kH100Sms), 2);
  EXPECT_EQ(split_group_consumers(true, 128, kH100Sms), 2);  // batch 16 at 512 and 4k, batch 1 at 16k
  EXPECT_EQ(split_group_consumers(false, 8, kH100Sms), 2);
}

// Decode batches take whole_rows on the wgmma kernel where its CTAs, one per (sequence, KV head),
// stream the batch within a tenth of the split schedules' time (in split-times: see the rule).
TEST(Schedule, WholeRowsForDecodeThatFillsTheSms) {
  EXPECT_NEAR(kH100Pull, 1.29, 0.01);
  EXPECT_NEAR(kH200Pull, 0.90, 0.01);
  EXPECT_DOUBLE_EQ(cta_pull_over_sm_share(0, kH100Sms), 1.3);  // bandwidth unknown: the H100's
  auto pays = [&](const Batch &b) { return decode_whole_rows_pays(true, 128, llama_grid(b), 8, kH100Sms, kH100Pull); };
  EXPECT_TRUE(pays(Batch().add(1, 512, 16)));    // 128 CTAs of 2 splits against 32 x 8 / 132 = 1.9
  EXPECT_TRUE(pays(Batch().add(1, 4096, 16)));   // 128 CTAs of 16 splits
  EXPECT_TRUE(pays(Batch().add(1, 16384, 16)));  // 64 splits each
  EXPECT_TRUE(pays(Batch().add(1, 4096, 64)));   // 512 CTAs: 3 waves of 16 and one of 116 CTAs (14) against 62
  EXPECT_TRUE(pays(Batch().add(1, 32768, 64)));
  EXPECT_TRUE(pays(Batch().add(1, 16384, 256)));
  EXPECT_FALSE(pays(Batch().add(1, 4096)));  // 8 CTAs: the splits spread over 128
  EXPECT_FALSE(pays(Batch().add(1, 16384)));
  EXPECT_FALSE(pays(Batch().add(1, 4096, 8)));   // 64 CTAs
  EXPECT_TRUE(pays(Batch().add(1, 4096, 12)));   // 96 CTAs: 16 / 1.3 = 12.3 split-times against 11.6
  EXPECT_FALSE(pays(Batch().add(1, 4096, 11)));  // 88 CTAs: 12.3 against 10.7
  EXPECT_FALSE(pays(Batch().add(1, 4096, 20)));  // 160 CTAs: 16 + 12.3 (a second wave of 28) against 19.4
  EXPECT_FALSE(pays(Batch().add(1, 4096, 24)));  // 192 CTAs: 16 + 12.3 against 23.3
  EXPECT_TRUE(pays(Batch().add(1, 4096, 32)));   // 256 CTAs: 16 + 16.5 against 31.0
  // One long row among short ones: whole_rows would wait on it alone.
  EXPECT_FALSE(pays(Batch().add(1, 512, 15).add(1, 32768)));
  // Not for prefill work, the mma.sync kernel or 32-key steps, or D = 256.
  EXPECT_FALSE(pays(Batch().add(16, 4096, 16)));  // full tiles: whole_rows_pays decides
  EXPECT_FALSE(decode_whole_rows_pays(false, 128, llama_grid(Batch().add(1, 4096, 16)), 8, kH100Sms, kH100Pull));
  EXPECT_FALSE(decode_whole_rows_pays(true, 256, llama_grid(Batch().add(1, 4096, 16)), 8, kH100Sms, kH100Pull));
  EXPECT_FALSE(decode_whole_rows_pays(true, 128, llama_grid(Batch().add(0, 0, 16)), 8, kH100Sms, kH100Pull));
  // An H200: a CTA pulls under an SM's share of its bandwidth, so split_groups' two streams per SM stay.
  EXPECT_FALSE(decode_whole_rows_pays(true, 128, llama_grid(Batch().add(1, 4096, 16)), 8, 132, kH200Pull));
  EXPECT_FALSE(decode_whole_rows_pays(true, 128, llama_grid(Batch().add(1, 16384, 64)), 8, 132, kH200Pull));
}

TEST(EarlyMerge, WhereverARowHasSeveralSplitsOfSplitGroups) {
  EXPECT_TRUE(early_merge_pays(true, 2));    // batch 1 at 512
  EXPECT_TRUE(early_merge_pays(true, 64));   // batch 1 at 16k: the merge's CTAs spread (below)
  EXPECT_FALSE(early_merge_pays(true, 1));   // one split: no merge
  EXPECT_FALSE(early_merge_pays(false, 2));  // split_per_cta
}

TEST(EarlyMerge, ItsCtasSpreadOverTheSms) {
  // An H200: 228 KiB of shared memory per SM, 227 KiB per CTA at most, 1 KiB reserved per CTA;
  // the merge kernel's own 512 bytes.
  constexpr int64_t kSmemPerSm = 233472, kPerCta = 232448, kReserved = 1024, kStatic = 512;
  // Batch 1 (32 CTAs): one per SM, the most a CTA may ask for.
  EXPECT_EQ(merge_spread_smem(32, 132, kSmemPerSm, kPerCta, kReserved, kStatic), kPerCta - kStatic);
  // Batch 16 (512 CTAs): 4 per SM, and a fifth does not fit.
  const int64_t four = merge_spread_smem(512, 132, kSmemPerSm, kPerCta, kReserved, kStatic);
  EXPECT_LE(4 * (four + kReserved + kStatic), kSmemPerSm);
  EXPECT_GT(5 * (four + kReserved + kStatic), kSmemPerSm);
  EXPECT_EQ(four % 128, 0);
  // So many CTAs that an SM's shared memory would not hold that many: nothing asked.
  EXPECT_EQ(merge_spread_smem(132 * 300, 132, kSmemPerSm, kPerCta, kReserved, kStatic), 0);
  EXPECT_EQ(merge_spread_smem(0, 132, kSmemPerSm, kPerCta, kReserved, kStatic), 0);
}

// The CTAs fold their rows' splits wherever one CTA, or a cluster of two, holds all of them and each
// consumer's states fit its Q slot: decode batches of 16 at 512-4k keys in one CTA (8 KV heads, GQA
// group 4: 4 live pairs a tile; two consumers of 1, 2, 4 and 8 splits, the splits-per-CTA rule's
// picks), batches of 8 and 12 at 4k in pairs.
TEST(FoldCtas, WhereOneCtaOrAPairHoldsEverySplitOfItsRows) {
  const int64_t slots = 2 * kH100Sms;
  for (int64_t ctx : {512, 1024, 2048, 4096}) {
    const KvGrid g = llama_grid(Batch().add(1, static_cast<int32_t>(ctx), 16));
    EXPECT_EQ(g.longest_q, 1);
    const int64_t spc = splits_per_cta(g.tile_splits, 8, slots);
    EXPECT_EQ(spc, ctx / 512) << ctx;
    EXPECT_EQ(fold_ctas(true, g.max_splits, 2, spc, 4, true), 1) << ctx;
    EXPECT_EQ(fold_ctas(true, g.max_splits, 1, spc, 4, true), spc >= 2 ? 2 : 0) << ctx;  // one consumer: a pair
    EXPECT_EQ(fold_ctas(true, g.max_splits, 1, spc, 4, false), 0) << ctx;  // no clusters: the merge kernel
  }
  // Batch 8 at 2k / 4k (8 and 16 splits in two CTAs), batch 16 at 8k (32 splits).
  for (auto [batch, ctx] : {std::pair<int, int>{8, 2048}, {8, 4096}, {16, 8192}}) {
    const KvGrid g = llama_grid(Batch().add(1, ctx, batch));
    const int64_t spc = splits_per_cta(g.tile_splits, 8, slots);
    EXPECT_EQ(2 * 2 * spc, g.max_splits) << batch << " x " << ctx;
    EXPECT_EQ(fold_ctas(true, g.max_splits, 2, spc, 4, true), 2) << batch << " x " << ctx;
  }
  for (auto [batch, ctx] : {std::pair<int, int>{8, 1024}, {1, 512}}) {  // a split a consumer: the merge kernel
    const KvGrid g = llama_grid(Batch().add(1, ctx, batch));
    const int64_t spc = splits_per_cta(g.tile_splits, 8, slots);
    EXPECT_EQ(spc, 1) << batch << " x " << ctx;
    EXPECT_EQ(fold_ctas(true, g.max_splits, batch == 1 ? 1 : 2, spc, 4, true), 0) << batch << " x " << ctx;
  }
  {  // batch 12 at 4k: 16 splits in CTAs of 4
    const KvGrid g = llama_grid(Batch().add(1, 4096, 12));
    EXPECT_EQ(fold_ctas(true, g.max_splits, 2, splits_per_cta(g.tile_splits, 8, slots), 4, true), 0);
  }
  EXPECT_EQ(fold_ctas(true, 16, 1, 1, 4, true), 0);  // batch 1 at 4k: a consumer per split
  EXPECT_EQ(fold_ctas(true, 64, 2, 8, 4, true), 0);  // batch 1 at 16k: 64 splits a row
  EXPECT_EQ(fold_ctas(true, 17, 2, 4, 4, true), 0);  // a third CTA
  EXPECT_EQ(fold_ctas(true, 1, 2, 1, 4, true), 0);   // one split: written as the output
  EXPECT_EQ(fold_ctas(false, 8, 2, 4, 4, true), 0);  // split_per_cta: the merge kernel
  EXPECT_EQ(fold_ctas(true, 6, 2, 3, 8, true), 1);   // forced groups of 3, GQA group 8
  EXPECT_EQ(fold_ctas(true, 16, 2, 8, 4, true), 1);  // a consumer's Q slot full: 8 splits of 4 pairs
  EXPECT_EQ(fold_ctas(true, 32, 2, 8, 4, true), 2);  // the same in a pair
  EXPECT_EQ(fold_ctas(true, 16, 2, 8, 8, true), 0);  // GQA group 8 at 4k: 64 states a consumer
  EXPECT_EQ(fold_ctas(true, 2, 2, 1, 64, true), 0);  // prefill tiles: 64 pairs
  EXPECT_EQ(llama_grid(Batch().add(1, 4096, 3).add(40, 100)).longest_q, 40);
}

TEST(SplitSlots, TwoConsumersPerSmOrTheKernelsOccupancy) {
  EXPECT_EQ(split_slots(true, kH100Sms, []() -> int64_t { throw std::logic_error("asked"); }), 264);
  EXPECT_EQ(split_slots(false, kH100Sms, [] { return 3; }), 396);
}

// Decode on an H100, 8 KV heads, 264 slots: the costs the splits-per-CTA rule weighed when it was
// measured (docs/perf/attention.md).
TEST(SplitsPerCta, MostSplitsWithinATenthOfTheCheapest) {
  const int64_t slots = 2 * kH100Sms;
  // Batch 16 at 4k: 8 at 1, 2, 4 and 8 splits per CTA; 8 ran fastest.
  EXPECT_EQ(splits_per_cta(llama_grid(Batch().add(1, 4096, 16)).tile_splits, 8, slots), 8);
  // Batch 1 at 32k: 4, 4, 4, 8: 4.
  EXPECT_EQ(splits_per_cta(llama_grid(Batch().add(1, 32768)).tile_splits, 8, slots), 4);
  // Batch 64 at 16k: 125, 126, 128, 128: 8 (the cheapest alone, 1, ran slower).
  EXPECT_EQ(splits_per_cta(llama_grid(Batch().add(1, 16384, 64)).tile_splits, 8, slots), 8);
  // One split per tile: grouping saves no CTA, so one split per CTA (1 against 2, 4, 8).
  EXPECT_EQ(splits_per_cta(std::vector<int64_t>(10, 1), 8, slots), 1);
  // 13 splits on one slot: 13 at 1, 14 at 2 (within a tenth), 16 at 4 and 8: 2.
  EXPECT_EQ(splits_per_cta(std::vector<int64_t>(1, 13), 1, 1), 2);
  // Three tiles of 9 splits on 8 slots: 4, 4, 8, 8: 2.
  EXPECT_EQ(splits_per_cta(std::vector<int64_t>(3, 9), 1, 8), 2);
  // No tiles at all: every cost is 0, and the most splits per CTA is as good as any.
  EXPECT_EQ(splits_per_cta({}, 8, slots), 8);
}

TEST(SplitsPerCta, PowersOfTwoUpToEight) {
  for (int64_t n = 1; n <= 200; n += 7)
    for (int64_t seqs : {1, 3, 16, 64})
      for (int64_t slots : {1, 16, 132, 264, 528}) {
        const int64_t spc = splits_per_cta(std::vector<int64_t>(seqs, n), 8, slots);
        ASSERT_TRUE(spc == 1 || spc == 2 || spc == 4 || spc == 8) << n << " " << seqs << " " << slots;
      }
}

// TMA boxes: whole 64-key boxes by default (pages of 64 or a multiple); smaller power-of-two pages
// only when forced and at least one producer step's rows (8 keys at D = 128, 16 at D = 64).
TEST(TmaBoxRows, WholeBoxesByDefault) {
  EXPECT_EQ(tma_box_rows(128, 64, 1000, KvLoads::automatic), 64);
  EXPECT_EQ(tma_box_rows(128, 128, 1000, KvLoads::automatic), 64);
  EXPECT_EQ(tma_box_rows(64, 256, 1000, KvLoads::automatic), 64);
  EXPECT_EQ(tma_box_rows(128, 16, 1000, KvLoads::automatic), 0);  // 16 boxes per tile: cp.async is faster
  EXPECT_EQ(tma_box_rows(128, 96, 1000, KvLoads::automatic), 0);  // not a multiple of 64
  EXPECT_EQ(tma_box_rows(128, 64, 1000, KvLoads::cp_async), 0);
}

TEST(TmaBoxRows, ForcedTmaOnSmallPages) {
  EXPECT_EQ(tma_box_rows(128, 16, 1000, KvLoads::tma), 16);
  EXPECT_EQ(tma_box_rows(128, 8, 1000, KvLoads::tma), 8);
  EXPECT_EQ(tma_box_rows(64, 8, 1000, KvLoads::tma), 0);  // below a producer step's 16 rows
  EXPECT_EQ(tma_box_rows(64, 16, 1000, KvLoads::tma), 16);
  EXPECT_EQ(tma_box_rows(128, 48, 1000, KvLoads::tma), 0);  // not a power of two
  EXPECT_EQ(tma_box_rows(128, 4, 1000, KvLoads::tma), 0);
}

// Runs of consecutive pages boxed whole: pages smaller than a tile that divide 64 and hold a
// producer step's rows, unless cp.async is forced; pages of 64 or more box every tile already.
TEST(TmaRunBoxes, SmallPagesThatDivideATile) {
  for (KvLoads loads : {KvLoads::automatic, KvLoads::tma}) {
    EXPECT_TRUE(tma_run_boxes(128, 16, 1000, loads));
    EXPECT_TRUE(tma_run_boxes(128, 8, 1000, loads));
    EXPECT_TRUE(tma_run_boxes(128, 32, 1000, loads));
    EXPECT_TRUE(tma_run_boxes(64, 16, 1000, loads));
    EXPECT_FALSE(tma_run_boxes(64, 8, 1000, loads));    // below a producer step's 16 rows
    EXPECT_FALSE(tma_run_boxes(128, 4, 1000, loads));   // below a producer step's 8 rows
    EXPECT_FALSE(tma_run_boxes(128, 24, 1000, loads));  // does not divide 64
    EXPECT_FALSE(tma_run_boxes(128, 64, 1000, loads));  // boxed by tma_box_rows
    EXPECT_FALSE(tma_run_boxes(128, 128, 1000, loads));
  }
  EXPECT_FALSE(tma_run_boxes(128, 16, 1000, KvLoads::cp_async));
  EXPECT_TRUE(tma_run_boxes(128, 16, (int64_t{1} << 27) - 1, KvLoads::automatic));
  EXPECT_FALSE(tma_run_boxes(128, 16, int64_t{1} << 27, KvLoads::automatic));  // 2^31 slots
  EXPECT_FALSE(tma_run_boxes(128, 16, 0, KvLoads::automatic));
}

TEST(TmaBoxRows, SlotCoordinatesAre32Bit) {
  EXPECT_EQ(tma_box_rows(128, 64, (int64_t{1} << 25) - 1, KvLoads::automatic), 64);
  EXPECT_EQ(tma_box_rows(128, 64, int64_t{1} << 25, KvLoads::automatic), 0);  // 2^31 slots
  EXPECT_EQ(tma_box_rows(128, 64, 0, KvLoads::automatic), 0);
}

}  // namespace
}  // namespace detfuzz::attention
