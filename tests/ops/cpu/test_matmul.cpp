// Fixed-order CPU mm / addmm / bmm: accuracy against float64 over dtypes, layouts and edge sizes;
// bitwise invariance to the batch, the layout and the thread count; the documented order itself;
// torch's addmm conventions; and the TORCH_CHECK messages.
#include "ops/cpu/cpu_ops.h"
#include "ops/cpu/fixed_order.h"
#include "ops/cpu/output.h"
#include "test_support.h"

#include <rapidcheck/gtest.h>

#include <cmath>
#include <cstring>
#include <limits>

namespace detfuzz {
namespace {

using test::accurate;
using test::bitwise_equal;
using test::Layout;

struct Mnk {
  int64_t m, n, k;
};
// Edge sizes: ones, around the K block (63, 64, 65, 127, 128, 129), primes, empty dims.
const std::vector<Mnk> kShapes = {{1, 1, 1},     {3, 5, 63},    {7, 9, 64}, {5, 129, 65}, {2, 3, 127}, {1, 64, 129},
                                  {13, 31, 200}, {17, 11, 128}, {0, 5, 3},  {4, 0, 3},    {4, 5, 0},   {0, 0, 0}};

std::string shape_name(const Mnk &s) {
  return std::to_string(s.m) + "x" + std::to_string(s.n) + "x" + std::to_string(s.k);
}

TEST(CpuMatmul, MmAccurateForEveryDtypeLayoutAndEdgeSize) {
  uint64_t seed = 1;
  for (auto dtype : test::float_types())
    for (const auto &s : kShapes)
      for (Layout la : test::all_layouts())
        for (Layout lb : {Layout::contiguous, Layout::transposed, Layout::strided}) {
          const at::Tensor a = test::with_layout(test::randn({s.m, s.k}, dtype, seed++), la);
          const at::Tensor b = test::with_layout(test::randn({s.k, s.n}, dtype, seed++), lb);
          const at::Tensor out = cpu_ops::mm(a, b);
          SCOPED_TRACE(std::string(c10::toString(dtype)) + " " + shape_name(s) + " a:" + test::name(la) +
                       " b:" + test::name(lb));
          ASSERT_TRUE(out.is_contiguous());
          ASSERT_EQ(out.scalar_type(), dtype);
          EXPECT_TRUE(accurate("mm", {{a, b}}, out));
        }
}

TEST(CpuMatmul, KZeroGivesZerosAndBiasOnly) {
  const at::Tensor a = at::empty({3, 0}), b = at::empty({0, 4});
  EXPECT_TRUE(at::equal(cpu_ops::mm(a, b), at::zeros({3, 4})));
  const at::Tensor bias = test::randn({4}, at::kFloat, 7);
  EXPECT_TRUE(at::equal(cpu_ops::addmm(bias, a, b, 2.0, 1.0), (2 * bias).expand({3, 4})));
}

TEST(CpuMatmul, AddmmAccurateForBiasShapesAndCoefficients) {
  uint64_t seed = 100;
  const std::vector<std::pair<double, double>> coefficients = {{1, 1}, {0.5, -2}, {0, 1.5}, {-1.25, 0}, {0, 0}};
  for (auto dtype : test::float_types())
    for (const auto &s : std::vector<Mnk>{{5, 7, 65}, {1, 33, 9}, {16, 3, 130}, {3, 4, 0}})
      for (const std::vector<int64_t> &bias_shape :
           std::vector<std::vector<int64_t>>{{s.n}, {s.m, s.n}, {1, s.n}, {s.m, 1}, {}})
        for (auto [beta, alpha] : coefficients)
          for (Layout layout : test::all_layouts()) {
            const at::Tensor bias = test::with_layout(test::randn(bias_shape, dtype, seed++), layout);
            const at::Tensor a = test::with_layout(test::randn({s.m, s.k}, dtype, seed++), layout);
            const at::Tensor b = test::with_layout(test::randn({s.k, s.n}, dtype, seed++), layout);
            OpArgs args{{bias, a, b}};
            args.beta = beta;
            args.alpha = alpha;
            SCOPED_TRACE(std::string(c10::toString(dtype)) + " " + shape_name(s) + " bias " + c10::str(bias.sizes()) +
                         " beta " + std::to_string(beta) + " alpha " + std::to_string(alpha) + " " +
                         test::name(layout));
            const at::Tensor out = cpu_ops::addmm(bias, a, b, beta, alpha);
            ASSERT_EQ(out.sizes(), (at::IntArrayRef{s.m, s.n}));
            EXPECT_TRUE(accurate("addmm", args, out));
          }
}

TEST(CpuMatmul, AddmmDropsTermsWithZeroCoefficientLikeTorch) {
  const double nan = std::nan("");
  const at::Tensor a = test::randn({2, 3}, at::kFloat, 3), b = test::randn({3, 4}, at::kFloat, 4);
  const at::Tensor nan_bias = at::full({4}, nan);
  EXPECT_FALSE(cpu_ops::addmm(nan_bias, a, b, 0.0, 1.0).isnan().any().item<bool>());
  EXPECT_TRUE(bitwise_equal(cpu_ops::mm(a, b), cpu_ops::addmm(nan_bias, a, b, 0.0, 1.0)));
  at::Tensor nan_a = a.clone();
  nan_a[0][0] = nan;
  const at::Tensor bias = test::randn({4}, at::kFloat, 5);
  EXPECT_TRUE(at::equal(cpu_ops::addmm(bias, nan_a, b, 1.0, 0.0), bias.expand({2, 4})));
  EXPECT_TRUE(at::equal(cpu_ops::addmm(bias, nan_a, b, 1.0, 0.0), at::addmm(bias, nan_a, b, 1.0, 0.0)));
}

TEST(CpuMatmul, BmmAccurateAndEqualToMmPerBatchEntry) {
  uint64_t seed = 500;
  for (auto dtype : test::float_types())
    for (const std::vector<int64_t> &bmnk : std::vector<std::vector<int64_t>>{
             {3, 5, 7, 65}, {1, 1, 1, 1}, {4, 17, 3, 64}, {2, 0, 3, 4}, {0, 2, 3, 4}, {2, 3, 4, 0}})
      for (Layout layout : test::all_layouts()) {
        const int64_t batch = bmnk[0], m = bmnk[1], n = bmnk[2], k = bmnk[3];
        const at::Tensor a = test::with_layout(test::randn({batch, m, k}, dtype, seed++), layout);
        const at::Tensor b = test::with_layout(test::randn({batch, k, n}, dtype, seed++), layout);
        SCOPED_TRACE(std::string(c10::toString(dtype)) + " " + c10::str(bmnk) + " " + test::name(layout));
        const at::Tensor out = cpu_ops::bmm(a, b);
        ASSERT_TRUE(out.is_contiguous());
        EXPECT_TRUE(accurate("bmm", {{a, b}}, out));
        for (int64_t i = 0; i < batch; ++i) EXPECT_TRUE(bitwise_equal(cpu_ops::mm(a[i], b[i]), out[i]));
      }
}

// Every row slice [i, j) of a batch gives the bits of the whole batch's rows i..j.
TEST(CpuMatmul, RowSlicesMatchTheFullBatchBitwise) {
  for (auto dtype : test::float_types())
    for (Layout layout : test::all_layouts()) {
      const int64_t m = 37, k = 150, n = 23;
      const at::Tensor a = test::with_layout(test::randn({m, k}, dtype, 11), layout);
      const at::Tensor b = test::with_layout(test::randn({k, n}, dtype, 12), layout);
      const at::Tensor bias = test::randn({n}, dtype, 13);
      const at::Tensor full = cpu_ops::mm(a, b), full_addmm = cpu_ops::addmm(bias, a, b, 0.75, -1.5);
      SCOPED_TRACE(std::string(c10::toString(dtype)) + " " + test::name(layout));
      for (auto [i, j] : std::vector<std::pair<int64_t, int64_t>>{{0, 1}, {5, 6}, {36, 37}, {3, 20}, {0, 37}}) {
        EXPECT_TRUE(bitwise_equal(full.slice(0, i, j), cpu_ops::mm(a.slice(0, i, j), b)));
        EXPECT_TRUE(bitwise_equal(full_addmm.slice(0, i, j), cpu_ops::addmm(bias, a.slice(0, i, j), b, 0.75, -1.5)));
      }
      // A row's bits do not change when the other rows do.
      at::Tensor changed = a.clone();
      changed.slice(0, 1, m).normal_();
      EXPECT_TRUE(bitwise_equal(full[0], cpu_ops::mm(changed, b)[0]));
    }
}

TEST(CpuMatmul, BmmBatchAndRowSlicesMatchBitwise) {
  for (auto dtype : test::float_types()) {
    const at::Tensor a = test::randn({6, 19, 70}, dtype, 21), b = test::randn({6, 70, 9}, dtype, 22);
    const at::Tensor full = cpu_ops::bmm(a, b);
    EXPECT_TRUE(bitwise_equal(full.slice(0, 2, 5), cpu_ops::bmm(a.slice(0, 2, 5), b.slice(0, 2, 5))));
    EXPECT_TRUE(bitwise_equal(full.slice(1, 4, 5), cpu_ops::bmm(a.slice(1, 4, 5), b)));
  }
}

TEST(CpuMatmul, BitsDoNotDependOnLayout) {
  for (auto dtype : test::float_types()) {
    const at::Tensor a = test::randn({9, 131}, dtype, 31), b = test::randn({131, 40}, dtype, 32);
    const at::Tensor expected = cpu_ops::mm(a, b);
    for (Layout la : test::all_layouts())
      for (Layout lb : test::all_layouts())
        EXPECT_TRUE(bitwise_equal(expected, cpu_ops::mm(test::with_layout(a, la), test::with_layout(b, lb))))
            << test::name(la) << " x " << test::name(lb);
  }
}

TEST(CpuMatmul, BitsDoNotDependOnThreadCount) {
  for (auto dtype : test::float_types()) {
    const at::Tensor a = test::randn({300, 96}, dtype, 41), b = test::randn({96, 300}, dtype, 42);
    const at::Tensor bias = test::randn({300, 300}, dtype, 43);
    const at::Tensor ba = test::randn({7, 50, 64}, dtype, 44), bb = test::randn({7, 64, 33}, dtype, 45);
    for (int threads : {2, 3}) {
      EXPECT_TRUE(bitwise_equal(test::with_threads(1, [&] { return cpu_ops::mm(a, b); }),
                                test::with_threads(threads, [&] { return cpu_ops::mm(a, b); })));
      EXPECT_TRUE(bitwise_equal(test::with_threads(1, [&] { return cpu_ops::addmm(bias, a, b, 0.5, 2.0); }),
                                test::with_threads(threads, [&] { return cpu_ops::addmm(bias, a, b, 0.5, 2.0); })));
      EXPECT_TRUE(bitwise_equal(test::with_threads(1, [&] { return cpu_ops::bmm(ba, bb); }),
                                test::with_threads(threads, [&] { return cpu_ops::bmm(ba, bb); })));
    }
  }
}

// The kernel computes exactly the order documented in fixed_order.h: products rounded to float32,
// summed sequentially within K blocks of kMatmulKBlock from zero, block partials added in order.
TEST(CpuMatmul, FollowsTheDocumentedOrder) {
  for (auto dtype : test::float_types()) {
    const int64_t m = 9, k = 2 * fixed_order::kMatmulKBlock + 37, n = 5;
    const at::Tensor a = test::randn({m, k}, dtype, 51), b = test::randn({k, n}, dtype, 52);
    const at::Tensor af = a.to(at::kFloat).contiguous(), bf = b.to(at::kFloat).contiguous();
    at::Tensor expected = at::empty({m, n});
    for (int64_t i = 0; i < m; ++i)
      for (int64_t j = 0; j < n; ++j) {
        float total = 0.f;
        for (int64_t k0 = 0; k0 < k; k0 += fixed_order::kMatmulKBlock) {
          float partial = 0.f;
          for (int64_t kk = k0; kk < std::min(k, k0 + fixed_order::kMatmulKBlock); ++kk) {
            const float product = af[i][kk].item<float>() * bf[kk][j].item<float>();
            partial = partial + product;
          }
          total = total + partial;
        }
        expected[i][j] = total;
      }
    EXPECT_TRUE(bitwise_equal(expected.to(dtype), cpu_ops::mm(a, b))) << c10::toString(dtype);
  }
}

// Values with every IEEE edge: NaN, infinities, signed zeros, subnormals, and ordinary numbers.
std::vector<float> edge_values(int64_t n, uint64_t seed) {
  const at::Tensor r = test::randn({n}, at::kFloat, seed);
  std::vector<float> v(r.data_ptr<float>(), r.data_ptr<float>() + n);
  const float specials[] = {std::numeric_limits<float>::quiet_NaN(), INFINITY, -INFINITY, 0.f, -0.f, 1e-41f, -3e-39f};
  for (int64_t i = 0; i < n; i += 11) v[i] = specials[(i / 11) % 7];
  return v;
}

// Same bits in every element; a NaN may carry another payload (which operand's NaN an addition
// keeps is the compiler's choice in either loop), which to_output canonicalises.
TEST(CpuMatmul, VectorisedTileGivesThePortableLoopsBits) {
  if (!fixed_order::accumulate_tile_vectorised())
    GTEST_SKIP() << "this CPU has no AVX-512: only the portable loop runs";
  uint64_t seed = 300;
  for (int64_t rows : {0, 1, 3, 4, 5, 9})
    for (int64_t kt : {1, 7, 64})
      for (int64_t nt : {1, 15, 16, 17, 31, 32, 33, 64, 100, 256}) {
        const std::vector<float> a = edge_values(std::max<int64_t>(1, rows * kt), seed++),
                                 b = edge_values(kt * nt, seed++);
        const int64_t ldc = nt + 3;
        const std::vector<float> start = edge_values(std::max<int64_t>(1, rows * ldc), seed++);
        std::vector<float> portable = start, vectorised = start;
        fixed_order::accumulate_tile_portable(a.data(), rows, kt, b.data(), nt, portable.data(), ldc);
        fixed_order::accumulate_tile(a.data(), rows, kt, b.data(), nt, vectorised.data(), ldc);
        for (size_t e = 0; e < portable.size(); ++e) {
          uint32_t x, y;
          std::memcpy(&x, &portable[e], 4);
          std::memcpy(&y, &vectorised[e], 4);
          ASSERT_TRUE(x == y || (std::isnan(portable[e]) && std::isnan(vectorised[e])))
              << rows << " rows, kt " << kt << ", nt " << nt << " element " << e << ": " << std::hex << x << " vs "
              << y;
        }
      }
}

// float16 operands are widened by ATen before the loop: the bits are those of the documented
// order on c10's element-by-element conversion, edge values included.
TEST(CpuMatmul, Float16WideningKeepsTheBits) {
  const int64_t m = 7, k = 2 * fixed_order::kMatmulKBlock + 5, n = 40;
  const std::vector<float> av = edge_values(m * k, 61), bv = edge_values(k * n, 62);
  const at::Tensor a = at::from_blob(const_cast<float *>(av.data()), {m, k}).to(at::kHalf);
  const at::Tensor b = at::from_blob(const_cast<float *>(bv.data()), {k, n}).to(at::kHalf);
  at::Tensor acc = at::empty({m, n});
  fixed_order::matmul_accumulate_rows<c10::Half>({a.data_ptr<c10::Half>(), k, 1}, {b.data_ptr<c10::Half>(), n, 1}, n, k,
                                                 0, m, acc.data_ptr<float>());
  EXPECT_TRUE(bitwise_equal(cpu_ops::to_output(acc, at::kHalf), cpu_ops::mm(a, b)));
  EXPECT_TRUE(bitwise_equal(cpu_ops::to_output(acc, at::kHalf), cpu_ops::mm(a, b.t().contiguous().t())));
}

TEST(CpuMatmul, BadInputsNameTheBadValue) {
  const at::Tensor a = at::ones({2, 3}), b = at::ones({4, 5});
  EXPECT_TRUE(test::throws_with([&] { cpu_ops::mm(a, b); }, "a.size(1)=3 != b.size(0)=4"));
  EXPECT_TRUE(test::throws_with([&] { cpu_ops::mm(at::ones({2, 3, 4}), b); }, "got a 3-D tensor"));
  EXPECT_TRUE(test::throws_with([&] { cpu_ops::mm(a, at::ones({3, 2}, at::kDouble)); }, "unsupported dtype Double"));
  EXPECT_TRUE(test::throws_with([&] { cpu_ops::mm(a, at::ones({3, 2}, at::kHalf)); }, "b has dtype Half"));
  EXPECT_TRUE(test::throws_with(
      [&] {
        cpu_ops::mm(at::ones({2, 3}, at::kInt), at::ones({3, 2}, at::kInt));
      },
      "unsupported dtype Int"));
  EXPECT_TRUE(test::throws_with(
      [&] {
        cpu_ops::addmm(at::ones({3}), a, at::ones({3, 2}), 1, 1);
      },
      "bias of shape [3] does not broadcast to the product's shape [2, 2]"));
  EXPECT_TRUE(test::throws_with([&] { cpu_ops::bmm(at::ones({2, 3, 4}), at::ones({3, 4, 5})); }, "batch sizes differ"));
  EXPECT_TRUE(test::throws_with(
      [&] {
        cpu_ops::bmm(at::ones({2, 3, 4}), at::ones({2, 5, 5}));
      },
      "a.size(2)=4 != b.size(1)=5"));
  EXPECT_TRUE(test::throws_with([&] { cpu_ops::bmm(a, b); }, "must be 3-D"));
}

RC_GTEST_PROP(CpuMatmulProperty, RowSliceMatchesFullBatch, ()) {
  const int64_t m = *rc::gen::inRange<int64_t>(1, 40);
  const int64_t k = *rc::gen::inRange<int64_t>(0, 200);
  const int64_t n = *rc::gen::inRange<int64_t>(1, 40);
  const int64_t i = *rc::gen::inRange<int64_t>(0, m);
  const int64_t j = *rc::gen::inRange<int64_t>(i + 1, m + 1);
  const auto dtype = *rc::gen::elementOf(test::float_types());
  const auto seed = *rc::gen::arbitrary<uint32_t>();
  const at::Tensor a = test::randn({m, k}, dtype, seed), b = test::randn({k, n}, dtype, seed + 1ull);
  RC_ASSERT(bitwise_diff(cpu_ops::mm(a, b).slice(0, i, j), cpu_ops::mm(a.slice(0, i, j), b)).equal());
}

}  // namespace
}  // namespace detfuzz
