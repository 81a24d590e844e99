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

// bfloat16 without a branch per element (c10's conversion tests for NaN inside), so the loop
// vectorises: round to nearest even on the bits, then the canonical NaN where x != x.
void convert_bf16(const float *src, uint16_t *dst, int64_t n) {
  for (int64_t i = 0; i < n; ++i) {
    uint32_t u;
    std::memcpy(&u, src + i, 4);
    const uint16_t rounded = static_cast<uint16_t>((u + 0x7FFFu + ((u >> 16) & 1u)) >> 16);
    dst[i] = src[i] != src[i] ? uint16_t{0x7FC0} : rounded;
  }
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
    convert_bf16(src, reinterpret_cast<uint16_t *>(out.data_ptr<c10::BFloat16>()), n);
  else
    convert(src, out.data_ptr<c10::Half>(), n, c10::Half(0x7E00, c10::Half::from_bits()));
  return out;
}

}  // namespace detfuzz::cpu_ops
