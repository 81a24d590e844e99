// Paged attention's bench: decode (one query row per sequence, GB/s against a device-to-device
// copy of the same bytes and time against FlashAttention-2's decode; the launch floor beside
// contexts <= 4k) and prefill (one sequence, TFLOP/s against torch's SDPA on contiguous
// inputs, causal), 32 query heads, 8 KV heads (a shape's kv_heads: 32 for MHA), head dim 128,
// pages of 16 by default. Each row also checks invariance on its own inputs. Registered as the attention family's bench.
#include "properties/attention/attention_bench.h"

#include "properties/bench_timing.h"

#include <algorithm>
#include <numeric>
#include <optional>
#include <ostream>
#include <random>
#include <stdexcept>
#include <utility>
#include <vector>

#ifdef DETFUZZ_WITH_CUDA
#include "ops/attention/paged_attention.h"
#include "ops/cuda/empty_kernel.cuh"

#include <ATen/cuda/CUDAContext.h>
#include <ATen/cuda/CUDAGeneratorImpl.h>
#include <ATen/cuda/CUDAGraph.h>
#include <c10/cuda/CUDAGuard.h>
#endif

namespace detfuzz {
namespace {

// `invariant@PATH`: the base impl name and the forced path.
bool split_forced_path(const std::string &impl, std::string *base, std::string *path) {
  const auto at = impl.find('@');
  if (at == std::string::npos) return false;
  *base = impl.substr(0, at);
  *path = impl.substr(at + 1);
  return true;
}

// `invariant@tma`, `invariant@cp-async`, `invariant@pingpong` and `invariant@no-pingpong`: paged
// attention's warp-specialised Hopper kernel with its K/V loads or its consumers' turns forced;
// `invariant@split-per-cta`, `invariant@split-groups` and `invariant@whole-rows`: the decode
// schedule forced;
// `invariant@one-consumer` and `invariant@two-consumers`: split_groups' consumers per CTA forced;
// `invariant@merge-kernel`: split_groups' splits folded by the merge kernel even where a CTA holds
// every split of its rows; nullopt for any other name.
enum class AttnVariant {
  tma,
  cp_async,
  pingpong,
  no_pingpong,
  split_per_cta,
  split_groups,
  whole_rows,
  one_consumer,
  two_consumers,
  merge_kernel
};
std::optional<AttnVariant> attention_variant_by_name(const std::string &impl) {
  std::string base, path;
  if (!split_forced_path(impl, &base, &path) || base != "invariant") return std::nullopt;
  if (path == "tma") return AttnVariant::tma;
  if (path == "cp-async") return AttnVariant::cp_async;
  if (path == "pingpong") return AttnVariant::pingpong;
  if (path == "no-pingpong") return AttnVariant::no_pingpong;
  if (path == "split-per-cta") return AttnVariant::split_per_cta;
  if (path == "split-groups") return AttnVariant::split_groups;
  if (path == "whole-rows") return AttnVariant::whole_rows;
  if (path == "one-consumer") return AttnVariant::one_consumer;
  if (path == "two-consumers") return AttnVariant::two_consumers;
  if (path == "merge-kernel") return AttnVariant::merge_kernel;
  return std::nullopt;
}

const char *kDecode = "paged_attention_decode";
const char *kPrefill = "paged_attention_prefill";
const char *kShuffled = "shuffled";                // a default row's variant: its pages shuffled in the pool
constexpr int64_t kQueryHeads = 32, kKvHeads = 8;  // the bench's heads (a shape may name other KV heads)

#ifdef DETFUZZ_WITH_CUDA
// A paged batch on the GPU: `lens` sequences of q_len query rows each (decode: 1; prefill: the
// whole length), pages of `page` tokens laid out one sequence after another, as a fresh allocator
// hands them out, or (shuffled) in an order drawn once with a fixed seed, as a pool that has served
// many requests holds them.
OpArgs paged_batch(const std::vector<int64_t> &kv_lens, int64_t q_len, int64_t hq, int64_t hkv, int64_t d, int64_t page,
                   at::ScalarType dtype, at::Generator &gen, bool shuffled = false) {
  const auto f32 = at::TensorOptions().device(at::kCUDA).dtype(at::kFloat);
  const auto i32 = at::TensorOptions().dtype(at::kInt);
  int64_t blocks = 0, max_blocks = 0, rows = 0;
  for (int64_t l : kv_lens) {
    blocks += (l + page - 1) / page;
    max_blocks = std::max(max_blocks, (l + page - 1) / page);
    rows += std::min(q_len, l);
  }
  at::Tensor table = at::zeros({static_cast<int64_t>(kv_lens.size()), max_blocks}, i32);
  at::Tensor cu = at::zeros({static_cast<int64_t>(kv_lens.size()) + 1}, i32),
             lens = at::zeros({static_cast<int64_t>(kv_lens.size())}, i32);
  auto t = table.accessor<int32_t, 2>();
  auto c = cu.accessor<int32_t, 1>();
  auto l = lens.accessor<int32_t, 1>();
  std::vector<int32_t> ids(static_cast<size_t>(blocks));
  std::iota(ids.begin(), ids.end(), 0);
  if (shuffled) std::shuffle(ids.begin(), ids.end(), std::mt19937(20261129));
  size_t next = 0;
  for (size_t s = 0; s < kv_lens.size(); ++s) {
    const int64_t nb = (kv_lens[s] + page - 1) / page;
    for (int64_t b = 0; b < nb; ++b) t[s][b] = ids[next++];
    l[s] = static_cast<int32_t>(kv_lens[s]);
    c[s + 1] = c[s] + static_cast<int32_t>(std::min(q_len, kv_lens[s]));
  }
  OpArgs a;
  a.tensors = {at::randn({rows, hq, d}, gen, f32).to(dtype),
               at::randn({blocks, page, hkv, d}, gen, f32).to(dtype),
               at::randn({blocks, page, hkv, d}, gen, f32).to(dtype),
               cu.cuda(),
               lens.cuda(),
               table.cuda()};
  return a;
}

// The fused kernel's run step with a plan made once for the batch (an engine plans once per step
// and runs once per layer), replayed from a CUDA graph.
double time_planned_attention(const OpArgs &a, const attention::CudaAttentionOptions &options, int reps,
                              const BenchClock &clock) {
  const auto &t = a.tensors;
  const attention::PagedAttentionCudaPlan plan(t[0], t[1], t[2], t[3], t[4], t[5], options);
  return median_graph_us([&] { plan.run(t[0], t[1], t[2], 0.0); }, reps, clock);
}

at::Tensor run_paged(const OpArgs &a, const attention::CudaAttentionOptions &options) {
  const auto &t = a.tensors;
  return attention::paged_attention_cuda(t[0], t[1], t[2], t[3], t[4], t[5], a.alpha, options);
}

// Decode (one query row per sequence, GB/s against a device-to-device copy of the same bytes)
// and prefill (one sequence, TFLOP/s against torch's SDPA on contiguous inputs, causal, GQA), for
// each kernel of ours: `invariant` (wgmma on an sm_90 GPU) and `invariant-mma-sync`, and the
// Hopper kernel's K/V loads forced (`invariant@tma`, `invariant@cp-async`) and its consumer turns
// (`invariant@pingpong`, `invariant@no-pingpong`), on all rows, and the decode schedule
// (`invariant@split-per-cta`, `invariant@split-groups`, `invariant@whole-rows`, and split_groups
// with one or two consumers per CTA: `invariant@one-consumer`, `invariant@two-consumers`, and its
// splits folded by the merge kernel: `invariant@merge-kernel`; decode rows) where --impl names them,
// on the same inputs; one row each.
void attention_bench(const FamilyBenchConfig &cfg, std::ostream &csv, std::ostream &log, at::Generator &gen,
                     const BenchClock &clock) {
  using Options = attention::CudaAttentionOptions;
  struct Timed {
    std::string impl;
    Options options;
    bool decode_only = false;  // a forced decode schedule
  };
  std::vector<Timed> impls = {{"invariant", {}}};
  impls.push_back({"invariant-mma-sync", {}});
  impls.back().options.kernel = Options::Kernel::mma_sync;
  for (const auto &name : cfg.impls) {
    const auto variant = attention_variant_by_name(name);
    if (!variant) continue;
    Options o;
    switch (*variant) {
      case AttnVariant::tma: o.kv_loads = Options::KvLoads::tma; break;
      case AttnVariant::cp_async: o.kv_loads = Options::KvLoads::cp_async; break;
      case AttnVariant::pingpong: o.turns = Options::ConsumerTurns::pingpong; break;
      case AttnVariant::no_pingpong: o.turns = Options::ConsumerTurns::free; break;
      case AttnVariant::split_per_cta: o.schedule = Options::Schedule::split_per_cta; break;
      case AttnVariant::split_groups: o.schedule = Options::Schedule::split_groups; break;
      case AttnVariant::whole_rows: o.schedule = Options::Schedule::whole_rows; break;
      case AttnVariant::one_consumer: o.group_consumers = 1; break;
      case AttnVariant::two_consumers: o.group_consumers = 2; break;
      case AttnVariant::merge_kernel: o.merge = Options::Merge::kernel; break;
    }
    // The schedules matter to decode rows only; the loads and the turns to both
    // (decode runs split_groups on the same kernel).
    const bool schedule = *variant == AttnVariant::split_per_cta || *variant == AttnVariant::split_groups ||
                          *variant == AttnVariant::whole_rows || *variant == AttnVariant::one_consumer ||
                          *variant == AttnVariant::two_consumers || *variant == AttnVariant::merge_kernel;
    impls.push_back({name, o, schedule});
  }
  // The shapes: a --shapes file's paged_attention_decode (M = batch, N = context, K = head dim)
  // and paged_attention_prefill (N = tokens) rows, or by default batches 1-256 at contexts
  // 512-32k (K+V up to 16 GiB) and prefills of 1k-8k tokens, GQA (8 KV heads) and MHA (32), head
  // dim 128, pages in the allocator's order; and decode batch 16 at 4k and prefill 8k again with
  // the pages shuffled in the pool (rows op[shuffled]: tiles of such pages are not runs).
  std::vector<BenchShape> shapes;
  for (const auto &s : cfg.shapes)
    if (s.op == kDecode || s.op == kPrefill) shapes.push_back(s);
  if (cfg.shapes.empty()) {
    for (int64_t batch : {1, 16, 64, 256})
      for (int64_t ctx : {512, 4096, 16384, 32768})
        if (batch * ctx <= 4 * 1024 * 1024) shapes.push_back({kDecode, batch, ctx, 128});
    for (int64_t kv_heads : {kKvHeads, kQueryHeads})
      for (int64_t len : {1024, 2048, 4096, 8192}) shapes.push_back({kPrefill, 1, len, 128, 16, kv_heads});
    shapes.push_back({kDecode, 16, 4096, 128, 16, kKvHeads, kShuffled});
    shapes.push_back({kPrefill, 1, 8192, 128, 16, kKvHeads, kShuffled});
  }
  constexpr int64_t hq = kQueryHeads;
  const auto kv_heads_of = [](const BenchShape &s) { return s.kv_heads > 0 ? s.kv_heads : kKvHeads; };
  // " kv_heads=N" in a log line where a row's KV heads are not the default.
  const auto kv_note = [](int64_t hkv) { return hkv == kKvHeads ? std::string() : " kv_heads=" + std::to_string(hkv); };
  constexpr int64_t kShortContext = 4096;  // decode rows that also report the launch floor
  const int reps = std::max(5, cfg.repetitions * 4);
  // The launch floor beside the short-context decode rows: an empty kernel, replayed from a graph
  // like the rows, timed once.
  const double floor_us = median_graph_us(
      [] { cuda_kernels::launch_empty_kernel(at::cuda::getCurrentCUDAStream().stream()); }, reps, clock);
  for (at::ScalarType dtype : cfg.dtypes) {
    if (dtype == at::kFloat) continue;
    const double elem = static_cast<double>(c10::elementSize(dtype));
    for (const BenchShape &shape : shapes) {
      if (shape.op != kDecode) continue;
      const int64_t batch = shape.m, ctx = shape.n, d = shape.k, page = shape.page, hkv = kv_heads_of(shape);
      const bool shuffled = shape.variant == kShuffled;
      const OpArgs args = paged_batch(std::vector<int64_t>(batch, ctx), 1, hq, hkv, d, page, dtype, gen, shuffled);
      const double bytes = elem * (2.0 * batch * ctx * hkv * d + 2.0 * batch * hq * d);
      at::Tensor src =
          at::empty({static_cast<int64_t>(bytes / 2)}, at::TensorOptions().device(at::kCUDA).dtype(at::kByte));
      at::Tensor dst = at::empty_like(src);
      // The copy reads and writes `bytes`; the faster of eager and graph-replayed (a graph runs a
      // large copy as a memcpy node, slower than the eager copy; eager adds launch time to small ones).
      const double copy_us = std::min(median_us([&] { dst.copy_(src); }, reps, clock),
                                      median_graph_us([&] { dst.copy_(src); }, reps, clock));
      // FlashAttention-2's decode as libtorch ships it (at::_flash_attention_forward: one query
      // row per sequence, K/V packed [batch, ctx, Hkv, D], GQA), on values of its own, timed the
      // same way: the speed to beat at every size.
      const auto opts = at::TensorOptions().device(at::kCUDA).dtype(dtype);
      const at::Tensor fq = at::randn({batch, 1, hq, d}, gen, opts), fk = at::randn({batch, ctx, hkv, d}, gen, opts),
                       fv = at::randn({batch, ctx, hkv, d}, gen, opts);
      const double fa2_us = median_graph_us(
          [&] { at::_flash_attention_forward(fq, fk, fv, std::nullopt, std::nullopt, 1, ctx, 0.0, false, false); },
          reps, clock);
      // Invariance on these inputs: sequence 0 of the batch alone gives the same bits.
      OpArgs one = paged_batch({ctx}, 1, hq, hkv, d, page, dtype, gen);
      one.tensors[0] = args.tensors[0].narrow(0, 0, 1);
      one.tensors[1] = args.tensors[1];
      one.tensors[2] = args.tensors[2];
      one.tensors[5] = args.tensors[5].narrow(0, 0, 1);
      // One row per baseline: the device copy of the same bytes, FlashAttention-2's decode and, at
      // short contexts, the launch floor.
      std::vector<std::pair<const char *, double>> baselines = {{"d2d-copy", copy_us}, {"torch-flash-decode", fa2_us}};
      if (ctx <= kShortContext) baselines.push_back({"empty-kernel", floor_us});
      for (const Timed &impl : impls) {
        const double us = time_planned_attention(args, impl.options, reps, clock);
        const bool verified = same_bits(run_paged(one, impl.options), run_paged(args, impl.options).narrow(0, 0, 1));
        for (const auto &[baseline, base_us] : baselines)
          csv << shape.label() << ',' << impl.impl << ',' << dtype_name(dtype) << ',' << batch << ',' << ctx << ',' << d
              << ',' << fmt(us) << ",," << fmt(bytes / us * 1e-3, "%.1f") << ',' << baseline << ',' << fmt(base_us)
              << ',' << fmt(base_us / us, "%.4f") << ',' << (verified ? "yes" : "no") << ','
              << fmt(bytes / copy_us * 1e-3, "%.1f") << ',' << fmt(copy_us / us, "%.4f") << ',' << page << ',' << hkv
              << '\n';
        log << "paged_attention decode " << impl.impl << ' ' << dtype_name(dtype) << " batch=" << batch
            << " ctx=" << ctx << (page == 16 ? "" : " page=" + std::to_string(page)) << kv_note(hkv)
            << (shuffled ? " pages shuffled" : "") << ": " << fmt(us, "%.1f") << " us, "
            << fmt(bytes / us * 1e-3, "%.0f") << " GB/s = " << fmt(100.0 * copy_us / us, "%.0f")
            << "% of a device copy, " << fmt(fa2_us / us, "%.2f") << "x FlashAttention-2 decode ("
            << fmt(fa2_us, "%.1f") << " us)"
            << (ctx <= kShortContext ? ", launch floor " + fmt(floor_us, "%.1f") + " us" : std::string())
            << (verified ? "" : "  (invariance FAILED)") << std::endl;
      }
    }
    for (const BenchShape &shape : shapes) {
      if (shape.op != kPrefill) continue;
      const int64_t len = shape.n, d = shape.k, page = shape.page, hkv = kv_heads_of(shape);
      const bool shuffled = shape.variant == kShuffled;
      const OpArgs args = paged_batch({len}, len, hq, hkv, d, page, dtype, gen, shuffled);
      // SDPA on the same values, contiguous [1, H, L, D], causal, K/V heads repeated for GQA: the
      // sequence's pages gathered in its table's order.
      const at::Tensor pages = args.tensors[5][0].to(at::kLong);
      const at::Tensor q = args.tensors[0].transpose(0, 1).unsqueeze(0).contiguous();
      const at::Tensor k = args.tensors[1]
                               .index_select(0, pages)
                               .reshape({-1, hkv, d})
                               .narrow(0, 0, len)
                               .transpose(0, 1)
                               .repeat_interleave(hq / hkv, 0)
                               .unsqueeze(0)
                               .contiguous();
      const at::Tensor v = args.tensors[2]
                               .index_select(0, pages)
                               .reshape({-1, hkv, d})
                               .narrow(0, 0, len)
                               .transpose(0, 1)
                               .repeat_interleave(hq / hkv, 0)
                               .unsqueeze(0)
                               .contiguous();
      // torch's flash (FlashAttention-2) and cuDNN backends of SDPA, each called directly (the
      // dispatcher's choice may be another backend), both replayed from CUDA graphs.
      const double sdpa_us = median_graph_us([&] { at::_scaled_dot_product_flash_attention(q, k, v, 0.0, true); },
                                             std::max(3, cfg.repetitions), clock);
      const double cudnn_us =
          median_graph_us([&] { at::_scaled_dot_product_cudnn_attention(q, k, v, std::nullopt, false, 0.0, true); },
                          std::max(3, cfg.repetitions), clock);
      const double flops = 4.0 * hq * d * (static_cast<double>(len) * (len + 1) / 2);
      // Invariance: the same prefill with a decode sequence ahead of it in the batch.
      const OpArgs both = paged_batch({100, len}, len, hq, hkv, d, page, dtype, gen);
      OpArgs shifted = both;
      shifted.tensors[0] = at::cat({both.tensors[0].narrow(0, 0, 100), args.tensors[0]});
      const int64_t first_block = (100 + page - 1) / page;
      shifted.tensors[1] = at::cat({both.tensors[1].narrow(0, 0, first_block), args.tensors[1]});
      shifted.tensors[2] = at::cat({both.tensors[2].narrow(0, 0, first_block), args.tensors[2]});
      // The prefill's pages where args has them, past the decode sequence's.
      shifted.tensors[5] = both.tensors[5].clone();
      shifted.tensors[5][1].narrow(0, 0, pages.size(0)).copy_(args.tensors[5][0] + static_cast<int32_t>(first_block));
      for (const Timed &impl : impls) {
        if (impl.decode_only) continue;
        const double us = time_planned_attention(args, impl.options, std::max(3, cfg.repetitions), clock);
        const bool verified =
            same_bits(run_paged(shifted, impl.options).narrow(0, 100, len), run_paged(args, impl.options));
        // One row per baseline: torch's flash backend, then its cuDNN backend.
        for (const auto &[baseline, base_us] : {std::pair<const char *, double>{"torch-sdpa-flash", sdpa_us},
                                                std::pair<const char *, double>{"torch-sdpa-cudnn", cudnn_us}})
          csv << shape.label() << ',' << impl.impl << ',' << dtype_name(dtype) << ",1," << len << ',' << d << ','
              << fmt(us) << ',' << fmt(flops / us * 1e-6, "%.2f") << ",," << baseline << ',' << fmt(base_us) << ','
              << fmt(base_us / us, "%.4f") << ',' << (verified ? "yes" : "no") << ",,," << page << ',' << hkv << '\n';
        log << "paged_attention prefill " << impl.impl << ' ' << dtype_name(dtype) << " len=" << len
            << (page == 16 ? "" : " page=" + std::to_string(page)) << kv_note(hkv)
            << (shuffled ? " pages shuffled" : "") << ": " << fmt(us, "%.1f") << " us, "
            << fmt(flops / us * 1e-6, "%.1f") << " TFLOP/s, " << fmt(sdpa_us / us, "%.2f") << "x torch SDPA (flash, "
            << fmt(flops / sdpa_us * 1e-6, "%.0f") << " TFLOP/s), " << fmt(cudnn_us / us, "%.2f")
            << "x torch SDPA (cuDNN, " << fmt(flops / cudnn_us * 1e-6, "%.0f") << " TFLOP/s)"
            << (verified ? "" : "  (invariance FAILED)") << std::endl;
      }
    }
  }
}

#endif

}  // namespace

void add_attention_bench(PropertyFamily &f) {
  f.bench_shape_kinds = {kDecode, kPrefill};
  f.bench_variants = {kShuffled};
  f.check_bench_shape = [](const BenchShape &s) {
    if (s.m <= 0 || s.n <= 0) throw std::invalid_argument("sizes must be positive");
    if (s.k != 64 && s.k != 128 && s.k != 256) throw std::invalid_argument("K is the head dim: 64, 128 or 256");
    if (s.op == kPrefill && s.m != 1) throw std::invalid_argument("a prefill row times one sequence (M = 1)");
    if (s.page <= 0 || s.page > 4096) throw std::invalid_argument("page must be 1 to 4096 tokens");
    if (s.kv_heads < 0 || (s.kv_heads > 0 && kQueryHeads % s.kv_heads != 0))
      throw std::invalid_argument("kv_heads must divide the 32 query heads (1, 2, 4, 8, 16 or 32)");
  };
  f.bench_impl = [](const std::string &impl) {
    return impl == "invariant" || attention_variant_by_name(impl).has_value();
  };
#ifdef DETFUZZ_WITH_CUDA
  f.bench = [](const FamilyBenchConfig &cfg, std::ostream &csv, std::ostream &log) {
    const BenchClock clock;
    at::Generator gen = at::cuda::detail::createCUDAGenerator();
    gen.set_current_seed(20261121);
    attention_bench(cfg, csv, log, gen, clock);
  };
#endif
}

}  // namespace detfuzz
