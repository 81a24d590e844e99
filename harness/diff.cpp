#include "harness/diff.h"

#include <cmath>
#include <cstdio>
#include <cstring>
#include <limits>
#include <sstream>

namespace detfuzz {
namespace {

int bit_width(at::ScalarType t) { return static_cast<int>(at::elementSize(t)) * 8; }

bool is_nan_bits(uint64_t bits, at::ScalarType t) {
  switch (t) {
    case at::kHalf: return (bits & 0x7c00) == 0x7c00 && (bits & 0x03ff) != 0;
    case at::kBFloat16: return (bits & 0x7f80) == 0x7f80 && (bits & 0x007f) != 0;
    case at::kFloat: return (bits & 0x7f800000u) == 0x7f800000u && (bits & 0x007fffffu) != 0;
    case at::kDouble:
      return (bits & 0x7ff0000000000000ull) == 0x7ff0000000000000ull && (bits & 0x000fffffffffffffull) != 0;
    default: return false;
  }
}

// Maps a sign-magnitude float bit pattern onto a line where adjacent floats are adjacent
// integers and -0 sits just below +0.
int64_t ordered(uint64_t bits, int width) {
  const uint64_t sign = 1ull << (width - 1);
  const uint64_t mag = bits & (sign - 1);
  return (bits & sign) ? -static_cast<int64_t>(mag) - 1 : static_cast<int64_t>(mag);
}

double value_of(uint64_t bits, at::ScalarType t) {
  switch (t) {
    case at::kHalf: {
      c10::Half h;
      h.x = static_cast<uint16_t>(bits);
      return static_cast<float>(h);
    }
    case at::kBFloat16: {
      c10::BFloat16 b;
      b.x = static_cast<uint16_t>(bits);
      return static_cast<float>(b);
    }
    case at::kFloat: {
      float f;
      uint32_t u = static_cast<uint32_t>(bits);
      std::memcpy(&f, &u, 4);
      return f;
    }
    case at::kDouble: {
      double d;
      std::memcpy(&d, &bits, 8);
      return d;
    }
    case at::kInt: return static_cast<double>(static_cast<int32_t>(bits));
    case at::kLong: return static_cast<double>(static_cast<int64_t>(bits));
    default: return std::numeric_limits<double>::quiet_NaN();
  }
}

}  // namespace

std::string coords_string(int64_t linear, at::IntArrayRef sizes) {
  std::vector<int64_t> c(sizes.size());
  for (int64_t d = static_cast<int64_t>(sizes.size()) - 1; d >= 0; --d) {
    c[d] = sizes[d] ? linear % sizes[d] : 0;
    linear = sizes[d] ? linear / sizes[d] : 0;
  }
  std::ostringstream os;
  os << '[';
  for (size_t i = 0; i < c.size(); ++i) os << (i ? "," : "") << c[i];
  os << ']';
  return os.str();
}

uint64_t ulp_distance(uint64_t a_bits, uint64_t b_bits, at::ScalarType dtype) {
  if (a_bits == b_bits) return 0;
  if (!at::isFloatingType(dtype)) {
    const int64_t a = static_cast<int64_t>(value_of(a_bits, dtype)), b = static_cast<int64_t>(value_of(b_bits, dtype));
    return static_cast<uint64_t>(a > b ? a - b : b - a);
  }
  if (is_nan_bits(a_bits, dtype) || is_nan_bits(b_bits, dtype)) return std::numeric_limits<uint64_t>::max();
  const int w = bit_width(dtype);
  const int64_t a = ordered(a_bits, w), b = ordered(b_bits, w);
  return static_cast<uint64_t>(a > b ? a - b : b - a);
}

std::string hex_bits(uint64_t bits, at::ScalarType dtype) {
  char buf[24];
  std::snprintf(buf, sizeof buf, "0x%0*llx", bit_width(dtype) / 4, static_cast<unsigned long long>(bits));
  return buf;
}

DiffStats bitwise_diff(const at::Tensor &expected, const at::Tensor &actual) {
  DiffStats s;
  if (expected.scalar_type() != actual.scalar_type() || !expected.sizes().equals(actual.sizes())) {
    s.shape_mismatch = true;
    std::ostringstream os;
    os << "expected " << expected.scalar_type() << expected.sizes() << ", got " << actual.scalar_type()
       << actual.sizes();
    s.shape_detail = os.str();
    return s;
  }
  const auto dtype = expected.scalar_type();
  s.dtype = dtype;
  const int w = bit_width(dtype);
  const at::Tensor e = expected.cpu().contiguous(), a = actual.cpu().contiguous();
  s.numel = e.numel();
  const auto *eb = static_cast<const uint8_t *>(e.data_ptr());
  const auto *ab = static_cast<const uint8_t *>(a.data_ptr());
  const size_t bytes = w / 8;
  for (int64_t i = 0; i < s.numel; ++i) {
    uint64_t x = 0, y = 0;
    std::memcpy(&x, eb + i * bytes, bytes);
    std::memcpy(&y, ab + i * bytes, bytes);
    if (x == y) continue;
    if (s.differing++ == 0) {
      s.first_index = i;
      s.expected_bits = x;
      s.actual_bits = y;
    }
    const double vx = value_of(x, dtype), vy = value_of(y, dtype);
    const double d =
        (std::isfinite(vx) && std::isfinite(vy)) ? std::fabs(vx - vy) : std::numeric_limits<double>::infinity();
    if (d > s.max_abs_diff || std::isnan(d)) s.max_abs_diff = d;
    const uint64_t u = ulp_distance(x, y, dtype);
    if (u > s.max_ulp) s.max_ulp = u;
  }
  if (s.first_index >= 0) s.first_coords = coords_string(s.first_index, e.sizes());
  return s;
}

std::string DiffStats::summary() const {
  if (shape_mismatch) return "shape/dtype mismatch: " + shape_detail;
  if (differing == 0) return "bitwise equal (" + std::to_string(numel) + " elements)";
  std::ostringstream os;
  os << differing << "/" << numel << " elements differ; first at " << first_coords << " (expected "
     << hex_bits(expected_bits, dtype) << ", got " << hex_bits(actual_bits, dtype) << "); max |diff| " << max_abs_diff
     << ", max ULP ";
  if (max_ulp == std::numeric_limits<uint64_t>::max())
    os << "inf(NaN)";
  else
    os << max_ulp;
  return os.str();
}

}  // namespace detfuzz
