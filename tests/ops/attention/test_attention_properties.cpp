// The attention properties on generated cases (RapidCheck): they hold for "invariant" and
// "reference", and each planted mutant is caught and shrunk to a small case.
#include "ops/registry.h"
#include "properties/attention/attention_properties.h"
#include "tests/ops/attention/property_run.h"

#include <gtest/gtest.h>
#include <rapidcheck.h>

#include <chrono>
#include <optional>

using namespace detfuzz;

namespace {

int64_t count_seqs(const CaseSpec &c) { return static_cast<int64_t>(attention_case::sequences(c).size()); }

const at::ScalarType kDtypes[] = {at::kBFloat16, at::kHalf, at::kFloat};

}  // namespace

class AttentionPropertyHolds : public ::testing::TestWithParam<std::tuple<std::string, std::string>> {};

TEST_P(AttentionPropertyHolds, OnGeneratedCases) {
  const auto &[impl, property] = GetParam();
  int total = 0;
  for (int i = 0; i < 3; ++i) {
    const auto r = run_property(impl, property, Backend::cpu, kDtypes[i], 70, 1000 + 17 * i);
    EXPECT_TRUE(r.passed) << impl << "/" << property << " " << dtype_name(kDtypes[i]) << "\n" << r.message;
    total += r.num_success;
  }
  EXPECT_GE(total, 200);
}

INSTANTIATE_TEST_SUITE_P(Cpu, AttentionPropertyHolds,
                         ::testing::Combine(::testing::Values("invariant", "reference"),
                                            ::testing::ValuesIn(attention_properties())),
                         [](const auto &info) {
                           std::string n = std::get<0>(info.param) + "_" + std::get<1>(info.param);
                           for (auto &ch : n)
                             if (!isalnum(static_cast<unsigned char>(ch))) ch = '_';
                           return n;
                         });

// Each mutant must be caught by a property within 2000 cases and shrunk to a small case.
struct MutantExpectation {
  std::string mutant, property;
  int64_t max_seqs;  // the shrunk counterexample has at most this many sequences
};

class MutantIsCaught : public ::testing::TestWithParam<MutantExpectation> {};

TEST_P(MutantIsCaught, AndShrunk) {
  const auto &e = GetParam();
  const auto r = run_property(e.mutant, e.property, Backend::cpu, at::kBFloat16, 2000, 42);
  ASSERT_FALSE(r.passed) << e.mutant << " survived " << e.property << " on " << r.num_success << " cases";
  ASSERT_TRUE(r.shrunk.has_value());
  const CaseSpec &c = *r.shrunk;
  std::cout << "[ mutant   ] " << e.mutant << " caught by " << e.property << " in " << r.seconds
            << " s, shrunk to: " << c.describe() << "\n";
  EXPECT_LE(count_seqs(c), e.max_seqs) << c.describe();
  // The shrunk case replays: the same record fails again, and the invariant impl passes it.
  EXPECT_FALSE(check_attention_case(c).passed()) << c.describe();
  CaseSpec inv = c;
  inv.impl = "invariant";
  EXPECT_TRUE(check_attention_case(inv).passed()) << inv.describe();
}

INSTANTIATE_TEST_SUITE_P(Cpu, MutantIsCaught,
                         ::testing::Values(MutantExpectation{"mutant-splits-from-maxlen", "seq_alone_vs_batched", 2},
                                           MutantExpectation{"mutant-qtile-from-avg", "seq_alone_vs_batched", 3},
                                           MutantExpectation{"mutant-qtile-from-avg", "decode_vs_prefill", 1},
                                           MutantExpectation{"mutant-qtile-from-avg", "chunked_prefill", 1},
                                           MutantExpectation{"mutant-padded-grid", "seq_alone_vs_batched", 3},
                                           MutantExpectation{"mutant-padded-grid", "block_placement", 5}),
                         [](const auto &info) {
                           std::string n = info.param.mutant + "_" + info.param.property;
                           for (auto &ch : n)
                             if (!isalnum(static_cast<unsigned char>(ch))) ch = '_';
                           return n;
                         });

TEST(AttentionCase, HandWrittenRecordReplays) {
  CaseSpec c;
  c.op = "paged_attention";
  c.impl = "invariant";
  c.property = "seq_alone_vs_batched";
  c.dtype = at::kBFloat16;
  c.shape = {4, 2, 64, 16};
  c.seed = 0x1234;
  c.params = {{"q", "5.1.1"}, {"kv", "17.40.300"}, {"target", "2"}, {"place", "9"}};
  EXPECT_TRUE(check_attention_case(c).passed());
  c.impl = "mutant-splits-from-maxlen";
  c.params["kv"] = "17.600.300";  // a neighbour longer than the target moves its splits
  const Verdict v = check_attention_case(c);
  EXPECT_EQ(v.outcome, Verdict::Outcome::fail) << v.detail;
  EXPECT_GT(v.diff.differing, 0);
}

TEST(AttentionCase, MalformedCasesThrowInvalidArgument) {
  CaseSpec good;
  good.op = "paged_attention";
  good.impl = "invariant";
  good.property = "repeat";
  good.dtype = at::kFloat;
  good.shape = {2, 1, 64, 16};
  good.params = {{"q", "1.2"}, {"kv", "3.4"}};
  EXPECT_TRUE(check_attention_case(good).passed());
  auto bad = [&](auto edit) {
    CaseSpec c = good;
    edit(c);
    return c;
  };
  EXPECT_THROW(check_attention_case(bad([](CaseSpec &c) { c.shape = {2, 1, 64}; })), std::invalid_argument);
  EXPECT_THROW(check_attention_case(bad([](CaseSpec &c) { c.shape = {3, 2, 64, 16}; })), std::invalid_argument);
  EXPECT_THROW(check_attention_case(bad([](CaseSpec &c) { c.params["q"] = "1.5"; })), std::invalid_argument);
  EXPECT_THROW(check_attention_case(bad([](CaseSpec &c) { c.params["q"] = "1"; })), std::invalid_argument);
  EXPECT_THROW(check_attention_case(bad([](CaseSpec &c) { c.params["kv"] = "3,4"; })), std::invalid_argument);
  EXPECT_THROW(check_attention_case(bad([](CaseSpec &c) { c.params["target"] = "2"; })), std::invalid_argument);
  EXPECT_THROW(check_attention_case(bad([](CaseSpec &c) { c.property = "nope"; })), std::invalid_argument);
  EXPECT_THROW(check_attention_case(bad([](CaseSpec &c) { c.impl = "nope"; })), std::invalid_argument);
  EXPECT_THROW(check_attention_case(bad([](CaseSpec &c) {
                 c.property = "chunked_prefill";
                 c.params["chunks"] = "1.1";
               })),
               std::invalid_argument);
}

TEST(AttentionCase, DataIsAPureFunctionAndNeverZero) {
  EXPECT_EQ(attention_case::value(1, 2, 3), attention_case::value(1, 2, 3));
  EXPECT_NE(attention_case::value(1, 2, 3), attention_case::value(1, 2, 4));
  EXPECT_NE(attention_case::value(1, 2, 3), attention_case::value(2, 2, 3));
  double sum = 0, sq = 0;
  const int n = 100000;
  for (int i = 0; i < n; ++i) {
    const double v = attention_case::value(5, 1, i);
    ASSERT_NE(v, 0.0);
    sum += v;
    sq += v * v;
  }
  EXPECT_NEAR(sum / n, 0.0, 0.02);
  EXPECT_NEAR(sq / n, 1.0, 0.03);
}

TEST(AttentionGenerators, CasesAreWellFormedAndCoverTheEdges) {
  // Generated cases parse, respect the CPU size limits, and hit long rows (more than one split)
  // and batches of many sequences.
  int multi_split = 0, big_batch = 0;
  const auto r = run_property("invariant", "repeat", Backend::cpu, at::kFloat, 1, 7);  // warms the registry
  EXPECT_TRUE(r.passed) << r.message;
  rc::detail::TestParams params;
  params.maxSuccess = 300;
  params.seed = 99;
  const auto result = rc::detail::checkProperty(rc::detail::toProperty([&] {
                                                  const CaseSpec c = *gen_attention_case("invariant", "chunked_prefill",
                                                                                         Backend::cpu, at::kHalf);
                                                  const auto seqs = attention_case::sequences(c);
                                                  int64_t pairs = 0;
                                                  for (const auto &s : seqs) {
                                                    RC_ASSERT(s.q_len >= 1 && s.q_len <= s.kv_len);
                                                    pairs += s.q_len * s.kv_len;
                                                    multi_split += s.kv_len > 256;
                                                  }
                                                  big_batch += seqs.size() > 16;
                                                  RC_ASSERT(c.shape[0] <= 8);
                                                  RC_ASSERT(pairs <= 12000 + 600 * 49);
                                                }),
                                                rc::detail::TestMetadata{}, params);
  EXPECT_TRUE(result.is<rc::detail::SuccessResult>());
  EXPECT_GT(multi_split, 50);
  EXPECT_GT(big_batch, 10);
}
