// One call of an op: its tensors in the op's documented order, plus the attributes it reads.
//
//   op           tensors            attributes read
//   mm           {a[M,K], b[K,N]}   -
//   addmm        {bias, a, b}       alpha, beta  (bias is [N] or [M,N])
//   bmm          {a[B,M,K], b[B,K,N]}
//   log_softmax  {x}                dim, half_to_float
//   mean         {x}                dims (empty = all), keepdim, out_dtype
//   rms_norm     {x[T,H], weight[H]}          eps
//   silu_and_mul {x[T,2I]}                    -
//   rope         {x[T,H,D], positions[T]}     theta   (positions int32/int64)
//   embedding    {weight[V,H], ids[T]}        -       (ids int32/int64)
//   scaled_mm    {a[M,K], b[K,N], scale_a, scale_b[, bias[N]]}   out_dtype, params scale= bias=
//                (a, b float8_e4m3fn; scales float32, sized by the scale mode: ops/cpu/moe.h)
//   fused_moe    {x[T,H], logits[T,E], w13[E,2I,H], w2[E,H,I][, s13, s2]}   params topk= (routing=1)
//                (fused_moe_fp8: w13, w2 float8_e4m3fn with 128 x 128 block scales s13, s2)
//
// Tensors may be any strided view (transposed, sliced, offset); impls must honour strides.
#pragma once

#include <ATen/ATen.h>

#include <functional>
#include <map>
#include <optional>
#include <string>
#include <vector>

namespace detfuzz {

struct OpArgs {
  std::vector<at::Tensor> tensors;
  int64_t dim = -1;
  std::vector<int64_t> dims;
  bool keepdim = false;
  bool half_to_float = false;
  double alpha = 1.0;
  double beta = 1.0;
  std::optional<at::ScalarType> out_dtype;
  double eps = 1e-6;       // rms_norm
  double theta = 10000.0;  // rope
  // The case's parameters as recorded, for ops that read their attributes themselves (an op
  // spec's value arguments, passed to the dispatcher by name).
  std::map<std::string, std::string> params;
};

using OpFn = std::function<at::Tensor(const OpArgs &)>;

}  // namespace detfuzz
