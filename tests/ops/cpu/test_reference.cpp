// The float64 references and check_accuracy: exact on small integer cases; the bounds accept the
// invariant ops yet flag what a real bug produces (an index bug, a wrong epilogue, a dropped block,
// a wrong divisor, a NaN or infinity of the wrong kind, a wrong shape or dtype), and point at it.
#include "ops/cpu/cpu_ops.h"
#include "test_support.h"

#include <cmath>
#include <limits>

namespace detfuzz {
namespace {

OpArgs addmm_args(const at::Tensor &bias, const at::Tensor &a, const at::Tensor &b, double beta, double alpha) {
  OpArgs args{{bias, a, b}};
  args.beta = beta;
  args.alpha = alpha;
  return args;
}

TEST(Reference, ExactOnSmallIntegerCases) {
  const at::Tensor a = at::tensor({1.f, 2.f, 3.f, 4.f}).view({2, 2}), b = at::tensor({5.f, 6.f, 7.f, 8.f}).view({2, 2});
  EXPECT_TRUE(at::equal(reference_f64("mm", {{a, b}}), at::tensor({19., 22., 43., 50.}, at::kDouble).view({2, 2})));
  EXPECT_TRUE(at::equal(reference_f64("addmm", addmm_args(at::tensor({1.f, -1.f}), a, b, 2, 0.5)),
                        at::tensor({11.5, 9., 23.5, 23.}, at::kDouble).view({2, 2})));
  OpArgs mean{{at::tensor({1, 2, 3, 6}, at::kInt).view({2, 2})}};
  mean.dims = {1};
  EXPECT_TRUE(at::equal(reference_f64("mean", mean), at::tensor({1.5, 4.5}, at::kDouble)));
  EXPECT_EQ(reference_f64("mm", {{a, b}}).scalar_type(), at::kDouble);
  try {
    reference_f64("conv", {});
    ADD_FAILURE() << "no error for an unknown op";
  } catch (const std::invalid_argument &e) {
    EXPECT_EQ(std::string(e.what()), "unknown op 'conv'");
  }
}

// For each dtype: the op's own output passes, and `perturb(out)` fails at the perturbed element.
void expect_flagged(const std::string &op, const OpArgs &args, const at::Tensor &out,
                    const std::function<at::Tensor(at::Tensor)> &perturb, int64_t expected_index,
                    const std::string &what) {
  SCOPED_TRACE(op + " " + what + " " + c10::toString(out.scalar_type()));
  ASSERT_TRUE(test::accurate(op, args, out));
  const AccuracyResult r = check_accuracy(op, args, perturb(out.clone()));
  EXPECT_FALSE(r.ok) << "not flagged";
  EXPECT_FALSE(r.detail.empty());
  if (expected_index >= 0) {
    EXPECT_EQ(r.worst_index, expected_index) << r.detail;
    EXPECT_GT(r.worst_error, r.worst_bound) << r.detail;  // a non-finite mismatch: inf over a bound of 0
  }
}

TEST(Reference, FlagsMatmulIndexAndEpilogueBugs) {
  for (auto dtype : test::float_types()) {
    const int64_t m = 6, k = 200, n = 9;
    const at::Tensor a = test::randn({m, k}, dtype, 1), b = test::randn({k, n}, dtype, 2);
    const at::Tensor out = cpu_ops::mm(a, b);
    // An index bug: element [2,3] takes column 4's value.
    expect_flagged(
        "mm", {{a, b}}, out,
        [](at::Tensor t) {
          t[2][3] = t[2][4];
          return t;
        },
        2 * n + 3, "column swap");
    // A dropped K block: the last 72 products of element [1,1] are missing.
    const double tail =
        at::mm(a.slice(1, 128, k).to(at::kDouble), b.slice(0, 128, k).to(at::kDouble))[1][1].item<double>();
    expect_flagged(
        "mm", {{a, b}}, out,
        [tail](at::Tensor t) {
          t[1][1] = t[1][1].item<double>() - tail;
          return t;
        },
        n + 1, "dropped block");
    // A plain float32 error far beyond the bound: 1e-3 relative on one element.
    expect_flagged(
        "mm", {{a, b}}, out,
        [](at::Tensor t) {
          t[5][8] = t[5][8].item<double>() * (1 + 1e-2) + 1e-2;
          return t;
        },
        5 * n + 8, "1% error");

    const at::Tensor bias = test::randn({n}, dtype, 3);
    const OpArgs args = addmm_args(bias, a, b, 0.5, 2.0);
    const at::Tensor addmm_out = cpu_ops::addmm(bias, a, b, 0.5, 2.0);
    // Wrong epilogues: beta applied to the product, or bias added unscaled.
    const at::Tensor wrong_coefficients = cpu_ops::addmm(bias, a, b, 2.0, 0.5);
    expect_flagged(
        "addmm", args, addmm_out, [&](at::Tensor) { return wrong_coefficients; }, -1, "alpha/beta swapped");
    const at::Tensor unscaled_bias = cpu_ops::addmm(bias, a, b, 1.0, 2.0);
    expect_flagged(
        "addmm", args, addmm_out, [&](at::Tensor) { return unscaled_bias; }, -1, "beta ignored");
  }
}

TEST(Reference, FlagsLogSoftmaxAndMeanBugs) {
  for (auto dtype : test::float_types()) {
    const at::Tensor x = test::randn({4, 300}, dtype, 5) * 2;
    OpArgs ls{{x}};
    ls.dim = 1;
    const at::Tensor out = cpu_ops::log_softmax(x, 1, false);
    // Off-by-one store: element [2,10] gets element [2,11]'s value.
    expect_flagged(
        "log_softmax", ls, out,
        [](at::Tensor t) {
          t[2][10] = t[2][11];
          return t;
        },
        2 * 300 + 10, "off-by-one store");
    // A dropped block of 64 terms from row 3's sum of exponentials shifts the whole row.
    const at::Tensor xd = x.to(at::kDouble)[3];
    const double shift = std::log((xd.exp().sum() / xd.slice(0, 64, 300).exp().sum()).item<double>());
    expect_flagged(
        "log_softmax", ls, out,
        [shift](at::Tensor t) {
          t[3].add_(shift);
          return t;
        },
        -1, "dropped block");

    OpArgs mean{{x}};
    mean.dims = {1};
    const at::Tensor mean_out = cpu_ops::mean(x, {1}, false, std::nullopt);
    // A wrong divisor, n - 1 instead of n (in float32, where the mean is well within the bound).
    if (dtype == at::kFloat)
      expect_flagged(
          "mean", mean, mean_out, [](at::Tensor t) { return t * (300.0 / 299.0); }, -1, "divisor n-1");
    // A row mean taken from the wrong row.
    expect_flagged(
        "mean", mean, mean_out,
        [](at::Tensor t) {
          t[0] = t[1];
          return t;
        },
        0, "wrong row");
  }
}

TEST(Reference, NonFiniteValuesMustMatchInKind) {
  const double inf = std::numeric_limits<double>::infinity(), nan = std::nan("");
  const at::Tensor x = at::tensor({0.5, -inf, 1.0, nan, 2.0, 3.0}, at::kDouble).view({2, 3}).to(at::kFloat);
  OpArgs ls{{x}};
  ls.dim = 1;
  const at::Tensor out = cpu_ops::log_softmax(x, 1, false);  // row 0: finite, -inf, finite; row 1: NaN
  ASSERT_TRUE(test::accurate("log_softmax", ls, out));
  expect_flagged(
      "log_softmax", ls, out,
      [](at::Tensor t) {
        t[0][1] = 0.0;
        return t;
      },
      1, "finite for -inf");
  expect_flagged(
      "log_softmax", ls, out,
      [inf](at::Tensor t) {
        t[0][1] = inf;
        return t;
      },
      1, "+inf for -inf");
  expect_flagged(
      "log_softmax", ls, out,
      [](at::Tensor t) {
        t[1][2] = -1.0;
        return t;
      },
      5, "finite for NaN");
  expect_flagged(
      "log_softmax", ls, out,
      [nan](at::Tensor t) {
        t[0][0] = nan;
        return t;
      },
      0, "NaN for finite");
}

TEST(Reference, ShapeAndDtypeMustMatch) {
  const at::Tensor a = test::randn({3, 4}, at::kFloat, 9), b = test::randn({4, 5}, at::kFloat, 10);
  const at::Tensor out = cpu_ops::mm(a, b);
  EXPECT_FALSE(check_accuracy("mm", {{a, b}}, out.t()).ok);
  const AccuracyResult wrong_dtype = check_accuracy("mm", {{a, b}}, out.to(at::kHalf));
  EXPECT_FALSE(wrong_dtype.ok);
  EXPECT_NE(wrong_dtype.detail.find("dtype"), std::string::npos) << wrong_dtype.detail;
  OpArgs ls{{a.to(at::kHalf)}};
  ls.dim = 1;
  ls.half_to_float = true;
  EXPECT_TRUE(check_accuracy("log_softmax", ls, cpu_ops::log_softmax(a.to(at::kHalf), 1, true)).ok);
  EXPECT_FALSE(check_accuracy("log_softmax", ls, cpu_ops::log_softmax(a.to(at::kHalf), 1, false)).ok);
}

// Outputs that overflow the output dtype (half here) are accepted as the infinity of the right sign.
TEST(Reference, AcceptsRoundingOverflowToInfinity) {
  const at::Tensor a = at::full({1, 2}, 60000.0).to(at::kHalf), b = at::full({2, 1}, 1.0).to(at::kHalf);
  const at::Tensor out = cpu_ops::mm(a, b);
  ASSERT_TRUE(std::isinf(out.item<float>()));
  EXPECT_TRUE(test::accurate("mm", {{a, b}}, out));
  EXPECT_FALSE(check_accuracy("mm", {{a, b}}, -out).ok);
}

// Where the bound reaches past the output's range on the other side of the reference (massive
// cancellation under scaled_mm's fp8 tensor-core term), that side's infinity is accepted too.
TEST(Reference, AcceptsAnInfinityWhereverTheBoundReachesPastTheRange) {
  auto args = [](double scale) {
    OpArgs x{{at::tensor({448.0, 448.0, 1.0}).reshape({1, 3}).to(at::kFloat8_e4m3fn),
              at::tensor({448.0, -448.0, -1.0}).reshape({3, 1}).to(at::kFloat8_e4m3fn), at::full({1}, scale),
              at::full({1}, 1.0)}};
    x.params = {{"scale", "tensor"}, {"bias", "0"}};
    x.out_dtype = at::kHalf;
    return x;
  };
  const at::Tensor inf = at::full({1, 1}, INFINITY).to(at::kHalf);
  // Exact -100, bound about 8e4 (33 * 2^-13 of the products' 2e7): either infinity may be a rounding.
  EXPECT_TRUE(check_accuracy("scaled_mm", args(100), inf).ok);
  EXPECT_TRUE(check_accuracy("scaled_mm", args(100), -inf).ok);
  // Exact -1, bound about 800: no infinity is.
  EXPECT_FALSE(check_accuracy("scaled_mm", args(1), inf).ok);
  EXPECT_FALSE(check_accuracy("scaled_mm", args(1), -inf).ok);
}

}  // namespace
}  // namespace detfuzz
