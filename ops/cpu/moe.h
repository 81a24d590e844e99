// fp8 scaled matmul and the fused mixture-of-experts layer on the CPU: the fixed-order kernels
// (the executable spec of the CUDA kernels, ops/cuda) and the knobs their mutants turn.
//
// scaled_mm: a [M, K] and b [K, N] in float8 e4m3fn, float32 scales, optional bias [N]:
//   out[i, j] = round(sum over K blocks kb of (P(i, j, kb) * (sa(i, kb) * sb(kb, j))) + bias[j])
// P is the float32 sum, sequential from zero, of the block's 128 products (each exact: two 4-bit
// significands fit float32's 24). The block totals are added into a float32 accumulator in K
// order. So K is promoted to float32 at a fixed interval of 128 (as DeepSeek-V3's kernels promote
// the tensor cores' partial sums), and no order depends on M. Scales, by `ScaleMode`:
//   tensor   sa [1],        sb [1]
//   channel  sa [M, 1],     sb [1, N]          (per row of a, per column of b)
//   block    sa [M, K/128], sb [K/128, N/128]  (1 x 128 activations, 128 x 128 weights; sizes
//                                               rounded up)
//
// fused_moe: x [T, H], router logits [T, E] (float32), w13 [E, 2I, H] (gate rows, then up rows),
// w2 [E, H, I]; bf16/fp16/fp32 weights of x's dtype, or fp8 e4m3fn weights with 128 x 128 block
// scales s13 [E, 2I/128, H/128], s2 [E, H/128, I/128] (activations stay in x's dtype). Per token:
//   1. top-k of its logits, larger first, ties to the lower expert index, NaN last;
//   2. weights: softmax over the k chosen logits (float32: exp(l - l_max), summed in slot order);
//   3. per chosen expert: [g, u] = w13[e] @ x, a = silu(g) * u, y = w2[e] @ a, each product a
//      blocked float32 sum over 128-wide K blocks (times the block's scale for fp8) in K order,
//      `a` computed in float32 and rounded to x's dtype (what the down GEMM reads, as engines
//      store the intermediate activation and as a tensor core takes it);
//   4. out = round(sum over slots s in order of w_s * y_s), float32 from zero.
// Every step reads the token's own data only: no bit depends on the batch or on expert loads.
#pragma once

#include <ATen/ATen.h>

#include <functional>
#include <string>
#include <vector>

namespace detfuzz {
struct ImplInfo;
}

namespace detfuzz::cpu_ops {

// The promotion interval of fp8 products and the quantisation block of fp8 scales.
constexpr int64_t kFp8Block = 128;

enum class ScaleMode { tensor, channel, block };
// "tensor" | "channel" | "block"; throws std::invalid_argument naming the bad value.
ScaleMode scale_mode_from_string(const std::string &s);
const char *to_string(ScaleMode m);
// Sizes of scale_a and scale_b for a [M, K] @ b [K, N] under `mode`.
std::vector<int64_t> scale_a_sizes(ScaleMode mode, int64_t m, int64_t k);
std::vector<int64_t> scale_b_sizes(ScaleMode mode, int64_t k, int64_t n);

// The input checks every scaled_mm kernel makes (this file's CPU one and the CUDA one, one set of
// messages): fp8 a [M, K] and b [K, N], an output dtype of bfloat16, float16 or float32, float32
// scales of `mode`'s sizes, bias [N]. Throws c10::Error.
void check_scaled_mm_inputs(const at::Tensor &a, const at::Tensor &b, const at::Tensor &scale_a,
                            const at::Tensor &scale_b, const at::Tensor &bias, ScaleMode mode,
                            at::ScalarType out_dtype);

// `blocks_per_promotion(M)`: how many 128-blocks are summed (each times its scale) before the
// sum is added into the float32 accumulator. The invariant kernel promotes every block (1).
using PromotionRule = std::function<int64_t(int64_t m)>;
at::Tensor scaled_mm(const at::Tensor &a, const at::Tensor &b, const at::Tensor &scale_a, const at::Tensor &scale_b,
                     const at::Tensor &bias, ScaleMode mode, at::ScalarType out_dtype,
                     const PromotionRule &promotion = {});

// How a fused_moe impl schedules the work: the invariant plan is the default; every other plan
// is a mutant whose bits depend on how many tokens reach an expert.
struct MoePlan {
  // K block of an expert's two GEMMs given the tokens it got in this batch (invariant: 128; a
  // divisor of 128 keeps every block inside one fp8 scale block).
  std::function<int64_t(int64_t expert_tokens)> k_block;
  // Whether an expert's GEMMs split K in two (at the multiple of 32 at or below the middle),
  // each part reduced in the plan's blocks, the two added.
  std::function<bool(int64_t expert_tokens)> split_k;
  // Combine each token's expert outputs in the order experts are processed, busiest expert
  // first, as float atomics would land (instead of the token's slot order).
  bool combine_by_expert_load = false;
};

// A token's top-k experts and their weights: ids [T, k] int64, weights [T, k] float32.
struct Routing {
  at::Tensor ids, weights;
};
Routing moe_route(const at::Tensor &logits, int64_t top_k);

// The input checks of every MoE kernel (CPU and CUDA, one set of messages); throw c10::Error.
// Logits: float32 [T, E], 1 <= top_k <= E.
void check_route_inputs(const at::Tensor &logits, int64_t top_k);
// fused_moe's: x [T, H] float, logits [T, E] (as above), w13 [E, 2I, H] and w2 [E, H, I] of x's
// dtype, or fp8 with float32 block scales [E, 2I/128, H/128] and [E, H/128, I/128]. Returns whether
// the weights are fp8.
bool check_fused_moe_inputs(const at::Tensor &x, const at::Tensor &logits, const at::Tensor &w13, const at::Tensor &w2,
                            const at::Tensor &w13_scale, const at::Tensor &w2_scale, int64_t top_k);

// w13_scale and w2_scale are undefined for weights of x's dtype, given for fp8 weights.
at::Tensor fused_moe(const at::Tensor &x, const at::Tensor &logits, const at::Tensor &w13, const at::Tensor &w2,
                     const at::Tensor &w13_scale, const at::Tensor &w2_scale, int64_t top_k, const MoePlan &plan = {});

// The impls of scaled_mm, fused_moe and fused_moe_fp8 (ops/cpu/moe_register.cpp): `invariant`
// and the planted mutants.
std::vector<ImplInfo> moe_invariant_impls();
std::vector<ImplInfo> moe_mutant_impls();

}  // namespace detfuzz::cpu_ops
