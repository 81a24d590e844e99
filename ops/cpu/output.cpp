#include "ops/cpu/output.h"

#include <c10/util/BFloat16.h>
#include <c10/util/Half.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>

namespace detfuzz::cpu_ops {
namespace {

template <typename Out>
void convert(const float *src, Out *dst, int64_t n, Out nan) {
  for (int64_t i = 0; i < n; ++i) dst[i] = std::isnan(src[i]) ? nan : Out(src[i]);
}

}  // namespace

at::Tensor to_output(at::Tensor f32, at::ScalarType dtype) {
  TORCH_CHECK(f32.scalar_type() == at::kFloat, "to_output: expected a float32 result, got ", f32.scalar_type());
  const bool known = dtype == at::kFloat || dtype == at::kBFloat16 || dtype == at::kHalf;
  if (!known || !f32.is_non_overlapping_and_dense()) {
    // Not a floating output dtype of ours, or a view with gaps: the element-wise way.
    f32.masked_fill_(f32.isnan(), std::numeric_limits<float>::quiet_NaN());
    return f32.to(dtype);
  }
  // Dense: the output has the same strides, so element k of memory maps to element k.
  const float *src = f32.data_ptr<float>();
  const int64_t n = f32.numel();
  if (dtype == at::kFloat) {
    float *dst = f32.data_ptr<float>();
    convert(src, dst, n, std::numeric_limits<float>::quiet_NaN());
    return f32;
  }
  at::Tensor out = at::empty_strided(f32.sizes(), f32.strides(), f32.options().dtype(dtype));
  if (dtype == at::kBFloat16)
    convert(src, out.data_ptr<c10::BFloat16>(), n, c10::BFloat16(0x7FC0, c10::BFloat16::from_bits()));
  else
    convert(src, out.data_ptr<c10::Half>(), n, c10::Half(0x7E00, c10::Half::from_bits()));
  return out;
}

}  // namespace detfuzz::cpu_ops
