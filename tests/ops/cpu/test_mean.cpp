// Fixed-order CPU mean: accuracy against float64 over dtypes (integers promoted), layouts, dim
// lists and keepdim; empty reductions; bitwise invariance to the batch, the dim order, the layout
// and the thread count; the documented order itself; TORCH_CHECK messages.
#include "ops/cpu/cpu_ops.h"
#include "ops/cpu/fixed_order.h"
#include "test_support.h"

#include <rapidcheck/gtest.h>

#include <cmath>

namespace detfuzz {
namespace {

using test::accurate;
using test::bitwise_equal;
using test::Layout;

OpArgs mean_args(const at::Tensor &x, std::vector<int64_t> dims, bool keepdim,
                 std::optional<at::ScalarType> out_dtype = std::nullopt) {
  OpArgs args{{x}};
  args.dims = std::move(dims);
  args.keepdim = keepdim;
  args.out_dtype = out_dtype;
  return args;
}

at::Tensor random_input(at::IntArrayRef shape, at::ScalarType dtype, uint64_t seed) {
  return at::isFloatingType(dtype) ? test::randn(shape, dtype, seed) + 0.5 : test::randint(shape, dtype, seed);
}

TEST(CpuMean, AccurateForEveryDtypeLayoutDimListAndKeepdim) {
  uint64_t seed = 1;
  const std::vector<std::pair<std::vector<int64_t>, std::vector<std::vector<int64_t>>>> cases = {
      {{7}, {{0}, {}}},     {{3, 63}, {{1}, {0}, {-1}, {}}}, {{5, 64}, {{1}, {0, 1}}},
      {{4, 65}, {{-1}}},    {{2, 129}, {{1}, {-2}}},         {{3, 5, 131}, {{2}, {0, 2}, {2, 0}, {1}, {}, {0, 1, 2}}},
      {{0, 5}, {{1}, {0}}}, {{4, 0, 3}, {{1}, {2}}}};
  for (auto dtype : {at::kFloat, at::kHalf, at::kBFloat16, at::kInt, at::kLong})
    for (const auto &[shape, dim_lists] : cases)
      for (const auto &dims : dim_lists)
        for (Layout layout : test::all_layouts())
          for (bool keepdim : {false, true}) {
            const at::Tensor x = test::with_layout(random_input(shape, dtype, seed++), layout);
            SCOPED_TRACE(std::string(c10::toString(dtype)) + " " + c10::str(shape) + " dims " + c10::str(dims) + " " +
                         test::name(layout) + (keepdim ? " keepdim" : ""));
            const at::Tensor out = cpu_ops::mean(x, dims, keepdim, std::nullopt);
            const at::Tensor expected_shape =
                at::mean(x.to(at::kDouble), dims.empty() ? at::IntArrayRef(std::vector<int64_t>{}) : dims, keepdim);
            ASSERT_EQ(out.sizes(), expected_shape.sizes());
            ASSERT_TRUE(out.is_contiguous());
            ASSERT_EQ(out.scalar_type(), at::isFloatingType(dtype) ? dtype : at::kFloat);
            EXPECT_TRUE(accurate("mean", mean_args(x, dims, keepdim), out));
          }
}

TEST(CpuMean, IntegersArePromotedAndSmallMeansAreExact) {
  for (auto dtype : {at::kInt, at::kLong}) {
    const at::Tensor x = at::arange(12, at::TensorOptions().dtype(dtype)).view({3, 4});  // row means 1.5, 5.5, 9.5
    const at::Tensor out = cpu_ops::mean(x, {1}, false, std::nullopt);
    EXPECT_EQ(out.scalar_type(), at::kFloat);
    EXPECT_TRUE(at::equal(out, at::tensor({1.5f, 5.5f, 9.5f})));
  }
}

TEST(CpuMean, OutputDtypeArgument) {
  const at::Tensor x = test::randn({4, 100}, at::kFloat, 3);
  for (auto out_dtype : {at::kHalf, at::kBFloat16, at::kFloat}) {
    const at::Tensor out = cpu_ops::mean(x, {1}, false, out_dtype);
    EXPECT_EQ(out.scalar_type(), out_dtype);
    EXPECT_TRUE(accurate("mean", mean_args(x, {1}, false, out_dtype), out));
    EXPECT_TRUE(bitwise_equal(cpu_ops::mean(x, {1}, false, std::nullopt).to(out_dtype), out));
  }
}

TEST(CpuMean, EmptyReductionIsNanAndScalarIsItself) {
  const at::Tensor out = cpu_ops::mean(at::empty({3, 0}), {1}, false, std::nullopt);
  EXPECT_TRUE(out.isnan().all().item<bool>());
  EXPECT_EQ(out.numel(), 3);
  EXPECT_EQ(cpu_ops::mean(at::empty({0, 4}), {0}, true, std::nullopt).sizes(), (at::IntArrayRef{1, 4}));
  EXPECT_EQ(cpu_ops::mean(at::scalar_tensor(2.5), {}, false, std::nullopt).item<float>(), 2.5f);
}

TEST(CpuMean, DimOrderDoesNotMatterBitwise) {
  const at::Tensor x = test::randn({6, 7, 90}, at::kFloat, 5);
  EXPECT_TRUE(
      bitwise_equal(cpu_ops::mean(x, {0, 2}, false, std::nullopt), cpu_ops::mean(x, {2, -3}, false, std::nullopt)));
}

TEST(CpuMean, RowSlicesMatchTheFullBatchBitwise) {
  for (auto dtype : {at::kFloat, at::kHalf, at::kBFloat16, at::kInt})
    for (Layout layout : test::all_layouts()) {
      const at::Tensor x = test::with_layout(random_input({23, 5, 150}, dtype, 7), layout);
      for (const std::vector<int64_t> &dims : std::vector<std::vector<int64_t>>{{2}, {1, 2}, {-1}}) {
        const at::Tensor full = cpu_ops::mean(x, dims, false, std::nullopt);
        for (auto [i, j] : std::vector<std::pair<int64_t, int64_t>>{{0, 1}, {22, 23}, {6, 7}, {2, 19}})
          EXPECT_TRUE(bitwise_equal(full.slice(0, i, j), cpu_ops::mean(x.slice(0, i, j), dims, false, std::nullopt)))
              << c10::toString(dtype) << " " << test::name(layout) << " dims " << dims << " rows " << i << ":" << j;
      }
    }
}

TEST(CpuMean, BitsDoNotDependOnLayoutOrThreadCount) {
  for (auto dtype : {at::kFloat, at::kHalf, at::kBFloat16}) {
    const at::Tensor x = test::randn({40, 300}, dtype, 9);
    for (const std::vector<int64_t> &dims : std::vector<std::vector<int64_t>>{{0}, {1}, {}}) {
      const at::Tensor expected = cpu_ops::mean(x, dims, true, std::nullopt);
      for (Layout layout : test::all_layouts())
        EXPECT_TRUE(bitwise_equal(expected, cpu_ops::mean(test::with_layout(x, layout), dims, true, std::nullopt)));
      for (int threads : {1, 2, 3})
        EXPECT_TRUE(bitwise_equal(
            expected, test::with_threads(threads, [&] { return cpu_ops::mean(x, dims, true, std::nullopt); })));
    }
  }
}

TEST(CpuMean, FollowsTheDocumentedOrder) {
  const int64_t n = 4 * fixed_order::kReduceBlock + 11;
  const at::Tensor x = test::randn({n}, at::kFloat, 13) + 1;
  float total = 0.f;
  for (int64_t k0 = 0; k0 < n; k0 += fixed_order::kReduceBlock) {
    float partial = 0.f;
    for (int64_t j = k0; j < std::min(n, k0 + fixed_order::kReduceBlock); ++j) partial = partial + x[j].item<float>();
    total = total + partial;
  }
  EXPECT_TRUE(
      bitwise_equal(at::scalar_tensor(total / static_cast<float>(n)), cpu_ops::mean(x, {0}, false, std::nullopt)));
}

TEST(CpuMean, BadInputsNameTheBadValue) {
  const at::Tensor x = at::ones({2, 3});
  EXPECT_TRUE(test::throws_with([&] { cpu_ops::mean(x, {2}, false, std::nullopt); }, "but got 2"));
  EXPECT_TRUE(test::throws_with([&] { cpu_ops::mean(x, {1, -1}, false, std::nullopt); }, "appears multiple times"));
  EXPECT_TRUE(test::throws_with([&] { cpu_ops::mean(x, {1}, false, at::kInt); }, "unsupported output dtype Int"));
  EXPECT_TRUE(test::throws_with([&] { cpu_ops::mean(x.to(at::kDouble), {1}, false, std::nullopt); },
                                "unsupported input dtype Double"));
  EXPECT_TRUE(test::throws_with([&] { cpu_ops::mean(x.to(at::kBool), {1}, false, std::nullopt); },
                                "unsupported input dtype Bool"));
}

RC_GTEST_PROP(CpuMeanProperty, SliceMatchesFullBatch, ()) {
  const int64_t rows = *rc::gen::inRange<int64_t>(1, 12);
  const int64_t n = *rc::gen::inRange<int64_t>(0, 300);
  const int64_t i = *rc::gen::inRange<int64_t>(0, rows);
  const int64_t j = *rc::gen::inRange<int64_t>(i + 1, rows + 1);
  const auto dtype = *rc::gen::elementOf(std::vector<at::ScalarType>{at::kFloat, at::kHalf, at::kBFloat16, at::kLong});
  const auto seed = *rc::gen::arbitrary<uint32_t>();
  const at::Tensor x = random_input({rows, n}, dtype, seed);
  RC_ASSERT(bitwise_diff(cpu_ops::mean(x, {1}, false, std::nullopt).slice(0, i, j),
                         cpu_ops::mean(x.slice(0, i, j), {1}, false, std::nullopt))
                .equal());
}

}  // namespace
}  // namespace detfuzz
