// Registry entries of the fixed-order CPU ops: impl `invariant`, expectation must-hold.
#include "ops/cpu/cpu_ops.h"
#include "ops/cpu/moe.h"
#include "ops/registry.h"

namespace detfuzz {
namespace {

const at::Tensor &tensor_arg(const OpArgs &args, size_t index, const char *op, size_t expected) {
  TORCH_CHECK(args.tensors.size() == expected, op, ": expected ", expected, " tensors, got ", args.tensors.size());
  return args.tensors[index];
}

}  // namespace

std::vector<ImplInfo> cpu_invariant_impls() {
  const auto e = Expectation::must_hold;
  const auto cpu = Backend::cpu;
  std::vector<ImplInfo> impls = {
      {"invariant", "mm", cpu, float_dtypes(), e, "fixed-order CPU matmul: K in blocks of 64, float32 accumulation",
       [](const OpArgs &x) { return cpu_ops::mm(tensor_arg(x, 0, "mm", 2), tensor_arg(x, 1, "mm", 2)); }},
      {"invariant", "addmm", cpu, float_dtypes(), e, "fixed-order CPU matmul + fixed epilogue alpha*acc + beta*bias",
       [](const OpArgs &x) {
         return cpu_ops::addmm(tensor_arg(x, 0, "addmm", 3), tensor_arg(x, 1, "addmm", 3), tensor_arg(x, 2, "addmm", 3),
                               x.beta, x.alpha);
       }},
      {"invariant", "bmm", cpu, float_dtypes(), e, "fixed-order CPU matmul per batch entry",
       [](const OpArgs &x) { return cpu_ops::bmm(tensor_arg(x, 0, "bmm", 2), tensor_arg(x, 1, "bmm", 2)); }},
      {"invariant", "log_softmax", cpu, float_dtypes(), e,
       "three-pass CPU log_softmax: sequential max, blocked (64) sum of exp",
       [](const OpArgs &x) {
         return cpu_ops::log_softmax(tensor_arg(x, 0, "log_softmax", 1), x.dim, x.half_to_float);
       }},
      {"invariant", "mean", cpu, float_and_int_dtypes(), e,
       "fixed-order CPU mean: blocked (64) float32 sum / n, integers promoted to float32",
       [](const OpArgs &x) { return cpu_ops::mean(tensor_arg(x, 0, "mean", 1), x.dims, x.keepdim, x.out_dtype); }},
      {"invariant", "rms_norm", cpu, float_dtypes(), e,
       "CPU rms_norm: float32 sum of squares in blocks of 64, sequential over blocks",
       [](const OpArgs &x) {
         return cpu_ops::rms_norm(tensor_arg(x, 0, "rms_norm", 2), tensor_arg(x, 1, "rms_norm", 2), x.eps);
       }},
      {"invariant", "rope", cpu, float_dtypes(), e, "CPU NeoX RoPE: float64 angles, float32 rotation",
       [](const OpArgs &x) {
         return cpu_ops::rope(tensor_arg(x, 0, "rope", 2), tensor_arg(x, 1, "rope", 2), x.theta);
       }},
      {"invariant", "silu_and_mul", cpu, float_dtypes(), e, "CPU silu(gate) * up in float32",
       [](const OpArgs &x) { return cpu_ops::silu_and_mul(tensor_arg(x, 0, "silu_and_mul", 1)); }},
      {"invariant", "embedding", cpu, float_dtypes(), e, "CPU row gather",
       [](const OpArgs &x) {
         return cpu_ops::embedding(tensor_arg(x, 0, "embedding", 2), tensor_arg(x, 1, "embedding", 2));
       }},
  };
  for (auto &i : cpu_ops::moe_invariant_impls()) impls.push_back(std::move(i));  // scaled_mm, fused_moe (moe.h)
  return impls;
}

}  // namespace detfuzz
