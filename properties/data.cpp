#include "properties/data.h"

#include <cmath>
#include <limits>
#include <stdexcept>

namespace detfuzz {
namespace {

// Uniform in [0, 1) with 53 random bits.
double unit(uint64_t bits) { return static_cast<double>(bits >> 11) * 0x1.0p-53; }

double smallest_subnormal(at::ScalarType t) {
  switch (t) {
    case at::kHalf: return std::ldexp(1.0, -24);
    case at::kBFloat16: return std::ldexp(1.0, -133);
    default: return std::ldexp(1.0, -149);
  }
}

double normal(uint64_t seed, uint64_t tensor, uint64_t i) {
  const double u1 = unit(counter_bits(seed, tensor, 2 * i)), u2 = unit(counter_bits(seed, tensor, 2 * i + 1));
  return std::sqrt(-2.0 * std::log1p(-u1)) * std::cos(6.283185307179586 * u2);
}

}  // namespace

const std::vector<std::string> &distributions() {
  static const std::vector<std::string> d = {"normal", "uniform", "linspace", "wide", "special"};
  return d;
}

at::Tensor make_values(uint64_t seed, uint64_t tensor, at::IntArrayRef sizes, at::ScalarType dtype,
                       const std::string &dist) {
  auto out = at::empty(sizes, at::TensorOptions().dtype(at::kDouble));
  double *v = out.data_ptr<double>();
  const int64_t n = out.numel();
  if (at::isIntegralType(dtype, /*includeBool=*/false)) {
    for (int64_t i = 0; i < n; ++i) v[i] = static_cast<double>(static_cast<int64_t>(counter_bits(seed, tensor, i) % 201) - 100);
    return out.to(dtype);
  }
  const double nan = std::numeric_limits<double>::quiet_NaN(), inf = std::numeric_limits<double>::infinity();
  if (dist == "normal") {
    for (int64_t i = 0; i < n; ++i) v[i] = normal(seed, tensor, i);
  } else if (dist == "uniform") {
    for (int64_t i = 0; i < n; ++i) v[i] = 2.0 * unit(counter_bits(seed, tensor, i)) - 1.0;
  } else if (dist == "linspace") {  // as the seed's tests: linspace(-100, 100, numel)
    for (int64_t i = 0; i < n; ++i) v[i] = n == 1 ? -100.0 : -100.0 + 200.0 * static_cast<double>(i) / static_cast<double>(n - 1);
  } else if (dist == "wide") {  // magnitudes 1e-30 .. 1e30, both signs
    for (int64_t i = 0; i < n; ++i) {
      const uint64_t b = counter_bits(seed, tensor, i);
      v[i] = ((b & 1) ? -1.0 : 1.0) * std::pow(10.0, 60.0 * unit(b) - 30.0);
    }
  } else if (dist == "special") {  // a quarter of the elements are +-0, denormals, +-inf or NaN
    const double specials[] = {0.0, -0.0, smallest_subnormal(dtype), -smallest_subnormal(dtype), inf, -inf, nan};
    for (int64_t i = 0; i < n; ++i) {
      const uint64_t b = counter_bits(seed, tensor ^ 0x5bd1e995ull, i);
      v[i] = (b % 4 == 0) ? specials[(b >> 8) % 7] : normal(seed, tensor, i);
    }
  } else {
    throw std::invalid_argument("unknown distribution '" + dist + "' (expected normal, uniform, linspace, wide or special)");
  }
  return out.to(dtype);
}

at::Device device_of(Backend b) { return b == Backend::cpu ? at::Device(at::kCPU) : at::Device(at::kCUDA, 0); }

at::Tensor with_layout(const at::Tensor &values, char layout, const at::Device &device) {
  const auto opts = values.options().device(device);
  const auto poison = [&](at::IntArrayRef sizes) {
    auto t = at::empty(sizes, opts);
    if (at::isFloatingType(t.scalar_type())) t.fill_(std::numeric_limits<double>::quiet_NaN());
    else t.fill_(-77);
    return t;
  };
  const int64_t rank = values.dim();
  at::Tensor view;
  switch (layout) {
    case 'c': view = poison(values.sizes()); break;
    case 't': {
      if (rank < 2) { view = poison(values.sizes()); break; }
      auto swapped = values.sizes().vec();
      std::swap(swapped[rank - 1], swapped[rank - 2]);
      view = poison(swapped).transpose(-1, -2);
      break;
    }
    case 'p': {  // rows padded by 3 elements, and the view starts 1 row + 2 elements in
      if (rank == 0) { view = poison(values.sizes()); break; }
      auto padded = values.sizes().vec();
      padded[rank - 1] += 3;
      if (rank == 1) {
        view = poison(padded).narrow(0, 2, values.size(0));
        break;
      }
      padded[0] += 1;
      view = poison(padded).narrow(0, 1, values.size(0)).narrow(rank - 1, 2, values.size(rank - 1));
      break;
    }
    case 'g': {  // inner stride 2
      if (rank == 0) { view = poison(values.sizes()); break; }
      auto wide = values.sizes().vec();
      wide[rank - 1] = 2 * wide[rank - 1];
      view = poison(wide).slice(rank - 1, 0, wide[rank - 1], 2);
      break;
    }
    default:
      throw std::invalid_argument(std::string("unknown layout code '") + layout + "' (expected c, t, p or g)");
  }
  view.copy_(values);
  return view;
}

}  // namespace detfuzz
