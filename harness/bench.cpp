#include "harness/bench.h"

#include "harness/diff.h"
#include "ops/registry.h"

#define CSV_IO_NO_THREAD
#include <libfccp/csv.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <map>
#include <optional>
#include <memory>
#include <ostream>
#include <sstream>
#include <stdexcept>

#ifdef DETFUZZ_WITH_CUDA
#include "ops/attention/paged_attention.h"
#include "ops/cuda/cuda_check.h"
#include "ops/cuda/cuda_ops.h"

#include <ATen/cuda/CUDAContext.h>
#include <ATen/cuda/CUDAGeneratorImpl.h>
#include <ATen/cuda/CUDAGraph.h>
#include <c10/cuda/CUDAGuard.h>
#include <benchmark/benchmark.h>
#endif

namespace detfuzz {

std::vector<BenchShape> default_bench_shapes() {
  std::vector<BenchShape> s;
  const std::pair<int64_t, int64_t> nk[] = {{4096, 4096}, {14336, 4096}, {4096, 14336}, {1024, 8192}, {6144, 4096}, {128256, 4096}};
  for (auto [n, k] : nk)
    for (int64_t m : {1, 8, 32, 128, 512, 2048, 8192}) s.push_back({"mm", m, n, k});
  for (const char *op : {"log_softmax", "mean"})
    for (auto [rows, cols] : {std::pair<int64_t, int64_t>{1024, 32768}, {4096, 32768}, {1024, 131072}}) s.push_back({op, rows, cols, 0});
  return s;
}

std::vector<BenchShape> read_bench_shapes(const std::string &path) {
  std::vector<BenchShape> out;
  try {
    io::CSVReader<5, io::trim_chars<' ', '\t'>> in(path);
    in.read_header(io::ignore_missing_column, "op", "M", "N", "K", "page");
    std::string op;
    int64_t m = 0, n = 0, k = 0, page = 16;
    while (in.read_row(op, m, n, k, page)) {
      const std::string where = path + ":" + std::to_string(in.get_file_line()) + ": ";
      const bool attention = op == "paged_attention_decode" || op == "paged_attention_prefill";
      if (op != "mm" && op != "log_softmax" && op != "mean" && !attention)
        throw std::invalid_argument(where + "op '" + op +
                                    "' cannot be benchmarked (mm, log_softmax, mean, paged_attention_decode, paged_attention_prefill)");
      if (m <= 0 || n <= 0 || (op == "mm" && k <= 0)) throw std::invalid_argument(where + "sizes must be positive");
      if (attention && k != 64 && k != 128 && k != 256) throw std::invalid_argument(where + "K is the head dim: 64, 128 or 256");
      if (op == "paged_attention_prefill" && m != 1) throw std::invalid_argument(where + "a prefill row times one sequence (M = 1)");
      if (attention && (page <= 0 || page > 4096)) throw std::invalid_argument(where + "page must be 1 to 4096 tokens");
      out.push_back({op, m, n, op == "mm" || attention ? k : 0, attention ? page : 16});
      k = 0;
      page = 16;
    }
  } catch (const io::error::base &e) {
    std::string what = e.what();
    std::replace(what.begin(), what.end(), '\n', ' ');
    throw std::invalid_argument(path + ": malformed shape file: " + what);
  }
  if (out.empty()) throw std::invalid_argument(path + ": no shapes");
  return out;
}

bool BenchPlan::times(const std::string &op, const std::string &impl) const {
  return std::find(pairs.begin(), pairs.end(), std::make_pair(op, impl)) != pairs.end();
}

namespace {

// `invariant@PATH` names impl `invariant` of a matmul op with its kernel path forced (a GemmPath
// or float32 path name: sm90_split_64, cluster-32x128, ...), to time one schedule alone.
bool split_forced_path(const std::string &impl, std::string *base, std::string *path) {
  const auto at = impl.find('@');
  if (at == std::string::npos) return false;
  *base = impl.substr(0, at);
  *path = impl.substr(at + 1);
  return true;
}

// `invariant@tma`, `invariant@cp-async`, `invariant@pingpong` and `invariant@no-pingpong`: paged
// attention's warp-specialised Hopper kernel with its K/V loads or its consumers' turns forced;
// `invariant@split-per-cta` and `invariant@split-groups`: the decode schedule forced; nullopt for
// any other name.
enum class AttnVariant { tma, cp_async, pingpong, no_pingpong, split_per_cta, split_groups };
std::optional<AttnVariant> attention_variant_by_name(const std::string &impl) {
  std::string base, path;
  if (!split_forced_path(impl, &base, &path) || base != "invariant") return std::nullopt;
  if (path == "tma") return AttnVariant::tma;
  if (path == "cp-async") return AttnVariant::cp_async;
  if (path == "pingpong") return AttnVariant::pingpong;
  if (path == "no-pingpong") return AttnVariant::no_pingpong;
  if (path == "split-per-cta") return AttnVariant::split_per_cta;
  if (path == "split-groups") return AttnVariant::split_groups;
  return std::nullopt;
}

bool known_matmul_path(const std::string &path) {
#ifdef DETFUZZ_WITH_CUDA
  return cuda_ops::matmul_path_by_name(path).has_value();
#else
  (void)path;
  return false;
#endif
}

}  // namespace

BenchPlan plan_bench(const BenchConfig &cfg) {
  static const std::vector<std::string> benchable = {"mm", "log_softmax", "mean", "paged_attention"};
  if (cfg.ops.empty()) throw std::invalid_argument("bench: no op selected");
  if (cfg.impls.empty()) throw std::invalid_argument("bench: no impl selected");
  for (const auto &op : cfg.ops)
    if (std::find(benchable.begin(), benchable.end(), op) == benchable.end())
      throw std::invalid_argument("bench: op '" + op + "' cannot be benchmarked (expected mm, log_softmax, mean or paged_attention)");
  BenchPlan plan;
  for (const auto &impl : cfg.impls) {
    bool anywhere = false;
    for (const auto &op : cfg.ops) {
      // Paged attention times our fused kernel only (against a device copy and SDPA).
      std::string base, path;
      const bool has = op == "paged_attention"   ? impl == "invariant" || attention_variant_by_name(impl)
                       : impl == kDispatchImpl ? op == "mm" && cfg.set_batch_invariant_mode != nullptr
                       : split_forced_path(impl, &base, &path)
                           ? op == "mm" && base == "invariant" && known_matmul_path(path)
                           : find_impl(op, impl, Backend::cuda) != nullptr;
      if (has) {
        plan.pairs.emplace_back(op, impl);
        anywhere = true;
      } else {
        plan.notes.push_back("bench: skipping " + op + "/" + impl + ": " + op + " has no CUDA impl '" + impl + "'");
      }
    }
#ifdef DETFUZZ_WITH_CUDA
    const std::string hint = " (see detfuzz list impls)";
#else
    const std::string hint = " (this detfuzz was built without CUDA)";
#endif
    if (!anywhere) throw std::invalid_argument("bench: impl '" + impl + "' is not a CUDA impl of any selected op" + hint);
  }
  return plan;
}

#ifndef DETFUZZ_WITH_CUDA
std::string run_bench(const BenchConfig &, std::ostream &, std::string *) {
  throw std::invalid_argument("bench needs CUDA: this detfuzz was built without it");
}
std::string run_scan(const ScanConfig &, std::ostream &) {
  throw std::invalid_argument("scan needs CUDA: this detfuzz was built without it");
}
#else
namespace {

void need_gpu(const char *what) {
  if (!at::hasCUDA()) throw std::invalid_argument(std::string(what) + " needs a CUDA GPU: none found");
}

const ImplInfo &cuda_impl(const std::string &op, const std::string &impl) {
  std::string base, path;
  if (split_forced_path(impl, &base, &path)) {
    // Made once per name and kept: the bench holds references to it.
    static std::map<std::string, std::unique_ptr<ImplInfo>> forced;
    auto &slot = forced[op + "/" + impl];
    if (!slot) {
      const auto choice = cuda_ops::matmul_path_by_name(path);
      if (!choice) throw std::invalid_argument("no matmul path '" + path + "' (in impl '" + impl + "')");
      slot = std::make_unique<ImplInfo>(cuda_impl(op, base));
      slot->impl = impl;
      slot->run = [run = slot->run, c = *choice](const OpArgs &a) {
        cuda_ops::ScopedMatmulPath forced_path(c);
        return run(a);
      };
    }
    return *slot;
  }
  const ImplInfo *i = find_impl(op, impl, Backend::cuda);
  if (!i) throw std::invalid_argument("no CUDA impl '" + impl + "' of " + op);
  return *i;
}

// Bitwise equality on the device: compares the integer views of the two tensors.
bool same_bits(const at::Tensor &a, const at::Tensor &b) {
  if (!a.sizes().equals(b.sizes()) || a.scalar_type() != b.scalar_type()) return false;
  const auto as_int = [](const at::Tensor &t) {
    const auto width = t.element_size();
    return t.contiguous().view(width == 2 ? at::kShort : width == 4 ? at::kInt : at::kLong);
  };
  return at::equal(as_int(a), as_int(b));
}

OpArgs bench_args(const BenchShape &s, at::ScalarType dtype, at::Generator &gen) {
  const auto opts = at::TensorOptions().device(at::kCUDA).dtype(at::kFloat);
  OpArgs a;
  if (s.op == "mm") {
    a.tensors = {at::randn({s.m, s.k}, gen, opts).to(dtype), at::randn({s.k, s.n}, gen, opts).to(dtype)};
  } else {
    a.tensors = {at::randn({s.m, s.n}, gen, opts).to(dtype)};
    a.dim = 1;
    a.dims = {1};
  }
  return a;
}

// batch_slice on the benchmark's own inputs: a few row ranges, compared bitwise.
bool batch_slice_holds(const ImplInfo &impl, const OpArgs &args, int64_t rows) {
  const at::Tensor full = impl.run(args);
  const std::pair<int64_t, int64_t> ranges[] = {{0, 1}, {rows / 2, rows / 2 + 1}, {rows - 1, rows}, {0, (rows + 1) / 2}};
  for (auto [i, j] : ranges) {
    OpArgs part = args;
    part.tensors[0] = args.tensors[0].narrow(0, i, j - i);
    if (!same_bits(full.narrow(0, i, j - i), impl.run(part))) return false;
  }
  return true;
}

// Captures the median of each benchmark's repetitions, in microseconds.
class MedianReporter : public benchmark::BenchmarkReporter {
 public:
  bool ReportContext(const Context &) override { return true; }
  void ReportRuns(const std::vector<Run> &runs) override {
    for (const auto &r : runs)
      if (r.aggregate_name == "median") medians[r.run_name.function_name] = r.GetAdjustedRealTime();
  }
  std::map<std::string, double> medians;
};

double time_one_call_us(const ImplInfo &impl, const OpArgs &args, cudaEvent_t start, cudaEvent_t stop, cudaStream_t stream) {
  DETFUZZ_CUDA_CHECK(cudaEventRecord(start, stream));
  impl.run(args);
  DETFUZZ_CUDA_CHECK(cudaEventRecord(stop, stream));
  DETFUZZ_CUDA_CHECK(cudaEventSynchronize(stop));
  float ms = 0;
  DETFUZZ_CUDA_CHECK(cudaEventElapsedTime(&ms, start, stop));
  return ms * 1e3;
}

std::string fmt(double v, const char *f = "%.3f") {
  char buf[48];
  std::snprintf(buf, sizeof buf, f, v);
  return buf;
}

// Median of `reps` device times of fn (after 3 warm-up calls), in microseconds.
template <typename Fn>
double median_us(Fn fn, int reps, cudaEvent_t start, cudaEvent_t stop, cudaStream_t stream) {
  for (int w = 0; w < 3; ++w) fn();
  std::vector<double> t;
  for (int r = 0; r < reps; ++r) {
    DETFUZZ_CUDA_CHECK(cudaEventRecord(start, stream));
    fn();
    DETFUZZ_CUDA_CHECK(cudaEventRecord(stop, stream));
    DETFUZZ_CUDA_CHECK(cudaEventSynchronize(stop));
    float ms = 0;
    DETFUZZ_CUDA_CHECK(cudaEventElapsedTime(&ms, start, stop));
    t.push_back(ms * 1e3);
  }
  std::sort(t.begin(), t.end());
  return t[t.size() / 2];
}

// A paged batch on the GPU: `lens` sequences of q_len query rows each (decode: 1; prefill: the
// whole length), pages of `page` tokens laid out one sequence after another.
OpArgs paged_batch(const std::vector<int64_t> &kv_lens, int64_t q_len, int64_t hq, int64_t hkv, int64_t d, int64_t page,
                   at::ScalarType dtype, at::Generator &gen) {
  const auto f32 = at::TensorOptions().device(at::kCUDA).dtype(at::kFloat);
  const auto i32 = at::TensorOptions().dtype(at::kInt);
  int64_t blocks = 0, max_blocks = 0, rows = 0;
  for (int64_t l : kv_lens) {
    blocks += (l + page - 1) / page;
    max_blocks = std::max(max_blocks, (l + page - 1) / page);
    rows += std::min(q_len, l);
  }
  at::Tensor table = at::zeros({static_cast<int64_t>(kv_lens.size()), max_blocks}, i32);
  at::Tensor cu = at::zeros({static_cast<int64_t>(kv_lens.size()) + 1}, i32), lens = at::zeros({static_cast<int64_t>(kv_lens.size())}, i32);
  auto t = table.accessor<int32_t, 2>();
  auto c = cu.accessor<int32_t, 1>();
  auto l = lens.accessor<int32_t, 1>();
  int32_t next = 0;
  for (size_t s = 0; s < kv_lens.size(); ++s) {
    const int64_t nb = (kv_lens[s] + page - 1) / page;
    for (int64_t b = 0; b < nb; ++b) t[s][b] = next++;
    l[s] = static_cast<int32_t>(kv_lens[s]);
    c[s + 1] = c[s] + static_cast<int32_t>(std::min(q_len, kv_lens[s]));
  }
  OpArgs a;
  a.tensors = {at::randn({rows, hq, d}, gen, f32).to(dtype), at::randn({blocks, page, hkv, d}, gen, f32).to(dtype),
               at::randn({blocks, page, hkv, d}, gen, f32).to(dtype), cu.cuda(), lens.cuda(), table.cuda()};
  return a;
}

// Median device time of one call of fn replayed from a CUDA graph (as engines replay their decode
// steps): the events see the kernels only, not the host's launch cost.
template <typename Fn>
double median_graph_us(Fn fn, int reps, cudaEvent_t start, cudaEvent_t stop, cudaStream_t stream) {
  fn();  // first use (kernel attributes, allocator) outside the capture
  DETFUZZ_CUDA_CHECK(cudaStreamSynchronize(stream));
  at::cuda::CUDAGraph graph;
  {
    c10::cuda::CUDAStreamGuard guard(c10::cuda::getStreamFromPool());
    graph.capture_begin();
    fn();
    graph.capture_end();
  }
  return median_us([&] { graph.replay(); }, reps, start, stop, stream);
}

// The fused kernel's run step with a plan made once for the batch (an engine plans once per step
// and runs once per layer), replayed from a CUDA graph.
double time_planned_attention(const OpArgs &a, const attention::CudaAttentionOptions &options, int reps, cudaEvent_t start,
                              cudaEvent_t stop, cudaStream_t stream) {
  const auto &t = a.tensors;
  const attention::PagedAttentionCudaPlan plan(t[0], t[1], t[2], t[3], t[4], t[5], options);
  return median_graph_us([&] { plan.run(t[0], t[1], t[2], 0.0); }, reps, start, stop, stream);
}

at::Tensor run_paged(const OpArgs &a, const attention::CudaAttentionOptions &options) {
  const auto &t = a.tensors;
  return attention::paged_attention_cuda(t[0], t[1], t[2], t[3], t[4], t[5], a.alpha, options);
}

// Decode (one query row per sequence, GB/s against a device-to-device copy of the same bytes)
// and prefill (one sequence, TFLOP/s against torch's SDPA on contiguous inputs, causal, GQA), for
// each kernel of ours: `invariant` (wgmma on an sm_90 GPU) and `invariant-mma-sync`, and the
// Hopper kernel's K/V loads forced (`invariant@tma`, `invariant@cp-async`; prefill rows), its
// consumer turns (`invariant@pingpong`, `invariant@no-pingpong`; all rows) and the decode
// schedule (`invariant@split-per-cta`, `invariant@split-groups`; decode rows) where --impl names
// them, on the same inputs; one row each.
void attention_bench(const BenchConfig &cfg, std::ostream &csv, std::ostream &log, at::Generator &gen, cudaEvent_t start,
                     cudaEvent_t stop, cudaStream_t stream) {
  using Options = attention::CudaAttentionOptions;
  struct Timed {
    std::string impl;
    Options options;
    bool prefill_only = false;  // forced K/V loads of the Hopper prefill kernel
    bool decode_only = false;   // a forced decode schedule
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
    }
    // The loads matter to prefill rows (decode pages of 16 go by cp.async), the schedules to
    // decode rows, the turns to both (decode runs split_groups on the same kernel).
    const bool loads = *variant == AttnVariant::tma || *variant == AttnVariant::cp_async;
    const bool schedule = *variant == AttnVariant::split_per_cta || *variant == AttnVariant::split_groups;
    impls.push_back({name, o, loads, schedule});
  }
  // The shapes: a --shapes file's paged_attention_decode (M = batch, N = context, K = head dim)
  // and paged_attention_prefill (N = tokens) rows, or by default batches 1-256 at contexts
  // 512-32k (K+V up to 16 GiB) and prefills of 1k-8k tokens, head dim 128.
  std::vector<BenchShape> shapes;
  for (const auto &s : cfg.shapes)
    if (s.op == "paged_attention_decode" || s.op == "paged_attention_prefill") shapes.push_back(s);
  if (cfg.shapes.empty()) {
    for (int64_t batch : {1, 16, 64, 256})
      for (int64_t ctx : {512, 4096, 16384, 32768})
        if (batch * ctx <= 4 * 1024 * 1024) shapes.push_back({"paged_attention_decode", batch, ctx, 128});
    for (int64_t len : {1024, 2048, 4096, 8192}) shapes.push_back({"paged_attention_prefill", 1, len, 128});
  }
  constexpr int64_t hq = 32, hkv = 8;
  const int reps = std::max(5, cfg.repetitions * 4);
  for (at::ScalarType dtype : cfg.dtypes) {
    if (dtype == at::kFloat) continue;
    const double elem = static_cast<double>(c10::elementSize(dtype));
    for (const BenchShape &shape : shapes) {
      if (shape.op != "paged_attention_decode") continue;
      const int64_t batch = shape.m, ctx = shape.n, d = shape.k, page = shape.page;
      const OpArgs args = paged_batch(std::vector<int64_t>(batch, ctx), 1, hq, hkv, d, page, dtype, gen);
      const double bytes = elem * (2.0 * batch * ctx * hkv * d + 2.0 * batch * hq * d);
      at::Tensor src = at::empty({static_cast<int64_t>(bytes / 2)}, at::TensorOptions().device(at::kCUDA).dtype(at::kByte));
      at::Tensor dst = at::empty_like(src);
      // The copy reads and writes `bytes`; the faster of eager and graph-replayed (a graph runs a
      // large copy as a memcpy node, slower than the eager copy; eager adds launch time to small ones).
      const double copy_us = std::min(median_us([&] { dst.copy_(src); }, reps, start, stop, stream),
                                      median_graph_us([&] { dst.copy_(src); }, reps, start, stop, stream));
      // Invariance on these inputs: sequence 0 of the batch alone gives the same bits.
      OpArgs one = paged_batch({ctx}, 1, hq, hkv, d, page, dtype, gen);
      one.tensors[0] = args.tensors[0].narrow(0, 0, 1);
      one.tensors[1] = args.tensors[1];
      one.tensors[2] = args.tensors[2];
      one.tensors[5] = args.tensors[5].narrow(0, 0, 1);
      for (const Timed &impl : impls) {
        if (impl.prefill_only) continue;
        const double us = time_planned_attention(args, impl.options, reps, start, stop, stream);
        const bool verified = same_bits(run_paged(one, impl.options), run_paged(args, impl.options).narrow(0, 0, 1));
        csv << "paged_attention_decode," << impl.impl << ',' << dtype_name(dtype) << ',' << batch << ',' << ctx << ',' << d << ','
            << fmt(us) << ",," << fmt(bytes / us * 1e-3, "%.1f") << ",d2d-copy," << fmt(copy_us) << ','
            << fmt(copy_us / us, "%.4f") << ',' << (verified ? "yes" : "no") << ',' << fmt(bytes / copy_us * 1e-3, "%.1f") << ','
            << fmt(copy_us / us, "%.4f") << ',' << page << '\n';
        log << "paged_attention decode " << impl.impl << ' ' << dtype_name(dtype) << " batch=" << batch << " ctx=" << ctx
            << (page == 16 ? "" : " page=" + std::to_string(page)) << ": "
            << fmt(us, "%.1f") << " us, " << fmt(bytes / us * 1e-3, "%.0f") << " GB/s = " << fmt(100.0 * copy_us / us, "%.0f")
            << "% of a device copy" << (verified ? "" : "  (invariance FAILED)") << std::endl;
      }
    }
    for (const BenchShape &shape : shapes) {
      if (shape.op != "paged_attention_prefill") continue;
      const int64_t len = shape.n, d = shape.k, page = shape.page;
      const OpArgs args = paged_batch({len}, len, hq, hkv, d, page, dtype, gen);
      // SDPA on the same values, contiguous [1, H, L, D], causal, K/V heads repeated for GQA.
      const at::Tensor q = args.tensors[0].transpose(0, 1).unsqueeze(0).contiguous();
      const at::Tensor k = args.tensors[1].reshape({-1, hkv, d}).narrow(0, 0, len).transpose(0, 1).repeat_interleave(hq / hkv, 0).unsqueeze(0).contiguous();
      const at::Tensor v = args.tensors[2].reshape({-1, hkv, d}).narrow(0, 0, len).transpose(0, 1).repeat_interleave(hq / hkv, 0).unsqueeze(0).contiguous();
      // torch's flash backend of SDPA, called directly (the dispatcher's choice may be another backend).
      const double sdpa_us = median_graph_us([&] { at::_scaled_dot_product_flash_attention(q, k, v, 0.0, true); },
                                             std::max(3, cfg.repetitions), start, stop, stream);
      const double flops = 4.0 * hq * d * (static_cast<double>(len) * (len + 1) / 2);
      // Invariance: the same prefill with a decode sequence ahead of it in the batch.
      const OpArgs both = paged_batch({100, len}, len, hq, hkv, d, page, dtype, gen);
      OpArgs shifted = both;
      shifted.tensors[0] = at::cat({both.tensors[0].narrow(0, 0, 100), args.tensors[0]});
      const int64_t first_block = (100 + page - 1) / page;
      shifted.tensors[1] = at::cat({both.tensors[1].narrow(0, 0, first_block), args.tensors[1]});
      shifted.tensors[2] = at::cat({both.tensors[2].narrow(0, 0, first_block), args.tensors[2]});
      for (const Timed &impl : impls) {
        if (impl.decode_only) continue;
        const double us = time_planned_attention(args, impl.options, std::max(3, cfg.repetitions), start, stop, stream);
        const bool verified = same_bits(run_paged(shifted, impl.options).narrow(0, 100, len), run_paged(args, impl.options));
        csv << "paged_attention_prefill," << impl.impl << ',' << dtype_name(dtype) << ",1," << len << ',' << d << ',' << fmt(us)
            << ',' << fmt(flops / us * 1e-6, "%.2f") << ",,torch-sdpa-flash," << fmt(sdpa_us) << ',' << fmt(sdpa_us / us, "%.4f")
            << ',' << (verified ? "yes" : "no") << ",,," << page << '\n';
        log << "paged_attention prefill " << impl.impl << ' ' << dtype_name(dtype) << " len=" << len
            << (page == 16 ? "" : " page=" + std::to_string(page)) << ": " << fmt(us, "%.1f")
            << " us, " << fmt(flops / us * 1e-6, "%.1f") << " TFLOP/s, " << fmt(sdpa_us / us, "%.2f") << "x torch SDPA (flash)"
            << (verified ? "" : "  (invariance FAILED)") << std::endl;
      }
    }
  }
}

}  // namespace

std::string run_bench(const BenchConfig &cfg, std::ostream &log, std::string *stopped) {
  const BenchPlan plan = plan_bench(cfg);
  need_gpu("bench");
  for (const auto &note : plan.notes) log << note << std::endl;
  static bool initialised = false;
  if (!initialised) {
    // Random interleaving: the repetitions of a shape's impls run in a shuffled order instead of
    // one impl's after another's, so that a drift of the GPU's clocks over the shape's second
    // reaches every impl alike rather than the ratio.
    int argc = 2;
    char name[] = "detfuzz";
    char interleave[] = "--benchmark_enable_random_interleaving=true";
    char *argv[] = {name, interleave, nullptr};
    benchmark::Initialize(&argc, argv);
    initialised = true;
  }
  const auto shapes = cfg.shapes.empty() ? default_bench_shapes() : cfg.shapes;
  cudaEvent_t start, stop;
  DETFUZZ_CUDA_CHECK(cudaEventCreate(&start));
  DETFUZZ_CUDA_CHECK(cudaEventCreate(&stop));
  const cudaStream_t stream = at::cuda::getCurrentCUDAStream();
  at::Generator gen = at::cuda::detail::createCUDAGenerator();
  gen.set_current_seed(20261121);

  std::ostringstream csv;
  csv << "op,impl,dtype,M,N,K,median_us,tflops,gbps,baseline_impl,cublas_median_us,speedup_vs_cublas,invariant_verified,"
         "d2d_gbps,bandwidth_share_of_d2d,page\n";
  // The dispatcher row: impl `torch` (at::mm) run with the batch-invariant mode on.
  std::unique_ptr<ImplInfo> dispatch_impl;
  if (cfg.set_batch_invariant_mode) {
    const ImplInfo &torch_mm = cuda_impl("mm", "torch");
    dispatch_impl = std::make_unique<ImplInfo>(torch_mm);
    dispatch_impl->impl = kDispatchImpl;
    // Turning the mode on is a no-op once it is on; every other impl's repetition turns it off
    // before its calls (the repetitions are interleaved), and it goes off after the shape, so
    // they run on libtorch's own kernels.
    dispatch_impl->run = [run = torch_mm.run, set = cfg.set_batch_invariant_mode](const OpArgs &a) {
      set(true);
      return run(a);
    };
  }
  auto mode_off = [&] {
    if (cfg.set_batch_invariant_mode) cfg.set_batch_invariant_mode(false);
  };
  std::map<std::string, std::vector<SpeedupSample>> speedups;  // "op/impl/dtype" -> (M, speedup) per shape
  try {
    size_t done = 0, total = 0;
    for (const auto &s : shapes)
      if (std::find(cfg.ops.begin(), cfg.ops.end(), s.op) != cfg.ops.end()) total += cfg.dtypes.size();

    for (const auto &s : shapes) {
      if (std::find(cfg.ops.begin(), cfg.ops.end(), s.op) == cfg.ops.end()) continue;
      const std::string baseline = s.op == "mm" ? "cublas" : "torch";
      for (at::ScalarType dtype : cfg.dtypes) {
        ++done;
        std::vector<std::string> impls;
        for (const auto &name : cfg.impls)
          if (plan.times(s.op, name) && name != baseline) impls.push_back(name);
        impls.push_back(baseline);
        std::stable_partition(impls.begin(), impls.end(), [](const std::string &n) { return n != kDispatchImpl; });
        // Input sets rotated so that together they exceed the L2 cache.
        const double elem = static_cast<double>(c10::elementSize(dtype));
        const double set_bytes = s.op == "mm" ? elem * (s.m * s.k + s.k * s.n) : elem * s.m * s.n;
        const int sets = static_cast<int>(std::clamp(std::ceil(cfg.rotate_bytes / set_bytes), 1.0, 16.0));
        std::vector<OpArgs> args;
        for (int i = 0; i < sets; ++i) args.push_back(bench_args(s, dtype, gen));

        MedianReporter reporter;
        std::map<std::string, bool> verified;
        for (const auto &name : impls) {
          const ImplInfo &impl = name == kDispatchImpl ? *dispatch_impl : cuda_impl(s.op, name);
          if (!impl.supports(dtype)) continue;
          verified[name] = batch_slice_holds(impl, args[0], s.m);
          for (int w = 0; w < 3; ++w) impl.run(args[w % sets]);  // warm-up: module load, handles, autotune caches
          mode_off();
          const double once_us = time_one_call_us(impl, args[0], start, stop, stream);
          const int64_t iters = static_cast<int64_t>(std::clamp(cfg.seconds_per_repetition * 1e6 / std::max(once_us, 1.0), 3.0, 2000.0));
          benchmark::RegisterBenchmark(name.c_str(), [&, impl_ptr = &impl, dispatch = name == kDispatchImpl](benchmark::State &st) {
            // Interleaved with the dispatcher row, whose calls turn the batch-invariant mode on:
            // every other impl runs with it off.
            if (!dispatch) mode_off();
            int k = 0;
            for (auto _ : st) st.SetIterationTime(time_one_call_us(*impl_ptr, args[k++ % sets], start, stop, stream) * 1e-6);
          })
              ->UseManualTime()
              ->Iterations(iters)
              ->Repetitions(cfg.repetitions)
              ->ReportAggregatesOnly(true)
              ->Unit(benchmark::kMicrosecond);
        }
        benchmark::RunSpecifiedBenchmarks(&reporter);
        benchmark::ClearRegisteredBenchmarks();
        mode_off();

        const double base_us = reporter.medians.count(baseline) ? reporter.medians[baseline] : NAN;
        // The device-to-device copy of the bytes a B-bound (M <= 32) product moves, timed the same way.
        const double mm_bytes = s.op == "mm" ? elem * (s.m * s.k + s.k * s.n + s.m * s.n) : 0;
        double d2d_gbps = NAN;
        if (s.op == "mm" && s.m <= 32) {
          const int64_t n = static_cast<int64_t>(mm_bytes);
          const at::Tensor src = at::empty({n}, at::TensorOptions().dtype(at::kByte).device(at::kCUDA));
          const at::Tensor dst = at::empty_like(src);
          dst.copy_(src);
          std::vector<double> t;
          for (int r = 0; r < 20; ++r) {
            DETFUZZ_CUDA_CHECK(cudaEventRecord(start, stream));
            dst.copy_(src);
            DETFUZZ_CUDA_CHECK(cudaEventRecord(stop, stream));
            DETFUZZ_CUDA_CHECK(cudaEventSynchronize(stop));
            float ms = 0;
            DETFUZZ_CUDA_CHECK(cudaEventElapsedTime(&ms, start, stop));
            t.push_back(ms * 1e3);
          }
          std::nth_element(t.begin(), t.begin() + t.size() / 2, t.end());
          d2d_gbps = 2.0 * mm_bytes / t[t.size() / 2] * 1e-3;
        }
        for (const auto &name : impls) {
          if (!reporter.medians.count(name)) continue;
          const double us = reporter.medians[name];
          const double flops = s.op == "mm" ? 2.0 * s.m * s.n * s.k : 0;
          const double out_elem = s.op == "mean" ? (dtype == at::kFloat ? 4 : elem) : elem;
          const double bytes = s.op == "mm" ? mm_bytes : elem * s.m * s.n + out_elem * (s.op == "mean" ? s.m : s.m * s.n);
          const double gbps = bytes / us * 1e-3;
          const double speedup = base_us / us;
          csv << s.op << ',' << name << ',' << dtype_name(dtype) << ',' << s.m << ',' << s.n << ',' << s.k << ',' << fmt(us) << ','
              << (flops > 0 ? fmt(flops / us * 1e-6, "%.2f") : "") << ',' << (bytes > 0 ? fmt(bytes / us * 1e-3, "%.1f") : "") << ','
              << baseline << ',' << fmt(base_us) << ',' << fmt(speedup, "%.4f") << ',' << (verified[name] ? "yes" : "no") << ','
              << (std::isnan(d2d_gbps) ? "" : fmt(d2d_gbps, "%.1f")) << ','
              << (std::isnan(d2d_gbps) ? "" : fmt(gbps / d2d_gbps, "%.4f")) << ",\n";
          if (name != baseline) speedups[s.op + "/" + name + "/" + dtype_name(dtype)].push_back({s.m, speedup});
          log << "[" << done << "/" << total << "] " << s.op << " " << name << " " << dtype_name(dtype) << " M=" << s.m << " N=" << s.n
              << " K=" << s.k << ": " << fmt(us, "%.1f") << " us, "
              << (s.op == "mm" ? fmt(flops / us * 1e-6, "%.0f") + " TFLOP/s, " : std::string())
              << (std::isnan(d2d_gbps) ? std::string() : fmt(100.0 * gbps / d2d_gbps, "%.0f") + "% of a D2D copy, ")
              << fmt(speedup, "%.2f") << "x " << baseline
              << (verified[name] ? "" : "  (batch_slice FAILED)") << std::endl;
        }
      }
    }
    if (std::any_of(plan.pairs.begin(), plan.pairs.end(), [](const auto &p) { return p.first == "paged_attention"; }))
      attention_bench(cfg, csv, log, gen, start, stop, stream);
  } catch (const std::exception &e) {
    if (!stopped) throw;
    *stopped = std::string(e.what()).substr(0, std::string(e.what()).find('\n'));
    log << "bench stopped: " << *stopped << "; keeping the rows finished so far" << std::endl;
  }
  DETFUZZ_CUDA_CHECK(cudaEventDestroy(start));
  DETFUZZ_CUDA_CHECK(cudaEventDestroy(stop));
  log << "\ngeomean speedup vs baseline (cublas for mm, torch for reductions):\n" << speedup_summary(speedups);
  return csv.str();
}

std::string speedup_summary(const std::map<std::string, std::vector<SpeedupSample>> &speedups) {
  // Geomean, lowest and count below 1.0x of the samples whose M passes `keep`.
  struct Stats {
    size_t n = 0, below_one = 0;
    double geomean = NAN, lowest = NAN;
  };
  auto stats = [](const std::vector<SpeedupSample> &v, auto keep) {
    Stats st;
    double logsum = 0;
    for (const SpeedupSample &x : v) {
      if (!keep(x.m)) continue;
      ++st.n;
      logsum += std::log(x.speedup);
      st.below_one += x.speedup < 1.0;
      st.lowest = st.n == 1 ? x.speedup : std::min(st.lowest, x.speedup);
    }
    if (st.n) st.geomean = std::exp(logsum / st.n);
    return st;
  };
  std::ostringstream out;
  for (const auto &[key, v] : speedups) {
    const Stats all = stats(v, [](int64_t) { return true; });
    out << "  " << key << ": " << fmt(all.geomean, "%.3f") << "x over " << all.n << " shapes";
    if (key.rfind("mm/", 0) == 0) {
      const Stats small = stats(v, [](int64_t m) { return m <= 32; });
      const Stats large = stats(v, [](int64_t m) { return m >= 128; });
      if (small.n)
        out << "; M <= 32: " << fmt(small.geomean, "%.3f") << "x (lowest " << fmt(small.lowest, "%.3f") << "x, "
            << small.below_one << " of " << small.n << " below 1.0x)";
      if (large.n) out << "; M >= 128: " << fmt(large.geomean, "%.3f") << "x (lowest " << fmt(large.lowest, "%.3f") << "x)";
    }
    out << "\n";
  }
  return out.str();
}

std::string run_scan(const ScanConfig &cfg, std::ostream &log) {
  need_gpu("scan");
  at::Generator gen = at::cuda::detail::createCUDAGenerator();
  gen.set_current_seed(20261121);
  std::ostringstream csv;
  csv << "impl,dtype,N,K,M,row0_differs_vs_1row,row0_max_ulp,prefix_differs_vs_prev,prefix_differing\n";
  const auto opts = at::TensorOptions().device(at::kCUDA).dtype(at::kFloat);
  for (at::ScalarType dtype : cfg.dtypes) {
    const at::Tensor a = at::randn({cfg.max_m, cfg.k}, gen, opts).to(dtype);
    const at::Tensor b = at::randn({cfg.k, cfg.n}, gen, opts).to(dtype);
    for (const auto &name : cfg.impls) {
      const ImplInfo &impl = cuda_impl("mm", name);
      OpArgs args;
      args.tensors = {a.narrow(0, 0, 1), b};
      const at::Tensor one_row = impl.run(args);
      at::Tensor prev = one_row;
      std::vector<int64_t> row0_changes, prefix_changes;
      for (int64_t m = 1; m <= cfg.max_m; ++m) {
        args.tensors[0] = a.narrow(0, 0, m);
        const at::Tensor out = impl.run(args);
        const bool row0_same = same_bits(out.narrow(0, 0, 1), one_row);
        const bool prefix_same = m == 1 || same_bits(out.narrow(0, 0, m - 1), prev);
        uint64_t ulp = 0;
        if (!row0_same) ulp = bitwise_diff(one_row.cpu(), out.narrow(0, 0, 1).cpu()).max_ulp;
        int64_t prefix_differing = 0;
        if (!prefix_same) prefix_differing = bitwise_diff(prev.cpu(), out.narrow(0, 0, m - 1).cpu()).differing;
        if (!row0_same) row0_changes.push_back(m);
        if (!prefix_same) prefix_changes.push_back(m);
        csv << name << ',' << dtype_name(dtype) << ',' << cfg.n << ',' << cfg.k << ',' << m << ',' << (row0_same ? 0 : 1) << ',' << ulp << ','
            << (prefix_same ? 0 : 1) << ',' << prefix_differing << '\n';
        prev = out;
      }
      log << name << " " << dtype_name(dtype) << " N=" << cfg.n << " K=" << cfg.k << ": row 0 differs from the 1-row product at "
          << row0_changes.size() << " of " << cfg.max_m << " M; the first M-1 rows change at M =";
      for (size_t i = 0; i < prefix_changes.size() && i < 40; ++i) log << ' ' << prefix_changes[i];
      if (prefix_changes.size() > 40) log << " ... (" << prefix_changes.size() << " in all)";
      if (prefix_changes.empty()) log << " (never)";
      log << std::endl;
    }
  }
  return csv.str();
}
#endif

}  // namespace detfuzz
