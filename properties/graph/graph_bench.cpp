// The graph runner's bench: batch prefill of the transformer of ops/graph sized to an 8B model's
// layers (hidden 4096, 32 query and 8 KV heads of 128, SiLU-gated MLP of 14336; 4 layers, vocab
// 32000, random weights drawn on the device), timed four ways on the same batches in the same
// run: the eager forward over the packed batch (`eager`), replay through the right-aligned runner
// with every bucket captured beforehand (`graph`), eager with its inputs through the buffer
// registry (`eager-registry`) and through the registry's no-copy path (`eager-no-copy`). Each
// time is the median of CUDA event times around the whole call (host packing, copies and
// launches included: what a serving step costs), and each row checks that the four give the same
// log-probability bits. Before timing, the memory the captured graphs hold in the runner's one
// shared pool is set against one pool per bucket, in the same process.
#include "properties/graph/graph_bench.h"

#include "properties/bench_timing.h"

#include <algorithm>
#include <cmath>
#include <map>
#include <ostream>
#include <stdexcept>

#ifdef DETFUZZ_WITH_CUDA
#include "ops/graph/prefill_runner.h"

#include <ATen/cuda/CUDAContext.h>
#include <ATen/cuda/CUDAGeneratorImpl.h>
#include <c10/cuda/CUDACachingAllocator.h>
#include <c10/cuda/CUDAFunctions.h>
#endif

namespace detfuzz {
namespace {

const char *kKind = "prefill_graph";

#ifdef DETFUZZ_WITH_CUDA
graph::ModelConfig bench_config(at::ScalarType dtype) {
  graph::ModelConfig c;
  c.vocab = 32000;
  c.hidden = 4096;
  c.layers = 4;
  c.q_heads = 32;
  c.kv_heads = 8;
  c.head_dim = 128;
  c.mlp = 14336;
  c.dtype = dtype;
  return c;
}

// Random weights on the device, scaled as make_weights scales its own (matrices of scale
// 1/sqrt(fan-in), norm weights near 1): drawing 1.9 G parameters on the host would take minutes.
graph::ModelWeights random_weights(const graph::ModelConfig &c, at::Generator &gen) {
  const auto f32 = at::TensorOptions().device(at::kCUDA).dtype(at::kFloat);
  const auto matrix = [&](int64_t in, int64_t out) {
    return (at::randn({in, out}, gen, f32) * (1.0 / std::sqrt(static_cast<double>(in)))).to(c.dtype);
  };
  const auto norm = [&](int64_t n) { return (at::randn({n}, gen, f32) * 0.1 + 1.0).to(c.dtype); };
  const int64_t qd = c.q_heads * c.head_dim, qkv_out = (c.q_heads + 2 * c.kv_heads) * c.head_dim;
  graph::ModelWeights w;
  w.embed = at::randn({c.vocab, c.hidden}, gen, f32).to(c.dtype);
  for (int64_t l = 0; l < c.layers; ++l) {
    graph::LayerWeights lw;
    lw.attn_norm = norm(c.hidden);
    lw.qkv = matrix(c.hidden, qkv_out);
    lw.o_proj = matrix(qd, c.hidden);
    lw.mlp_norm = norm(c.hidden);
    lw.gate_up = matrix(c.hidden, 2 * c.mlp);
    lw.down = matrix(c.mlp, c.hidden);
    w.layers.push_back(std::move(lw));
  }
  w.final_norm = norm(c.hidden);
  w.lm_head = matrix(c.hidden, c.vocab);
  return w;
}

struct Row {
  int64_t bs = 0, fresh = 0, cached = 0, page = 16;
};

int64_t pages_of(const Row &r) { return (r.cached + r.fresh + r.page - 1) / r.page; }

// Sequence s of a row: `cached` tokens already in the cache, `fresh` new ones, its pages after
// the previous sequence's (from page 1: page 0 is the runner's scratch page).
std::vector<graph::SequenceInput> batch_of(const Row &r, int64_t vocab) {
  std::vector<graph::SequenceInput> seqs;
  int64_t next_page = 1;
  for (int64_t s = 0; s < r.bs; ++s) {
    graph::SequenceInput q;
    q.cached = r.cached;
    for (int64_t j = 0; j < r.fresh; ++j) q.new_tokens.push_back((s * 7919 + (r.cached + j) * 104729 + 17) % vocab);
    for (int64_t p = 0; p < pages_of(r); ++p) q.blocks.push_back(next_page++);
    seqs.push_back(std::move(q));
  }
  return seqs;
}

// The useful work of a row's forward: every matmul over the real tokens, the LM head over one row
// per sequence, and causal attention over each sequence's cached and new keys (no padding).
double forward_flops(const graph::ModelConfig &c, const Row &r) {
  const double tokens = static_cast<double>(r.bs * r.fresh);
  const double qd = static_cast<double>(c.q_heads * c.head_dim), h = static_cast<double>(c.hidden);
  const double qkv_out = static_cast<double>((c.q_heads + 2 * c.kv_heads) * c.head_dim);
  const double per_token =
      2.0 * static_cast<double>(c.layers) *
      (h * qkv_out + qd * h + h * 2.0 * static_cast<double>(c.mlp) + static_cast<double>(c.mlp) * h);
  const double keys =
      static_cast<double>(r.fresh) * (static_cast<double>(r.cached) + (static_cast<double>(r.fresh) + 1) / 2);
  const double attention = 4.0 * qd * static_cast<double>(c.layers) * keys * static_cast<double>(r.bs);
  return tokens * per_token + 2.0 * static_cast<double>(r.bs) * h * static_cast<double>(c.vocab) + attention;
}

int64_t reserved_bytes() {
  const auto stats = c10::cuda::CUDACachingAllocator::getDeviceStats(c10::cuda::current_device());
  return stats.reserved_bytes[static_cast<size_t>(c10::CachingAllocator::StatType::AGGREGATE)].current;
}

struct PoolMemory {
  int64_t pool_bytes = 0;      // the graphs' pools (segments the allocator holds for them)
  int64_t reserved_bytes = 0;  // the allocator's growth over the captures (warm-up runs included)
  size_t graphs = 0;
};

// Captures every bucket of `runner` (largest first) from an emptied cache and reads what the
// graphs hold.
PoolMemory capture_memory(graph::BatchPrefillGraphRunner &runner, int64_t reserved_before) {
  runner.capture_all();
  c10::cuda::device_synchronize();
  PoolMemory m;
  m.pool_bytes = runner.graph_pool_bytes();
  m.reserved_bytes = reserved_bytes() - reserved_before;
  m.graphs = runner.capture_order().size();
  return m;
}

std::string mib(int64_t bytes) { return fmt(static_cast<double>(bytes) / (1024.0 * 1024.0), "%.0f") + " MiB"; }

void graph_bench(const FamilyBenchConfig &cfg, std::ostream &csv, std::ostream &log, at::Generator &gen,
                 const BenchClock &clock) {
  std::vector<Row> rows;
  for (const auto &s : cfg.shapes)
    if (s.op == kKind) rows.push_back({s.m, s.n, s.k, s.page});
  if (cfg.shapes.empty())
    for (int64_t cached : {0, 512})
      for (int64_t bs : {1, 2, 4, 8})
        for (int64_t fresh : {16, 64, 128, 256}) rows.push_back({bs, fresh, cached, 16});
  if (rows.empty()) return;
  const int reps = std::max(5, cfg.repetitions * 8);
  for (at::ScalarType dtype : cfg.dtypes) {
    if (dtype != at::kBFloat16 && dtype != at::kHalf) continue;
    const graph::ModelConfig config = bench_config(dtype);
    const graph::Model model(config, Backend::cuda, graph::invariant_kernels(Backend::cuda),
                             random_weights(config, gen));
    log << "prefill_graph " << dtype_name(dtype) << ": " << config.describe() << std::endl;
    std::map<int64_t, std::vector<Row>> by_page;
    for (const Row &r : rows) by_page[r.page].push_back(r);
    std::vector<double> small_speedups, copy_overheads;
    bool memory_logged = false;
    for (const auto &[page, page_rows] : by_page) {
      // One cache and one runner for the rows of a page size: enough pages for the largest batch,
      // and a block table that holds the longest sequence and the runner's longest bucket (256).
      int64_t max_pages = (256 + page - 1) / page, max_bs = 1;
      for (const Row &r : page_rows) {
        max_pages = std::max(max_pages, pages_of(r));
        max_bs = std::max(max_bs, r.bs);
      }
      attention::KVCache cache = model.make_cache(1 + max_bs * max_pages, page);
      for (int64_t l = 0; l < config.layers; ++l) {
        cache.k(l).normal_(0.0, 1.0, gen);  // the cached prefixes' keys and values
        cache.v(l).normal_(0.0, 1.0, gen);
      }
      graph::RunnerOptions options;
      options.max_blocks = max_pages;
      // The memory of the captured graphs: one pool per bucket, then the runner's one shared pool
      // (kept for the timings), each from an emptied cache.
      c10::cuda::device_synchronize();
      c10::cuda::CUDACachingAllocator::emptyCache();
      PoolMemory per_bucket;
      {
        graph::RunnerOptions o = options;
        o.shared_pool = false;
        graph::BatchPrefillGraphRunner separate(model, cache, o);
        per_bucket = capture_memory(separate, reserved_bytes());
      }
      c10::cuda::device_synchronize();
      c10::cuda::CUDACachingAllocator::emptyCache();
      graph::BatchPrefillGraphRunner runner(model, cache, options);
      const PoolMemory shared = capture_memory(runner, reserved_bytes());
      if (!memory_logged) {
        log << "prefill_graph " << dtype_name(dtype) << " graph memory, " << shared.graphs
            << " buckets captured largest first: one shared pool " << mib(shared.pool_bytes) << " (allocator +"
            << mib(shared.reserved_bytes) << ") against a pool per bucket " << mib(per_bucket.pool_bytes)
            << " (allocator +" << mib(per_bucket.reserved_bytes) << ")" << std::endl;
        memory_logged = true;
      }
      graph::EagerInputs through(model, max_pages, /*no_copy=*/false), no_copy(model, max_pages, /*no_copy=*/true);
      for (const Row &r : page_rows) {
        const std::vector<graph::SequenceInput> seqs = batch_of(r, config.vocab);
        // The bits first: each run writes the same K/V to the same slots, so the cache is the same
        // for all four.
        const graph::RunResult eager = graph::run_eager(model, cache, seqs, max_pages);
        const graph::RunResult replay = runner.run(seqs);
        const graph::RunResult registry = graph::run_eager(model, cache, seqs, max_pages, &through);
        const graph::RunResult direct = graph::run_eager(model, cache, seqs, max_pages, &no_copy);
        const bool verified = same_bits(eager.logprobs, replay.logprobs) &&
                              same_bits(eager.logprobs, registry.logprobs) &&
                              same_bits(eager.logprobs, direct.logprobs);
        const std::vector<double> us =
            interleaved_medians_us({[&] { graph::run_eager(model, cache, seqs, max_pages); }, [&] { runner.run(seqs); },
                                    [&] { graph::run_eager(model, cache, seqs, max_pages, &through); },
                                    [&] { graph::run_eager(model, cache, seqs, max_pages, &no_copy); }},
                                   reps, clock);
        const double eager_us = us[0], graph_us = us[1], registry_us = us[2], no_copy_us = us[3];
        const double flops = forward_flops(config, r);
        const auto row = [&](const char *impl, double us, const char *baseline, double baseline_us) {
          csv << kKind << ',' << impl << ',' << dtype_name(dtype) << ',' << r.bs << ',' << r.fresh << ',' << r.cached
              << ',' << fmt(us) << ',' << fmt(flops / us * 1e-6, "%.2f") << ",," << baseline << ',' << fmt(baseline_us)
              << ',' << fmt(baseline_us / us, "%.4f") << ',' << (verified ? "yes" : "no") << ",,," << r.page << ",\n";
        };
        row("eager", eager_us, "eager", eager_us);
        row("graph", graph_us, "eager", eager_us);
        row("eager-no-copy", no_copy_us, "eager", eager_us);
        row("eager-registry", registry_us, "eager-no-copy", no_copy_us);
        const int64_t tokens = r.bs * r.fresh;
        const double copy = registry_us / no_copy_us - 1.0;
        if (tokens <= 512 && replay.used_graph) small_speedups.push_back(eager_us / graph_us);
        if (r.bs == 8) copy_overheads.push_back(copy);
        log << "prefill_graph " << dtype_name(dtype) << " bs=" << r.bs << " new=" << r.fresh << " cached=" << r.cached
            << (r.page == 16 ? "" : " page=" + std::to_string(r.page)) << " (" << tokens << " tokens, "
            << (replay.bucket ? replay.bucket->name() : replay.note) << "): eager " << fmt(eager_us, "%.1f")
            << " us, graph " << fmt(graph_us, "%.1f") << " us (" << fmt(eager_us / graph_us, "%.2f")
            << "x eager), registry " << fmt(registry_us, "%.1f") << " us (" << (copy >= 0 ? "+" : "")
            << fmt(100.0 * copy, "%.1f") << "% over no-copy " << fmt(no_copy_us, "%.1f") << " us), "
            << fmt(flops / graph_us * 1e-6, "%.0f") << " TFLOP/s replayed" << (verified ? "" : "  (bits DIFFER)")
            << std::endl;
      }
    }
    if (!small_speedups.empty()) {
      std::sort(small_speedups.begin(), small_speedups.end());
      double log_sum = 0;
      for (double s : small_speedups) log_sum += std::log(s);
      log << "prefill_graph " << dtype_name(dtype) << ": graph replay at <= 512 tokens "
          << fmt(small_speedups.front(), "%.2f") << "x to " << fmt(small_speedups.back(), "%.2f") << "x eager (geomean "
          << fmt(std::exp(log_sum / static_cast<double>(small_speedups.size())), "%.2f") << "x, "
          << small_speedups.size() << " batches)" << std::endl;
    }
    if (!copy_overheads.empty()) {
      std::sort(copy_overheads.begin(), copy_overheads.end());
      log << "prefill_graph " << dtype_name(dtype) << ": the registry's copy at bs 8 "
          << fmt(100.0 * copy_overheads.front(), "%+.1f") << "% to " << fmt(100.0 * copy_overheads.back(), "%+.1f")
          << "% over no-copy (median " << fmt(100.0 * copy_overheads[copy_overheads.size() / 2], "%+.1f") << "%, "
          << copy_overheads.size() << " batches)" << std::endl;
    }
  }
}
#endif

}  // namespace

void add_graph_bench(PropertyFamily &f) {
  f.bench_shape_kinds = {kKind};
  f.check_bench_shape = [](const BenchShape &s) {
    if (s.m < 1 || s.m > 8 || s.n < 1 || s.n > 256)
      throw std::invalid_argument(
          "prefill_graph rows are M sequences (1-8) of N new tokens (1-256): the runner's buckets");
    if (s.k < 0 || s.k > 32768) throw std::invalid_argument("K is the cached tokens per sequence, 0 to 32768");
    if (s.page <= 0 || s.page > 4096) throw std::invalid_argument("page must be 1 to 4096 tokens");
  };
  f.bench_impl = [](const std::string &impl) {
    return impl == "invariant" || impl == "eager" || impl == "graph" || impl == "eager-registry" ||
           impl == "eager-no-copy";
  };
#ifdef DETFUZZ_WITH_CUDA
  f.bench = [](const FamilyBenchConfig &cfg, std::ostream &csv, std::ostream &log) {
    const BenchClock clock;
    at::Generator gen = at::cuda::detail::createCUDAGenerator();
    gen.set_current_seed(20261126);
    graph_bench(cfg, csv, log, gen, clock);
  };
#endif
}

}  // namespace detfuzz
