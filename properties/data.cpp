#include "properties/data.h"

#include "properties/counter_data.h"

#if defined(__x86_64__)
#include <immintrin.h>
#endif

#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <limits>
#include <stdexcept>
#include <vector>

#ifdef DETFUZZ_WITH_CUDA
#include <c10/cuda/CUDAException.h>
#include "properties/cuda/device_kernels.h"

#include <ATen/cuda/CUDAContext.h>
#include <c10/cuda/CUDAGuard.h>
#endif

namespace detfuzz {
namespace {

using counter_data::Dist;
using counter_data::OutType;

double smallest_subnormal(at::ScalarType t) {
  switch (t) {
    case at::kHalf: return std::ldexp(1.0, -24);
    case at::kBFloat16: return std::ldexp(1.0, -133);
    default: return std::ldexp(1.0, -149);
  }
}

Dist dist_of(const std::string &dist) {
  if (dist == "normal") return Dist::normal;
  if (dist == "uniform") return Dist::uniform;
  if (dist == "linspace") return Dist::linspace;
  if (dist == "wide") return Dist::wide;
  if (dist == "special") return Dist::special;
  throw std::invalid_argument("unknown distribution '" + dist +
                              "' (expected normal, uniform, linspace, wide or special)");
}

// A floating dtype the generator rounds itself (counter_data::rounded_bits): ATen's own
// conversion gives the same bits except for NaN, whose bfloat16 pattern depends on whether its
// vectorised or scalar path converted the element (0xffff or 0x7fc0), i.e. on the element's
// position and the machine's CPU capability. Ours is one pattern everywhere, on the GPU too.
bool rounded_here(at::ScalarType t, OutType &out) {
  switch (t) {
    case at::kFloat: out = OutType::float32; return true;
    case at::kHalf: out = OutType::float16; return true;
    case at::kBFloat16: out = OutType::bfloat16; return true;
    default: return false;
  }
}

template <typename Word, OutType type>
void store_rounded_as(Word *out, const double *values, int64_t count) {
  for (int64_t k = 0; k < count; ++k) out[k] = static_cast<Word>(counter_data::rounded_bits(values[k], type));
}

// Writes the rounded bits of values[0..count) into `out` (contiguous, CPU, count elements).
void store_rounded(at::Tensor &out, OutType type, const double *values, int64_t count) {
  switch (type) {
    case OutType::float16:
      store_rounded_as<uint16_t, OutType::float16>(static_cast<uint16_t *>(out.data_ptr()), values, count);
      break;
    case OutType::bfloat16:
      store_rounded_as<uint16_t, OutType::bfloat16>(static_cast<uint16_t *>(out.data_ptr()), values, count);
      break;
    default:
      store_rounded_as<uint32_t, OutType::float32>(static_cast<uint32_t *>(out.data_ptr()), values, count);
      break;
  }
}

// The host's values: float64, rounded once to the dtype.
at::Tensor host_values(uint64_t seed, uint64_t tensor, at::IntArrayRef sizes, at::ScalarType dtype, Dist dist) {
  auto wide = at::empty(sizes, at::TensorOptions().dtype(at::kDouble));
  double *v = wide.data_ptr<double>();
  const int64_t n = wide.numel();
  const counter_data::Keys keys = counter_data::keys_of(seed, tensor);
  if (at::isIntegralType(dtype, /*includeBool=*/false)) {
    for (int64_t i = 0; i < n; ++i) v[i] = static_cast<double>(counter_data::int_value(keys, i));
    return wide.to(dtype);
  }
  const double subnormal = smallest_subnormal(dtype);
  for (int64_t i = 0; i < n; ++i) v[i] = counter_data::float_value(keys, i, n, dist, subnormal);
  OutType type;
  if (!rounded_here(dtype, type)) return wide.to(dtype);
  at::Tensor out = at::empty(sizes, at::TensorOptions().dtype(dtype));
  store_rounded(out, type, v, n);
  return out;
}

#ifdef DETFUZZ_WITH_CUDA
bool device_out_type(at::ScalarType t, OutType &out) {
  switch (t) {
    case at::kFloat: out = OutType::float32; return true;
    case at::kHalf: out = OutType::float16; return true;
    case at::kBFloat16: out = OutType::bfloat16; return true;
    case at::kInt: out = OutType::int32; return true;
    case at::kLong: out = OutType::int64; return true;
    default: return false;
  }
}

// The same values made on the GPU (properties/cuda/device_data.cu). The few elements whose
// float64 value the device cannot round with certainty as the host does are recomputed here.
at::Tensor device_values(uint64_t seed, uint64_t tensor, at::IntArrayRef sizes, at::ScalarType dtype, Dist dist,
                         OutType type, const at::Device &device) {
  const c10::cuda::CUDAGuard guard(device);
  at::Tensor out = at::empty(sizes, at::TensorOptions().dtype(dtype).device(device));
  const int64_t n = out.numel();
  if (n == 0) return out;
  const int64_t capacity = std::max<int64_t>(256, n / 4096);
  // One buffer: the flagged count (8 bytes) and then the flagged indices.
  at::Tensor scratch = at::empty({capacity + 1}, at::TensorOptions().dtype(at::kLong).device(device));
  auto *count = reinterpret_cast<unsigned long long *>(scratch.data_ptr<int64_t>());
  const cudaStream_t stream = at::cuda::getCurrentCUDAStream();
  const double subnormal = smallest_subnormal(dtype);
  device_kernels::launch_counter_fill(out.data_ptr(), type, n, seed, tensor, dist, subnormal, count,
                                      scratch.data_ptr<int64_t>() + 1, capacity, stream);
  unsigned long long flagged = 0;
  C10_CUDA_CHECK(cudaMemcpyAsync(&flagged, count, sizeof flagged, cudaMemcpyDeviceToHost, stream));
  C10_CUDA_CHECK(cudaStreamSynchronize(stream));
  if (flagged == 0) return out;
  if (static_cast<int64_t>(flagged) > capacity) return host_values(seed, tensor, sizes, dtype, dist).to(device);
  const at::Tensor index = scratch.narrow(0, 1, static_cast<int64_t>(flagged)).cpu();
  const int64_t *where = index.data_ptr<int64_t>();
  std::vector<double> exact(flagged);
  const counter_data::Keys keys = counter_data::keys_of(seed, tensor);
  for (size_t k = 0; k < exact.size(); ++k) exact[k] = counter_data::float_value(keys, where[k], n, dist, subnormal);
  at::Tensor fixed = at::empty({static_cast<int64_t>(flagged)}, at::TensorOptions().dtype(dtype));
  store_rounded(fixed, type, exact.data(), static_cast<int64_t>(flagged));
  out.view(-1).index_copy_(0, index.to(device), fixed.to(device));
  return out;
}
#endif

void irwin_hall_row_portable(uint64_t key, uint64_t first, int64_t width, float *out) {
  for (int64_t e = 0; e < width; ++e) out[e] = counter_data::irwin_hall_value(key, first + static_cast<uint64_t>(e));
}

#if defined(__x86_64__)
// irwin_hall_value eight elements at a time: the same integer steps (splitmix64, the four 16-bit
// fields), the one exact int64 -> double conversion, the one rounding of the product and of the
// conversion to float32 (to nearest even), the same 0 -> 0.5: the same bits.
__attribute__((target("avx512f,avx512dq"))) void irwin_hall_row_avx512(uint64_t key, uint64_t first, int64_t width,
                                                                       float *out) {
  const __m512i lanes = _mm512_set_epi64(7, 6, 5, 4, 3, 2, 1, 0), low16 = _mm512_set1_epi64(0xffff);
  const __m512i golden = _mm512_set1_epi64(static_cast<long long>(kSplitmixGamma));
  const __m512i mul1 = _mm512_set1_epi64(static_cast<long long>(kSplitmixMul1));
  const __m512i mul2 = _mm512_set1_epi64(static_cast<long long>(kSplitmixMul2));
  const __m512i centre = _mm512_set1_epi64(2 * 65535);
  const __m512d scale = _mm512_set1_pd(1.7320508075688772 / 65536.0);
  const __m256 zero = _mm256_setzero_ps(), half = _mm256_set1_ps(0.5f);
  int64_t e = 0;
  for (; e + 8 <= width; e += 8) {
    __m512i x =
        _mm512_add_epi64(_mm512_set1_epi64(static_cast<long long>(key + first + static_cast<uint64_t>(e))), lanes);
    x = _mm512_add_epi64(x, golden);
    x = _mm512_mullo_epi64(_mm512_xor_si512(x, _mm512_srli_epi64(x, 30)), mul1);
    x = _mm512_mullo_epi64(_mm512_xor_si512(x, _mm512_srli_epi64(x, 27)), mul2);
    const __m512i h = _mm512_xor_si512(x, _mm512_srli_epi64(x, 31));
    __m512i sum = _mm512_add_epi64(_mm512_and_si512(h, low16), _mm512_and_si512(_mm512_srli_epi64(h, 16), low16));
    sum = _mm512_add_epi64(sum, _mm512_and_si512(_mm512_srli_epi64(h, 32), low16));
    sum = _mm512_sub_epi64(_mm512_add_epi64(sum, _mm512_srli_epi64(h, 48)), centre);
    const __m256 v = _mm512_cvtpd_ps(_mm512_mul_pd(_mm512_cvtepi64_pd(sum), scale));
    _mm256_storeu_ps(out + e, _mm256_blendv_ps(v, half, _mm256_cmp_ps(v, zero, _CMP_EQ_OQ)));
  }
  irwin_hall_row_portable(key, first + static_cast<uint64_t>(e), width - e, out + e);
}
#endif

}  // namespace

bool irwin_hall_rows_vectorised() {
#if defined(__x86_64__)
  static const bool avx512 = __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512dq");
  return avx512;
#else
  return false;
#endif
}

void irwin_hall_row(uint64_t key, uint64_t first, int64_t width, float *out) {
#if defined(__x86_64__)
  if (irwin_hall_rows_vectorised()) return irwin_hall_row_avx512(key, first, width, out);
#endif
  irwin_hall_row_portable(key, first, width, out);
}

const std::vector<std::string> &distributions() {
  static const std::vector<std::string> d = {"normal", "uniform", "linspace", "wide", "special"};
  return d;
}

at::Tensor make_values(uint64_t seed, uint64_t tensor, at::IntArrayRef sizes, at::ScalarType dtype,
                       const std::string &dist, const at::Device &device) {
  const Dist d = dist_of(dist);
#ifdef DETFUZZ_WITH_CUDA
  OutType type;
  if (device.is_cuda() && device_out_type(dtype, type))
    return device_values(seed, tensor, sizes, dtype, d, type, device);
#endif
  const at::Tensor values = host_values(seed, tensor, sizes, dtype, d);
  return device.is_cpu() ? values : values.to(device);
}

at::Tensor keyed_rows(const std::vector<uint64_t> &keys, const std::vector<uint64_t> &first, int64_t width,
                      const at::Device &device) {
  if (keys.size() != first.size() || width < 0)
    throw std::invalid_argument("keyed_rows: keys and first differ in length, or width < 0");
  const int64_t rows = static_cast<int64_t>(keys.size());
#ifdef DETFUZZ_WITH_CUDA
  if (device.is_cuda() && rows > 0 && width > 0) {
    const c10::cuda::CUDAGuard guard(device);
    // One transfer of the (key, first) pairs, then a kernel writes every element.
    at::Tensor pairs = at::empty({rows, 2}, at::TensorOptions().dtype(at::kLong));
    auto *p = reinterpret_cast<uint64_t *>(pairs.data_ptr<int64_t>());
    for (int64_t r = 0; r < rows; ++r) {
      p[2 * r] = keys[r];
      p[2 * r + 1] = first[r];
    }
    const at::Tensor on_device = pairs.to(device);
    at::Tensor out = at::empty({rows, width}, at::TensorOptions().dtype(at::kFloat).device(device));
    device_kernels::launch_keyed_rows(out.data_ptr<float>(),
                                      reinterpret_cast<const uint64_t *>(on_device.data_ptr<int64_t>()), rows, width,
                                      at::cuda::getCurrentCUDAStream());
    return out;
  }
#endif
  at::Tensor out = at::empty({rows, width}, at::TensorOptions().dtype(at::kFloat));
  float *o = out.data_ptr<float>();
  for (int64_t r = 0; r < rows; ++r) irwin_hall_row(keys[r], first[r], width, o + r * width);
  return device.is_cpu() ? out : out.to(device);
}

at::Device device_of(Backend b) { return b == Backend::cpu ? at::Device(at::kCPU) : at::Device(at::kCUDA, 0); }

void check_tensors_fit(double bytes, const at::Device &device, const std::string &what) {
  static const double host_memory =
      static_cast<double>(sysconf(_SC_PHYS_PAGES)) * static_cast<double>(sysconf(_SC_PAGESIZE));
  double memory = host_memory;
  std::string where = "the host's";
#ifdef DETFUZZ_WITH_CUDA
  if (device.is_cuda()) {
    memory = static_cast<double>(at::cuda::getDeviceProperties(device.index())->totalGlobalMem);
    where = "the CUDA device's";
  }
#endif
  if (memory > 0 && bytes > memory) {  // 0 or less: the host did not say
    const auto gib = [](double b) {
      char text[32];
      std::snprintf(text, sizeof text, "%.1f GiB", b / (1 << 30));
      return std::string(text);
    };
    throw std::invalid_argument(what + ": its tensors need " + gib(bytes) + ", more than " + where + " " + gib(memory) +
                                " of memory");
  }
}

at::Tensor with_layout(const at::Tensor &values, char layout, const at::Device &device) {
  const auto opts = values.options().device(device);
  const auto poison = [&](at::IntArrayRef sizes) {
    auto t = at::empty(sizes, opts);
    if (at::isFloatingType(t.scalar_type()))
      t.fill_(std::numeric_limits<double>::quiet_NaN());
    else
      t.fill_(-77);
    return t;
  };
  const int64_t rank = values.dim();
  at::Tensor view;
  switch (layout) {
    case 'c': view = at::empty(values.sizes(), opts); break;  // the copy covers all of it: nothing to poison
    case 't': {
      if (rank < 2) {
        view = poison(values.sizes());
        break;
      }
      auto swapped = values.sizes().vec();
      std::swap(swapped[rank - 1], swapped[rank - 2]);
      view = poison(swapped).transpose(-1, -2);
      break;
    }
    case 'p': {  // rows padded by 3 elements, and the view starts 1 row + 2 elements in
      if (rank == 0) {
        view = poison(values.sizes());
        break;
      }
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
      if (rank == 0) {
        view = poison(values.sizes());
        break;
      }
      auto wide = values.sizes().vec();
      wide[rank - 1] = 2 * wide[rank - 1];
      view = poison(wide).slice(rank - 1, 0, wide[rank - 1], 2);
      break;
    }
    default: throw std::invalid_argument(std::string("unknown layout code '") + layout + "' (expected c, t, p or g)");
  }
  view.copy_(values);
  return view;
}

}  // namespace detfuzz
