// Impl `invariant` on the CUDA backend: the batch-invariant kernels of this folder, held to
// must-hold on every property.
#include "ops/cuda/cuda_ops.h"
#include "ops/registry.h"

namespace detfuzz {

std::vector<ImplInfo> cuda_invariant_impls() {
  const auto b = Backend::cuda;
  const auto e = Expectation::must_hold;
  return {
      {"invariant", "mm", b, float_dtypes(), e,
       "persistent matmul, one CTA per SM, fixed 128x128 tiles and K order (mma.sync for 16-bit, FMA for fp32)",
       [](const OpArgs &x) { return cuda_ops::mm(x.tensors.at(0), x.tensors.at(1)); }},
      {"invariant", "addmm", b, float_dtypes(), e, "persistent matmul with alpha/beta and the bias fused in the epilogue",
       [](const OpArgs &x) { return cuda_ops::addmm(x.tensors.at(0), x.tensors.at(1), x.tensors.at(2), x.beta, x.alpha); }},
      {"invariant", "bmm", b, float_dtypes(), e, "persistent matmul, batch folded into the tile space (one launch)",
       [](const OpArgs &x) { return cuda_ops::bmm(x.tensors.at(0), x.tensors.at(1)); }},
      {"invariant", "log_softmax", b, float_dtypes(), e,
       "three-pass row log_softmax, reduction order fixed by the row length",
       [](const OpArgs &x) { return cuda_ops::log_softmax(x.tensors.at(0), x.dim, x.half_to_float); }},
      {"invariant", "mean", b, float_and_int_dtypes(), e,
       "row mean over any dims (one fixed-order reduction, integers promoted to float32)",
       [](const OpArgs &x) { return cuda_ops::mean(x.tensors.at(0), x.dims, x.keepdim, x.out_dtype); }},
  };
}

}  // namespace detfuzz
