// scaled_mm and the MoE ops as detfuzz checks them: their definitions and family, generated cases
// that fit, every property holding for the invariant impls, malformed cases as one-line errors,
// and each planted mutant caught by a CPU campaign and shrunk to its known minimum.
#include "harness/campaign.h"
#include "properties/defs/op_def.h"
#include "properties/family.h"
#include "properties/moe/moe_properties.h"
#include "properties/properties.h"
#include "properties/rows/row_properties.h"
#include "tests/support/first_failure.h"

#include <gtest/gtest.h>
#include <rapidcheck/gtest.h>

#include <algorithm>
#include <map>

namespace detfuzz {
namespace {

const std::vector<std::string> kMoeOps = {"fused_moe", "fused_moe_fp8"};

TEST(MoeDefs, DefinitionsAreCompleteAndTheFamilyHoldsTheMoeOps) {
  for (const char *op : {"scaled_mm", "fused_moe", "fused_moe_fp8"}) {
    const OpDef *d = find_op_def(op);
    ASSERT_NE(d, nullptr) << op;
    EXPECT_TRUE(d->input_sizes && d->gen && d->out_dtype && d->has_batch() && d->has_reference() && d->core_bound)
        << op;
    EXPECT_NE(find_impl(op, "invariant", Backend::cpu), nullptr) << op;
    EXPECT_NE(find_impl(op, "torch", Backend::cpu), nullptr) << op;
  }
  EXPECT_EQ(family_of("scaled_mm")->name, "rows");
  EXPECT_EQ(properties_for("scaled_mm"), row_properties());
  for (const auto &op : kMoeOps) {
    EXPECT_EQ(family_of(op)->name, "moe") << op;
    std::vector<std::string> want = row_properties();
    want.push_back("expert_load_invariance");
    want.push_back("routing_invariance");
    EXPECT_EQ(properties_for(op), want) << op;
  }
  // Each op is listed once, by the family that holds it.
  const auto ops = all_ops();
  for (const char *op : {"scaled_mm", "fused_moe", "fused_moe_fp8"})
    EXPECT_EQ(std::count(ops.begin(), ops.end(), op), 1) << op;
}

CaseSpec moe_case(const std::string &property, std::vector<int64_t> shape, std::map<std::string, std::string> params) {
  CaseSpec c;
  c.op = "fused_moe";
  c.impl = "invariant";
  c.property = property;
  c.dtype = at::kBFloat16;
  c.shape = std::move(shape);
  c.layout = "cccc";
  c.seed = 11;
  c.params = std::move(params);
  return c;
}

TEST(MoeDefs, MalformedCasesAreOneLineErrors) {
  CaseSpec c = moe_case("accuracy", {2, 16, 8, 8}, {{"topk", "9"}});
  EXPECT_THROW(check_case(c), std::invalid_argument);
  c.params["topk"] = "two";
  EXPECT_THROW(check_case(c), std::invalid_argument);
  c.params["topk"] = "2";
  c.shape = {2, 16, 8};
  EXPECT_THROW(check_case(c), std::invalid_argument);
  c = moe_case("expert_load_invariance", {2, 16, 8, 8}, {{"topk", "2"}, {"i", "2"}});
  EXPECT_THROW(check_case(c), std::invalid_argument);
  CaseSpec s = c;
  s.op = "scaled_mm";
  s.property = "batch_slice";
  s.shape = {4, 4, 4};
  s.params = {{"scale", "row"}};
  try {
    check_case(s);
    ADD_FAILURE() << "no error for scale=row";
  } catch (const std::invalid_argument &e) {
    EXPECT_EQ(std::string(e.what()), "unknown scale mode 'row' (expected tensor, channel or block)");
  }
  s.params = {{"scale", "block"}, {"bias", "2"}};
  EXPECT_THROW(check_case(s), std::invalid_argument);
}

// Generated cases fit their definitions (inputs, batch axis, reference and bound shapes).
RC_GTEST_PROP(MoeDefs, GeneratedCasesFitTheirDefinition, ()) {
  const std::string op = *rc::gen::element<std::string>("scaled_mm", "fused_moe", "fused_moe_fp8");
  const std::string property = *rc::gen::elementOf(properties_for(op));
  const Target t{op, "invariant", property, Backend::cpu, at::kBFloat16, Expectation::must_hold};
  const CaseSpec c = *gen_case(t);
  const OpDef &d = *find_op_def(op);
  const auto sizes = d.input_sizes(c);
  const BatchAxis ax = d.batch_axis(c);
  for (auto [tensor, dim] : ax.inputs) RC_ASSERT(sizes.at(tensor).at(dim) == ax.size);
  const OpArgs args = make_row_args(c);
  RC_ASSERT(d.reference(args).sizes() == d.core_bound(args).sizes());
}

// Every property holds for the invariant impls, in every dtype.
RC_GTEST_PROP(MoeProperties, InvariantImplsHoldEveryProperty, ()) {
  const std::string op = *rc::gen::element<std::string>("scaled_mm", "fused_moe", "fused_moe_fp8");
  const std::string property = *rc::gen::elementOf(properties_for(op));
  const at::ScalarType dtype = *rc::gen::element(at::kBFloat16, at::kHalf, at::kFloat);
  const Target t{op, "invariant", property, Backend::cpu, dtype, Expectation::must_hold};
  const CaseSpec c = *gen_case(t);
  const Verdict v = check_case(c);
  if (!v.passed()) RC_FAIL(c.describe() + ": " + v.detail);
}

// Ties in the logits (ties=1) route by index the same way alone and in a batch, and a heavily
// loaded batch leaves the target's bits alone.
TEST(MoeProperties, TiesAndHeavyLoadsHoldForTheInvariantImpls) {
  for (const auto &op : kMoeOps)
    for (const char *k : {"1", "2", "8"}) {
      CaseSpec c = moe_case("routing_invariance", {6, 40, 8, 24}, {{"topk", k}, {"i", "4"}, {"ties", "1"}});
      c.op = op;
      c.layout = op == "fused_moe" ? "tccg" : "ccccpc";
      Verdict v = check_case(c);
      EXPECT_TRUE(v.passed()) << c.describe() << ": " << v.detail;
      c.property = "expert_load_invariance";
      c.params.insert({{"o", "3"}, {"tail", "20"}, {"same", "12"}});
      v = check_case(c);
      EXPECT_TRUE(v.passed()) << c.describe() << ": " << v.detail;
    }
}

// The libtorch baseline of the MoE layer (Hugging Face's eager block: at::mm on each expert's
// gathered tokens, index_add_) is observed, never must-hold.
TEST(MoeProperties, TorchBaselineIsObserved) {
  for (const auto &op : kMoeOps) EXPECT_EQ(find_impl(op, "torch", Backend::cpu)->expectation, Expectation::observed);
  EXPECT_EQ(find_impl("scaled_mm", "torch", Backend::cpu)->expectation, Expectation::observed);
}

// A CPU campaign on one target, shrinking on: the first failure's record.
Record first_failure(const Target &t, uint64_t seed) { return campaign_first_failure(t, seed, 120, 60); }

// float32: a 16-bit output rounds most one-ulp float32 differences away.
Target cpu_target(const std::string &op, const std::string &impl, const std::string &property) {
  return {op, impl, property, Backend::cpu, at::kFloat, Expectation::must_hold};
}

void expect_replays(const Record &r) {
  const ReplayResult rr = replay_record(r);
  EXPECT_FALSE(rr.verdict.passed()) << r.spec.describe();
  EXPECT_TRUE(rr.reproduced) << r.detail << " vs " << rr.verdict.detail;
}

// Promotion every 256 of K from M = 16 on: a smaller M never fails, and K must pass 128.
TEST(MoeMutants, Fp8PromotionMutantIsRecordedAtSixteenRows) {
  const Record r = first_failure(cpu_target("scaled_mm", "mutant-fp8-promote", "batch_slice"), 1);
  ASSERT_EQ(r.spec.shape.size(), 3u);
  EXPECT_EQ(r.spec.shape[0], 16) << r.spec.describe();
  EXPECT_GT(r.spec.shape[2], 128) << r.spec.describe();
  expect_replays(r);
}

// Split-K for experts with <= 2 tokens: the target alone splits, loaded it does not. The search
// lowers E to top-k (any E >= k is an MoE layer): one token, top-1 of one expert, and a width of at
// least 64, the smallest K that splits (at 32).
TEST(MoeMutants, SplitKMutantIsRecordedAtOneToken) {
  for (const auto &op : kMoeOps) {
    const Record r = first_failure(cpu_target(op, "mutant-moe-splitk", "expert_load_invariance"), 2);
    ASSERT_EQ(r.spec.shape.size(), 4u);
    EXPECT_EQ(r.spec.shape[0], 1) << r.spec.describe();
    EXPECT_EQ(r.spec.shape[2], 1) << r.spec.describe();
    EXPECT_EQ(r.spec.param("topk"), "1") << r.spec.describe();
    EXPECT_EQ(std::min(r.spec.shape[1], r.spec.shape[3]), 1) << r.spec.describe();
    EXPECT_GE(std::max(r.spec.shape[1], r.spec.shape[3]), 64) << r.spec.describe();
    EXPECT_GE(std::stoll(r.spec.param("o")) + std::stoll(r.spec.param("tail")), 2) << r.spec.describe();
    expect_replays(r);
  }
}

// Small K blocks for experts with >= 4 tokens: one token alone, then with three more on its
// expert (copies of its logits, or fresh tokens that happen to route there).
TEST(MoeMutants, TileMutantIsRecordedAtOneTokenAndThreeMore) {
  const Record r = first_failure(cpu_target("fused_moe", "mutant-moe-tile", "expert_load_invariance"), 3);
  ASSERT_EQ(r.spec.shape.size(), 4u);
  EXPECT_EQ(r.spec.shape[0], 1) << r.spec.describe();
  EXPECT_EQ(r.spec.param("topk"), "1") << r.spec.describe();
  EXPECT_LE(std::stoll(r.spec.param("same")), 3) << r.spec.describe();
  EXPECT_GE(std::stoll(r.spec.param("o")) + std::stoll(r.spec.param("tail")), 3) << r.spec.describe();
  EXPECT_GT(std::max(r.spec.shape[1], r.spec.shape[3]), 32) << r.spec.describe();
  expect_replays(r);
}

// Atomics-order combine: only a sum of three or more terms can change with the order, so top-8;
// and of more than 8 experts (top-8 of 8 loads every expert alike, so their order is fixed). E
// itself is a local minimum: which E still reorders depends on the data.
TEST(MoeMutants, AtomicCombineMutantIsRecordedAtTopEight) {
  for (const char *property : {"batch_slice", "expert_load_invariance"}) {
    const Record r = first_failure(cpu_target("fused_moe", "mutant-moe-atomic", property), 4);
    ASSERT_EQ(r.spec.shape.size(), 4u);
    EXPECT_EQ(r.spec.param("topk"), "8") << r.spec.describe();
    EXPECT_GT(r.spec.shape[2], 8) << r.spec.describe();
    EXPECT_LE(r.spec.shape[2], 64) << r.spec.describe();
    expect_replays(r);
  }
}

}  // namespace
}  // namespace detfuzz
