#include "ops/cpu/output.h"

#include <c10/util/BFloat16.h>
#include <c10/util/Half.h>

#if defined(__x86_64__)
#include <immintrin.h>
#endif

#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>

namespace detfuzz::cpu_ops {
namespace {

// Without a branch per element, so that the loops vectorise: round to nearest even, then the
// canonical NaN where the bits are a NaN's (an integer test: a float compare becomes a branch).
inline uint32_t bits_of(const float *x) {
  uint32_t u;
  std::memcpy(&u, x, 4);
  return u;
}
inline bool nan_bits(uint32_t u) { return (u & 0x7FFFFFFFu) > 0x7F800000u; }
void convert_bf16(const float *src, uint16_t *dst, int64_t n) {
  for (int64_t i = 0; i < n; ++i) {
    const uint32_t u = bits_of(src + i);
    const uint16_t rounded = static_cast<uint16_t>((u + 0x7FFFu + ((u >> 16) & 1u)) >> 16);
    dst[i] = nan_bits(u) ? uint16_t{0x7FC0} : rounded;
  }
}
void convert_half(const float *src, uint16_t *dst, int64_t n) {
  for (int64_t i = 0; i < n; ++i) {
    const uint16_t rounded = c10::detail::fp16_ieee_from_fp32_value(src[i]);
    dst[i] = nan_bits(bits_of(src + i)) ? uint16_t{0x7E00} : rounded;
  }
}

#if defined(__x86_64__)
// float16 eight at a time where the CPU has F16C (its conversion rounds to nearest even, like
// c10's), which the portable loop above cannot be vectorised into without it.
__attribute__((target("avx2,f16c"))) void convert_half_f16c(const float *src, uint16_t *dst, int64_t n) {
  const __m256i magnitude = _mm256_set1_epi32(0x7FFFFFFF), inf = _mm256_set1_epi32(0x7F800000);
  const __m128i canonical = _mm_set1_epi16(0x7E00);
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    const __m256 x = _mm256_loadu_ps(src + i);
    const __m128i rounded = _mm256_cvtps_ph(x, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    const __m256i nan32 = _mm256_cmpgt_epi32(_mm256_and_si256(_mm256_castps_si256(x), magnitude), inf);
    const __m128i nan16 = _mm_packs_epi32(_mm256_castsi256_si128(nan32), _mm256_extracti128_si256(nan32, 1));
    _mm_storeu_si128(reinterpret_cast<__m128i *>(dst + i), _mm_blendv_epi8(rounded, canonical, nan16));
  }
  convert_half(src + i, dst + i, n - i);
}
#endif

void widen_half(const uint16_t *src, float *dst, int64_t n) {
  for (int64_t i = 0; i < n; ++i) dst[i] = c10::detail::fp16_ieee_to_fp32_value(src[i]);
}

#if defined(__x86_64__)
__attribute__((target("avx2,f16c"))) void widen_half_f16c(const uint16_t *src, float *dst, int64_t n) {
  int64_t i = 0;
  for (; i + 8 <= n; i += 8)
    _mm256_storeu_ps(dst + i, _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i *>(src + i))));
  widen_half(src + i, dst + i, n - i);
}
#endif

bool has_f16c() {
#if defined(__x86_64__)
  static const bool f16c = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("f16c");
  return f16c;
#else
  return false;
#endif
}

void convert_half_fastest(const float *src, uint16_t *dst, int64_t n) {
#if defined(__x86_64__)
  if (has_f16c()) return convert_half_f16c(src, dst, n);
#endif
  convert_half(src, dst, n);
}

// Writes n float32 values to `out` (contiguous, float32, bfloat16 or float16), NaN canonicalised;
// `src` may be a float32 `out`'s own data.
void store_output(const float *src, int64_t n, const at::Tensor &out) {
  const at::ScalarType dtype = out.scalar_type();
  if (dtype == at::kFloat) {
    float *dst = out.data_ptr<float>();
    for (int64_t i = 0; i < n; ++i)
      dst[i] = nan_bits(bits_of(src + i)) ? std::numeric_limits<float>::quiet_NaN() : src[i];
  } else if (dtype == at::kBFloat16) {
    convert_bf16(src, reinterpret_cast<uint16_t *>(out.data_ptr<c10::BFloat16>()), n);
  } else {
    convert_half_fastest(src, reinterpret_cast<uint16_t *>(out.data_ptr<c10::Half>()), n);
  }
}

}  // namespace

at::Tensor to_output(at::Tensor f32, at::ScalarType dtype) {
  TORCH_CHECK(f32.scalar_type() == at::kFloat, "to_output: expected a float32 result, got ", f32.scalar_type());
  if (dtype != at::kFloat && dtype != at::kBFloat16 && dtype != at::kHalf) {
    // Not a dtype the CPU ops produce: ATen's conversion, after the float32 canonicalisation.
    f32.masked_fill_(f32.isnan(), std::numeric_limits<float>::quiet_NaN());
    return f32.to(dtype);
  }
  // A view with gaps is made dense first; a dense result's output has the same strides, so
  // element k of memory maps to element k.
  if (!f32.is_non_overlapping_and_dense()) f32 = f32.contiguous();
  const float *src = f32.data_ptr<float>();
  const int64_t n = f32.numel();
  if (dtype == at::kFloat) {  // canonicalised in place
    store_output(src, n, f32);
    return f32;
  }
  at::Tensor out = at::empty_strided(f32.sizes(), f32.strides(), f32.options().dtype(dtype));
  store_output(src, n, out);
  return out;
}

at::Tensor to_output(const float *src, at::IntArrayRef sizes, at::ScalarType dtype) {
  TORCH_CHECK(dtype == at::kFloat || dtype == at::kBFloat16 || dtype == at::kHalf,
              "to_output: a float32 buffer goes to float32, bfloat16 or float16, not ", dtype);
  at::Tensor out = at::empty(sizes, at::TensorOptions().dtype(dtype));
  store_output(src, out.numel(), out);
  return out;
}

const float *float_values(const at::Tensor &t, std::vector<float> &buffer) {
  TORCH_CHECK(t.device().is_cpu(), "float_values: expected a CPU tensor, got ", t.device());
  const at::ScalarType dtype = t.scalar_type();
  TORCH_CHECK(dtype == at::kFloat || dtype == at::kBFloat16 || dtype == at::kHalf,
              "float_values: expected float32, bfloat16 or float16, got ", dtype);
  if (dtype == at::kFloat && t.is_contiguous()) return t.const_data_ptr<float>();
  const at::Tensor dense = t.contiguous();
  const int64_t n = dense.numel();
  buffer.resize(static_cast<size_t>(n));
  if (dtype == at::kFloat) {
    std::memcpy(buffer.data(), dense.const_data_ptr<float>(), static_cast<size_t>(n) * sizeof(float));
  } else if (dtype == at::kBFloat16) {
    const auto *src = reinterpret_cast<const uint16_t *>(dense.const_data_ptr<c10::BFloat16>());
    for (int64_t i = 0; i < n; ++i) {
      const uint32_t u = static_cast<uint32_t>(src[i]) << 16;
      std::memcpy(&buffer[i], &u, 4);
    }
  } else {
    const auto *src = reinterpret_cast<const uint16_t *>(dense.const_data_ptr<c10::Half>());
#if defined(__x86_64__)
    if (has_f16c()) {
      widen_half_f16c(src, buffer.data(), n);
      return buffer.data();
    }
#endif
    widen_half(src, buffer.data(), n);
  }
  return buffer.data();
}

}  // namespace detfuzz::cpu_ops
