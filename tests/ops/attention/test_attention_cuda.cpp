// The fused CUDA kernel: accuracy against the float64 reference, batch invariance, the properties
// on CUDA and the CUDA mutants. Every test skips where no GPU is found.
#include "ops/attention/paged_attention.h"
#include "ops/registry.h"
#include "properties/attention/attention_properties.h"
#include "tests/ops/attention/property_run.h"

#include <gtest/gtest.h>
#include <rapidcheck.h>

#ifdef DETFUZZ_WITH_CUDA
#include <ATen/cuda/CUDAContext.h>
#endif

#include <chrono>
#include <optional>

using namespace detfuzz;

namespace {

bool have_gpu() {
#ifdef DETFUZZ_WITH_CUDA
  return at::cuda::is_available();
#else
  return false;
#endif
}

#define NEED_GPU() \
  if (!have_gpu()) GTEST_SKIP() << "needs a CUDA GPU: none found"

CaseSpec cuda_case(std::vector<int64_t> shape, const std::string &q, const std::string &kv, at::ScalarType dtype,
                   const std::string &property, uint64_t seed = 3) {
  CaseSpec c;
  c.op = "paged_attention";
  c.impl = "invariant";
  c.property = property;
  c.backend = Backend::cuda;
  c.dtype = dtype;
  c.shape = std::move(shape);
  c.seed = seed;
  c.params = {{"q", q}, {"kv", kv}, {"place", "11"}, {"pool", "5"}, {"target", "1"}};
  return c;
}

}  // namespace

TEST(PagedAttentionCuda, AccuracyAgainstFloat64OverTheSupportedGrid) {
  NEED_GPU();
  // Every head dim, dtype, page size and GQA group 1..8, with a mixed batch whose rows need 1, 2
  // and 4 splits (kv 1000), partial tiles and pages.
  int checked = 0;
  for (auto dt : {at::kBFloat16, at::kHalf})
    for (int64_t d : {64, 128, 256})
      for (int64_t page : {1, 16, 64})
        for (int64_t group : {1, 3, 8}) {
          const CaseSpec c = cuda_case({2 * group, 2, d, page}, "1.37.5.1", "1000.300.257.63", dt, "accuracy",
                                       static_cast<uint64_t>(d + page + group));
          const Verdict v = check_attention_case(c);
          EXPECT_TRUE(v.passed()) << c.describe() << ": " << v.detail;
          ++checked;
        }
  EXPECT_EQ(checked, 54);
}

TEST(PagedAttentionCuda, TargetAloneVsBatchedAndOtherInvariances) {
  NEED_GPU();
  for (const std::string prop : {"seq_alone_vs_batched", "decode_vs_prefill", "repeat", "block_placement"}) {
    CaseSpec c = cuda_case({8, 2, 128, 16}, "3.300.1.64", "900.700.1500.64", at::kBFloat16, prop);
    c.params["place2"] = "77";
    c.params["share"] = "2";
    const Verdict v = check_attention_case(c);
    EXPECT_TRUE(v.passed()) << c.describe() << ": " << v.detail;
  }
  CaseSpec c = cuda_case({4, 4, 64, 1}, "3.513.1", "900.700.64", at::kHalf, "chunked_prefill");
  c.params["chunks"] = "1.255.1.256";
  const Verdict v = check_attention_case(c);
  EXPECT_TRUE(v.passed()) << c.describe() << ": " << v.detail;
}

TEST(PagedAttentionCuda, OutputIsFullyWrittenAndFinite) {
  NEED_GPU();
  const CaseSpec c = cuda_case({8, 1, 256, 64}, "1.200.1", "2000.257.1", at::kBFloat16, "repeat");
  const auto b = attention_case::build(c, attention_case::sequences(c), 11, 5, false);
  const auto *impl = find_impl("paged_attention", "invariant", Backend::cuda);
  ASSERT_NE(impl, nullptr);
  const auto out = impl->run(b.args).to(at::kCPU).to(at::kFloat);
  EXPECT_TRUE(at::isfinite(out).all().item<bool>());
  EXPECT_GT(out.abs().min().item<float>(), 0.f);
}

TEST(PagedAttentionCuda, PropertiesHoldOnGeneratedCases) {
  NEED_GPU();
  for (const std::string impl : {"invariant", "invariant-mma-sync"})
    for (const auto &prop : attention_properties())
      for (auto dt : {at::kBFloat16, at::kHalf}) {
        const auto r = run_property(impl, prop, Backend::cuda, dt, 25, 2024);
        EXPECT_TRUE(r.passed) << impl << "/" << prop << " " << dtype_name(dt) << "\n" << r.message;
        std::cout << "[ cuda     ] " << impl << "/" << prop << " " << dtype_name(dt) << ": " << r.num_success
                  << " cases in " << r.seconds << " s\n";
      }
}

#ifdef DETFUZZ_WITH_CUDA
// The schedules run the same arithmetic: on generated batches (mixed prefill, chunk and decode
// sequences, every head dim, page size and GQA group) a CTA per split, three splits per CTA,
// whole rows and (wgmma) split groups must give the same bits, on each kernel (mma.sync, and
// wgmma where it runs).
TEST(PagedAttentionCuda, SchedulesGiveTheSameBits) {
  NEED_GPU();
  using Schedule = attention::CudaAttentionOptions::Schedule;
  using Kernel = attention::CudaAttentionOptions::Kernel;
  int compared = 0;
  int compared_groups = 0;
  const auto result = rc::check(
      "split_per_cta (1 and 3 splits per CTA), whole_rows and split_groups agree bit for bit, for splits of 1-4 tiles",
      [&] {
        const Kernel kernel = *rc::gen::element(Kernel::automatic, Kernel::mma_sync);
        const CaseSpec c =
            *gen_attention_case("invariant", "repeat", Backend::cuda, *rc::gen::element(at::kBFloat16, at::kHalf));
        // Pages in the allocator's order (0: the Hopper kernel boxes runs of pages whole) or shuffled.
        const int64_t place = *rc::gen::element(int64_t{0}, int64_t{11});
        const auto b = attention_case::build(c, attention_case::sequences(c), place, 5, false);
        const auto &t = b.args.tensors;
        // Splits of 4 tiles (the default), 3 (whole_rows' tile pairs start at tile 1: a split then
        // starts at a pair's first tile) and 1 (every tile starts one).
        const int64_t split_tokens = *rc::gen::element(attention::kKvSplit, int64_t{192}, int64_t{64});
        attention::CudaAttentionOptions split, split3, whole;
        split.split_tokens = split3.split_tokens = whole.split_tokens = split_tokens;
        split.kernel = split3.kernel = whole.kernel = kernel;
        split.schedule = split3.schedule = Schedule::split_per_cta;
        split.splits_per_cta = 1;
        split3.splits_per_cta = 3;  // a CTA walks three splits, writing each one's state
        whole.schedule = Schedule::whole_rows;
        const auto x = attention::paged_attention_cuda(t[0], t[1], t[2], t[3], t[4], t[5], b.args.alpha, split);
        const auto z = attention::paged_attention_cuda(t[0], t[1], t[2], t[3], t[4], t[5], b.args.alpha, split3);
        RC_LOG() << c.describe() << (kernel == Kernel::mma_sync ? " (mma.sync)" : " (automatic kernel)")
                 << ", splits of " << split_tokens << ", placement " << place << "\n";
        RC_ASSERT(x.view(at::kShort).equal(z.view(at::kShort)));
        if (c.shape[2] <= 128) {  // whole_rows exists for D <= 128
          const auto y = attention::paged_attention_cuda(t[0], t[1], t[2], t[3], t[4], t[5], b.args.alpha, whole);
          RC_ASSERT(x.view(at::kShort).equal(y.view(at::kShort)));
        }
        // split_groups (the wgmma kernel only): consumers on 1, 3 or 4 splits each (3 and 4: small
        // pages by TMA where TMA can box them and the grid is one wave), ping-pong or not, one or
        // two consumers per CTA, and K/V forced through TMA boxes. Where a CTA holds every split of
        // its rows it folds them itself; with 4 splits a consumer the merge kernel is forced once
        // too.
        if (kernel == Kernel::automatic &&
            attention::PagedAttentionCudaPlan(t[0], t[1], t[2], t[3], t[4], t[5]).wgmma()) {
          using Turns = attention::CudaAttentionOptions::ConsumerTurns;
          using KvLoads = attention::CudaAttentionOptions::KvLoads;
          for (int64_t spc : {1, 3, 4})
            for (Turns turns : {Turns::pingpong, Turns::free}) {
              attention::CudaAttentionOptions groups;
              groups.split_tokens = split_tokens;
              groups.schedule = Schedule::split_groups;
              groups.splits_per_cta = spc;
              groups.turns = turns;
              groups.group_consumers = turns == Turns::free ? 1 : 2;
              groups.kv_loads = spc == 1 && turns == Turns::free ? KvLoads::tma : KvLoads::automatic;
              const auto y = attention::paged_attention_cuda(t[0], t[1], t[2], t[3], t[4], t[5], b.args.alpha, groups);
              RC_ASSERT(x.view(at::kShort).equal(y.view(at::kShort)));
              if (spc == 4 && turns == Turns::pingpong) {
                groups.merge = attention::CudaAttentionOptions::Merge::kernel;
                const auto m =
                    attention::paged_attention_cuda(t[0], t[1], t[2], t[3], t[4], t[5], b.args.alpha, groups);
                RC_ASSERT(x.view(at::kShort).equal(m.view(at::kShort)));
              }
            }
          ++compared_groups;
        }
        ++compared;
      });
  EXPECT_TRUE(result);
  EXPECT_GT(compared, 50);
  if (at::cuda::getCurrentDeviceProperties()->major == 9) EXPECT_GT(compared_groups, 20);
}

// The merge kernel folds a row's splits from batches of 32 loads (split_per_cta's merge) or from
// the whole row copied into its shared memory at once (split_groups' early merge): rows of more
// than 32 and 64 splits (decode, three sequences of different lengths, pages in shuffled order,
// scores scaled up so that the splits' maxima, and so the merge weights, differ widely) get the bits
// of whole_rows, which folds each split as it finishes, either way.
TEST(PagedAttentionCuda, LongRowsMergeAsWholeRowsFold) {
  NEED_GPU();
  using Schedule = attention::CudaAttentionOptions::Schedule;
  at::manual_seed(20261128);
  const auto f32 = at::TensorOptions().device(at::kCUDA).dtype(at::kFloat);
  const auto i32 = at::TensorOptions().dtype(at::kInt);
  constexpr int64_t hq = 8, hkv = 2, d = 128, page = 16;
  for (at::ScalarType dt : {at::kBFloat16, at::kHalf})
    for (int64_t split_tokens : {int64_t{64}, attention::kKvSplit}) {
      const std::vector<int64_t> lens = {split_tokens * 33 + 5, split_tokens * 70 - 1, split_tokens * 97};
      int64_t blocks = 0, max_blocks = 0;
      for (int64_t l : lens) {
        blocks += (l + page - 1) / page;
        max_blocks = std::max(max_blocks, (l + page - 1) / page);
      }
      const at::Tensor order = at::randperm(blocks, at::TensorOptions().dtype(at::kLong));
      at::Tensor table = at::zeros({static_cast<int64_t>(lens.size()), max_blocks}, i32);
      at::Tensor cu = at::arange(static_cast<int64_t>(lens.size()) + 1, i32), seq = at::zeros({3}, i32);
      for (int64_t s = 0, next = 0; s < 3; ++s) {
        seq[s] = static_cast<int32_t>(lens[s]);
        for (int64_t b = 0; b < (lens[s] + page - 1) / page; ++b) table[s][b] = order[next++].item<int64_t>();
      }
      const at::Tensor q = (at::randn({3, hq, d}, f32) * 4).to(dt);
      const at::Tensor k = at::randn({blocks, page, hkv, d}, f32).to(dt),
                       v = at::randn({blocks, page, hkv, d}, f32).to(dt);
      auto run = [&](Schedule schedule) {
        attention::CudaAttentionOptions o;
        o.split_tokens = split_tokens;
        o.schedule = schedule;
        return attention::paged_attention_cuda(q, k, v, cu.cuda(), seq.cuda(), table.cuda(), 0.0, o);
      };
      const at::Tensor whole = run(Schedule::whole_rows);
      ASSERT_TRUE(whole.isfinite().all().item<bool>());
      EXPECT_TRUE(run(Schedule::split_per_cta).view(at::kShort).equal(whole.view(at::kShort)))
          << "split_per_cta, splits of " << split_tokens << ", " << dt;
      if (attention::PagedAttentionCudaPlan(q, k, v, cu.cuda(), seq.cuda(), table.cuda()).wgmma())
        EXPECT_TRUE(run(Schedule::split_groups).view(at::kShort).equal(whole.view(at::kShort)))
            << "split_groups, splits of " << split_tokens << ", " << dt;
    }
}

// split_groups' CTAs fold their rows' splits where one CTA, or a cluster of two, holds all of them
// (attention_policy::fold_ctas): splits of 64 keys, rows of up to 512 keys (8 splits), one or two
// query rows a sequence. In one CTA of two consumers of 4 splits: rows of 5-8 splits (both consumers
// keep splits), of 2-4 (consumer 1 has no tile: consumer 0 folds alone) and of one split. In pairs
// of CTAs, two consumers of 2 splits or one of 4: rows whose splits span both CTAs (the second
// with one consumer busy or both) and rows within the first (the second CTA has nothing and exits).
// Each gets the bits of the merge kernel and of whole_rows, for both dtypes, head dims 64 and 128,
// and GQA groups of 2 and 4.
TEST(PagedAttentionCuda, SplitGroupsFoldTheirRowsInTheirCtas) {
  NEED_GPU();
  using Options = attention::CudaAttentionOptions;
  at::manual_seed(20261130);
  const auto f32 = at::TensorOptions().device(at::kCUDA).dtype(at::kFloat);
  const auto i32 = at::TensorOptions().dtype(at::kInt);
  constexpr int64_t page = 16;
  // (query rows, keys) per sequence.
  const std::vector<std::pair<int64_t, int64_t>> seqs = {{1, 500}, {1, 129}, {2, 257}, {1, 60}, {2, 300}, {1, 512}};
  int64_t blocks = 0, max_blocks = 0, rows = 0;
  for (const auto &[q_len, kv] : seqs) {
    blocks += (kv + page - 1) / page;
    max_blocks = std::max(max_blocks, (kv + page - 1) / page);
    rows += q_len;
  }
  const at::Tensor order = at::randperm(blocks, at::TensorOptions().dtype(at::kLong));
  at::Tensor table = at::zeros({static_cast<int64_t>(seqs.size()), max_blocks}, i32);
  at::Tensor cu = at::zeros({static_cast<int64_t>(seqs.size()) + 1}, i32),
             lens = at::zeros({static_cast<int64_t>(seqs.size())}, i32);
  for (int64_t s = 0, next = 0; s < static_cast<int64_t>(seqs.size()); ++s) {
    cu[s + 1] = cu[s].item<int32_t>() + static_cast<int32_t>(seqs[s].first);
    lens[s] = static_cast<int32_t>(seqs[s].second);
    for (int64_t b = 0; b < (seqs[s].second + page - 1) / page; ++b) table[s][b] = order[next++].item<int64_t>();
  }
  const at::Tensor cu_d = cu.cuda(), lens_d = lens.cuda(), table_d = table.cuda();
  for (at::ScalarType dt : {at::kBFloat16, at::kHalf})
    for (int64_t d : {64, 128})
      for (int64_t hkv : {2, 4}) {
        const int64_t hq = 8;
        const at::Tensor q = (at::randn({rows, hq, d}, f32) * 3).to(dt);
        const at::Tensor k = at::randn({blocks, page, hkv, d}, f32).to(dt),
                         v = at::randn({blocks, page, hkv, d}, f32).to(dt);
        // (splits per consumer, consumers, the CTAs that fold a row).
        for (auto [spc, consumers, ctas] : {std::tuple<int64_t, int64_t, int64_t>{4, 2, 1}, {2, 2, 2}, {4, 1, 2}}) {
          auto options = [&](Options::Schedule schedule, Options::Merge merge) {
            Options o;
            o.split_tokens = 64;
            o.schedule = schedule;
            o.splits_per_cta = spc;
            o.group_consumers = consumers;
            o.merge = merge;
            return o;
          };
          const Options folds = options(Options::Schedule::split_groups, Options::Merge::automatic);
          const attention::PagedAttentionCudaPlan plan(q, k, v, cu_d, lens_d, table_d, folds);
          if (!plan.wgmma()) GTEST_SKIP() << "no wgmma kernel on this GPU";
          const std::string what = std::string(c10::toString(dt)) + ", D = " + std::to_string(d) + ", " +
                                   std::to_string(hkv) + " KV heads, " + std::to_string(consumers) + " consumers of " +
                                   std::to_string(spc) + " splits";
          ASSERT_TRUE(plan.cta_merge()) << what;
          ASSERT_EQ(plan.fold_ctas(), ctas) << what;
          const at::Tensor folded = plan.run(q, k, v, 0.0);
          ASSERT_TRUE(folded.isfinite().all().item<bool>()) << what;
          for (const Options &o : {options(Options::Schedule::split_groups, Options::Merge::kernel),
                                   options(Options::Schedule::whole_rows, Options::Merge::automatic)})
            EXPECT_TRUE(
                folded.view(at::kShort)
                    .equal(attention::paged_attention_cuda(q, k, v, cu_d, lens_d, table_d, 0.0, o).view(at::kShort)))
                << what;
        }
      }
}

// The running maximum is a lagging reference: a step rescales only where its maximum passes the
// reference by more than 2^8. Keys scaled in bands of 128 (x1, x3, x5, x7, then x1 again) make the
// maximum jump at a band's first tile, hold at its second and fall back at a cycle's start, in the
// middle of splits and at their starts. Prefill rows (whole_rows in pairs of tiles, two consumers)
// and decode rows get the bits of split_per_cta and split_groups, and the float64 answer.
TEST(PagedAttentionCuda, RescalesOnlyWhereTheMaximumJumpsInEverySchedule) {
  NEED_GPU();
  using Schedule = attention::CudaAttentionOptions::Schedule;
  at::manual_seed(20261129);
  const auto f32 = at::TensorOptions().device(at::kCUDA).dtype(at::kFloat);
  const auto i32 = at::TensorOptions().dtype(at::kInt);
  constexpr int64_t hq = 8, hkv = 2, d = 128, page = 16;
  for (at::ScalarType dt : {at::kBFloat16, at::kHalf})
    for (int64_t q_len : {int64_t{1}, int64_t{40}}) {
      const int64_t kv_len = 1100, blocks = (kv_len + page - 1) / page;
      const at::Tensor cu = at::tensor({0, static_cast<int32_t>(q_len)}, i32);
      const at::Tensor seq = at::tensor({static_cast<int32_t>(kv_len)}, i32);
      const at::Tensor table = at::randperm(blocks, i32).view({1, blocks});
      const at::Tensor band = (at::arange(blocks * page, f32) / 128).floor().remainder(4) * 2 + 1;
      const at::Tensor k = (at::randn({blocks, page, hkv, d}, f32) * band.view({blocks, page, 1, 1})).to(dt);
      const at::Tensor v = at::randn({blocks, page, hkv, d}, f32).to(dt);
      const at::Tensor q = (at::randn({q_len, hq, d}, f32) * 2).to(dt);
      auto run = [&](Schedule schedule) {
        attention::CudaAttentionOptions o;
        o.schedule = schedule;
        return attention::paged_attention_cuda(q, k, v, cu.cuda(), seq.cuda(), table.cuda(), 0.0, o);
      };
      const at::Tensor whole = run(Schedule::whole_rows);
      const std::string what = std::to_string(q_len) + " query rows, " + std::string(c10::toString(dt));
      ASSERT_TRUE(whole.isfinite().all().item<bool>()) << what;
      EXPECT_TRUE(run(Schedule::split_per_cta).view(at::kShort).equal(whole.view(at::kShort))) << what;
      if (attention::PagedAttentionCudaPlan(q, k, v, cu.cuda(), seq.cuda(), table.cuda()).wgmma())
        EXPECT_TRUE(run(Schedule::split_groups).view(at::kShort).equal(whole.view(at::kShort))) << what;
      const at::Tensor ref =
          attention::paged_attention_reference_f64(q, k, v, cu.cuda(), seq.cuda(), table.cuda(), 0.0);
      const double err = (whole.to(at::kDouble) - ref).abs().max().item<double>();
      const double scale = ref.abs().max().item<double>();
      EXPECT_LT(err, (dt == at::kBFloat16 ? 2e-2 : 4e-3) * std::max(scale, 1.0)) << what;
    }
}

// The Hopper prefill kernel loads K/V tiles by TMA or by cp.async (KvLoads), and its consumers
// issue freely or take turns (ping-pong): the shared memory and the arithmetic, and so every bit,
// must be the same, including tiles past kv_len (cp.async zero-fills them in either mode), pages
// TMA cannot box (pages of 1), and CTAs whose second consumer has no rows (no turns). Pages in the
// allocator's order (placement 0) make every whole tile of small pages a run of consecutive pages,
// boxed whole by TMA; shuffled pages (placement 11) mostly are not.
// Generated batches use pages of 1, 16 and 64.
TEST(PagedAttentionCuda, HopperPrefillVariantsGiveTheSameBits) {
  NEED_GPU();
  using Schedule = attention::CudaAttentionOptions::Schedule;
  using KvLoads = attention::CudaAttentionOptions::KvLoads;
  int compared = 0;
  const auto result = rc::check("whole_rows with TMA, cp.async, automatic loads and ping-pong agree bit for bit", [&] {
    const CaseSpec c =
        *gen_attention_case("invariant", "repeat", Backend::cuda, *rc::gen::element(at::kBFloat16, at::kHalf));
    RC_PRE(c.shape[2] <= 128);  // whole_rows exists for D <= 128
    const int64_t place = *rc::gen::element(int64_t{0}, int64_t{11});
    const auto b = attention_case::build(c, attention_case::sequences(c), place, 5, false);
    const auto &t = b.args.tensors;
    RC_LOG() << c.describe() << ", placement " << place << "\n";
    attention::CudaAttentionOptions o;
    o.schedule = Schedule::whole_rows;
    o.kv_loads = KvLoads::cp_async;
    const auto ref = attention::paged_attention_cuda(t[0], t[1], t[2], t[3], t[4], t[5], b.args.alpha, o);
    for (KvLoads loads : {KvLoads::tma, KvLoads::automatic}) {
      o.kv_loads = loads;
      const auto y = attention::paged_attention_cuda(t[0], t[1], t[2], t[3], t[4], t[5], b.args.alpha, o);
      RC_ASSERT(ref.view(at::kShort).equal(y.view(at::kShort)));
    }
    using Turns = attention::CudaAttentionOptions::ConsumerTurns;
    for (Turns turns : {Turns::free, Turns::pingpong}) {
      o.turns = turns;
      const auto y = attention::paged_attention_cuda(t[0], t[1], t[2], t[3], t[4], t[5], b.args.alpha, o);
      RC_ASSERT(ref.view(at::kShort).equal(y.view(at::kShort)));
    }
    ++compared;
  });
  EXPECT_TRUE(result);
  EXPECT_GT(compared, 50);
}

// The kernel follows the device and the head dim only: wgmma on an sm_90 GPU for D = 64 and 128,
// mma.sync for D = 256 and on other GPUs; asking for wgmma where it cannot run is an error.
TEST(PagedAttentionCuda, KernelFollowsDeviceAndHeadDim) {
  NEED_GPU();
  const bool hopper = at::cuda::getCurrentDeviceProperties()->major == 9;
  for (int64_t d : {64, 128, 256}) {
    const CaseSpec c = cuda_case({8, 2, d, 16}, "1.70", "300.70", at::kBFloat16, "repeat");
    const auto b = attention_case::build(c, attention_case::sequences(c), 11, 5, false);
    const auto &t = b.args.tensors;
    const attention::PagedAttentionCudaPlan plan(t[0], t[1], t[2], t[3], t[4], t[5]);
    EXPECT_EQ(plan.wgmma(), hopper && d <= 128) << "D = " << d;
    attention::CudaAttentionOptions wg;
    wg.kernel = attention::CudaAttentionOptions::Kernel::wgmma;
    if (!plan.wgmma()) {
      EXPECT_THROW(attention::PagedAttentionCudaPlan(t[0], t[1], t[2], t[3], t[4], t[5], wg), c10::Error);
      continue;
    }
    // Both kernels are accurate; where they differ, by rounding only.
    attention::CudaAttentionOptions mma;
    mma.kernel = attention::CudaAttentionOptions::Kernel::mma_sync;
    const auto x = attention::paged_attention_cuda(t[0], t[1], t[2], t[3], t[4], t[5], 0.0, wg).to(at::kFloat);
    const auto y = attention::paged_attention_cuda(t[0], t[1], t[2], t[3], t[4], t[5], 0.0, mma).to(at::kFloat);
    EXPECT_LT((x - y).abs().max().item<float>(), 0.02f * y.abs().max().item<float>()) << "D = " << d;
  }
}

TEST(PagedAttentionCuda, PlanRejectsOtherShapes) {
  NEED_GPU();
  const CaseSpec c = cuda_case({8, 2, 128, 16}, "3.1", "300.64", at::kBFloat16, "repeat");
  const auto b = attention_case::build(c, attention_case::sequences(c), 11, 5, false);
  const auto &t = b.args.tensors;
  const attention::PagedAttentionCudaPlan plan(t[0], t[1], t[2], t[3], t[4], t[5]);
  EXPECT_TRUE(plan.run(t[0], t[1], t[2], 0.0)
                  .view(at::kShort)
                  .equal(attention::paged_attention_cuda(t[0], t[1], t[2], t[3], t[4], t[5], 0.0).view(at::kShort)));
  EXPECT_THROW(plan.run(t[0].narrow(0, 0, 2), t[1], t[2], 0.0), c10::Error);
  EXPECT_THROW(plan.run(t[0], t[1].narrow(0, 0, 1), t[2], 0.0), c10::Error);
}
#endif

TEST(PagedAttentionCuda, MutantsAreCaught) {
  NEED_GPU();
  for (const std::string m : {"mutant-splits-from-maxlen", "mutant-qtile-from-avg", "mutant-padded-grid"}) {
    const auto r = run_property(m, "seq_alone_vs_batched", Backend::cuda, at::kHalf, 500, 7);
    EXPECT_FALSE(r.passed) << m << " survived";
    if (r.shrunk)
      std::cout << "[ cuda     ] " << m << " caught in " << r.seconds << " s, shrunk to " << r.shrunk->describe()
                << "\n";
  }
}

// libtorch's other attention backends (cuDNN, memory-efficient) and FlashAttention-2 in varlen
// form: registered as observed baselines, each runs and is accurate on the fuzzer's cases (a
// backend that cannot take a case reports an error, which this test would show).
TEST(PagedAttentionCuda, TorchBackendBaselinesRunAndAreAccurate) {
  NEED_GPU();
  for (const char *impl : {"torch-sdpa-cudnn", "torch-sdpa-efficient", "torch-flash-varlen"}) {
    const auto *info = find_impl("paged_attention", impl, Backend::cuda);
    ASSERT_NE(info, nullptr) << impl;
    EXPECT_EQ(info->expectation, Expectation::observed) << impl;
    int differ = 0;
    for (int i = 0; i < 4; ++i) {
      CaseSpec c = cuda_case({8, 2, 128, 16}, "1.1.7.1", "700.300.257.900", at::kBFloat16, "accuracy", 200 + i);
      c.impl = impl;
      const Verdict a = check_attention_case(c);
      EXPECT_TRUE(a.passed()) << impl << ": " << a.detail;
      c.property = "seq_alone_vs_batched";
      c.params["target"] = std::to_string(i % 4);
      const Verdict v = check_attention_case(c);
      EXPECT_NE(v.outcome, Verdict::Outcome::error) << impl << ": " << v.detail;
      differ += !v.passed();
    }
    std::cout << "[ cuda     ] " << impl << " seq_alone_vs_batched differs in " << differ << "/4 cases\n";
  }
}

TEST(PagedAttentionCuda, TorchSdpaBaselineIsObserved) {
  NEED_GPU();
  const auto *sdpa = find_impl("paged_attention", "torch-sdpa", Backend::cuda);
  ASSERT_NE(sdpa, nullptr);
  EXPECT_EQ(sdpa->expectation, Expectation::observed);
  int differ = 0, total = 0;
  for (int i = 0; i < 8; ++i) {
    CaseSpec c =
        cuda_case({8, 2, 128, 16}, "1.1.7.1", "700.300.257.900", at::kBFloat16, "seq_alone_vs_batched", 100 + i);
    c.impl = "torch-sdpa";
    c.params["target"] = std::to_string(i % 4);
    const Verdict v = check_attention_case(c);
    ASSERT_NE(v.outcome, Verdict::Outcome::error) << v.detail;
    differ += !v.passed();
    ++total;
    c.property = "accuracy";
    const Verdict a = check_attention_case(c);
    EXPECT_TRUE(a.passed()) << a.detail;
  }
  std::cout << "[ cuda     ] torch-sdpa seq_alone_vs_batched differs in " << differ << "/" << total << " cases\n";
}
