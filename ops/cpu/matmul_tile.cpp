// The inner step of fixed_order::matmul_accumulate_rows on float32 tiles, in two forms with the
// same bits: the plain loop (the specification, and the path of CPUs without AVX-512) and an
// AVX-512 kernel that keeps each row's partial sums in registers over the whole K block, four
// rows at a time sharing each load of B. Every partial starts at +0 and takes its products
// a*b (one rounding each, then one addition: -ffp-contract=off keeps them apart) in ascending
// k, exactly as the plain loop does; columns are independent, so the lanes change no order.
// Only a NaN's payload may differ (the compiler may swap a product's operands in either loop);
// every caller's output step canonicalises NaN.
#include "ops/cpu/fixed_order.h"

#if defined(__x86_64__)
#include <immintrin.h>
#endif

namespace detfuzz::fixed_order {

void accumulate_tile_portable(const float *a, int64_t rows, int64_t kt, const float *b, int64_t nt, float *acc,
                              int64_t ldc) {
  thread_local std::vector<float> partial;
  partial.resize(static_cast<size_t>(nt));
  for (int64_t i = 0; i < rows; ++i) {
    float *__restrict part = partial.data();
    std::fill(part, part + nt, 0.f);
    for (int64_t kk = 0; kk < kt; ++kk) {
      const float a_ik = a[i * kt + kk];
      const float *__restrict tile_row = b + kk * nt;
      for (int64_t j = 0; j < nt; ++j) part[j] += a_ik * tile_row[j];
    }
    float *__restrict acc_row = acc + i * ldc;
    for (int64_t j = 0; j < nt; ++j) acc_row[j] = acc_row[j] + part[j];
  }
}

#if defined(__x86_64__)
namespace {

__attribute__((target("avx512f"))) inline __mmask16 lanes(int64_t width) {
  return width >= 16 ? __mmask16(0xFFFF) : width <= 0 ? __mmask16(0) : __mmask16((1u << width) - 1u);
}

// R rows by 32 columns (two vectors per row, the last column block masked).
template <int R>
__attribute__((target("avx512f"))) inline void rows_avx512(const float *a, int64_t kt, const float *b, int64_t nt,
                                                           float *acc, int64_t ldc) {
  for (int64_t j0 = 0; j0 < nt; j0 += 32) {
    const __mmask16 m0 = lanes(nt - j0), m1 = lanes(nt - j0 - 16);
    __m512 p0[R], p1[R];
    for (int r = 0; r < R; ++r) p0[r] = p1[r] = _mm512_setzero_ps();
    for (int64_t kk = 0; kk < kt; ++kk) {
      const float *tile_row = b + kk * nt + j0;
      const __m512 b0 = _mm512_maskz_loadu_ps(m0, tile_row), b1 = _mm512_maskz_loadu_ps(m1, tile_row + 16);
      for (int r = 0; r < R; ++r) {
        const __m512 a_ik = _mm512_set1_ps(a[r * kt + kk]);
        p0[r] = _mm512_add_ps(p0[r], _mm512_mul_ps(a_ik, b0));
        p1[r] = _mm512_add_ps(p1[r], _mm512_mul_ps(a_ik, b1));
      }
    }
    for (int r = 0; r < R; ++r) {
      float *acc_row = acc + r * ldc + j0;
      _mm512_mask_storeu_ps(acc_row, m0, _mm512_add_ps(_mm512_maskz_loadu_ps(m0, acc_row), p0[r]));
      _mm512_mask_storeu_ps(acc_row + 16, m1, _mm512_add_ps(_mm512_maskz_loadu_ps(m1, acc_row + 16), p1[r]));
    }
  }
}

__attribute__((target("avx512f"))) void accumulate_tile_avx512(const float *a, int64_t rows, int64_t kt, const float *b,
                                                               int64_t nt, float *acc, int64_t ldc) {
  int64_t i = 0;
  for (; i + 4 <= rows; i += 4) rows_avx512<4>(a + i * kt, kt, b, nt, acc + i * ldc, ldc);
  for (; i < rows; ++i) rows_avx512<1>(a + i * kt, kt, b, nt, acc + i * ldc, ldc);
}

}  // namespace
#endif

bool accumulate_tile_vectorised() {
#if defined(__x86_64__)
  static const bool avx512 = __builtin_cpu_supports("avx512f");
  return avx512;
#else
  return false;
#endif
}

void accumulate_tile(const float *a, int64_t rows, int64_t kt, const float *b, int64_t nt, float *acc, int64_t ldc) {
#if defined(__x86_64__)
  if (accumulate_tile_vectorised()) return accumulate_tile_avx512(a, rows, kt, b, nt, acc, ldc);
#endif
  accumulate_tile_portable(a, rows, kt, b, nt, acc, ldc);
}

}  // namespace detfuzz::fixed_order
