// Path A and the float64 reference against a naive float64 attention; the fixed-split CPU impl
// against Path A; the registry.
#include "ops/attention/cpu_dot.h"
#include "ops/attention/paged_attention.h"
#include "ops/registry.h"
#include "properties/attention/attention_properties.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>

using namespace detfuzz;
using namespace detfuzz::attention;

namespace {

CaseSpec make_case(std::vector<int64_t> shape, const std::string &q, const std::string &kv, at::ScalarType dtype,
                   uint64_t seed = 1) {
  CaseSpec c;
  c.op = "paged_attention";
  c.impl = "invariant";
  c.property = "accuracy";
  c.dtype = dtype;
  c.shape = std::move(shape);
  c.seed = seed;
  c.params = {{"q", q}, {"kv", kv}, {"place", "17"}, {"pool", "3"}};
  return c;
}

// Attention in float64 straight from the logical per-sequence data (no pages involved).
at::Tensor naive_f64(const CaseSpec &c) {
  const auto g = attention_case::geometry(c);
  const auto seqs = attention_case::sequences(c);
  int64_t rows = 0;
  for (const auto &s : seqs) rows += s.q_len;
  auto out = at::empty({rows, g.h_q, g.head_dim}, at::kDouble);
  double *o = out.data_ptr<double>();
  const double scale = softmax_scale(0.0, g.head_dim);  // 1/sqrt(D) rounded to float32, as every impl takes it
  // Values as the cache holds them: rounded to the case's dtype.
  auto logical = [&](uint64_t t, int64_t n) {
    auto x = at::empty({n}, at::kFloat);
    for (int64_t i = 0; i < n; ++i) x.data_ptr<float>()[i] = attention_case::value(c.seed, t, i);
    return x.to(c.dtype).to(at::kDouble).contiguous();
  };
  int64_t r = 0;
  for (const auto &s : seqs) {
    const auto qv = logical(3 * s.uid, s.kv_len * g.h_q * g.head_dim);
    const auto kv = logical(3 * s.uid + 1, s.kv_len * g.h_kv * g.head_dim);
    const auto vv = logical(3 * s.uid + 2, s.kv_len * g.h_kv * g.head_dim);
    const double *qd = qv.data_ptr<double>(), *kd = kv.data_ptr<double>(), *vd = vv.data_ptr<double>();
    for (int64_t qi = 0; qi < s.q_len; ++qi, ++r) {
      const int64_t pos = s.kv_len - s.q_len + qi;
      for (int64_t h = 0; h < g.h_q; ++h) {
        const int64_t kvh = h / (g.h_q / g.h_kv);
        std::vector<double> sc(pos + 1);
        double mx = -INFINITY;
        for (int64_t k = 0; k <= pos; ++k) {
          double dot = 0;
          for (int64_t d = 0; d < g.head_dim; ++d)
            dot += qd[(pos * g.h_q + h) * g.head_dim + d] * kd[(k * g.h_kv + kvh) * g.head_dim + d];
          sc[k] = dot * scale;
          mx = std::max(mx, sc[k]);
        }
        double l = 0;
        for (auto &x : sc) l += (x = std::exp(x - mx));
        for (int64_t d = 0; d < g.head_dim; ++d) {
          double acc = 0;
          for (int64_t k = 0; k <= pos; ++k) acc += sc[k] * vd[(k * g.h_kv + kvh) * g.head_dim + d];
          o[(r * g.h_q + h) * g.head_dim + d] = acc / l;
        }
      }
    }
  }
  return out;
}

double max_rel_err(const at::Tensor &out, const at::Tensor &ref) {
  const auto diff = (out.to(at::kDouble) - ref).abs().max().item<double>();
  return diff / ref.abs().max().item<double>();
}

at::Tensor run(const std::string &impl, const attention_case::Batch &b) {
  const ImplInfo *i = find_impl("paged_attention", impl, Backend::cpu);
  EXPECT_NE(i, nullptr) << impl;
  return i->run(b.args);
}

}  // namespace

TEST(PathA, MatchesNaiveFloat64) {
  // GQA 4:2, page sizes 1, 5 and 16, prefill + chunk + decode in one batch.
  for (int64_t page : {1, 5, 16}) {
    const CaseSpec c = make_case({4, 2, 64, page}, "7.3.1", "7.20.33", at::kFloat, 3 + page);
    const auto b = attention_case::build(c, attention_case::sequences(c), 17, 3, false);
    const auto out = paged_attention_reference(b.args.tensors[0], b.args.tensors[1], b.args.tensors[2],
                                               b.args.tensors[3], b.args.tensors[4], b.args.tensors[5], 0.0);
    const auto ref = naive_f64(c);
    ASSERT_EQ(out.sizes(), ref.sizes());
    EXPECT_LT(max_rel_err(out, ref), 2e-6) << "page " << page;
    EXPECT_GT(ref.abs().min().item<double>(), 0.0);  // never testing on zeros
  }
}

TEST(Float64Reference, MatchesNaiveFloat64) {
  // What the accuracy property measures against: GQA 4:2 and 8:1, pages 1, 5, 16, mixed batches.
  for (const auto &shape : std::vector<std::vector<int64_t>>{{4, 2, 64, 1}, {4, 2, 64, 5}, {8, 1, 128, 16}}) {
    const CaseSpec c = make_case(shape, "7.3.1.40", "7.20.33.300", at::kBFloat16, 11 + shape[3]);
    const auto b = attention_case::build(c, attention_case::sequences(c), 23, 4, false);
    const auto &t = b.args.tensors;
    const auto out = paged_attention_reference_f64(t[0], t[1], t[2], t[3], t[4], t[5], 0.0);
    ASSERT_EQ(out.scalar_type(), at::kDouble);
    const auto ref = naive_f64(c);
    ASSERT_EQ(out.sizes(), ref.sizes());
    EXPECT_LT(max_rel_err(out, ref), 1e-12) << "shape " << c.shape_string();
  }
}

TEST(PathA, AlphaIsTheSoftmaxScale) {
  const CaseSpec c = make_case({2, 2, 64, 16}, "2", "40", at::kFloat);
  auto b = attention_case::build(c, attention_case::sequences(c), 0, 0, false);
  const auto dflt = run("reference", b);
  b.args.alpha = 0.125;  // == 1/sqrt(64)
  EXPECT_TRUE(at::equal(dflt, run("reference", b)));
  b.args.alpha = 0.5;
  EXPECT_FALSE(at::equal(dflt, run("reference", b)));
}

TEST(FixedSplitCpu, MatchesPathAAcrossSplits) {
  // kv up to 700: rows with 1, 2 and 3 splits of 256; partial tiles; GQA 8:2 and 2:2.
  for (const auto &shape : std::vector<std::vector<int64_t>>{{8, 2, 64, 16}, {2, 2, 128, 1}, {4, 1, 64, 64}}) {
    const CaseSpec c = make_case(shape, "1.9.1.2", "700.300.257.64", at::kFloat, 9);
    const auto b = attention_case::build(c, attention_case::sequences(c), 5, 2, false);
    const auto out = run("invariant", b), ref = run("reference", b);
    EXPECT_LT(max_rel_err(out, ref.to(at::kDouble)), 1e-5);
    EXPECT_LT(max_rel_err(out, naive_f64(c)), 1e-5);
  }
}

TEST(FixedSplitCpu, HalfPrecisionOutputsCloseToPathA) {
  for (auto dt : {at::kBFloat16, at::kHalf}) {
    const CaseSpec c = make_case({4, 2, 128, 16}, "5.1", "300.520", dt, 4);
    const auto b = attention_case::build(c, attention_case::sequences(c), 1, 0, false);
    const auto out = run("invariant", b), ref = run("reference", b);
    EXPECT_EQ(out.scalar_type(), dt);
    const double eps = dt == at::kBFloat16 ? 0x1.0p-7 : 0x1.0p-10;
    const auto err = (out.to(at::kDouble) - ref.to(at::kDouble)).abs();
    const auto bound = (ref.to(at::kDouble).abs() + 1.0) * 2 * eps;  // P is rounded to dt before P@V
    EXPECT_TRUE((err <= bound).all().item<bool>()) << dtype_name(dt);
  }
}

TEST(FixedSplitCpu, SplitBoundariesChangeBitsButNotTheInvariantImpl) {
  // A row over 600 keys: the invariant plan against a plan with 128-token splits differs in bits
  // (so split boundaries are observable and the mutants can be caught), and the invariant
  // result is the same when the batch around it changes.
  const CaseSpec c = make_case({2, 1, 64, 16}, "1.1", "600.900", at::kFloat, 2);
  const auto b = attention_case::build(c, attention_case::sequences(c), 3, 0, false);
  const auto &t = b.args.tensors;
  const auto inv = paged_attention_split_cpu(t[0], t[1], t[2], t[3], t[4], t[5], 0.0);
  const auto other =
      paged_attention_split_cpu(t[0], t[1], t[2], t[3], t[4], t[5], 0.0, [](const MetadataHost &, int64_t) {
        return SplitPlan{64, 128};
      });
  EXPECT_FALSE(at::equal(inv, other));
  const auto alone = attention_case::build(c, {attention_case::sequences(c)[0]}, 3, 0, false);
  EXPECT_TRUE(at::equal(run("invariant", alone)[0], inv[0]));
}

// The AVX2 build of the fixed-split loops against the portable one, bit for bit: every dtype,
// head dims that fill 8 lanes, leave a tail or are shorter than 8, GQA, several splits, a
// mutant's plan, padding rows without keys, and queries with NaN, infinities and signed zeros.
TEST(FixedSplitCpu, VectorisedBuildGivesThePortableBits) {
  if (!cpu_attention_vectorised()) GTEST_SKIP() << "this CPU has no AVX2 + FMA + F16C: only the portable build runs";
  const PlanFn mutant = mutant_plan(Mutant::qtile_from_avg);
  uint64_t seed = 40;
  for (auto dt : {at::kFloat, at::kHalf, at::kBFloat16})
    for (const auto &shape :
         std::vector<std::vector<int64_t>>{{2, 1, 16, 16}, {6, 2, 20, 1}, {3, 3, 5, 64}, {8, 2, 64, 16}})
      for (bool special : {false, true}) {
        const CaseSpec c = make_case(shape, "1.30.2.1", "700.300.40.1", dt, seed++);
        const auto b = attention_case::build(c, attention_case::sequences(c), 5, 2, false);
        const auto &t = b.args.tensors;
        at::Tensor q = t[0].clone();
        if (special) {
          auto flat = q.view(-1);
          flat[3] = NAN;
          flat[q.size(1) * q.size(2) + 1] = INFINITY;
          flat[2 * q.size(1) * q.size(2)] = -INFINITY;
          flat[5] = -0.0;
        }
        std::vector<at::Tensor> outs;
        for (bool portable : {true, false}) {
          pin_portable_cpu_attention(portable);
          outs.push_back(paged_attention_split_cpu(q, t[1], t[2], t[3], t[4], t[5], 0.0));
          outs.push_back(paged_attention_split_cpu(q, t[1], t[2], t[3], t[4], t[5], 0.0, mutant));
          // q_len > kv_len: the first rows of each sequence see no key (a graph slot's padding).
          const at::Tensor cu = at::tensor({0, 8, 40, 48, 56}, at::kInt);
          const at::Tensor wide_q = at::cat({q, q, q}, 0).narrow(0, 0, 56);
          outs.push_back(paged_attention_split_cpu(wide_q, t[1], t[2], cu, t[4], t[5], 0.0, {}, true));
        }
        pin_portable_cpu_attention(false);
        for (size_t i = 0; i < 3; ++i) {
          const at::Tensor x = outs[i].contiguous(), y = outs[i + 3].contiguous();
          ASSERT_EQ(x.sizes(), y.sizes());
          EXPECT_EQ(0, std::memcmp(x.data_ptr(), y.data_ptr(), x.nbytes()))
              << dtype_name(dt) << " shape " << c.shape_string() << " special " << special << " call " << i;
        }
      }
}

TEST(Registry, PagedAttentionImplsAndExpectations) {
  const std::vector<std::string> must = {"invariant", "reference", "mutant-splits-from-maxlen", "mutant-qtile-from-avg",
                                         "mutant-padded-grid"};
  for (const auto &name : must) {
    const ImplInfo *i = find_impl("paged_attention", name, Backend::cpu);
    ASSERT_NE(i, nullptr) << name;
    EXPECT_EQ(i->expectation, Expectation::must_hold) << name;
    EXPECT_TRUE(i->supports(at::kBFloat16) && i->supports(at::kHalf)) << name;
  }
  const ImplInfo *sdpa = find_impl("paged_attention", "torch-sdpa", Backend::cpu);
  ASSERT_NE(sdpa, nullptr);
  EXPECT_EQ(sdpa->expectation, Expectation::observed);
}

TEST(TorchSdpa, AgreesWithPathA) {
  const CaseSpec c = make_case({4, 2, 64, 16}, "6.1", "20.70", at::kFloat, 5);
  const auto b = attention_case::build(c, attention_case::sequences(c), 0, 0, false);
  EXPECT_LT(max_rel_err(run("torch-sdpa", b), run("reference", b).to(at::kDouble)), 1e-5);
}
