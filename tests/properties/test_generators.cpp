#include "properties/generators.h"
#include "properties/properties.h"
#include "properties/rows/row_properties.h"

#include <gtest/gtest.h>
#include <rapidcheck/gtest.h>

namespace detfuzz {
namespace {

RC_GTEST_PROP(Generators, RowCasesAreWellFormedAndWithinLimits, ()) {
  const std::string op = *rc::gen::elementOf(builtin_row_ops());
  const std::string property = *rc::gen::elementOf(row_properties());
  const auto dtype = *rc::gen::element(at::kFloat, at::kHalf, at::kBFloat16);
  const Target t{op, "invariant", property, Backend::cpu, dtype, Expectation::must_hold};
  const CaseSpec c = *gen_row_case(t);
  const auto sizes = row_input_sizes(c);  // throws on a malformed case
  // One layout code per input, except that the transformer ops' side inputs (rms_norm's weight,
  // rope's positions, embedding's ids) are always contiguous: one code, for the first tensor.
  const bool one_code = op == "rms_norm" || op == "rope" || op == "embedding";
  RC_ASSERT(c.layout.size() == (one_code ? 1 : sizes.size()));
  const SizeLimits lim = size_limits(Backend::cpu);
  for (auto s : c.shape) RC_ASSERT(s >= 0 && s <= std::max({lim.rows, lim.cols, lim.reduce}));
  if (property == "batch_slice" || property == "batch_compose" || property == "permute") {
    const BatchAxis ax = row_batch_axis(c);
    const int64_t i = c.param_int("i", -1), j = c.param_int("j", -1);
    RC_ASSERT(0 <= i);
    RC_ASSERT(i < j || ax.size == 0);
    RC_ASSERT(j <= ax.size);
  }
  // The case survives a trip through its text form.
  RC_ASSERT(parse_shape(c.shape_string()) == c.shape);
  RC_ASSERT(parse_params(c.params_string()) == c.params);
}

TEST(Generators, DimensionsHitTheEdgesAndShrinkTowardTheLowerBound) {
  std::map<int64_t, int> seen;
  const auto gen = gen_dim(1, 300);
  for (int k = 0; k < 3000; ++k) seen[gen(rc::Random(k), 100).value()]++;
  for (int64_t edge : {1, 63, 64, 65, 127, 128, 129, 255, 256, 257}) EXPECT_GT(seen[edge], 0) << edge;
  // Repeatedly taking the first shrink reaches the lower bound.
  for (int k = 0; k < 20; ++k) {
    rc::Shrinkable<int64_t> s = gen_dim(3, 300)(rc::Random(k), 50);
    for (auto next = s.shrinks().next(); next; next = s.shrinks().next()) s = *next;
    EXPECT_EQ(s.value(), 3) << "seed " << k;
  }
  std::map<int64_t, int> with_zero;
  for (int k = 0; k < 2000; ++k) with_zero[gen_dim(0, 10)(rc::Random(k), 100).value()]++;
  EXPECT_GT(with_zero[0], 0) << "empty dimensions are generated";
  EXPECT_EQ(with_zero.rbegin()->first, 10);
}

TEST(Generators, ChoicesShrinkTowardTheFirst) {
  const auto gen = shrinking_choice<char>({{1, 'c'}, {5, 't'}, {5, 'g'}});
  for (int k = 0; k < 20; ++k) {
    rc::Shrinkable<char> s = gen(rc::Random(k), 50);
    for (auto next = s.shrinks().next(); next; next = s.shrinks().next()) s = *next;
    EXPECT_EQ(s.value(), 'c');
  }
}

TEST(Properties, CatalogueCoversEveryOp) {
  for (const auto &op : all_ops()) EXPECT_FALSE(properties_for(op).empty()) << op;
  EXPECT_TRUE(properties_for("conv2d").empty());
  CaseSpec c;
  c.op = "conv2d";
  EXPECT_THROW(check_case(c), std::invalid_argument);
}

TEST(Properties, MalformedCasesAreRejectedNotRun) {
  CaseSpec c;
  c.op = "mm";
  c.impl = "invariant";
  c.property = "batch_slice";
  c.shape = {4, 4};  // mm needs M N K
  EXPECT_THROW(check_case(c), std::invalid_argument);
  c.shape = {4, 4, 4};
  c.impl = "nonesuch";
  EXPECT_THROW(check_case(c), std::invalid_argument);
  c.impl = "invariant";
  c.property = "telepathy";
  EXPECT_THROW(check_case(c), std::invalid_argument);
  c.property = "batch_slice";
  c.dtype = at::kInt;
  EXPECT_THROW(check_case(c), std::invalid_argument);
}

TEST(Properties, AnImplThatThrowsBecomesAnErrorVerdict) {
  CaseSpec c;
  c.op = "log_softmax";
  c.impl = "invariant";
  c.property = "repeat";
  c.dtype = at::kHalf;
  c.shape = {3, 40};
  c.layout = "c";
  c.params = {{"dim", "1"}, {"h2f", "1"}};
  EXPECT_TRUE(check_case(c).passed());
  // libtorch's CPU _log_softmax has no half_to_float: the case comes back as an error verdict
  // carrying the message, instead of ending the run.
  c.impl = "torch";
  const Verdict v = check_case(c);
  EXPECT_EQ(v.outcome, Verdict::Outcome::error);
  EXPECT_FALSE(v.detail.empty());
}

}  // namespace
}  // namespace detfuzz
