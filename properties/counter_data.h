// The counter-based test data, element by element, as one function that the host (properties/
// data.cpp) and the device (properties/cuda/device_data.cu) both compile, so that a case's inputs
// have the same bits wherever they are made.
//
// Element e of tensor t of a case with data seed s is computed in float64 from counter_bits(s, t, e)
// and rounded once to the dtype, as ATen's double -> dtype conversion rounds (to float32 first,
// round to nearest even, then to float16 / bfloat16; NaN patterns as c10 makes them). Integer
// arithmetic, the unit interval, linspace and the rounding are exact IEEE operations and agree bit
// for bit on both sides. log1p, cos and pow (normal, wide, special) are not correctly rounded: the
// host's libm and CUDA's differ in the last bits of a float64. The device therefore also rounds
// value*(1 -+ kRoundingMargin) and flags the element when the two ends round differently; the host
// recomputes the flagged elements (a few per million), so the result equals the host's exactly.
#pragma once

#include "ops/counter_rng.h"  // the generator and its hash; DETFUZZ_HOST_DEVICE

#include <cmath>
#include <cstdint>
#include <cstring>

namespace detfuzz {
namespace counter_data {

enum class Dist : int { normal = 0, uniform = 1, linspace = 2, wide = 3, special = 4 };
// Output element types: the widths and roundings the generator knows.
enum class OutType : int { float32 = 0, float16 = 1, bfloat16 = 2, int32 = 3, int64 = 4 };

// Relative half-width of the interval that holds both sides' float64 value of a non-exact
// element: CUDA's and glibc's log1p, cos and pow are within a few ulp (2^-52) of the true value,
// so 2^-40 leaves a margin of about a thousand.
constexpr double kRoundingMargin = 0x1.0p-40;

// The generator (ops/counter_rng.h), under the names this header has always had.
using detfuzz::counter_bits;
using detfuzz::keyed_bits;
using detfuzz::splitmix64;
using detfuzz::tensor_key;

// The keys of one tensor: its values, and (distribution `special`) where its constants go.
struct Keys {
  uint64_t values, specials;
};
DETFUZZ_HOST_DEVICE inline Keys keys_of(uint64_t seed, uint64_t tensor) {
  return {tensor_key(seed, tensor), tensor_key(seed, tensor ^ 0x5bd1e995ull)};
}

// Uniform in [0, 1) with 53 random bits (counter_unit).
DETFUZZ_HOST_DEVICE inline double unit(uint64_t bits) { return counter_unit(bits); }

DETFUZZ_HOST_DEVICE inline double normal(uint64_t key, uint64_t i) {
  const double u1 = unit(keyed_bits(key, 2 * i)), u2 = unit(keyed_bits(key, 2 * i + 1));
  return sqrt(-2.0 * log1p(-u1)) * cos(6.283185307179586 * u2);
}

// Whether every float64 operation behind an element of `dist` is correctly rounded (then both
// sides agree without a margin).
DETFUZZ_HOST_DEVICE inline bool exact_dist(Dist dist) { return dist == Dist::uniform || dist == Dist::linspace; }

// Element i of n of a floating tensor, in float64. `subnormal` is the dtype's smallest positive
// subnormal (the `special` distribution uses it).
DETFUZZ_HOST_DEVICE inline double float_value(const Keys &k, uint64_t i, uint64_t n, Dist dist, double subnormal) {
  switch (dist) {
    case Dist::uniform: return 2.0 * unit(keyed_bits(k.values, i)) - 1.0;
    case Dist::linspace:  // as the seed's tests: linspace(-100, 100, numel)
      return n == 1 ? -100.0 : -100.0 + 200.0 * static_cast<double>(i) / static_cast<double>(n - 1);
    case Dist::wide: {  // magnitudes 1e-30 .. 1e30, both signs
      const uint64_t b = keyed_bits(k.values, i);
      return ((b & 1) ? -1.0 : 1.0) * pow(10.0, 60.0 * unit(b) - 30.0);
    }
    case Dist::special: {  // a quarter of the elements are +-0, denormals, +-inf or NaN
      const uint64_t b = keyed_bits(k.specials, i);
      if (b % 4 != 0) return normal(k.values, i);
      switch ((b >> 8) % 7) {
        case 0: return 0.0;
        case 1: return -0.0;
        case 2: return subnormal;
        case 3: return -subnormal;
        case 4: return HUGE_VAL;
        case 5: return -HUGE_VAL;
        default: return NAN;
      }
    }
    default: return normal(k.values, i);
  }
}

// Whether element i of a `special` tensor is one of the exact constants (not a normal draw).
DETFUZZ_HOST_DEVICE inline bool special_constant(const Keys &k, uint64_t i) {
  return keyed_bits(k.specials, i) % 4 == 0;
}

// Element i of an integer tensor: uniform in [-100, 100].
DETFUZZ_HOST_DEVICE inline int64_t int_value(const Keys &k, uint64_t i) {
  return static_cast<int64_t>(keyed_bits(k.values, i) % 201) - 100;
}

// The paged-attention data: one splitmix64 per element, whose four 16-bit quarters are four
// uniforms with a centred sum (Irwin-Hall) that is normal-ish with variance 1 and |v| < 3.47;
// never 0 (0 becomes 0.5). Integer arithmetic and one correctly rounded multiply: the same bits
// on both sides.
DETFUZZ_HOST_DEVICE inline float irwin_hall_value(uint64_t key, uint64_t index) {
  const uint64_t h = keyed_bits(key, index);
  const int64_t sum = static_cast<int64_t>(h & 0xffff) + static_cast<int64_t>((h >> 16) & 0xffff) +
                      static_cast<int64_t>((h >> 32) & 0xffff) + static_cast<int64_t>(h >> 48) - 2 * 65535;
  const float v = static_cast<float>(static_cast<double>(sum) * (1.7320508075688772 / 65536.0));
  return v == 0.f ? 0.5f : v;
}

// float64 -> float32 bits as x86-64 converts (round to nearest even; NaN keeps its sign and the
// top of its payload, so the quiet NaN becomes 0x7fc00000). CUDA's __double2float_rn makes a
// canonical 0x7fffffff of every NaN, so NaN is done by hand.
DETFUZZ_HOST_DEVICE inline uint32_t float32_bits(double v) {
  uint64_t d;
  memcpy(&d, &v, 8);
  if ((d & 0x7fffffffffffffffull) > 0x7ff0000000000000ull)
    return static_cast<uint32_t>(d >> 32 & 0x80000000u) | 0x7fc00000u | static_cast<uint32_t>(d >> 29 & 0x003fffffu);
  const float f = static_cast<float>(v);  // round to nearest even on both sides
  uint32_t u;
  memcpy(&u, &f, 4);
  return u;
}

// float32 bits -> float16 bits, round to nearest even, as c10::Half does (NaN: sign | 0x7e00).
DETFUZZ_HOST_DEVICE inline uint16_t float16_bits(uint32_t f) {
  const uint32_t sign = (f >> 16) & 0x8000u;
  const uint32_t mag = f & 0x7fffffffu;
  if (mag > 0x7f800000u) return static_cast<uint16_t>(sign | 0x7e00u);
  if (mag >= 0x477ff000u) return static_cast<uint16_t>(sign | 0x7c00u);  // rounds to >= 65520: inf
  const int exp = static_cast<int>(mag >> 23) - 127;
  if (exp >= -14) {                               // normal half: drop 13 mantissa bits with round to nearest even
    const uint32_t rebased = mag - (112u << 23);  // exponent bias 127 -> 15
    const uint32_t rest = rebased & 0x1fffu;
    uint32_t h = rebased >> 13;
    if (rest > 0x1000u || (rest == 0x1000u && (h & 1u))) ++h;
    return static_cast<uint16_t>(sign | h);
  }
  if (exp < -25) return static_cast<uint16_t>(sign);  // below half the smallest subnormal: +-0
  // Subnormal half: the value in units of 2^-24, rounded to nearest even.
  const uint32_t mant = (mag & 0x7fffffu) | 0x800000u;  // exp >= -25 here, so the implicit bit is set
  const int shift = -exp - 14 + 13;                     // 14..25 bits to drop
  const uint32_t h = mant >> shift, rest = mant & ((1u << shift) - 1u), halfway = 1u << (shift - 1);
  return static_cast<uint16_t>(sign | (h + ((rest > halfway || (rest == halfway && (h & 1u))) ? 1u : 0u)));
}

// float32 bits -> bfloat16 bits, round to nearest even, as c10::BFloat16 does (NaN: 0x7fc0).
DETFUZZ_HOST_DEVICE inline uint16_t bfloat16_bits(uint32_t f) {
  if ((f & 0x7fffffffu) > 0x7f800000u) return 0x7fc0u;
  return static_cast<uint16_t>((f + 0x7fffu + ((f >> 16) & 1u)) >> 16);
}

// A float64 value rounded to a floating output type, as bits (zero-extended).
DETFUZZ_HOST_DEVICE inline uint32_t rounded_bits(double v, OutType t) {
  const uint32_t f = float32_bits(v);
  if (t == OutType::float16) return float16_bits(f);
  if (t == OutType::bfloat16) return bfloat16_bits(f);
  return f;
}

// Whether both ends of [v(1-margin), v(1+margin)] round to the same bits (then any float64 within
// that interval does too: the rounding is monotonic).
DETFUZZ_HOST_DEVICE inline bool rounds_unambiguously(double v, OutType t) {
  if (!(v == v) || v == 0.0 || v == HUGE_VAL || v == -HUGE_VAL) return true;  // NaN, zeros and infinities are exact
  return rounded_bits(v * (1.0 - kRoundingMargin), t) == rounded_bits(v * (1.0 + kRoundingMargin), t);
}

}  // namespace counter_data
}  // namespace detfuzz
