// Op specs: how detfuzz fuzzes an arbitrary dispatcher operator (a user's kernel library loaded
// at run time, or an aten op). A spec names the operator, describes each of its arguments in
// schema order — tensors by their sizes in terms of size variables, other arguments by the values
// to try — says which tensor dimension is the batch, and bounds each size variable.
//
// The spec file format. One or more blocks, each opened by an `op` line. `#` starts a comment;
// blank lines are ignored; spaces inside [...] are ignored; other tokens are separated by spaces.
//
//   op     <namespace>::<name>[.<overload>]          e.g. myns::my_mm, aten::mean.dim
//   arg    <name> tensor [<d>, <d>, ...] [batch=<i>] [dtype=<dtype>]
//   arg    <name> int    <v>|<v>|...                  schema int, SymInt (or optional)
//   arg    <name> float  <v>|<v>|...                  schema float, Scalar (or optional)
//   arg    <name> bool   <false|true>|...             schema bool (or optional)
//   arg    <name> int[]  [<v>,<v>,...]|[...]|none     schema int[], int[N], SymInt[] (or optional)
//   arg    <name> dtype  <dtype>|none|...             schema ScalarType (or optional)
//   arg    <name> none                                any optional argument: passes None
//   out    [<d>, <d>, ...] batch=<i>                  the (single tensor) result; the shape is
//   out    batch=<i>                                  optional, and checked when given
//   sizes  <V>=<lo>..<hi> <V>=<n> ...                 every size variable with its range; this
//                                                     order is the order of a case's shape
//   dtypes <dtype> ...                                dtypes of tensors without dtype=
//
//   <d> is a size variable (an identifier declared in `sizes`) or an integer. `batch=<i>` marks
//   dimension i of a tensor as the batch: every marked tensor must have the same variable there,
//   and `out` must mark where that variable lands in the result. A spec with no batch gets only
//   the properties that need none (repeat, variant_agree). Value lists `a|b|c` are the values a
//   case may take, the first being where shrinking goes. Arguments come in the schema's order
//   and with its names; trailing arguments that have defaults may be left out (their defaults
//   are passed). <dtype> is float32, float16, bfloat16, float64, int32 or int64.
//
// Example (tests/plugins/example_kernels.spec):
//
//   op     detfuzz_example::rowwise_mm
//   arg    a tensor [M, K] batch=0
//   arg    b tensor [K, N]
//   out    [M, N] batch=0
//   sizes  M=1..64 N=1..32 K=1..64
//   dtypes float32 float16 bfloat16
//
// Errors (a malformed spec, a spec that contradicts the operator's schema, an operator that is not
// registered, a library that cannot be loaded) are std::invalid_argument with a one-line message
// naming the origin and line. Nothing here registers anything at static-initialisation time: the
// built-in specs of the aten ops are built on first use.
#pragma once

#include <ATen/ATen.h>

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace detfuzz {

struct SpecArg {
  enum class Kind { tensor, int_value, float_value, bool_value, int_list, dtype, none };
  std::string name;
  Kind kind = Kind::tensor;
  // tensor: its sizes, each a size variable or an integer literal; the batch dim or -1; a fixed dtype.
  std::vector<std::string> dims;
  int batch = -1;
  std::optional<at::ScalarType> dtype;
  // Other kinds: the values a case may take, in the encoding of case params (no spaces, commas
  // or '='): int "-1", float the hex bits of a double, bool "0"/"1", int[] "1.2" ("empty" for
  // []), dtype "float32", and "none" for None.
  std::vector<std::string> values;
  int line = 0;
};

struct SizeVar {
  std::string name;
  int64_t lo = 0, hi = 0;
  int line = 0;
};

struct OpSpec {
  std::string name;      // as written: "aten::mean.dim"
  std::string op_name;   // "aten::mean"
  std::string overload;  // "dim", or "" for the default overload
  std::vector<SpecArg> args;
  std::vector<std::string> out_dims;
  bool out_shape_given = false;
  int out_batch = -1;
  std::vector<SizeVar> sizes;
  std::vector<at::ScalarType> dtypes;
  std::string origin;    // file name or "<builtin>"
  int line = 0;          // of the `op` line
  bool builtin = false;  // a built-in aten spec (its `torch` impl is a baseline: observed)

  bool has_batch() const { return out_batch >= 0; }
  int tensor_count() const;
  int size_index(const std::string &var) const;  // -1 when not a size variable
  int batch_size_index() const;                  // the size variable of the batch, -1 if none
};

const char *to_string(SpecArg::Kind k);
// The key under which a case stores a value argument's choice: the argument's name, or
// "arg.<name>" when that name is one of the property parameters (i, j, o, tail, perm).
std::string spec_param_key(const std::string &arg_name);

// Parses every block of `text`; `origin` (a file name) prefixes error messages.
std::vector<OpSpec> parse_op_specs(const std::string &text, const std::string &origin);
// Exactly one block.
OpSpec parse_op_spec(const std::string &text, const std::string &origin);
// Checks a spec against the operator's schema in libtorch's dispatcher: the operator exists, the
// arguments match in number (trailing defaults may be left out), names and types, and it
// returns one tensor.
void validate_op_spec(const OpSpec &spec);

// dlopen(path, RTLD_NOW | RTLD_GLOBAL): the library's TORCH_LIBRARY blocks register its ops.
// A library that cannot be loaded (missing, not a shared object, unresolved symbols) throws
// std::invalid_argument("cannot load kernel library '<path>': <dlerror>"). Loading a path twice is
// harmless. A library whose static registration throws (its TORCH_LIBRARY namespace is already
// taken, e.g. by a copy under another path) ends the process with c10's message, as in Python.
void load_kernel_library(const std::string &path);

// The spec registry: the built-in aten specs (mm, addmm, bmm, baddbmm, _log_softmax, mean.dim)
// and those registered. register_op_spec validates against the schema first; registering a name
// again replaces the earlier spec (pointers to it stay valid but stale).
void register_op_spec(OpSpec spec);
// Reads a spec file, registers every block in it, returns the op names in file order.
std::vector<std::string> load_op_spec_file(const std::string &path);
const OpSpec *find_op_spec(const std::string &op);  // nullptr when unknown
std::vector<std::string> spec_ops();                // built-ins first, then registration order

// The built-in specs' text (documentation, and what tests parse).
const std::string &builtin_op_specs_text();

}  // namespace detfuzz
