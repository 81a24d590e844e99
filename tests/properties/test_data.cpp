#include "properties/data.h"
#include "harness/diff.h"

#include <gtest/gtest.h>

namespace detfuzz {
namespace {

TEST(Data, CounterGeneratorIsAPureFunctionOfItsKey) {
  EXPECT_EQ(counter_bits(1, 2, 3), counter_bits(1, 2, 3));
  EXPECT_NE(counter_bits(1, 2, 3), counter_bits(1, 2, 4));
  EXPECT_NE(counter_bits(1, 2, 3), counter_bits(1, 3, 3));
  EXPECT_NE(counter_bits(1, 2, 3), counter_bits(2, 2, 3));
  // Golden values: a change here changes every saved record's data; bump corpora if intended.
  EXPECT_EQ(counter_bits(0, 0, 0), 0x238275bc38fcbe91ull);
  EXPECT_EQ(counter_bits(0x1234, 5, 678), 0x5b42e2e4ea3c06faull);
}

TEST(Data, ValuesRebuildTheSameBitsForEveryDistributionAndDtype) {
  for (const auto &dist : distributions())
    for (auto dtype : {at::kFloat, at::kHalf, at::kBFloat16, at::kInt}) {
      const auto a = make_values(42, 1, {7, 13}, dtype, dist), b = make_values(42, 1, {7, 13}, dtype, dist);
      EXPECT_TRUE(bitwise_diff(a, b).equal()) << dist;
      EXPECT_EQ(a.scalar_type(), dtype);
      EXPECT_TRUE(a.is_contiguous());
      if (dist != "linspace") EXPECT_FALSE(bitwise_diff(a, make_values(43, 1, {7, 13}, dtype, dist)).equal()) << dist;
    }
}

TEST(Data, NeverAllZerosAndSpecialHasTheSpecials) {
  const auto n = make_values(1, 0, {64, 64}, at::kFloat, "normal");
  EXPECT_GT(n.abs().sum().item<double>(), 1000.0);
  const auto s = make_values(1, 0, {64, 64}, at::kFloat, "special");
  EXPECT_TRUE(s.isnan().any().item<bool>());
  EXPECT_TRUE(s.isinf().any().item<bool>());
  EXPECT_TRUE((s == 0).logical_and(s.signbit()).any().item<bool>()) << "-0";
  EXPECT_TRUE((s.abs() < 1e-38).logical_and(s != 0).any().item<bool>()) << "denormals";
  const auto w = make_values(1, 0, {64, 64}, at::kDouble, "wide");
  EXPECT_GT(w.abs().max().item<double>(), 1e25);
  EXPECT_LT(w.abs().min().item<double>(), 1e-25);
  EXPECT_THROW(make_values(1, 0, {2}, at::kFloat, "gaussian"), std::invalid_argument);
}

TEST(Data, LayoutsKeepTheValuesAndChangeTheStrides) {
  const auto v = make_values(5, 0, {9, 11}, at::kFloat, "normal");
  for (char code : {'c', 't', 'p', 'g'}) {
    const auto t = with_layout(v, code, at::kCPU);
    EXPECT_TRUE(bitwise_diff(v, t).equal()) << code;
  }
  EXPECT_TRUE(with_layout(v, 'c', at::kCPU).is_contiguous());
  EXPECT_EQ(with_layout(v, 't', at::kCPU).stride(0), 1);
  const auto p = with_layout(v, 'p', at::kCPU);
  EXPECT_GT(p.storage_offset(), 0);
  EXPECT_EQ(p.stride(0), 14);
  EXPECT_EQ(with_layout(v, 'g', at::kCPU).stride(1), 2);
  // Storage outside the view is poisoned with NaN, so a kernel reading past its view shows it.
  const auto g = with_layout(v, 'g', at::kCPU);
  EXPECT_TRUE(at::isnan(g.as_strided({1}, {1}, g.storage_offset() + 1)).item<bool>());
  EXPECT_THROW(with_layout(v, 'x', at::kCPU), std::invalid_argument);
}

}  // namespace
}  // namespace detfuzz
