// Test data made on the GPU equals the host's bit for bit, for every distribution and dtype; the
// device diff returns what the host diff engine returns.
#include "harness/diff.h"
#include "properties/data.h"
#include "properties/device_diff.h"

#include <gtest/gtest.h>
#include <torch/cuda.h>

#include <limits>

namespace detfuzz {
namespace {

#define REQUIRE_GPU() \
  if (!torch::cuda::is_available()) GTEST_SKIP() << "needs a CUDA GPU: none found"

const at::Device kGpu(at::kCUDA, 0);

TEST(DeviceData, BitIdenticalToTheHostForEveryDistributionAndDtype) {
  REQUIRE_GPU();
  for (const auto &dist : distributions())
    for (auto dtype : {at::kFloat, at::kHalf, at::kBFloat16, at::kInt, at::kLong})
      for (const std::vector<int64_t> &sizes :
           std::vector<std::vector<int64_t>>{{1}, {0, 5}, {3, 1000}, {1024, 1031}, {2, 3, 70001}}) {
        for (uint64_t seed : {0ull, 0x1234ull, 0xfedcba9876ull}) {
          const at::Tensor host = make_values(seed, 2, sizes, dtype, dist);
          const at::Tensor device = make_values(seed, 2, sizes, dtype, dist, kGpu);
          ASSERT_TRUE(device.is_cuda());
          ASSERT_EQ(device.scalar_type(), dtype);
          const DiffStats d = bitwise_diff(host, device.cpu());
          EXPECT_TRUE(d.equal()) << dist << " " << dtype << " " << sizes << " seed " << seed << ": " << d.summary();
        }
      }
}

// The paged-attention data made on the device equals the host's.
TEST(DeviceData, KeyedRowsBitIdenticalToTheHost) {
  REQUIRE_GPU();
  std::vector<uint64_t> keys, first;
  for (uint64_t r = 0; r < 777; ++r) {
    keys.push_back(counter_bits(5, r % 7, r));
    first.push_back(r * 1024 + (r % 3));
  }
  for (int64_t width : {1, 128, 1024, 4096}) {
    const at::Tensor host = keyed_rows(keys, first, width, at::kCPU), device = keyed_rows(keys, first, width, kGpu);
    ASSERT_TRUE(device.is_cuda());
    EXPECT_TRUE(bitwise_diff(host, device.cpu()).equal()) << "width " << width;
  }
  EXPECT_EQ(keyed_rows({}, {}, 64, kGpu).numel(), 0);
}

// Float64 has no device path: it is made on the host and moved, with the same bits.
TEST(DeviceData, OtherDtypesFallBackToTheHost) {
  REQUIRE_GPU();
  const at::Tensor device = make_values(5, 1, {33, 17}, at::kDouble, "normal", kGpu);
  EXPECT_TRUE(device.is_cuda());
  EXPECT_TRUE(bitwise_diff(make_values(5, 1, {33, 17}, at::kDouble, "normal"), device.cpu()).equal());
}

void expect_same_stats(const at::Tensor &expected, const at::Tensor &actual, const std::string &what) {
  const DiffStats host = bitwise_diff(expected, actual);
  const DiffStats device = device_bitwise_diff(expected.to(kGpu), actual.to(kGpu));
  EXPECT_EQ(device.numel, host.numel) << what;
  EXPECT_EQ(device.differing, host.differing) << what;
  EXPECT_EQ(device.first_index, host.first_index) << what;
  EXPECT_EQ(device.first_coords, host.first_coords) << what;
  EXPECT_EQ(device.expected_bits, host.expected_bits) << what;
  EXPECT_EQ(device.actual_bits, host.actual_bits) << what;
  EXPECT_EQ(device.max_ulp, host.max_ulp) << what;
  EXPECT_EQ(device.max_abs_diff, host.max_abs_diff) << what;
  EXPECT_EQ(device.summary(), host.summary()) << what;
}

TEST(DeviceDiff, SameStatsAsTheHostEngine) {
  REQUIRE_GPU();
  const double nan = std::numeric_limits<double>::quiet_NaN(), inf = std::numeric_limits<double>::infinity();
  for (auto dtype : {at::kFloat, at::kHalf, at::kBFloat16, at::kDouble, at::kInt, at::kLong}) {
    const bool floating = at::isFloatingType(dtype);
    const at::Tensor a = make_values(11, 0, {37, 129}, dtype, floating ? "special" : "normal");
    EXPECT_TRUE(device_bitwise_diff(a.to(kGpu), a.to(kGpu)).equal()) << dtype;
    // Scattered changes: next representable values, sign flips, and (floats) NaN, inf, -0.
    at::Tensor b = a.clone();
    auto flat = b.view(-1);
    flat.narrow(0, 100, 50).copy_(make_values(12, 0, {50}, dtype, floating ? "normal" : "uniform"));
    flat[4000] = flat[4000].neg();
    if (floating) {
      flat[7] = nan;
      flat[3001] = inf;
      flat[3002] = -0.0;
      if (dtype == at::kFloat || dtype == at::kDouble)
        flat[4444] = at::nextafter(flat[4444], at::full({}, inf, flat.options()));
    } else {
      flat[9] = 1000;
    }
    expect_same_stats(a, b, std::string("dtype ") + c10::toString(dtype));
    // A single differing element at the very end, and non-contiguous views.
    at::Tensor c = a.clone();
    c.view(-1)[c.numel() - 1] = 3;
    expect_same_stats(a, c, "last element");
    expect_same_stats(a.t(), b.t(), "transposed views");
  }
  expect_same_stats(at::empty({0, 3}), at::empty({0, 3}), "empty");
  // Shape mismatches are reported, not compared.
  const DiffStats m = compare_bits(at::zeros({2, 3}, kGpu), at::zeros({3, 2}, kGpu));
  EXPECT_TRUE(m.shape_mismatch);
}

}  // namespace
}  // namespace detfuzz
