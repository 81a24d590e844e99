#include "ops/registry.h"

#include <algorithm>
#include <stdexcept>

namespace detfuzz {

const char *to_string(Backend b) { return b == Backend::cpu ? "cpu" : "cuda"; }
const char *to_string(Expectation e) { return e == Expectation::must_hold ? "must-hold" : "observed"; }

Backend backend_from_string(const std::string &s) {
  if (s == "cpu") return Backend::cpu;
  if (s == "cuda") return Backend::cuda;
  throw std::invalid_argument("unknown backend '" + s + "' (expected cpu or cuda)");
}

bool ImplInfo::supports(at::ScalarType t) const { return std::find(dtypes.begin(), dtypes.end(), t) != dtypes.end(); }

const std::vector<ImplInfo> &all_impls() {
  static const std::vector<ImplInfo> impls = [] {
    std::vector<ImplInfo> all;
    auto add = [&all](std::vector<ImplInfo> more) {
      for (auto &i : more) all.push_back(std::move(i));
    };
    add(cpu_invariant_impls());
    add(torch_default_impls(Backend::cpu));
    add(cpu_mutant_impls());
    add(attention_impls(Backend::cpu));
    add(engine_impls(Backend::cpu));
    add(graph_impls(Backend::cpu));
#ifdef DETFUZZ_WITH_CUDA
    add(cuda_invariant_impls());
    add(cuda_mutant_impls());
    add(torch_default_impls(Backend::cuda));
    add(cublas_impls());
    add(attention_impls(Backend::cuda));
    add(engine_impls(Backend::cuda));
    add(graph_impls(Backend::cuda));
#endif
    return all;
  }();
  return impls;
}

const ImplInfo *find_impl(const std::string &op, const std::string &impl, Backend backend) {
  for (const auto &i : all_impls())
    if (i.op == op && i.impl == impl && i.backend == backend) return &i;
  return nullptr;
}

std::vector<at::ScalarType> float_dtypes() { return {at::kFloat, at::kHalf, at::kBFloat16}; }
std::vector<at::ScalarType> half_dtypes() { return {at::kHalf, at::kBFloat16}; }
std::vector<at::ScalarType> float_and_int_dtypes() {
  return {at::kFloat, at::kHalf, at::kBFloat16, at::kInt, at::kLong};
}

at::ScalarType dtype_from_string(const std::string &s) {
  if (s == "float32") return at::kFloat;
  if (s == "float16") return at::kHalf;
  if (s == "bfloat16") return at::kBFloat16;
  if (s == "float64") return at::kDouble;
  if (s == "int32") return at::kInt;
  if (s == "int64") return at::kLong;
  throw std::invalid_argument("unknown dtype '" + s + "' (expected float32, float16, bfloat16, int32 or int64)");
}

std::string dtype_name(at::ScalarType t) {
  switch (t) {
    case at::kFloat: return "float32";
    case at::kHalf: return "float16";
    case at::kBFloat16: return "bfloat16";
    case at::kDouble: return "float64";
    case at::kInt: return "int32";
    case at::kLong: return "int64";
    default: return c10::toString(t);
  }
}

}  // namespace detfuzz
