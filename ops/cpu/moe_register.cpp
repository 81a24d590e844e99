// Registry entries of scaled_mm, fused_moe and fused_moe_fp8 on the CPU: the invariant impls and
// the planted mutants, each imitating a real fp8 or MoE kernel bug. The mutants are correct ops
// (within the accuracy bound) whose bits depend on the batch; they claim invariance (must-hold),
// so the harness has to catch them and shrink them.
//
// Attributes come from the case's parameters (OpArgs::params): scaled_mm's `scale` (tensor,
// channel, block) and `bias` (0, 1); fused_moe's `topk`, and `routing=1` to return the routing
// instead of the layer's output: [T, 2k] float32, the k weights then the k expert ids.
#include "ops/cpu/moe.h"
#include "ops/registry.h"

#include <stdexcept>

namespace detfuzz::cpu_ops {
namespace {

// From this many rows on (M >= 16) the fp8 promotion mutant promotes every two K blocks.
constexpr int64_t kLatePromotionMinRows = 16;
// An expert with at least this many tokens gets the small-K-block tile (mutant-moe-tile).
constexpr int64_t kBigTileMinTokens = 4;
constexpr int64_t kSmallKBlock = 32;
// An expert with at most this many tokens splits K (mutant-moe-splitk).
constexpr int64_t kSplitKMaxTokens = 2;

int64_t int_param(const OpArgs &a, const char *key, int64_t fallback) {
  const auto it = a.params.find(key);
  if (it == a.params.end()) return fallback;
  try {
    return std::stoll(it->second);
  } catch (const std::exception &) {
    throw std::invalid_argument(std::string(key) + "=" + it->second + " is not an integer");
  }
}

ScaleMode scale_param(const OpArgs &a) {
  const auto it = a.params.find("scale");
  return scale_mode_from_string(it == a.params.end() ? "tensor" : it->second);
}

at::Tensor run_scaled_mm(const OpArgs &a, const PromotionRule &promotion) {
  const size_t n = a.tensors.size();
  TORCH_CHECK(n == 4 || n == 5, "scaled_mm: expected 4 or 5 tensors (a, b, scale_a, scale_b[, bias]), got ", n);
  return scaled_mm(a.tensors[0], a.tensors[1], a.tensors[2], a.tensors[3], n == 5 ? a.tensors[4] : at::Tensor(),
                   scale_param(a), a.out_dtype.value_or(at::kBFloat16), promotion);
}

at::Tensor run_fused_moe(const OpArgs &a, const MoePlan &plan) {
  const size_t n = a.tensors.size();
  TORCH_CHECK(n == 4 || n == 6, "fused_moe: expected 4 tensors (x, logits, w13, w2) or 6 (and s13, s2), got ", n);
  const int64_t top_k = int_param(a, "topk", 1);
  if (int_param(a, "routing", 0) == 1) {
    const Routing r = moe_route(a.tensors[1], top_k);
    return at::cat({r.weights, r.ids.to(at::kFloat)}, 1);
  }
  return fused_moe(a.tensors[0], a.tensors[1], a.tensors[2], a.tensors[3], n == 6 ? a.tensors[4] : at::Tensor(),
                   n == 6 ? a.tensors[5] : at::Tensor(), top_k, plan);
}

}  // namespace

std::vector<ImplInfo> moe_invariant_impls() {
  const auto e = Expectation::must_hold;
  const auto cpu = Backend::cpu;
  return {
      {"invariant", "scaled_mm", cpu, float_dtypes(), e,
       "fixed-order CPU fp8 matmul: float32 partial per 128-wide K block times its scales, summed in K order",
       [](const OpArgs &x) { return run_scaled_mm(x, {}); }},
      {"invariant", "fused_moe", cpu, float_dtypes(), e,
       "per-token CPU MoE: top-k, blocked (128) float32 expert GEMMs, combine in slot order",
       [](const OpArgs &x) { return run_fused_moe(x, {}); }},
      {"invariant", "fused_moe_fp8", cpu, float_dtypes(), e,
       "per-token CPU MoE, fp8 weights with 128x128 block scales applied per K block",
       [](const OpArgs &x) { return run_fused_moe(x, {}); }},
  };
}

std::vector<ImplInfo> moe_mutant_impls() {
  const auto e = Expectation::must_hold;
  const auto cpu = Backend::cpu;
  MoePlan atomic;
  atomic.combine_by_expert_load = true;
  MoePlan tile;
  tile.k_block = [](int64_t tokens) { return tokens >= kBigTileMinTokens ? kSmallKBlock : kFp8Block; };
  MoePlan splitk;
  splitk.split_k = [](int64_t tokens) { return tokens <= kSplitKMaxTokens; };
  std::vector<ImplInfo> all;
  for (const char *op : {"fused_moe", "fused_moe_fp8"}) {
    // Imitates a combine by float atomicAdd: each expert adds its outputs as it finishes, the
    // busiest expert first, so a token's sum order follows the other tokens' routing.
    all.push_back({"mutant-moe-atomic", op, cpu, float_dtypes(), e,
                   "combine in the order experts finish (busiest first), not in slot order",
                   [atomic](const OpArgs &x) { return run_fused_moe(x, atomic); }});
    // Imitates a grouped GEMM whose tile (and K blocking) is picked from the tokens per expert.
    all.push_back({"mutant-moe-tile", op, cpu, float_dtypes(), e, "K block of 32 for experts with >= 4 tokens",
                   [tile](const OpArgs &x) { return run_fused_moe(x, tile); }});
    // Imitates split-K to fill the GPU when an expert has few tokens.
    all.push_back({"mutant-moe-splitk", op, cpu, float_dtypes(), e, "split-K in two for experts with <= 2 tokens",
                   [splitk](const OpArgs &x) { return run_fused_moe(x, splitk); }});
  }
  // Imitates an fp8 GEMM that promotes the tensor cores' partial sums to float32 at an interval
  // tied to its M tile: every 256 instead of every 128 of K for M >= 16.
  all.push_back(
      {"mutant-fp8-promote", "scaled_mm", cpu, float_dtypes(), e, "promotion every 2 K blocks when M >= 16",
       [](const OpArgs &x) { return run_scaled_mm(x, [](int64_t m) { return m >= kLatePromotionMinRows ? 2 : 1; }); }});
  return all;
}

}  // namespace detfuzz::cpu_ops
