// The element function the GPU runs (properties/counter_data.h), checked on the CPU: its
// rounding equals ATen's double -> dtype conversion bit for bit, and element by element it gives
// the values make_values gives on the host. (tests/properties/cuda checks the device itself.)
#include "ops/counter_rng.h"
#include "ops/engine/workload.h"
#include "properties/counter_data.h"
#include "properties/data.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <vector>

namespace detfuzz {
namespace {

using counter_data::Dist;
using counter_data::OutType;

uint32_t aten_bits(const at::Tensor &t, int64_t i) {
  uint32_t bits = 0;
  std::memcpy(&bits, static_cast<const char *>(t.data_ptr()) + i * t.element_size(), t.element_size());
  return bits;
}

// Doubles that stress the rounding: random bit patterns over the whole range, float32/float16/
// bfloat16 boundaries and the halfway points between neighbours, subnormals, overflow, NaN, inf.
std::vector<double> rounding_probes() {
  std::vector<double> v = {0.0,
                           -0.0,
                           std::numeric_limits<double>::quiet_NaN(),
                           -std::numeric_limits<double>::quiet_NaN(),
                           std::numeric_limits<double>::infinity(),
                           -std::numeric_limits<double>::infinity(),
                           65504.0,
                           65519.99,
                           65520.0,
                           -65520.0,
                           65536.0,
                           0x1.0p-24,
                           0x1.0p-25,
                           0x1.8p-25,
                           0x1.0p-26,
                           0x1.0p-14,
                           0x1.ffcp-15,
                           0x1.0p-133,
                           0x1.0p-149,
                           0x1.0p-150,
                           0x1.8p-150,
                           3.4028235677973366e38,
                           3.4028235e38,
                           1e39,
                           1.0 + 0x1.0p-11,
                           1.0 + 0x1.0p-8,
                           1.0 + 0x1.8p-8,
                           1.0 + 0x1.0p-24,
                           1.0 + 0x1.8p-24};
  for (uint64_t k = 0; k < 200000; ++k) {
    const uint64_t b = counter_data::counter_bits(99, 0, k);
    double d;
    std::memcpy(&d, &b, 8);
    v.push_back(d);
    // Values near 1, near the half/bfloat16 ranges, and exact halfway points of float16.
    v.push_back(std::ldexp(1.0 + counter_data::unit(b), static_cast<int>(b % 80) - 40) * ((b >> 7) & 1 ? -1 : 1));
    const double h = std::ldexp(static_cast<double>((b >> 20) % 2048 + 1024) + 0.5, static_cast<int>(b % 40) - 34);
    v.push_back(h);
  }
  return v;
}

TEST(CounterData, RoundingMatchesATenForEveryFloatDtype) {
  const std::vector<double> probes = rounding_probes();
  const at::Tensor d = at::tensor(probes, at::kDouble);
  for (auto [dtype, type] :
       {std::pair{at::kFloat, OutType::float32}, {at::kHalf, OutType::float16}, {at::kBFloat16, OutType::bfloat16}}) {
    const at::Tensor t = d.to(dtype).contiguous();
    int64_t mismatches = 0;
    for (size_t i = 0; i < probes.size(); ++i) {
      // NaN: ATen's pattern depends on its vector path (bfloat16 0xffff or 0x7fc0); ours is one.
      if (std::isnan(probes[i])) continue;
      const uint32_t ours = counter_data::rounded_bits(probes[i], type), aten = aten_bits(t, static_cast<int64_t>(i));
      if (ours != aten && ++mismatches <= 5)
        ADD_FAILURE() << dtype << ": " << std::hexfloat << probes[i] << " -> ours 0x" << std::hex << ours << ", ATen 0x"
                      << aten;
    }
    EXPECT_EQ(mismatches, 0) << dtype;
  }
}

// What the device kernel computes, run on the host: it equals make_values for every
// distribution and dtype, and the exact distributions never ask the host to recompute.
TEST(CounterData, TheDeviceAlgorithmGivesTheHostValues) {
  const std::vector<std::pair<at::ScalarType, OutType>> types = {{at::kFloat, OutType::float32},
                                                                 {at::kHalf, OutType::float16},
                                                                 {at::kBFloat16, OutType::bfloat16},
                                                                 {at::kInt, OutType::int32},
                                                                 {at::kLong, OutType::int64}};
  const Dist dists[] = {Dist::normal, Dist::uniform, Dist::linspace, Dist::wide, Dist::special};
  const int64_t n = 40000;
  for (size_t k = 0; k < distributions().size(); ++k)
    for (auto [dtype, type] : types) {
      const std::string &name = distributions()[k];
      const at::Tensor host = make_values(7, 3, {n}, dtype, name);
      const double subnormal = dtype == at::kHalf ? 0x1.0p-24 : dtype == at::kBFloat16 ? 0x1.0p-133 : 0x1.0p-149;
      const counter_data::Keys keys = counter_data::keys_of(7, 3);
      int64_t flagged = 0, mismatches = 0;
      for (int64_t i = 0; i < n; ++i) {
        uint64_t ours;
        if (type == OutType::int32 || type == OutType::int64) {
          ours = static_cast<uint64_t>(counter_data::int_value(keys, i));
          if (type == OutType::int32) ours &= 0xffffffffull;
        } else {
          const double v = counter_data::float_value(keys, i, n, dists[k], subnormal);
          ours = counter_data::rounded_bits(v, type);
          const bool exact = counter_data::exact_dist(dists[k]) ||
                             (dists[k] == Dist::special && counter_data::special_constant(keys, i));
          if (!exact && !counter_data::rounds_unambiguously(v, type)) ++flagged;
        }
        uint64_t theirs = 0;
        std::memcpy(&theirs, static_cast<const char *>(host.data_ptr()) + i * host.element_size(), host.element_size());
        if (ours != theirs) ++mismatches;
      }
      EXPECT_EQ(mismatches, 0) << name << " " << dtype;
      EXPECT_LT(flagged, n / 1000) << name << " " << dtype << ": the margin flags too many elements";
    }
}

TEST(CounterData, AmbiguityIsFlaggedNextToARoundingBoundary) {
  // Exactly halfway between two float32 neighbours of 1: a last-bit difference decides the rounding.
  EXPECT_FALSE(counter_data::rounds_unambiguously(1.0 + 0x1.0p-24, OutType::float32));
  EXPECT_TRUE(counter_data::rounds_unambiguously(1.0 + 0x1.0p-25, OutType::float32));
  // float16 rounds from float32 (as ATen does): the halfway point 1 + 2^-11 is itself a float32,
  // so both ends land on it and tie to even; one float32 half-ulp above it they do not.
  EXPECT_TRUE(counter_data::rounds_unambiguously(1.0 + 0x1.0p-11, OutType::float16));
  EXPECT_FALSE(counter_data::rounds_unambiguously(1.0 + 0x1.0p-11 + 0x1.0p-24, OutType::float16));
  EXPECT_TRUE(counter_data::rounds_unambiguously(std::numeric_limits<double>::quiet_NaN(), OutType::bfloat16));
}

// NaN elements of `special` data have one bit pattern per dtype wherever they sit (ATen's own
// conversion gives bfloat16 NaN 0xffff or 0x7fc0 depending on its vector path).
TEST(CounterData, SpecialNaNsHaveOnePattern) {
  for (auto [dtype, pattern] : {std::pair{at::kFloat, 0x7fc00000u}, {at::kHalf, 0x7e00u}, {at::kBFloat16, 0x7fc0u}}) {
    const at::Tensor t = make_values(3, 1, {4099}, dtype, "special");
    int64_t nans = 0;
    for (int64_t i = 0; i < t.numel(); ++i)
      if (std::isnan(t[i].item<double>())) {
        ++nans;
        EXPECT_EQ(aten_bits(t, i), pattern) << dtype << " element " << i;
      }
    EXPECT_GT(nans, 50) << dtype;
  }
}

// keyed_rows (the paged-attention data, made on the GPU for CUDA cases) is, row by row, the
// values of its key from its first index.
TEST(CounterData, KeyedRowsAreRunsOfKeyedValues) {
  const std::vector<uint64_t> keys = {counter_data::tensor_key(1, 4), counter_data::tensor_key(9, 2),
                                      counter_data::tensor_key(1, 4)};
  const std::vector<uint64_t> first = {0, 640, 128};
  const at::Tensor rows = keyed_rows(keys, first, 256, at::kCPU);
  ASSERT_EQ(rows.sizes(), (at::IntArrayRef{3, 256}));
  for (int64_t r = 0; r < 3; ++r)
    for (int64_t e = 0; e < 256; ++e)
      ASSERT_EQ(rows[r][e].item<float>(), counter_data::irwin_hall_value(keys[r], first[r] + e));
  // Row 2 starts where row 0's index 128 is: the same values.
  EXPECT_TRUE(at::equal(rows[0].narrow(0, 128, 128), rows[2].narrow(0, 0, 128)));
  EXPECT_THROW(keyed_rows(keys, {0}, 4, at::kCPU), std::invalid_argument);
}

// The AVX-512 row has the scalar function's bits: every width around the eight lanes, indices
// that wrap past 2^64, and enough elements that sums of zero (made 0.5) occur.
TEST(CounterData, VectorisedKeyedRowMatchesTheScalarValues) {
  if (!irwin_hall_rows_vectorised()) GTEST_SKIP() << "this CPU has no AVX-512: only the scalar loop runs";
  std::vector<float> row;
  for (uint64_t first : {uint64_t{0}, uint64_t{3}, ~uint64_t{0} - 5})
    for (int64_t width = 0; width <= 40; ++width) {
      row.assign(width, -1.f);
      irwin_hall_row(counter_data::tensor_key(7, first), first, width, row.data());
      for (int64_t e = 0; e < width; ++e) {
        const float expected = counter_data::irwin_hall_value(counter_data::tensor_key(7, first), first + e);
        ASSERT_EQ(0, std::memcmp(&expected, &row[e], sizeof(float)))
            << "first " << first << " width " << width << " e " << e;
      }
    }
  const int64_t n = 1 << 21;
  row.assign(n, -1.f);
  irwin_hall_row(12345, 0, n, row.data());
  int64_t halves = 0;
  for (int64_t e = 0; e < n; ++e) {
    const float expected = counter_data::irwin_hall_value(12345, e);
    ASSERT_EQ(0, std::memcmp(&expected, &row[e], sizeof(float))) << "e " << e;
    halves += expected == 0.5f;
  }
  EXPECT_GT(halves, 0);
}

// The one generator (ops/counter_rng.h) and the three places that had their own copy of it: test
// data (counter_data), the engine's workloads (ops/engine/workload.cpp) and the rest of detfuzz.
// The answers were computed before the copies were merged: saved records replay only while they hold.
TEST(CounterRng, KnownAnswersOfEveryFormerCopy) {
  EXPECT_EQ(splitmix64(0), 0xe220a8397b1dcdafull);
  EXPECT_EQ(splitmix64(1), 0x910a2dec89025cc1ull);
  EXPECT_EQ(splitmix64(0x9e3779b97f4a7c15ull), 0x6e789e6aa1b965f4ull);
  EXPECT_EQ(splitmix64(~0ull), 0xe4d971771b652c20ull);
  EXPECT_EQ(splitmix64(0x123456789abcdefull), 0x157a3807a48faa9dull);
  EXPECT_EQ(counter_bits(0, 0, 0), 0x238275bc38fcbe91ull);
  EXPECT_EQ(counter_bits(0x1234, 5, 678), 0x5b42e2e4ea3c06faull);
  EXPECT_EQ(counter_bits(7, 3, uint64_t{1} << 40), 0x85396e63741be8d0ull);
  EXPECT_EQ(counter_bits(~0ull, ~0ull, ~0ull), 0x55e2c9ae3b41d287ull);
  EXPECT_EQ(counter_bits(42, 1000, 17), 0xac2f630e7bf05d7cull);
  EXPECT_EQ(tensor_key(1, 4), 0xdef434e398051d63ull);
  EXPECT_EQ(keyed_bits(tensor_key(1, 4), 99), 0x9f2f44e945b97be8ull);
  const double u = counter_unit(counter_bits(0x1234, 5, 678));
  uint64_t u_bits = 0;
  std::memcpy(&u_bits, &u, 8);
  EXPECT_EQ(u_bits, 0x3fd6d0b8b93a8f00ull);

  // counter_data's names are the same functions.
  for (uint64_t i : {uint64_t{0}, uint64_t{17}, ~uint64_t{0}}) {
    EXPECT_EQ(counter_data::splitmix64(i), splitmix64(i));
    EXPECT_EQ(counter_data::counter_bits(i, 3, 5), counter_bits(i, 3, 5));
    EXPECT_EQ(counter_data::keyed_bits(counter_data::tensor_key(i, 3), 5), counter_bits(i, 3, 5));
    EXPECT_EQ(counter_data::unit(i), counter_unit(i));
  }
  EXPECT_EQ(counter_data::keys_of(7, 3).specials, 0x3b68995555c4d252ull);
  const float ih = counter_data::irwin_hall_value(tensor_key(1, 4), 5);
  uint32_t ih_bits = 0;
  std::memcpy(&ih_bits, &ih, 4);
  EXPECT_EQ(ih_bits, 0x3ecfa4a4u);
  EXPECT_EQ(counter_data::int_value(counter_data::keys_of(7, 3), 11), -19);
  const double uni = counter_data::float_value(counter_data::keys_of(7, 3), 11, 100, Dist::uniform, 0);
  uint64_t uni_bits = 0;
  std::memcpy(&uni_bits, &uni, 8);
  EXPECT_EQ(uni_bits, 0xbfef1312dcad0682ull);

  // The engine's workloads: every prompt token, length and arrival time, hashed (FNV-1a).
  auto trace_hash = [](const engine::Trace &t) {
    uint64_t h = 0xcbf29ce484222325ull;
    auto mix = [&](uint64_t v) {
      for (int i = 0; i < 8; ++i) {
        h ^= (v >> (8 * i)) & 0xff;
        h *= 0x100000001b3ull;
      }
    };
    for (const engine::Request &r : t) {
      uint64_t arrival = 0;
      std::memcpy(&arrival, &r.arrival_s, 8);
      mix(static_cast<uint64_t>(r.id));
      mix(r.prompt.size());
      for (int32_t x : r.prompt) mix(static_cast<uint32_t>(x));
      mix(arrival);
      mix(static_cast<uint64_t>(r.decode_steps));
    }
    return h;
  };
  engine::WorkloadConfig w;
  w.requests = 50;
  w.short_max = 100;
  w.max_len = 300;
  w.seed = 7;
  const engine::Trace t = engine::make_workload(w);
  ASSERT_EQ(t[0].prompt.size(), 35u);
  EXPECT_EQ(t[0].prompt[0], 180);
  EXPECT_EQ(t[0].prompt[1], 133);
  EXPECT_EQ(t[0].prompt[2], 81);
  EXPECT_EQ(t[0].arrival_s, 0x1.cf6a1c460ddb8p-7);
  EXPECT_EQ(trace_hash(t), 0xdee95e935fa40e47ull);
  EXPECT_EQ(trace_hash(engine::make_workload(engine::WorkloadConfig{})), 0xabe06dbdebd8fea3ull);
}

}  // namespace
}  // namespace detfuzz
