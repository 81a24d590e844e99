// `detfuzz bench` and `detfuzz scan`: speed of our CUDA kernels against the baselines, and the
// map of where a baseline's rows stop matching the smaller product.
//
// bench: Google Benchmark drives each (op, impl, dtype, shape) with manual timing from CUDA events
// around every call, after a warm-up, over input sets rotated so that the L2 cache does not
// flatter small shapes; the figure kept is the median of the repetitions, which Google
// Benchmark runs in a random order interleaved across a shape's impls. The same run checks
// batch_slice bitwise on the same shapes for every impl timed. Baselines: cublas for mm,
// torch's CUDA kernels for log_softmax and mean. Paged attention (32 query heads, 8 KV heads,
// head dim 128, pages of 16): decode over batch 1..256 and context 512..32k against a
// device-to-device copy of the same bytes, prefill of 1k..8k tokens, with 8 KV heads and with 32
// (MHA), against torch's SDPA.
// Every mm row reports TFLOP/s and the bytes of A, B and C moved per second; rows with M <= 32
// (bound by reading B) also give that bandwidth as a share of a device-to-device copy's measured
// in the same run (read and write both counted), the ceiling such a kernel can approach.
//
// scan: for one (N, K, dtype), for M = 1..max, compares row 0 of the M-row product with the
// 1-row product, and the first M-1 rows with the (M-1)-row product: every M where a baseline's
// kernel choice changes the bits. Impls are mm's, or OP/IMPL for another op whose definition has
// the shape M N K and a batch (scaled_mm/torch-scaled-mm: its inputs as the definition makes
// them, default parameters).
#pragma once

#include <cstdint>
#include <functional>
#include <iosfwd>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include <ATen/ATen.h>

#include "properties/defs/op_def.h"  // BenchShape, BenchDef: what each op's definition says of its bench

namespace detfuzz {

struct BenchConfig {
  std::vector<std::string> ops = {"mm", "log_softmax", "mean", "paged_attention"};
  std::vector<std::string> impls = {"invariant"};  // timed beside their baseline
  std::vector<at::ScalarType> dtypes = {at::kBFloat16, at::kHalf, at::kFloat};
  std::vector<BenchShape> shapes;  // empty: the default shape set
  int repetitions = 5;
  double seconds_per_repetition = 0.05;
  double rotate_bytes = 256e6;  // input sets rotated until they cover this many bytes
  // Turns libtorch's batch-invariant mode on or off (set by the CLI, which links the mode). When
  // set, impl `invariant-dispatch` of mm is at::mm (impl `torch`) with the mode on: the speed a
  // PyTorch user gets through the dispatcher.
  std::function<void(bool)> set_batch_invariant_mode;
};
inline const char *kDispatchImpl = "invariant-dispatch";

// The default shape set: every row op's definition's bench shapes (mm: (N, K) in {(4096,4096),
// (14336,4096), (4096,14336), (1024,8192), (6144,4096), (128256,4096)} x M in {1, 8, 32, 128, 512,
// 2048, 8192}; log_softmax and mean at 1024x32768, 4096x32768 and 1024x131072). Families that
// bench themselves (paged attention) add their own defaults.
std::vector<BenchShape> default_bench_shapes();
// A user CSV with header op,M,N,K[,page][,kv_heads] (reductions: M rows, N columns, K empty or 0; a family's
// shape kinds, e.g. paged_attention_decode, as its bench reads them).
std::vector<BenchShape> read_bench_shapes(const std::string &path);  // throws std::invalid_argument

// The (op, impl) pairs a bench will time, checked before anything is timed. Throws
// std::invalid_argument (one line) for an op that cannot be benchmarked, an impl that no selected
// op has on CUDA, or a selection that leaves nothing to time. A selected impl that some selected
// ops lack (cublaslt-noworkspace of log_softmax) is skipped for those ops, with a note in `notes`.
struct BenchPlan {
  std::vector<std::pair<std::string, std::string>> pairs;  // (op, impl), baselines excluded
  std::vector<std::string> notes;                          // one line per skipped pair
  // The row ops' shapes to time: the selected ops' rows of cfg.shapes (or of the default set). A
  // family's rows (paged_attention_decode, prefill_graph, ...) go to the family's own bench.
  std::vector<BenchShape> row_shapes;
  bool times(const std::string &op, const std::string &impl) const;
};
BenchPlan plan_bench(const BenchConfig &cfg);

// The end-of-run summary, one line per "op/impl/dtype" key: the geomean speedup over its shapes;
// for ops benched over M, N and K also over M <= the definition's small_m (decode: 32 rows for
// the matmuls, 64 tokens for fused_moe; the lowest, and how many shapes fall below 1.0x) and over
// M >= 128 (the lowest), the classes the targets are stated in.
struct SpeedupSample {
  int64_t m;
  double speedup;
};
std::string speedup_summary(const std::map<std::string, std::vector<SpeedupSample>> &speedups);

// Runs the benchmark; returns bench.csv's content and prints progress and the geomeans to `log`.
// When a benchmark throws part way, `stopped` receives the error and the rows finished so far are
// returned (a report of what was measured rather than nothing). Throws std::invalid_argument
// when the selection is invalid (plan_bench) or CUDA is unavailable, before timing anything.
std::string run_bench(const BenchConfig &cfg, std::ostream &log, std::string *stopped = nullptr);

struct ScanConfig {
  int64_t n = 4096, k = 4096, max_m = 1024;
  std::vector<at::ScalarType> dtypes = {at::kBFloat16};
  std::vector<std::string> impls = {"cublas", "cublaslt-noworkspace", "torch", "invariant"};
};
// Returns scan.csv's content; prints, per impl and dtype, the M values where bits changed.
std::string run_scan(const ScanConfig &cfg, std::ostream &log);

}  // namespace detfuzz
