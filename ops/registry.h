// The impl registry: every implementation of every op on every backend, with the expectation
// the harness holds it to. Backends contribute their lists through the *_impls() functions
// below; nothing registers itself at static-initialisation time.
#pragma once

#include "ops/op_args.h"

#include <functional>
#include <optional>
#include <string>
#include <vector>

namespace detfuzz {

enum class Backend { cpu, cuda };
enum class Expectation { must_hold, observed };

const char *to_string(Backend b);
const char *to_string(Expectation e);
Backend backend_from_string(const std::string &s);  // throws std::invalid_argument

// One kernel path an impl may choose, forced: `variant_agree` holds it to the automatic choice's
// bits and `bench` times it alone as impl@name.
struct ImplVariant {
  std::string name;  // "sm90_split_64", "cluster-32x128", ...
  OpFn run;
};

struct ImplInfo {
  std::string impl;  // "invariant", "torch", "cublas", "mutant-splitk", ...
  std::string op;    // "mm", "addmm", ...
  Backend backend;
  std::vector<at::ScalarType> dtypes;  // input dtypes it accepts
  Expectation expectation;
  std::string description;  // one line, shown by `detfuzz list`
  OpFn run;                 // empty for ops whose impls are whole pipelines (prefill_graph)
  // The impl calls the op through libtorch's dispatcher, so a mode that overrides the aten op
  // (ours or a user's) decides which kernel runs: with such a mode on, it is held to must-hold.
  bool through_dispatcher = false;
  // The kernel paths that may run for inputs of `dtype` on CUDA device `device`, each forced
  // (empty when the impl has one path, or none to force).
  std::function<std::vector<ImplVariant>(int device, at::ScalarType dtype)> variants;
  // A path by name, for any device and dtype (bench's impl@name); nullopt when unknown.
  std::function<std::optional<ImplVariant>(const std::string &name)> variant_named;

  bool supports(at::ScalarType t) const;
};

// All impls, built on first use; CUDA impls are present only in CUDA builds.
const std::vector<ImplInfo> &all_impls();
// nullptr when no such (op, impl, backend).
const ImplInfo *find_impl(const std::string &op, const std::string &impl, Backend backend);

// Contributions, one per source of impls.
std::vector<ImplInfo> cpu_invariant_impls();                 // ops/cpu
std::vector<ImplInfo> cpu_mutant_impls();                    // ops/cpu/mutants
std::vector<ImplInfo> torch_default_impls(Backend backend);  // ops/baseline/torch_default
// RoPE composed of libtorch ops (the `torch` impl of rope, and the small transformer's torch kernels).
at::Tensor torch_rope(const at::Tensor &x, const at::Tensor &positions, double theta);
std::vector<ImplInfo> attention_impls(Backend backend);  // ops/attention (paged_attention)
std::vector<ImplInfo> engine_impls(Backend backend);     // ops/engine (laps_engine)
std::vector<ImplInfo> graph_impls(Backend backend);      // ops/graph (prefill_graph; run is empty)
#ifdef DETFUZZ_WITH_CUDA
std::vector<ImplInfo> cuda_invariant_impls();  // ops/cuda
std::vector<ImplInfo> cuda_mutant_impls();     // ops/cuda: the fp8 and MoE mutants
std::vector<ImplInfo> cublas_impls();          // ops/baseline/cublas
#endif

// Shorthands for the dtype lists impls declare.
std::vector<at::ScalarType> float_dtypes();              // float32, float16, bfloat16
std::vector<at::ScalarType> half_dtypes();               // float16, bfloat16
std::vector<at::ScalarType> float_and_int_dtypes();      // the above plus int32, int64 (mean)
at::ScalarType dtype_from_string(const std::string &s);  // throws std::invalid_argument
std::string dtype_name(at::ScalarType t);                // "float32", "bfloat16", ...

}  // namespace detfuzz
