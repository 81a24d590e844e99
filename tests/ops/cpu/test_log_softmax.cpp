// Fixed-order CPU log_softmax: accuracy against float64 over dtypes, layouts, dims and edge
// lengths; torch's handling of -inf, +inf and NaN; half_to_float; bitwise invariance to the batch,
// the layout and the thread count; the documented order itself; TORCH_CHECK messages.
#include "ops/cpu/cpu_ops.h"
#include "ops/cpu/fixed_order.h"
#include "test_support.h"

#include <rapidcheck/gtest.h>

#include <cmath>
#include <limits>

namespace detfuzz {
namespace {

using test::accurate;
using test::bitwise_equal;
using test::Layout;

OpArgs log_softmax_args(const at::Tensor &x, int64_t dim, bool half_to_float) {
  OpArgs args{{x}};
  args.dim = dim;
  args.half_to_float = half_to_float;
  return args;
}

TEST(CpuLogSoftmax, AccurateForEveryDtypeLayoutDimAndEdgeLength) {
  uint64_t seed = 1;
  const std::vector<std::pair<std::vector<int64_t>, std::vector<int64_t>>> shapes_and_dims = {
      {{1}, {0}},
      {{7}, {-1}},
      {{3, 63}, {1, 0}},
      {{5, 64}, {-1}},
      {{4, 65}, {1}},
      {{2, 129}, {1, 0}},
      {{3, 4, 131}, {0, 1, 2, -2}},
      {{2, 300}, {1}},
      {{0, 5}, {1, 0}},
      {{4, 0}, {1}}};
  for (auto dtype : test::float_types())
    for (const auto &[shape, dims] : shapes_and_dims)
      for (int64_t dim : dims)
        for (Layout layout : test::all_layouts())
          for (bool half_to_float : {false, true}) {
            const at::Tensor x = test::with_layout(test::randn(shape, dtype, seed++) * 4, layout);
            SCOPED_TRACE(std::string(c10::toString(dtype)) + " " + c10::str(shape) + " dim " + std::to_string(dim) +
                         " " + test::name(layout) + (half_to_float ? " half_to_float" : ""));
            const at::Tensor out = cpu_ops::log_softmax(x, dim, half_to_float);
            ASSERT_TRUE(out.is_contiguous());
            ASSERT_EQ(out.scalar_type(), half_to_float ? at::kFloat : dtype);
            EXPECT_TRUE(accurate("log_softmax", log_softmax_args(x, dim, half_to_float), out));
          }
}

TEST(CpuLogSoftmax, ScalarInputIsARowOfOne) {
  const at::Tensor out = cpu_ops::log_softmax(at::scalar_tensor(3.5), 0, false);
  EXPECT_EQ(out.dim(), 0);
  EXPECT_EQ(out.item<float>(), 0.f);
}

// -inf, +inf and NaN give what torch's float64 kernel gives: same NaN positions, same infinities.
TEST(CpuLogSoftmax, NonFiniteInputsBehaveAsTorch) {
  const double inf = std::numeric_limits<double>::infinity(), nan = std::nan("");
  const std::vector<std::vector<double>> rows = {{-inf, 0, 1},  {-inf, -inf, -inf}, {1, nan, 2}, {1, inf, 2},
                                                 {inf, inf, 0}, {-inf, inf, 3},     {0, 1, 2}};
  for (auto dtype : test::float_types()) {
    at::Tensor x = at::empty({static_cast<int64_t>(rows.size()), 3}, at::kDouble);
    for (size_t r = 0; r < rows.size(); ++r)
      for (size_t c = 0; c < 3; ++c) x[static_cast<int64_t>(r)][static_cast<int64_t>(c)] = rows[r][c];
    const at::Tensor ref = at::_log_softmax(x, 1, false);
    const at::Tensor out = cpu_ops::log_softmax(x.to(dtype), 1, false).to(at::kDouble);
    EXPECT_TRUE(at::equal(ref.isnan(), out.isnan())) << c10::toString(dtype) << "\n" << out;
    EXPECT_TRUE(at::equal(ref.isposinf(), out.isposinf()));
    EXPECT_TRUE(at::equal(ref.isneginf(), out.isneginf()));
    EXPECT_TRUE(
        accurate("log_softmax", log_softmax_args(x.to(dtype), 1, false), cpu_ops::log_softmax(x.to(dtype), 1, false)));
  }
}

// half_to_float returns float32 with exactly the bits the float32 path computes on the upcast input.
TEST(CpuLogSoftmax, HalfToFloatKeepsTheFloat32Result) {
  for (auto dtype : {at::kHalf, at::kBFloat16}) {
    const at::Tensor x = test::randn({6, 77}, dtype, 7);
    const at::Tensor out = cpu_ops::log_softmax(x, 1, true);
    EXPECT_EQ(out.scalar_type(), at::kFloat);
    EXPECT_TRUE(bitwise_equal(cpu_ops::log_softmax(x.to(at::kFloat), 1, false), out));
    EXPECT_TRUE(bitwise_equal(out.to(dtype), cpu_ops::log_softmax(x, 1, false)));
  }
}

TEST(CpuLogSoftmax, RowSlicesMatchTheFullBatchBitwise) {
  for (auto dtype : test::float_types())
    for (Layout layout : test::all_layouts()) {
      const at::Tensor x = test::with_layout(test::randn({29, 200}, dtype, 17), layout);
      const at::Tensor full = cpu_ops::log_softmax(x, 1, false);
      for (auto [i, j] : std::vector<std::pair<int64_t, int64_t>>{{0, 1}, {28, 29}, {4, 5}, {3, 17}})
        EXPECT_TRUE(bitwise_equal(full.slice(0, i, j), cpu_ops::log_softmax(x.slice(0, i, j), 1, false)))
            << c10::toString(dtype) << " " << test::name(layout) << " rows " << i << ":" << j;
      // Reducing dim 0 of the transpose: every column is a row, sliced along dim 1.
      const at::Tensor xt = x.t();
      EXPECT_TRUE(bitwise_equal(cpu_ops::log_softmax(xt, 0, false).slice(1, 3, 9),
                                cpu_ops::log_softmax(xt.slice(1, 3, 9), 0, false)));
      at::Tensor changed = x.clone();
      changed.slice(0, 1, 29).normal_();
      EXPECT_TRUE(bitwise_equal(full[0], cpu_ops::log_softmax(changed, 1, false)[0]));
    }
}

TEST(CpuLogSoftmax, BitsDoNotDependOnLayoutOrThreadCount) {
  for (auto dtype : test::float_types()) {
    const at::Tensor x = test::randn({5, 300, 7}, dtype, 27);
    for (int64_t dim : {0, 1, 2}) {
      const at::Tensor expected = cpu_ops::log_softmax(x, dim, false);
      for (Layout layout : test::all_layouts())
        EXPECT_TRUE(bitwise_equal(expected, cpu_ops::log_softmax(test::with_layout(x, layout), dim, false)));
      for (int threads : {1, 2, 3})
        EXPECT_TRUE(
            bitwise_equal(expected, test::with_threads(threads, [&] { return cpu_ops::log_softmax(x, dim, false); })));
    }
  }
}

// The three passes of fixed_order.h, spelled out for one row.
TEST(CpuLogSoftmax, FollowsTheDocumentedOrder) {
  const int64_t n = 3 * fixed_order::kReduceBlock + 5;
  const at::Tensor x = test::randn({n}, at::kFloat, 37) * 3;
  std::vector<float> v(static_cast<size_t>(n));
  for (int64_t j = 0; j < n; ++j) v[static_cast<size_t>(j)] = x[j].item<float>();
  float m = -std::numeric_limits<float>::infinity();
  for (float e : v) m = std::max(m, e);
  float total = 0.f;
  for (int64_t k0 = 0; k0 < n; k0 += fixed_order::kReduceBlock) {
    float partial = 0.f;
    for (int64_t j = k0; j < std::min(n, k0 + fixed_order::kReduceBlock); ++j)
      partial = partial + std::exp(v[static_cast<size_t>(j)] - m);
    total = total + partial;
  }
  const float log_sum = std::log(total);
  at::Tensor expected = at::empty({n});
  for (int64_t j = 0; j < n; ++j) expected[j] = (v[static_cast<size_t>(j)] - m) - log_sum;
  EXPECT_TRUE(bitwise_equal(expected, cpu_ops::log_softmax(x, 0, false)));
}

TEST(CpuLogSoftmax, BadInputsNameTheBadValue) {
  EXPECT_TRUE(test::throws_with([] { cpu_ops::log_softmax(at::ones({2, 3}), 2, false); }, "but got 2"));
  EXPECT_TRUE(test::throws_with([] { cpu_ops::log_softmax(at::ones({2, 3}), -3, false); }, "but got -3"));
  EXPECT_TRUE(test::throws_with(
      [] {
        cpu_ops::log_softmax(at::ones({2, 3}, at::kInt), 1, false);
      },
      "unsupported dtype Int"));
  EXPECT_TRUE(test::throws_with(
      [] {
        cpu_ops::log_softmax(at::ones({2, 3}, at::kDouble), 1, false);
      },
      "unsupported dtype Double"));
}

RC_GTEST_PROP(CpuLogSoftmaxProperty, SliceAlongAnotherDimMatchesFullBatch, ()) {
  const int64_t rows = *rc::gen::inRange<int64_t>(1, 12);
  const int64_t n = *rc::gen::inRange<int64_t>(1, 300);
  const int64_t i = *rc::gen::inRange<int64_t>(0, rows);
  const int64_t j = *rc::gen::inRange<int64_t>(i + 1, rows + 1);
  const auto dtype = *rc::gen::elementOf(test::float_types());
  const auto seed = *rc::gen::arbitrary<uint32_t>();
  const at::Tensor x = test::randn({rows, n}, dtype, seed) * 5;
  RC_ASSERT(
      bitwise_diff(cpu_ops::log_softmax(x, 1, false).slice(0, i, j), cpu_ops::log_softmax(x.slice(0, i, j), 1, false))
          .equal());
}

}  // namespace
}  // namespace detfuzz
