// Op definitions: every built-in row op has a complete one, a spec op's is the same kind without
// a reference, generated cases fit their definition, and the definitions the bench reads are
// consistent. The impls' declarations that replaced name checks (variants, the dispatcher flag,
// the graph pipelines) are read from the impls.
#include "ops/graph/pipelines.h"
#include "properties/accuracy.h"
#include "properties/defs/op_def.h"
#include "properties/properties.h"
#include "properties/rows/row_properties.h"
#include "properties/spec/spec_def.h"

#include <gtest/gtest.h>
#include <rapidcheck/gtest.h>

namespace detfuzz {
namespace {

TEST(OpDefs, EveryBuiltinRowOpIsCompleteAndHasEveryRowProperty) {
  ASSERT_EQ(builtin_row_ops().size(), 12u);
  for (const auto &op : builtin_row_ops()) {
    const OpDef *d = find_op_def(op);
    ASSERT_NE(d, nullptr) << op;
    EXPECT_EQ(d->name, op);
    EXPECT_FALSE(d->size_names.empty()) << op;
    EXPECT_TRUE(d->input_sizes && d->gen && d->out_dtype) << op;
    EXPECT_TRUE(d->has_batch()) << op;
    EXPECT_TRUE(d->has_reference() && d->core_bound) << op;
    EXPECT_FALSE(d->dispatcher_impl) << op << ": built-in ops take their impls from the registry";
    // The MoE ops' family adds its own properties after the row properties.
    auto props = properties_for(op);
    if (!d->family.empty()) props.resize(std::min(props.size(), row_properties().size()));
    EXPECT_EQ(props, row_properties()) << op;
  }
}

TEST(OpDefs, SpecOpsAreDefinitionsWithoutAReference) {
  for (const auto &name :
       {"aten::mm", "aten::addmm", "aten::bmm", "aten::baddbmm", "aten::_log_softmax", "aten::mean.dim"}) {
    const OpDef *d = find_op_def(name);
    ASSERT_NE(d, nullptr) << name;
    EXPECT_FALSE(d->has_reference()) << name;
    EXPECT_TRUE(d->dispatcher_impl) << name;
    EXPECT_FALSE(d->graph_replay) << name;
    EXPECT_EQ(find_op_def(name), d) << "one definition per spec";
    const ImplInfo torch = d->dispatcher_impl(Backend::cpu);
    EXPECT_TRUE(torch.through_dispatcher) << name;
    EXPECT_EQ(torch.expectation, Expectation::observed) << name;
  }
  EXPECT_EQ(find_op_def("aten::nope"), nullptr);
  EXPECT_EQ(find_op_def("conv2d"), nullptr);
}

TEST(OpDefs, AccuracyByNameNeedsAReference) {
  OpArgs a;
  a.tensors = {at::ones({2, 3}), at::ones({3, 4})};
  EXPECT_TRUE(check_accuracy("mm", a, at::full({2, 4}, 3.0)).ok);
  EXPECT_FALSE(check_accuracy("mm", a, at::full({2, 4}, 3.5)).ok);
  EXPECT_THROW(check_accuracy("aten::mm", a, at::full({2, 4}, 3.0)), std::invalid_argument);
  EXPECT_THROW(reference_f64("conv2d", a), std::invalid_argument);
}

// The built-in impls that call the aten op through the dispatcher say so (a mode that overrides
// the op turns them must-hold); ours and the attention impls do not.
TEST(OpDefs, DispatcherImplsAreDeclaredByTheImpl) {
  for (const auto &op : builtin_row_ops()) {
    const ImplInfo *torch = find_impl(op, "torch", Backend::cpu);
    ASSERT_NE(torch, nullptr) << op;
    EXPECT_TRUE(torch->through_dispatcher) << op;
    const ImplInfo *ours = find_impl(op, "invariant", Backend::cpu);
    ASSERT_NE(ours, nullptr) << op;
    EXPECT_FALSE(ours->through_dispatcher) << op;
  }
  for (const auto &i : all_impls())
    if (i.op == "paged_attention") EXPECT_FALSE(i.through_dispatcher) << i.impl;
}

#ifdef DETFUZZ_WITH_CUDA
// The CUDA matmuls declare their kernel paths (what variant_agree compares and bench forces); the
// lookup by name needs no GPU.
TEST(OpDefs, MatmulImplsDeclareTheirKernelPaths) {
  for (const char *op : {"mm", "addmm", "bmm"}) {
    const ImplInfo *i = find_impl(op, "invariant", Backend::cuda);
    ASSERT_NE(i, nullptr) << op;
    ASSERT_TRUE(i->variants && i->variant_named) << op;
    EXPECT_TRUE(i->variant_named("sm90_split_64").has_value()) << op;
    EXPECT_TRUE(i->variant_named("mma_sync").has_value()) << op;
    EXPECT_FALSE(i->variant_named("no-such-path").has_value()) << op;
  }
  EXPECT_FALSE(find_impl("log_softmax", "invariant", Backend::cuda)->variant_named);
}
#endif

TEST(OpDefs, GraphImplsDeclareTheirPipelines) {
  for (const auto &i : all_impls()) {
    if (i.op != "prefill_graph") continue;
    EXPECT_NE(graph::prefill_pipeline(i.impl), nullptr) << i.impl << " has no declared pipeline";
  }
  EXPECT_TRUE(graph::prefill_pipeline("graph")->runner);
  EXPECT_TRUE(graph::prefill_pipeline("mutant-left-aligned")->left_aligned);
  EXPECT_TRUE(graph::prefill_pipeline("eager-no-copy")->no_copy);
  EXPECT_FALSE(graph::prefill_pipeline("eager")->through_registry);
  EXPECT_EQ(graph::prefill_pipeline("nope"), nullptr);
  EXPECT_TRUE(property_applies("prefill_graph", "eager-registry", "registry_agree"));
  EXPECT_FALSE(property_applies("prefill_graph", "eager", "registry_agree"));
  EXPECT_FALSE(property_applies("prefill_graph", "eager", "replay_vs_eager"));
  EXPECT_TRUE(property_applies("prefill_graph", "graph", "replay_vs_eager"));
}

// Every generated case of every built-in op fits its definition: inputs, batch axis and the
// definition's own output dtype on the reference.
RC_GTEST_PROP(OpDefs, GeneratedCasesFitTheirDefinition, ()) {
  const std::string op = *rc::gen::elementOf(builtin_row_ops());
  const OpDef &d = *find_op_def(op);
  const Target t{op, "invariant", "batch_slice", Backend::cpu, at::kFloat, Expectation::must_hold};
  const CaseSpec c = *d.gen(t);
  const auto sizes = d.input_sizes(c);
  const BatchAxis ax = d.batch_axis(c);
  for (auto [tensor, dim] : ax.inputs) {
    RC_ASSERT(static_cast<size_t>(tensor) < sizes.size());
    RC_ASSERT(sizes[tensor][dim] == ax.size);
  }
  const OpArgs args = make_row_args(c);
  const at::Tensor ref = d.reference(args);
  RC_ASSERT(ref.scalar_type() == at::kDouble);
  RC_ASSERT(ref.dim() > ax.out_dim || ax.size == 0);
  if (ref.dim() > ax.out_dim) RC_ASSERT(ref.size(ax.out_dim) == ax.size);
  RC_ASSERT(d.core_bound(args).sizes() == ref.sizes());
}

TEST(OpDefs, BenchShapesComeFromTheDefinitions) {
  size_t shapes = 0;
  for (const auto &op : builtin_row_ops()) {
    const BenchDef &b = find_op_def(op)->bench;
    for (const auto &s : b.shapes) EXPECT_EQ(s.op, op);
    if (!b.shapes.empty()) EXPECT_TRUE(b.args && b.flops && b.bytes && b.input_bytes && b.against_copy) << op;
    shapes += b.shapes.size();
  }
  // mm's 42 matmul shapes, log_softmax's and mean's 3, scaled_mm's 42 per tensor and 42 block-wise,
  // fused_moe's and fused_moe_fp8's 2 layers x 6 batches.
  EXPECT_EQ(shapes, 42u + 3 + 3 + 84 + 12 + 12);
  EXPECT_EQ(find_op_def("mm")->bench.baseline, "cublas");
  EXPECT_EQ(find_op_def("scaled_mm")->bench.baseline, "torch-scaled-mm");
  EXPECT_EQ(find_op_def("fused_moe")->bench.baseline, "torch-grouped");
  // fp8 experts against our 16-bit kernel on the same layer: inputs of its own, made from ours.
  EXPECT_EQ(find_op_def("fused_moe_fp8")->bench.baseline, "fused_moe:invariant");
  EXPECT_TRUE(find_op_def("fused_moe_fp8")->bench.baseline_args != nullptr);
  EXPECT_TRUE(find_op_def("fused_moe")->bench.baseline_args == nullptr);
  EXPECT_DOUBLE_EQ(find_op_def("mm")->bench.flops({"mm", 2, 3, 4}), 48.0);
}

}  // namespace
}  // namespace detfuzz
