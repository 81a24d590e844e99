#include "harness/diff.h"

#include <gtest/gtest.h>

#include <cmath>
#include <limits>

namespace detfuzz {
namespace {

at::Tensor f32(std::vector<float> v) { return at::tensor(v, at::kFloat); }

TEST(BitwiseDiff, EqualTensorsAreEqual) {
  const auto a = f32({1.5f, -2.0f, 3.25f});
  const auto d = bitwise_diff(a, a.clone());
  EXPECT_TRUE(d.equal());
  EXPECT_EQ(d.differing, 0);
  EXPECT_EQ(d.first_index, -1);
}

TEST(BitwiseDiff, PlusAndMinusZeroDiffer) {
  const auto d = bitwise_diff(f32({0.0f}), f32({-0.0f}));
  EXPECT_FALSE(d.equal());
  EXPECT_EQ(d.differing, 1);
  EXPECT_EQ(d.max_ulp, 1u);
  EXPECT_EQ(d.max_abs_diff, 0.0);
}

TEST(BitwiseDiff, NanEqualsOnlyTheSamePattern) {
  uint32_t bits_a = 0x7fc00000u, bits_b = 0x7fc00001u;
  float na, nb;
  std::memcpy(&na, &bits_a, 4);
  std::memcpy(&nb, &bits_b, 4);
  EXPECT_TRUE(bitwise_diff(f32({na}), f32({na})).equal());
  const auto d = bitwise_diff(f32({na}), f32({nb}));
  EXPECT_FALSE(d.equal());
  EXPECT_EQ(d.max_ulp, std::numeric_limits<uint64_t>::max());
  EXPECT_TRUE(std::isinf(d.max_abs_diff));
}

TEST(BitwiseDiff, ReportsFirstIndexCoordsAndWorstDistance) {
  auto a = at::arange(12, at::kFloat).reshape({3, 4}) + 1;
  auto b = a.clone();
  b[1][2] = std::nextafter(b[1][2].item<float>(), 100.0f);
  b[2][3] = b[2][3].item<float>() + 0.5f;
  const auto d = bitwise_diff(a, b);
  EXPECT_EQ(d.differing, 2);
  EXPECT_EQ(d.first_index, 6);
  EXPECT_EQ(d.first_coords, "[1,2]");
  EXPECT_EQ(d.expected_bits, 0x40e00000u);  // 7.0f
  EXPECT_EQ(d.actual_bits, 0x40e00001u);
  EXPECT_DOUBLE_EQ(d.max_abs_diff, 0.5);
  EXPECT_GT(d.max_ulp, 1u);
  EXPECT_NE(d.summary().find("2/12 elements differ"), std::string::npos);
}

TEST(BitwiseDiff, HalfPrecisionUlpsAndHexWidth) {
  auto a = at::tensor({1.0f}).to(at::kBFloat16);
  auto b = at::tensor({1.0078125f}).to(at::kBFloat16);  // next bf16 above 1
  const auto d = bitwise_diff(a, b);
  EXPECT_EQ(d.max_ulp, 1u);
  EXPECT_EQ(hex_bits(d.expected_bits, at::kBFloat16), "0x3f80");
  EXPECT_EQ(ulp_distance(0x8001, 0x0001, at::kHalf), 3u);  // -denorm, -0, +0, +denorm
}

TEST(BitwiseDiff, ShapeOrDtypeMismatchIsNotEqual) {
  EXPECT_TRUE(bitwise_diff(f32({1, 2}), f32({1, 2, 3})).shape_mismatch);
  EXPECT_TRUE(bitwise_diff(f32({1}), f32({1}).to(at::kDouble)).shape_mismatch);
  EXPECT_FALSE(bitwise_diff(f32({1}), f32({1}).to(at::kDouble)).equal());
}

TEST(BitwiseDiff, ComparesLogicalOrderOfStridedViews) {
  auto a = at::arange(6, at::kFloat).reshape({2, 3});
  auto t = a.t().contiguous().t();  // same values, other strides
  EXPECT_TRUE(bitwise_diff(a, t).equal());
}

}  // namespace
}  // namespace detfuzz
