// The fp8 scaled matmul and the MoE layer on the CPU (ops/cpu/moe.h): exact against the float64
// references where every value is an integer (so every order gives the same bits), a token's or
// a row's bits alone and in a batch, layouts, the routing rule, the one-line errors, and the
// mutants' triggers (the invariant's bits when off, other bits when on, accurate either way).
#include "ops/cpu/moe.h"
#include "ops/registry.h"
#include "test_support.h"

#include <stdexcept>

namespace detfuzz {
namespace {

using cpu_ops::ScaleMode;
using test::bitwise_equal;

const ImplInfo &impl_of(const std::string &impl, const std::string &op) {
  if (const ImplInfo *i = find_impl(op, impl, Backend::cpu)) return *i;
  throw std::runtime_error("no impl " + impl + " of " + op);
}

// Integers in [lo, hi] as `dtype`.
at::Tensor ints(at::IntArrayRef sizes, int64_t lo, int64_t hi, at::ScalarType dtype, uint64_t seed) {
  at::Generator gen = at::make_generator<at::CPUGeneratorImpl>(seed);
  return at::randint(lo, hi + 1, sizes, gen, at::TensorOptions().dtype(at::kFloat)).to(dtype);
}

// Powers of two 2^e, e in [-2, 2]: scaling by them is exact (and the sums stay within 24 bits).
at::Tensor powers_of_two(at::IntArrayRef sizes, uint64_t seed) {
  return at::pow(2.0, ints(sizes, -2, 2, at::kFloat, seed));
}

std::vector<int64_t> values(const at::Tensor &ids) {
  const at::Tensor c = ids.contiguous();
  return std::vector<int64_t>(c.const_data_ptr<int64_t>(), c.const_data_ptr<int64_t>() + c.numel());
}

const char *mode_name(ScaleMode m) { return cpu_ops::to_string(m); }

OpArgs scaled_mm_args(ScaleMode mode, int64_t m, int64_t n, int64_t k, bool bias, bool integers, uint64_t seed,
                      at::ScalarType out = at::kFloat) {
  OpArgs a;
  const auto fp8 = at::kFloat8_e4m3fn;
  if (integers) {
    a.tensors = {ints({m, k}, -8, 8, fp8, seed), ints({k, n}, -8, 8, fp8, seed + 1),
                 powers_of_two(cpu_ops::scale_a_sizes(mode, m, k), seed + 2),
                 powers_of_two(cpu_ops::scale_b_sizes(mode, k, n), seed + 3)};
    if (bias) a.tensors.push_back(ints({n}, -50, 50, out, seed + 4));
  } else {
    a.tensors = {test::randn({m, k}, fp8, seed), test::randn({k, n}, fp8, seed + 1),
                 test::randn(cpu_ops::scale_a_sizes(mode, m, k), at::kFloat, seed + 2).abs() + 0.01,
                 test::randn(cpu_ops::scale_b_sizes(mode, k, n), at::kFloat, seed + 3).abs() + 0.01};
    if (bias) a.tensors.push_back(test::randn({n}, out, seed + 4));
  }
  a.params = {{"scale", mode_name(mode)}, {"bias", bias ? "1" : "0"}};
  a.out_dtype = out;
  return a;
}

const ScaleMode kModes[] = {ScaleMode::tensor, ScaleMode::channel, ScaleMode::block};

TEST(ScaledMm, ExactOnIntegersAgainstTheReference) {
  for (ScaleMode mode : kModes)
    for (bool bias : {false, true})
      for (int64_t k : {1, 127, 128, 129, 300}) {
        const OpArgs a = scaled_mm_args(mode, 5, 131, k, bias, true, 10 + k);
        const at::Tensor out = impl_of("invariant", "scaled_mm").run(a);
        const at::Tensor ref = reference_f64("scaled_mm", a);
        EXPECT_TRUE(bitwise_equal(ref.to(at::kFloat), out)) << mode_name(mode) << " bias=" << bias << " K=" << k;
        // bfloat16 output: the one rounding of the exact value.
        OpArgs b = a;
        b.out_dtype = at::kBFloat16;
        if (bias) b.tensors[4] = b.tensors[4].to(at::kBFloat16);
        EXPECT_TRUE(
            bitwise_equal(reference_f64("scaled_mm", b).to(at::kBFloat16), impl_of("invariant", "scaled_mm").run(b)));
      }
}

TEST(ScaledMm, RowsAloneEqualRowsInTheBatchInEveryLayout) {
  for (ScaleMode mode : kModes) {
    const OpArgs a = scaled_mm_args(mode, 37, 20, 400, true, false, 3, at::kBFloat16);
    const at::Tensor whole = impl_of("invariant", "scaled_mm").run(a);
    EXPECT_FALSE(at::isnan(whole).any().item<bool>()) << "every element written";
    EXPECT_TRUE(test::accurate("scaled_mm", a, whole)) << mode_name(mode);
    for (int64_t i : {0, 17, 36}) {
      OpArgs one = a;
      one.tensors[0] = a.tensors[0].narrow(0, i, 1);
      if (mode != ScaleMode::tensor) one.tensors[2] = a.tensors[2].narrow(0, i, 1);
      EXPECT_TRUE(bitwise_equal(whole.narrow(0, i, 1), impl_of("invariant", "scaled_mm").run(one)))
          << mode_name(mode) << " row " << i;
    }
    for (test::Layout l : test::all_layouts()) {
      OpArgs laid = a;
      laid.tensors[0] = test::with_layout(a.tensors[0], l);
      laid.tensors[1] = test::with_layout(a.tensors[1], l);
      EXPECT_TRUE(bitwise_equal(whole, impl_of("invariant", "scaled_mm").run(laid))) << test::name(l);
    }
  }
}

TEST(ScaledMm, BadInputIsAOneLineError) {
  EXPECT_THROW(cpu_ops::scale_mode_from_string("row"), std::invalid_argument);
  OpArgs a = scaled_mm_args(ScaleMode::block, 4, 4, 200, false, true, 1);
  a.params["scale"] = "channel";  // scales sized for block
  EXPECT_TRUE(test::throws_with([&] { impl_of("invariant", "scaled_mm").run(a); }, "scale_a must be [4, 1]"));
  OpArgs b = scaled_mm_args(ScaleMode::tensor, 4, 4, 8, false, true, 1);
  b.tensors[0] = b.tensors[0].to(at::kBFloat16);
  EXPECT_TRUE(test::throws_with([&] { impl_of("invariant", "scaled_mm").run(b); }, "float8_e4m3fn"));
  OpArgs c = scaled_mm_args(ScaleMode::tensor, 4, 4, 8, false, true, 1);
  c.tensors[1] = c.tensors[1].narrow(0, 0, 7);
  EXPECT_TRUE(test::throws_with([&] { impl_of("invariant", "scaled_mm").run(c); }, "a [M, K] and b [K, N]"));
}

TEST(ScaledMm, PromotionMutantDiffersOnlyFromSixteenRowsAndStaysAccurate) {
  const ImplInfo &mutant = impl_of("mutant-fp8-promote", "scaled_mm");
  for (ScaleMode mode : kModes) {
    const OpArgs small = scaled_mm_args(mode, 15, 24, 600, false, false, 5);
    EXPECT_TRUE(bitwise_equal(impl_of("invariant", "scaled_mm").run(small), mutant.run(small))) << mode_name(mode);
    const OpArgs tall = scaled_mm_args(mode, 16, 24, 600, false, false, 5);
    const at::Tensor got = mutant.run(tall);
    EXPECT_FALSE(bitwise_equal(impl_of("invariant", "scaled_mm").run(tall), got)) << mode_name(mode);
    EXPECT_TRUE(test::accurate("scaled_mm", tall, got)) << mode_name(mode);
  }
}

// MoE arguments: x [T, H], logits [T, E], w13 [E, 2I, H], w2 [E, H, I]; fp8 adds block scales.
OpArgs moe_args(int64_t t, int64_t h, int64_t e, int64_t i, int64_t k, bool fp8, uint64_t seed,
                at::ScalarType dtype = at::kBFloat16) {
  OpArgs a;
  const auto wt = fp8 ? at::kFloat8_e4m3fn : dtype;
  a.tensors = {test::randn({t, h}, dtype, seed), test::randn({t, e}, at::kFloat, seed + 1),
               (test::randn({e, 2 * i, h}, at::kFloat, seed + 2) * 0.25).to(wt),
               (test::randn({e, h, i}, at::kFloat, seed + 3) * 0.25).to(wt)};
  if (fp8) {
    auto b = [](int64_t n) { return (n + 127) / 128; };
    a.tensors.push_back(test::randn({e, b(2 * i), b(h)}, at::kFloat, seed + 4).abs() + 0.01);
    a.tensors.push_back(test::randn({e, b(h), b(i)}, at::kFloat, seed + 5).abs() + 0.01);
  }
  a.params = {{"topk", std::to_string(k)}};
  return a;
}

const char *moe_op(bool fp8) { return fp8 ? "fused_moe_fp8" : "fused_moe"; }

// Every value an integer: gate rows and x positive, so g >= 48 and silu(g) = g exactly in float32
// and float64; equal logits give weights 1/2 (top-2) or 1 (top-1), ties going to the lower
// index. The sums stay below 2^23.
TEST(FusedMoe, ExactOnIntegersAgainstTheReferenceAndByHand) {
  for (bool fp8 : {false, true})
    for (int64_t k : {1, 2}) {
      const int64_t t = 3, h = 8, e = 8, i = 6;
      const auto wt = fp8 ? at::kFloat8_e4m3fn : at::kFloat;
      OpArgs a;
      at::Tensor w13 = at::cat({ints({e, i, h}, 3, 5, at::kFloat, 1), ints({e, i, h}, -3, 3, at::kFloat, 2)}, 1);
      at::Tensor w2 = ints({e, h, i}, -2, 2, at::kFloat, 3);
      at::Tensor logits = at::zeros({t, e}, at::kFloat);
      logits[1][5] = 1;  // token 1: experts 3 and 5 tie above the rest
      logits[1][3] = 1;
      logits[2].fill_(2);
      a.tensors = {ints({t, h}, 2, 4, at::kFloat, 4), logits, w13.to(wt), w2.to(wt)};
      if (fp8) {
        a.tensors.push_back(at::full({e, 1, 1}, 2.0, at::kFloat));
        a.tensors.push_back(at::full({e, 1, 1}, 0.5, at::kFloat));
      }
      a.params = {{"topk", std::to_string(k)}};
      const at::Tensor out = impl_of("invariant", moe_op(fp8)).run(a);
      const at::Tensor ref = reference_f64(moe_op(fp8), a);
      EXPECT_TRUE(bitwise_equal(ref.to(at::kFloat), out)) << moe_op(fp8) << " k=" << k;
      // By hand: token 1 reaches expert 3 (and 5), tokens 0 and 2 expert 0 (and 1), with weights 1
      // or 1/2.
      const double s13 = fp8 ? 2 : 1, s2 = fp8 ? 0.5 : 1;
      auto expert_out = [&](int64_t tok, int64_t ex) {
        std::vector<double> y(h, 0.0), act(i);
        for (int64_t r = 0; r < i; ++r) {
          double g = 0, u = 0;
          for (int64_t c = 0; c < h; ++c) {
            g += w13[ex][r][c].item<double>() * s13 * a.tensors[0][tok][c].item<double>();
            u += w13[ex][i + r][c].item<double>() * s13 * a.tensors[0][tok][c].item<double>();
          }
          act[r] = g * u;  // silu(g) = g for g >= 48
        }
        for (int64_t c = 0; c < h; ++c)
          for (int64_t r = 0; r < i; ++r) y[c] += w2[ex][c][r].item<double>() * s2 * act[r];
        return y;
      };
      for (int64_t tok : {0, 1, 2}) {
        const auto y0 = expert_out(tok, tok == 1 ? 3 : 0), y1 = expert_out(tok, tok == 1 ? 5 : 1);
        for (int64_t c = 0; c < h; ++c)
          EXPECT_EQ(ref[tok][c].item<double>(), k == 1 ? y0[c] : 0.5 * y0[c] + 0.5 * y1[c]) << tok << "," << c;
      }
    }
}

TEST(FusedMoe, RoutingBreaksTiesByIndexAndPutsNaNLast) {
  at::Tensor logits = at::tensor({1.f, 3.f, 3.f, NAN, 2.f, 3.f}, at::kFloat).reshape({1, 6});
  const cpu_ops::Routing r = cpu_ops::moe_route(logits, 5);
  EXPECT_EQ(values(r.ids), (std::vector<int64_t>{1, 2, 5, 4, 0}));
  const cpu_ops::Routing one = cpu_ops::moe_route(logits, 1);
  EXPECT_EQ(one.weights.item<float>(), 1.f);
  const cpu_ops::Routing two = cpu_ops::moe_route(at::full({1, 8}, 0.75f), 2);
  EXPECT_EQ(values(two.ids), (std::vector<int64_t>{0, 1}));
  EXPECT_EQ(two.weights[0][1].item<float>(), 0.5f);
}

TEST(FusedMoe, TokensAloneEqualTokensInTheBatchAndAreAccurate) {
  for (bool fp8 : {false, true})
    for (int64_t k : {1, 2, 8}) {
      const OpArgs a = moe_args(19, 150, 8, 140, k, fp8, 40 + k);
      const at::Tensor whole = impl_of("invariant", moe_op(fp8)).run(a);
      EXPECT_FALSE(at::isnan(whole).any().item<bool>()) << "every element written";
      EXPECT_TRUE(test::accurate(moe_op(fp8), a, whole)) << moe_op(fp8) << " k=" << k;
      for (int64_t t : {0, 9, 18}) {
        OpArgs one = a;
        one.tensors[0] = a.tensors[0].narrow(0, t, 1);
        one.tensors[1] = a.tensors[1].narrow(0, t, 1);
        one.tensors[2] = test::with_layout(a.tensors[2], test::Layout::transposed);
        one.tensors[3] = test::with_layout(a.tensors[3], test::Layout::strided);
        EXPECT_TRUE(bitwise_equal(whole.narrow(0, t, 1), impl_of("invariant", moe_op(fp8)).run(one)))
            << moe_op(fp8) << " k=" << k << " token " << t;
      }
    }
}

TEST(FusedMoe, BadInputIsAOneLineError) {
  OpArgs a = moe_args(2, 16, 8, 8, 9, false, 1);
  EXPECT_TRUE(test::throws_with([&] { impl_of("invariant", "fused_moe").run(a); }, "top_k=9 must be in [1, E]"));
  OpArgs b = moe_args(2, 16, 8, 8, 2, true, 1);
  b.tensors[4] = b.tensors[4].narrow(1, 0, 0);
  EXPECT_TRUE(test::throws_with([&] { impl_of("invariant", "fused_moe_fp8").run(b); }, "block scales must be"));
  OpArgs c = moe_args(2, 16, 8, 8, 2, false, 1);
  c.tensors[1] = c.tensors[1].to(at::kBFloat16);
  EXPECT_TRUE(test::throws_with([&] { impl_of("invariant", "fused_moe").run(c); }, "logits must be float32"));
}

// Each MoE mutant: the invariant's bits where its trigger is off, other bits where it is on,
// within the accuracy bound. `shared` gives every token the same logits, so all share experts.
// float32 activations: a 16-bit output would round most one-ulp float32 differences away.
TEST(FusedMoe, MutantsKeepTheInvariantBitsUntilTheirTrigger) {
  for (bool fp8 : {false, true}) {
    const ImplInfo &inv = impl_of("invariant", moe_op(fp8));
    auto shared = [&](int64_t tokens, int64_t k) {
      OpArgs a = moe_args(tokens, 200, 8, 136, k, fp8, 7, at::kFloat);
      a.tensors[1] = a.tensors[1].narrow(0, 0, 1).expand({tokens, 8}).contiguous();
      return a;
    };
    // Split-K for experts with <= 2 tokens: one token splits, three do not.
    const ImplInfo &splitk = impl_of("mutant-moe-splitk", moe_op(fp8));
    EXPECT_TRUE(bitwise_equal(inv.run(shared(3, 2)), splitk.run(shared(3, 2))));
    EXPECT_FALSE(bitwise_equal(inv.run(shared(1, 2)), splitk.run(shared(1, 2))));
    EXPECT_TRUE(test::accurate(moe_op(fp8), shared(1, 2), splitk.run(shared(1, 2))));
    // Small K blocks for experts with >= 4 tokens.
    const ImplInfo &tile = impl_of("mutant-moe-tile", moe_op(fp8));
    EXPECT_TRUE(bitwise_equal(inv.run(shared(3, 2)), tile.run(shared(3, 2))));
    EXPECT_FALSE(bitwise_equal(inv.run(shared(4, 2)), tile.run(shared(4, 2))));
    EXPECT_TRUE(test::accurate(moe_op(fp8), shared(4, 2), tile.run(shared(4, 2))));
    // Atomics-order combine: with top-1 there is one term, so it changes nothing; with top-8 of
    // 64 a token's sum order follows the experts' loads.
    const ImplInfo &atomic = impl_of("mutant-moe-atomic", moe_op(fp8));
    const OpArgs top1 = moe_args(12, 64, 8, 40, 1, fp8, 9, at::kFloat);
    EXPECT_TRUE(bitwise_equal(inv.run(top1), atomic.run(top1)));
    const OpArgs top8 = moe_args(12, 64, 64, 40, 8, fp8, 9, at::kFloat);
    EXPECT_FALSE(bitwise_equal(inv.run(top8), atomic.run(top8)));
    EXPECT_TRUE(test::accurate(moe_op(fp8), top8, atomic.run(top8)));
  }
}

// The bounds are far below the error of a real bug: 1% off on the largest element, a dropped
// bias, a dropped expert.
at::Tensor nudged(const at::Tensor &out) {
  at::Tensor t = out.clone();
  const int64_t at_max = t.abs().argmax().item<int64_t>();
  t.view({-1})[at_max] = t.view({-1})[at_max] * 1.01;
  return t;
}

TEST(ScaledMm, AccuracyBoundCatchesWrongOutputs) {
  for (ScaleMode mode : kModes) {
    const OpArgs a = scaled_mm_args(mode, 9, 33, 300, true, false, 21);
    const at::Tensor out = impl_of("invariant", "scaled_mm").run(a);
    EXPECT_TRUE(test::accurate("scaled_mm", a, out));
    EXPECT_FALSE(test::accurate("scaled_mm", a, nudged(out))) << mode_name(mode);
    OpArgs no_bias = a;
    no_bias.tensors.pop_back();
    no_bias.params["bias"] = "0";
    EXPECT_FALSE(test::accurate("scaled_mm", a, impl_of("invariant", "scaled_mm").run(no_bias))) << mode_name(mode);
  }
}

TEST(FusedMoe, AccuracyBoundCatchesWrongOutputs) {
  for (bool fp8 : {false, true}) {
    const OpArgs a = moe_args(7, 150, 8, 100, 2, fp8, 31, at::kFloat);
    const at::Tensor out = impl_of("invariant", moe_op(fp8)).run(a);
    EXPECT_TRUE(test::accurate(moe_op(fp8), a, out));
    EXPECT_FALSE(test::accurate(moe_op(fp8), a, nudged(out))) << moe_op(fp8);
    OpArgs top1 = a;
    top1.params["topk"] = "1";
    EXPECT_FALSE(test::accurate(moe_op(fp8), a, impl_of("invariant", moe_op(fp8)).run(top1))) << moe_op(fp8);
  }
}

}  // namespace
}  // namespace detfuzz
