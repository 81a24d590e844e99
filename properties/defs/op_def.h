// An op definition: everything detfuzz needs to know of one op, in one place. The row properties,
// the case generators, the accuracy check and the bench read definitions; none of them branches
// on an op's name.
//
// A built-in row op has one definition file in this folder (mm.cpp, rms_norm.cpp, ...) and one
// registration line in defs.cpp. A user's `--spec` op (and a built-in aten spec) is the same kind
// of definition, made from the spec's text (properties/spec): it has no reference, no bench
// shapes, and its own `dispatcher_impl`.
//
// Case vocabulary: a case's `shape` holds the op's size variables in the order the definition
// names them (mm: M N K); `params` its attributes (dim=1 keepdim=0 ...) and the property
// parameters (i j o tail perm), which the row family adds.
#pragma once

#include "ops/op_args.h"
#include "ops/registry.h"
#include "properties/case.h"
#include "properties/generators.h"

#include <rapidcheck.h>

#include <functional>
#include <string>
#include <utility>
#include <vector>

namespace detfuzz {

// Where the batch lives in a case: the input dims sliced together and the matching output dim.
struct BatchAxis {
  std::vector<std::pair<int, int>> inputs;  // (tensor index in OpArgs, dim)
  int out_dim = 0;
  int64_t size = 0;  // the batch size of the case
};

// One benchmarked shape (harness/bench): sizes M N K of an op, or of a family's own kind of shape
// (paged attention: batch, context, head dim, page, KV heads).
struct BenchShape {
  std::string op;
  int64_t m = 0, n = 0, k = 0;
  int64_t page = 16;
  int64_t kv_heads = 0;  // attention rows: KV heads of the 32 query heads (0: the family's default, 8)
  // A setting of the definition's own that the shape is timed under (scaled_mm: "block" scales),
  // shown after the op as op[variant]; empty for none.
  std::string variant{};
  std::string label() const { return variant.empty() ? op : op + "[" + variant + "]"; }
};

// How `detfuzz bench` times an op: its default shapes, the inputs of a shape, what it moves and
// computes, and the impl it is compared with.
struct BenchDef {
  std::vector<BenchShape> shapes;
  bool uses_k = false;             // K is a size of the op (a bench shape file must give it)
  std::string baseline = "torch";  // the impl every row's speedup is against
  // A baseline of another op, named "op:impl" (fused_moe_fp8 against "fused_moe:invariant", the
  // 16-bit kernel on the same layer before quantisation), runs on inputs made from ours by this.
  std::function<OpArgs(const OpArgs &)> baseline_args;
  // Also time impl `invariant-dispatch`: the op's `torch` impl with the batch-invariant mode on
  // (the speed a PyTorch user gets through the dispatcher).
  bool dispatch_row = false;
  std::function<OpArgs(const BenchShape &, at::ScalarType, at::Generator &)> args;  // on the GPU
  std::function<double(const BenchShape &)> flops;                                  // 0: not a FLOP-bound op
  std::function<double(const BenchShape &, at::ScalarType)> bytes;                  // read + written once
  std::function<double(const BenchShape &, at::ScalarType)> input_bytes;            // one input set
  // Whether bench also reports the share of a device copy of the same bytes (B-bound products).
  std::function<bool(const BenchShape &)> against_copy;
  // The inputs whose first dim is the batch (bench's batch_slice check cuts them together).
  std::function<std::vector<size_t>(const BenchShape &)> batch_inputs = [](const BenchShape &) {
    return std::vector<size_t>{0};
  };
  // The end-of-run summary of an op with uses_k also sums up M <= small_m (decode) and M >= 128.
  int64_t small_m = 32;
  // The variants a shape may name (BenchShape::variant; a shape file's `variant` column).
  std::vector<std::string> variants;
};

struct OpDef {
  std::string name;                     // "mm", "aten::mm", "myns::my_op"
  std::vector<std::string> size_names;  // the case's shape: {"M", "N", "K"}

  // Input sizes of a case, in OpArgs order. Throws std::invalid_argument (naming the bad value)
  // when the case's shape or parameters do not fit the op.
  std::function<std::vector<std::vector<int64_t>>(const CaseSpec &)> input_sizes;
  // The output's sizes where they can outgrow the inputs' (a matrix product, an embedding): the
  // check that a replayed record fits the backend's memory counts them too. Empty for the others.
  std::function<std::vector<int64_t>(const CaseSpec &)> output_sizes;
  // Where the batch lives; empty when the op has none (only repeat and variant_agree apply).
  // Throws std::invalid_argument for parameters that do not fit.
  std::function<BatchAxis(const CaseSpec &)> batch_axis;
  // Ops with several batch axes (bmm: the matrices or each matrix's rows): sets the case's
  // choice (a parameter) from a draw in [0, 4), before the batch is sliced.
  std::function<void(CaseSpec &, int choice)> pick_batch_axis;
  // The fixed dtype of input t, if it has one (index tensors, a spec's dtype=); else the case's.
  std::function<std::optional<at::ScalarType>(size_t t)> input_dtype;
  // Input t holds indices in [0, range) (rope's positions, embedding's ids): > 0 to say so.
  std::function<int64_t(const CaseSpec &, size_t t)> index_range;
  // The op's attributes from the case's parameters (dim, keepdim, alpha, ...).
  std::function<void(const CaseSpec &, OpArgs &)> read_attributes;
  // Extra checks of a case before it runs (a spec's parameters decode); throws std::invalid_argument.
  std::function<void(const CaseSpec &)> validate;
  // Checks the output of a case's own inputs (a spec's `out`); throws OpFailure when it is wrong.
  std::function<void(const CaseSpec &, const at::Tensor &out, int64_t batch)> check_output;

  // Cases of a target: shapes, layouts, data, attributes and the property's parameters.
  std::function<rc::Gen<CaseSpec>(const Target &)> gen;

  // The float64 reference (inputs upcast exactly, computed on the CPU), and the `core` of the
  // accuracy bound (properties/accuracy.h): both empty for an op without a reference.
  std::function<at::Tensor(const OpArgs &)> reference;
  std::function<at::Tensor(const OpArgs &)> core_bound;
  // The dtype the op returns for these inputs.
  std::function<at::ScalarType(const OpArgs &)> out_dtype;

  // The property family that holds the op when it is not the row family alone (the MoE ops:
  // "moe", which adds its own properties to the row properties); empty for a plain row op.
  std::string family;

  // variant_agree also replays the op from a CUDA graph (off for ops that may not be capturable).
  bool graph_replay = true;
  // A spec op's only impl, `torch` (the dispatcher's kernel); empty for built-in ops, whose impls
  // come from the registry.
  std::function<ImplInfo(Backend)> dispatcher_impl;

  BenchDef bench;  // bench.shapes is empty for ops that are not benchmarked

  bool has_batch() const { return static_cast<bool>(batch_axis); }
  bool has_reference() const { return static_cast<bool>(reference); }
  std::string shape_text() const;  // "MxNxK"
};

// The op failed on a case (it threw, or returned the wrong shape): the case's verdict is an error.
struct OpFailure : std::runtime_error {
  using std::runtime_error::runtime_error;
};

// The definitions (properties/op_registry.cpp): the built-in row ops (properties/defs, in
// catalogue order) and the ops of spec files, the built-in aten specs among them
// (properties/spec). A pointer stays valid for the process; a spec registered again under the
// same name gets a new definition.
const std::vector<std::string> &builtin_row_ops();
const OpDef *find_op_def(const std::string &op);  // nullptr when unknown

// Helpers for definition files.
namespace defs {

// Throws unless the case's shape has lo..hi sizes.
void need_rank(const CaseSpec &c, size_t lo, size_t hi);
// `d` in [-rank, rank) made non-negative; throws naming `what` otherwise.
int64_t normalized_dim(int64_t d, int64_t rank, const std::string &what);
// "1.-1" -> {1, -1}; throws for text that is not integers joined by '.'.
std::vector<int64_t> parse_dims(const std::string &s);
at::Tensor f64(const at::Tensor &t);  // exact upcast to float64

}  // namespace defs
}  // namespace detfuzz
