#include "harness/bench.h"

#include "harness/diff.h"
#include "ops/registry.h"
#include "properties/bench_timing.h"
#include "properties/defs/op_def.h"
#include "properties/family.h"
#include "properties/rows/row_properties.h"

#define CSV_IO_NO_THREAD
#include <libfccp/csv.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <map>
#include <set>
#include <optional>
#include <memory>
#include <ostream>
#include <sstream>
#include <stdexcept>

#ifdef DETFUZZ_WITH_CUDA
#include <ATen/cuda/CUDAContext.h>
#include <ATen/cuda/CUDAGeneratorImpl.h>
#include <benchmark/benchmark.h>
#include <c10/cuda/CUDAException.h>
#endif

namespace detfuzz {

namespace {

// The bench of a row op: its definition's, when it has shapes to time; nullptr otherwise.
const BenchDef *row_bench(const std::string &op) {
  const OpDef *d = find_op_def(op);
  return d && !d->bench.shapes.empty() ? &d->bench : nullptr;
}

// The family whose own bench times shapes of `kind`, or nullptr.
const PropertyFamily *family_with_shape_kind(const std::string &kind) {
  for (const auto &f : property_families())
    if (std::find(f.bench_shape_kinds.begin(), f.bench_shape_kinds.end(), kind) != f.bench_shape_kinds.end()) return &f;
  return nullptr;
}

// "a, b, c".
std::string comma_joined(const std::vector<std::string> &names) {
  std::string out;
  for (const auto &name : names) out += (out.empty() ? "" : ", ") + name;
  return out;
}

// "a, b, c or d".
std::string listed(const std::vector<std::string> &names) {
  std::string out;
  for (size_t k = 0; k < names.size(); ++k) out += (k == 0 ? "" : k + 1 == names.size() ? " or " : ", ") + names[k];
  return out;
}

// Every op `bench --op` takes: the row ops with bench shapes, then the ops of the families that
// bench themselves.
std::vector<std::string> all_benchable_ops() {
  std::vector<std::string> ops;
  for (const auto &op : builtin_row_ops())
    if (row_bench(op)) ops.push_back(op);
  for (const auto &f : property_families())
    if (f.bench_impl)
      for (const auto &op : f.ops()) ops.push_back(op);
  return ops;
}

}  // namespace

std::vector<BenchShape> default_bench_shapes() {
  std::vector<BenchShape> s;
  for (const auto &op : builtin_row_ops())
    if (const BenchDef *b = row_bench(op)) s.insert(s.end(), b->shapes.begin(), b->shapes.end());
  return s;
}

std::vector<BenchShape> read_bench_shapes(const std::string &path) {
  std::vector<std::string> kinds;
  for (const auto &op : builtin_row_ops())
    if (row_bench(op)) kinds.push_back(op);
  for (const auto &f : property_families())
    kinds.insert(kinds.end(), f.bench_shape_kinds.begin(), f.bench_shape_kinds.end());
  std::vector<BenchShape> out;
  try {
    io::CSVReader<7, io::trim_chars<' ', '\t'>> in(path);
    in.read_header(io::ignore_missing_column, "op", "M", "N", "K", "page", "kv_heads", "variant");
    std::string op, variant;
    int64_t m = 0, n = 0, k = 0, page = 16, kv_heads = 0;
    while (in.read_row(op, m, n, k, page, kv_heads, variant)) {
      const std::string where = path + ":" + std::to_string(in.get_file_line()) + ": ";
      const BenchDef *row = row_bench(op);
      const PropertyFamily *family = row ? nullptr : family_with_shape_kind(op);
      if (!row && !family)
        throw std::invalid_argument(where + "op '" + op + "' cannot be benchmarked (" + comma_joined(kinds) + ")");
      const std::vector<std::string> &variants = row ? row->variants : family->bench_variants;
      if (!variant.empty() && std::find(variants.begin(), variants.end(), variant) == variants.end())
        throw std::invalid_argument(where + "no variant '" + variant + "' of " + op + " (" +
                                    (variants.empty() ? std::string("it has none") : comma_joined(variants)) + ")");
      if (row) {
        if (m <= 0 || n <= 0 || (row->uses_k && k <= 0)) throw std::invalid_argument(where + "sizes must be positive");
        out.push_back({op, m, n, row->uses_k ? k : 0, 16, 0, variant});
      } else {
        const BenchShape shape{op, m, n, k, page, kv_heads, variant};
        try {
          family->check_bench_shape(shape);
        } catch (const std::invalid_argument &e) {
          throw std::invalid_argument(where + e.what());
        }
        out.push_back(shape);
      }
      variant.clear();
      k = 0;
      page = 16;
      kv_heads = 0;
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

}  // namespace

BenchPlan plan_bench(const BenchConfig &cfg) {
  std::vector<std::string> benchable;
  for (const auto &op : all_benchable_ops()) benchable.push_back(op);
  if (cfg.ops.empty()) throw std::invalid_argument("bench: no op selected");
  if (cfg.impls.empty()) throw std::invalid_argument("bench: no impl selected");
  for (const auto &op : cfg.ops)
    if (std::find(benchable.begin(), benchable.end(), op) == benchable.end())
      throw std::invalid_argument("bench: op '" + op + "' cannot be benchmarked (expected " + listed(benchable) + ")");
  BenchPlan plan;
  for (const auto &impl : cfg.impls) {
    bool anywhere = false;
    for (const auto &op : cfg.ops) {
      const PropertyFamily *family = family_of(op);
      const BenchDef *row = row_bench(op);
      std::string base, path;
      bool has;
      if (family && family->bench_impl && !row) {
        has = family->bench_impl(impl);  // a family's own bench times its own impls
      } else if (impl == kDispatchImpl) {
        has = row->dispatch_row && cfg.set_batch_invariant_mode != nullptr;
      } else if (split_forced_path(impl, &base, &path)) {
        const ImplInfo *i = find_impl(op, base, Backend::cuda);
        has = i && i->variant_named && i->variant_named(path).has_value();
      } else {
        has = find_impl(op, impl, Backend::cuda) != nullptr;
      }
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
    if (!anywhere)
      throw std::invalid_argument("bench: impl '" + impl + "' is not a CUDA impl of any selected op" + hint);
  }
  for (const auto &s : cfg.shapes.empty() ? default_bench_shapes() : cfg.shapes)
    if (row_bench(s.op) && std::find(cfg.ops.begin(), cfg.ops.end(), s.op) != cfg.ops.end())
      plan.row_shapes.push_back(s);
  return plan;
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
    // Matmuls (ops benched over M, N and K) are also summed up by their M classes.
    const std::string op = key.substr(0, key.find('/'));
    const BenchDef *def = row_bench(op.substr(0, op.find('[')));
    if (def && def->uses_k) {
      const int64_t small_m = def->small_m;
      const Stats small = stats(v, [small_m](int64_t m) { return m <= small_m; });
      const Stats large = stats(v, [](int64_t m) { return m >= 128; });
      if (small.n)
        out << "; M <= " << small_m << ": " << fmt(small.geomean, "%.3f") << "x (lowest " << fmt(small.lowest, "%.3f")
            << "x, " << small.below_one << " of " << small.n << " below 1.0x)";
      if (large.n)
        out << "; M >= 128: " << fmt(large.geomean, "%.3f") << "x (lowest " << fmt(large.lowest, "%.3f") << "x)";
    }
    out << "\n";
  }
  return out.str();
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
      const ImplInfo &of = cuda_impl(op, base);
      const auto variant = of.variant_named ? of.variant_named(path) : std::nullopt;
      if (!variant) throw std::invalid_argument("no kernel path '" + path + "' of " + op + " (in impl '" + impl + "')");
      slot = std::make_unique<ImplInfo>(of);
      slot->impl = impl;
      slot->run = variant->run;
    }
    return *slot;
  }
  const ImplInfo *i = find_impl(op, impl, Backend::cuda);
  if (!i) throw std::invalid_argument("no CUDA impl '" + impl + "' of " + op);
  return *i;
}

// batch_slice on the benchmark's own inputs: a few row ranges, compared bitwise.
bool batch_slice_holds(const ImplInfo &impl, const OpArgs &args, int64_t rows,
                       const std::vector<size_t> &batch_inputs) {
  const at::Tensor full = impl.run(args);
  const std::pair<int64_t, int64_t> ranges[] = {
      {0, 1}, {rows / 2, rows / 2 + 1}, {rows - 1, rows}, {0, (rows + 1) / 2}};
  for (auto [i, j] : ranges) {
    OpArgs part = args;
    for (size_t t : batch_inputs) part.tensors[t] = args.tensors[t].narrow(0, i, j - i);
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
  const BenchClock clock;
  at::Generator gen = at::cuda::detail::createCUDAGenerator();
  gen.set_current_seed(20261121);

  std::ostringstream csv;
  csv << "op,impl,dtype,M,N,K,median_us,tflops,gbps,baseline_impl,cublas_median_us,speedup_vs_cublas,invariant_"
         "verified,"
         "d2d_gbps,bandwidth_share_of_d2d,page,kv_heads\n";
  // The dispatcher rows: impl `torch` (at::mm, ...) run with the batch-invariant mode on, made
  // per op on first use.
  std::map<std::string, std::unique_ptr<ImplInfo>> dispatch_impls;
  auto dispatch_impl = [&](const std::string &op) -> const ImplInfo & {
    auto &slot = dispatch_impls[op];
    if (!slot) {
      const ImplInfo &torch_impl = cuda_impl(op, "torch");
      slot = std::make_unique<ImplInfo>(torch_impl);
      slot->impl = kDispatchImpl;
      // Turning the mode on is a no-op once it is on; every other impl's repetition turns it off
      // before its calls (the repetitions are interleaved), and it goes off after the shape, so
      // they run on libtorch's own kernels.
      slot->run = [run = torch_impl.run, set = cfg.set_batch_invariant_mode](const OpArgs &a) {
        set(true);
        return run(a);
      };
    }
    return *slot;
  };
  auto mode_off = [&] {
    if (cfg.set_batch_invariant_mode) cfg.set_batch_invariant_mode(false);
  };
  std::map<std::string, std::vector<SpeedupSample>> speedups;  // "op/impl/dtype" -> (M, speedup) per shape
  try {
    const size_t total = plan.row_shapes.size() * cfg.dtypes.size();
    size_t done = 0;
    for (const auto &s : plan.row_shapes) {
      const BenchDef &def = *row_bench(s.op);
      const std::string &baseline = def.baseline;
      for (at::ScalarType dtype : cfg.dtypes) {
        ++done;
        std::vector<std::string> impls;
        for (const auto &name : cfg.impls)
          if (plan.times(s.op, name) && name != baseline) impls.push_back(name);
        impls.push_back(baseline);
        std::stable_partition(impls.begin(), impls.end(), [](const std::string &n) { return n != kDispatchImpl; });
        // Input sets rotated so that together they exceed the L2 cache.
        const double set_bytes = def.input_bytes(s, dtype);
        const int sets = static_cast<int>(std::clamp(std::ceil(cfg.rotate_bytes / set_bytes), 1.0, 16.0));
        std::vector<OpArgs> args, baseline_args;
        for (int i = 0; i < sets; ++i) args.push_back(def.args(s, dtype, gen));
        // A baseline of another op ("op:impl") runs on inputs of its own, made from ours.
        const size_t colon = baseline.find(':');
        const bool other_op = colon != std::string::npos;
        if (other_op)
          for (const OpArgs &a : args) baseline_args.push_back(def.baseline_args(a));
        auto impl_of = [&](const std::string &name) -> const ImplInfo & {
          if (name == kDispatchImpl) return dispatch_impl(s.op);
          if (other_op && name == baseline) return cuda_impl(baseline.substr(0, colon), baseline.substr(colon + 1));
          return cuda_impl(s.op, name);
        };

        MedianReporter reporter;
        std::map<std::string, bool> verified;
        std::set<std::string> unchecked;
        for (const auto &name : impls) {
          const ImplInfo &impl = impl_of(name);
          const std::vector<OpArgs> &inputs = other_op && name == baseline ? baseline_args : args;
          if (!impl.supports(dtype)) continue;
          // A baseline that refuses the shape (cuBLASLt without a kernel for it) leaves the row to
          // ours alone, its TFLOP/s without a speedup.
          if (name == baseline) {
            try {
              impl.run(inputs[0]);
            } catch (const std::exception &e) {
              const std::string what = e.what();
              log << s.label() << " " << name << " " << dtype_name(dtype) << " M=" << s.m << " N=" << s.n
                  << " K=" << s.k << ": refused (" << what.substr(0, what.find('\n')) << ")" << std::endl;
              continue;
            }
          }
          try {
            verified[name] = batch_slice_holds(impl, inputs[0], s.m, def.batch_inputs(s));
          } catch (const std::exception &e) {
            if (name != baseline) throw;
            unchecked.insert(name);  // it refused a slice of the shape: its rows stay unchecked
          }
          for (int w = 0; w < 3; ++w) impl.run(inputs[w % sets]);  // warm-up: module load, handles, autotune caches
          mode_off();
          const double once_us = time_one_call_us([&] { impl.run(inputs[0]); }, clock);
          const int64_t iters =
              static_cast<int64_t>(std::clamp(cfg.seconds_per_repetition * 1e6 / std::max(once_us, 1.0), 3.0, 2000.0));
          benchmark::RegisterBenchmark(
              name.c_str(),
              [&, impl_ptr = &impl, args_ptr = &inputs, dispatch = name == kDispatchImpl](benchmark::State &st) {
                // Interleaved with the dispatcher row, whose calls turn the batch-invariant mode on:
                // every other impl runs with it off.
                if (!dispatch) mode_off();
                int k = 0;
                for (auto _ : st)
                  st.SetIterationTime(time_one_call_us([&] { impl_ptr->run((*args_ptr)[k++ % sets]); }, clock) * 1e-6);
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
        const double bytes = def.bytes(s, dtype);
        double d2d_gbps = NAN;
        if (def.against_copy(s)) {
          const at::Tensor src =
              at::empty({static_cast<int64_t>(bytes)}, at::TensorOptions().dtype(at::kByte).device(at::kCUDA));
          const at::Tensor dst = at::empty_like(src);
          dst.copy_(src);
          std::vector<double> t;
          for (int r = 0; r < 20; ++r) t.push_back(time_one_call_us([&] { dst.copy_(src); }, clock));
          std::nth_element(t.begin(), t.begin() + t.size() / 2, t.end());
          d2d_gbps = 2.0 * bytes / t[t.size() / 2] * 1e-3;
        }
        for (const auto &name : impls) {
          if (!reporter.medians.count(name)) continue;
          const double us = reporter.medians[name];
          const double flops = def.flops(s);
          const double gbps = bytes / us * 1e-3;
          const double speedup = base_us / us;
          csv << s.label() << ',' << name << ',' << dtype_name(dtype) << ',' << s.m << ',' << s.n << ',' << s.k << ','
              << fmt(us) << ',' << (flops > 0 ? fmt(flops / us * 1e-6, "%.2f") : "") << ','
              << (bytes > 0 ? fmt(bytes / us * 1e-3, "%.1f") : "") << ',' << baseline << ',' << fmt(base_us) << ','
              << fmt(speedup, "%.4f") << ','
              << (unchecked.count(name) ? "unchecked"
                  : verified[name] ? "yes"
                                   : "no")
              << ',' << (std::isnan(d2d_gbps) ? "" : fmt(d2d_gbps, "%.1f")) << ','
              << (std::isnan(d2d_gbps) ? "" : fmt(gbps / d2d_gbps, "%.4f")) << ",,\n";
          if (name != baseline && !std::isnan(speedup))
            speedups[s.label() + "/" + name + "/" + dtype_name(dtype)].push_back({s.m, speedup});
          log << "[" << done << "/" << total << "] " << s.label() << " " << name << " " << dtype_name(dtype)
              << " M=" << s.m << " N=" << s.n << " K=" << s.k << ": " << fmt(us, "%.1f") << " us, "
              << (flops > 0 ? fmt(flops / us * 1e-6, "%.0f") + " TFLOP/s, " : std::string())
              << (std::isnan(d2d_gbps) ? std::string() : fmt(100.0 * gbps / d2d_gbps, "%.0f") + "% of a D2D copy, ")
              << (std::isnan(speedup) ? "no " + baseline + " time" : fmt(speedup, "%.2f") + "x " + baseline)
              << (unchecked.count(name) ? "  (batch_slice unchecked: it refused a slice)"
                  : verified[name] ? ""
                                   : "  (batch_slice FAILED)")
              << std::endl;
        }
      }
    }
    // The families that bench themselves (paged attention), where an op of theirs is selected.
    for (const auto &f : property_families()) {
      if (!f.bench) continue;
      const bool selected =
          std::any_of(plan.pairs.begin(), plan.pairs.end(), [&](const auto &p) { return f.owns(p.first); });
      if (selected) f.bench({cfg.impls, cfg.dtypes, cfg.shapes, cfg.repetitions}, csv, log);
    }
  } catch (const std::exception &e) {
    if (!stopped) throw;
    *stopped = std::string(e.what()).substr(0, std::string(e.what()).find('\n'));
    log << "bench stopped: " << *stopped << "; keeping the rows finished so far" << std::endl;
  }
  log << "\ngeomean speedup vs baseline (cublas for mm, torch for reductions):\n" << speedup_summary(speedups);
  return csv.str();
}

namespace {

// The inputs of one impl's scan, cut to M rows: mm's random A and B for a plain impl name; for
// "OP/IMPL", the inputs that OP's definition makes for a case of shape M = max_m, N, K (its
// default parameters, contiguous, normal data), narrowed along the definition's batch axis.
struct ScanInputs {
  const ImplInfo *impl = nullptr;
  std::function<OpArgs(int64_t m)> rows;
  int out_dim = 0;
};

ScanInputs scan_inputs(const std::string &name, const ScanConfig &cfg, at::ScalarType dtype, const at::Tensor &a,
                       const at::Tensor &b) {
  ScanInputs s;
  const size_t slash = name.find('/');
  if (slash == std::string::npos) {
    s.impl = &cuda_impl("mm", name);
    s.rows = [a, b](int64_t m) {
      OpArgs args;
      args.tensors = {a.narrow(0, 0, m), b};
      return args;
    };
    return s;
  }
  const std::string op = name.substr(0, slash);
  const OpDef *def = find_op_def(op);
  if (!def || def->size_names != std::vector<std::string>{"M", "N", "K"} || !def->has_batch())
    throw std::invalid_argument("scan: '" + op + "' is not an op of shape M N K with a batch (in impl '" + name + "')");
  s.impl = &cuda_impl(op, name.substr(slash + 1));
  CaseSpec c;
  c.op = op;
  c.impl = s.impl->impl;
  c.backend = Backend::cuda;
  c.dtype = dtype;
  c.shape = {cfg.max_m, cfg.n, cfg.k};
  c.layout = std::string(def->input_sizes(c).size(), 'c');
  c.seed = 20261121;
  const OpArgs full = make_row_args(c);
  const BatchAxis axis = def->batch_axis(c);
  s.out_dim = axis.out_dim;
  s.rows = [full, axis](int64_t m) {
    OpArgs args = full;
    for (auto [t, dim] : axis.inputs) args.tensors[t] = full.tensors[t].narrow(dim, 0, m);
    return args;
  };
  return s;
}

}  // namespace

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
      const ScanInputs in = scan_inputs(name, cfg, dtype, a, b);
      const ImplInfo &impl = *in.impl;
      const int d = in.out_dim;
      const at::Tensor one_row = impl.run(in.rows(1));
      at::Tensor prev = one_row;
      std::vector<int64_t> row0_changes, prefix_changes;
      for (int64_t m = 1; m <= cfg.max_m; ++m) {
        const at::Tensor out = impl.run(in.rows(m));
        const bool row0_same = same_bits(out.narrow(d, 0, 1), one_row);
        const bool prefix_same = m == 1 || same_bits(out.narrow(d, 0, m - 1), prev);
        uint64_t ulp = 0;
        if (!row0_same) ulp = bitwise_diff(one_row.cpu(), out.narrow(d, 0, 1).cpu()).max_ulp;
        int64_t prefix_differing = 0;
        if (!prefix_same) prefix_differing = bitwise_diff(prev.cpu(), out.narrow(d, 0, m - 1).cpu()).differing;
        if (!row0_same) row0_changes.push_back(m);
        if (!prefix_same) prefix_changes.push_back(m);
        csv << name << ',' << dtype_name(dtype) << ',' << cfg.n << ',' << cfg.k << ',' << m << ','
            << (row0_same ? 0 : 1) << ',' << ulp << ',' << (prefix_same ? 0 : 1) << ',' << prefix_differing << '\n';
        prev = out;
      }
      log << name << " " << dtype_name(dtype) << " N=" << cfg.n << " K=" << cfg.k
          << ": row 0 differs from the 1-row product at " << row0_changes.size() << " of " << cfg.max_m
          << " M; the first M-1 rows change at M =";
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
