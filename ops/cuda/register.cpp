// Impl `invariant` on the CUDA backend: the batch-invariant kernels of this folder, held to
// must-hold on every property.
#include "ops/cuda/cuda_ops.h"
#include "ops/cuda/moe_ops.h"
#include "ops/registry.h"

namespace detfuzz {
namespace {

// `run` with the matmul path `choice` forced.
ImplVariant forced(const cuda_ops::MatmulPathChoice &choice, const OpFn &run) {
  return {choice.name(), [choice, run](const OpArgs &x) {
            cuda_ops::ScopedMatmulPath path(choice);
            return run(x);
          }};
}

// The matmul impls' variants: every path whose bits must equal the automatic choice's.
void declare_matmul_paths(ImplInfo &impl) {
  impl.variants = [run = impl.run](int device, at::ScalarType dtype) {
    std::vector<ImplVariant> out;
    for (const auto &choice : cuda_ops::equivalent_matmul_paths(device, dtype)) out.push_back(forced(choice, run));
    return out;
  };
  impl.variant_named = [run = impl.run](const std::string &name) -> std::optional<ImplVariant> {
    const auto choice = cuda_ops::matmul_path_by_name(name);
    if (!choice) return std::nullopt;
    return forced(*choice, run);
  };
}

// scaled_mm's case parameters: `scale` (tensor, channel, block), the bias as a fifth tensor.
// The planted mutant (`late_promotion`): the mma.sync kernel, promoting every 2 K blocks from
// M >= 16 on.
at::Tensor run_scaled_mm(const OpArgs &x, bool late_promotion = false) {
  const size_t n = x.tensors.size();
  TORCH_CHECK(n == 4 || n == 5, "scaled_mm: expected 4 or 5 tensors (a, b, scale_a, scale_b[, bias]), got ", n);
  const auto it = x.params.find("scale");
  return cuda_ops::scaled_mm(
      x.tensors[0], x.tensors[1], x.tensors[2], x.tensors[3], n == 5 ? x.tensors[4] : at::Tensor(),
      cpu_ops::scale_mode_from_string(it == x.params.end() ? "tensor" : it->second),
      x.out_dtype.value_or(at::kBFloat16),
      late_promotion ? cuda_kernels::ScaledMmPath::mma_sync : cuda_kernels::ScaledMmPath::automatic,
      late_promotion && x.tensors[0].size(0) >= 16 ? 2 : 1);
}

// fused_moe's case parameters: `topk`, and `routing=1` for the routing instead of the layer's
// output ([T, 2k] float32: the k weights, then the k expert ids).
at::Tensor run_fused_moe(const OpArgs &x, const cuda_ops::MoeMutation &mutation = {}) {
  const size_t n = x.tensors.size();
  TORCH_CHECK(n == 4 || n == 6, "fused_moe: expected 4 tensors (x, logits, w13, w2) or 6 (and s13, s2), got ", n);
  auto param = [&x](const char *key, const char *fallback) {
    const auto it = x.params.find(key);
    return it == x.params.end() ? std::string(fallback) : it->second;
  };
  const int64_t top_k = std::stoll(param("topk", "1"));
  if (param("routing", "0") == "1") {
    const cpu_ops::Routing r = cuda_ops::moe_route(x.tensors[1], top_k);
    return at::cat({r.weights, r.ids.to(at::kFloat)}, 1);
  }
  return cuda_ops::fused_moe(x.tensors[0], x.tensors[1], x.tensors[2], x.tensors[3],
                             n == 6 ? x.tensors[4] : at::Tensor(), n == 6 ? x.tensors[5] : at::Tensor(), top_k,
                             mutation);
}

}  // namespace

std::vector<ImplInfo> cuda_invariant_impls() {
  const auto b = Backend::cuda;
  const auto e = Expectation::must_hold;
  std::vector<ImplInfo> impls = {
      {"invariant", "mm", b, float_dtypes(), e,
       "16-bit: Hopper TMA+wgmma, 128x128 tiles, fixed K chunks (persistent or cluster split, same bits); fp32: FMA",
       [](const OpArgs &x) { return cuda_ops::mm(x.tensors.at(0), x.tensors.at(1)); }},
      {"invariant", "addmm", b, float_dtypes(), e,
       "persistent matmul with alpha/beta and the bias fused in the epilogue",
       [](const OpArgs &x) {
         return cuda_ops::addmm(x.tensors.at(0), x.tensors.at(1), x.tensors.at(2), x.beta, x.alpha);
       }},
      {"invariant", "bmm", b, float_dtypes(), e, "persistent matmul, batch folded into the tile space (one launch)",
       [](const OpArgs &x) { return cuda_ops::bmm(x.tensors.at(0), x.tensors.at(1)); }},
      // The mma.sync kernel that other GPUs run, forced on this one: invariant on its own bits.
      {"invariant-mma-sync", "mm", b, half_dtypes(), e, "the sm_80 mma.sync persistent matmul (no K chunks), forced",
       [](const OpArgs &x) {
         cuda_ops::ScopedMatmulPath path(cuda_kernels::GemmPath::mma_sync);
         return cuda_ops::mm(x.tensors.at(0), x.tensors.at(1));
       }},
      {"invariant-mma-sync", "addmm", b, half_dtypes(), e, "the sm_80 mma.sync matmul with the bias fused, forced",
       [](const OpArgs &x) {
         cuda_ops::ScopedMatmulPath path(cuda_kernels::GemmPath::mma_sync);
         return cuda_ops::addmm(x.tensors.at(0), x.tensors.at(1), x.tensors.at(2), x.beta, x.alpha);
       }},
      {"invariant-mma-sync", "bmm", b, half_dtypes(), e, "the sm_80 mma.sync matmul over a batch, forced",
       [](const OpArgs &x) {
         cuda_ops::ScopedMatmulPath path(cuda_kernels::GemmPath::mma_sync);
         return cuda_ops::bmm(x.tensors.at(0), x.tensors.at(1));
       }},
      {"invariant", "log_softmax", b, float_dtypes(), e,
       "three-pass row log_softmax, reduction order fixed by the row length",
       [](const OpArgs &x) { return cuda_ops::log_softmax(x.tensors.at(0), x.dim, x.half_to_float); }},
      {"invariant", "mean", b, float_and_int_dtypes(), e,
       "row mean over any dims (one fixed-order reduction, integers promoted to float32)",
       [](const OpArgs &x) { return cuda_ops::mean(x.tensors.at(0), x.dims, x.keepdim, x.out_dtype); }},
      {"invariant", "rms_norm", b, float_dtypes(), e,
       "one CTA per row, 64-element block partials summed in block order (the CPU's bits)",
       [](const OpArgs &x) { return cuda_ops::rms_norm(x.tensors.at(0), x.tensors.at(1), x.eps); }},
      {"invariant", "rope", b, float_dtypes(), e,
       "NeoX RoPE, a thread per pair of up to 8 heads of a token (one float64 angle for them)",
       [](const OpArgs &x) { return cuda_ops::rope(x.tensors.at(0), x.tensors.at(1), x.theta); }},
      {"invariant", "silu_and_mul", b, float_dtypes(), e,
       "silu(gate) * up, a thread per 16-byte piece of a row (or per element)",
       [](const OpArgs &x) { return cuda_ops::silu_and_mul(x.tensors.at(0)); }},
      {"invariant", "embedding", b, float_dtypes(), e, "row gather (index_select of whole rows)",
       [](const OpArgs &x) { return cuda_ops::embedding(x.tensors.at(0), x.tensors.at(1)); }},
      {"invariant", "scaled_mm", b, float_dtypes(), e,
       "fp8 on Hopper wgmma e4m3 (tiles 128x128 to 64x8, the same bits), elsewhere float16 mma.sync; float32 "
       "partial per 128-wide K block times its scales, in K order",
       [](const OpArgs &x) { return run_scaled_mm(x); }},
      {"invariant", "fused_moe", b, float_dtypes(), e,
       "Hopper: grouped wgmma over every expert (16-bit, widths multiples of 8); elsewhere per-thread dot products "
       "in the CPU's order; two grouped GEMM launches, slot-order combine, no atomics",
       [](const OpArgs &x) { return run_fused_moe(x); }},
      {"invariant", "fused_moe_fp8", b, float_dtypes(), e,
       "the same with fp8 weights (Hopper: widened per 128x128 block, widths multiples of 128), each K block's "
       "partial times its scale, in K order",
       [](const OpArgs &x) { return run_fused_moe(x); }},
  };
  for (ImplInfo &i : impls)
    if (i.impl == "invariant" && (i.op == "mm" || i.op == "addmm" || i.op == "bmm")) declare_matmul_paths(i);
  return impls;
}

// The fp8 and MoE mutants on CUDA, the CPU's (ops/cpu/moe_register.cpp) on the CUDA kernels: a
// schedule chosen from the batch, so a row's bits depend on the other rows. They claim
// invariance (must-hold); the harness has to catch and shrink them.
std::vector<ImplInfo> cuda_mutant_impls() {
  const auto b = Backend::cuda;
  const auto e = Expectation::must_hold;
  cuda_ops::MoeMutation atomic, tile, splitk;
  atomic.combine_by_expert_load = true;
  tile.small_k_block_from = 4;
  splitk.split_k_up_to = 2;
  std::vector<ImplInfo> all;
  for (const char *op : {"fused_moe", "fused_moe_fp8"}) {
    all.push_back({"mutant-moe-atomic", op, b, float_dtypes(), e,
                   "combine in the order experts finish (busiest first), as float atomics land",
                   [atomic](const OpArgs &x) { return run_fused_moe(x, atomic); }});
    all.push_back({"mutant-moe-tile", op, b, float_dtypes(), e, "K blocks of 32 for experts with >= 4 tokens",
                   [tile](const OpArgs &x) { return run_fused_moe(x, tile); }});
    all.push_back({"mutant-moe-splitk", op, b, float_dtypes(), e, "split-K in two for experts with <= 2 tokens",
                   [splitk](const OpArgs &x) { return run_fused_moe(x, splitk); }});
  }
  all.push_back({"mutant-fp8-promote", "scaled_mm", b, float_dtypes(), e,
                 "promotion every 2 K blocks when M >= 16 (the mma.sync kernel)",
                 [](const OpArgs &x) { return run_scaled_mm(x, true); }});
  return all;
}

}  // namespace detfuzz
