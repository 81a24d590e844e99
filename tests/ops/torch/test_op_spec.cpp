// Op specs (properties/spec): the parser's one-line errors, specs that contradict the operator's
// schema, kernel libraries that do not load, the built-in aten specs, and the example plugin
// (tests/plugins): check_spec_case passes detfuzz_example::rowwise_mm on generated cases of every
// property, and a RapidCheck run finds detfuzz_example::splitk_mm's planted split-K and shrinks it
// to M = 17 within 30 s. With batch-invariant mode the built-in aten::mm spec passes; without,
// the spec path finds libtorch's CPU mm difference.
#include "ops/torch/batch_invariant_mode.h"
#include "properties/spec/op_spec.h"
#include "properties/spec/spec_def.h"
#include "properties/properties.h"
#include "properties/rows/row_properties.h"

#include <gtest/gtest.h>
#include <rapidcheck.h>

#include <chrono>
#include <fstream>
#include <optional>
#include <sstream>

#ifndef DETFUZZ_EXAMPLE_KERNELS_LIB
#error "tests/plugins/CMakeLists.txt defines DETFUZZ_EXAMPLE_KERNELS_LIB and DETFUZZ_EXAMPLE_KERNELS_SPEC"
#endif

namespace detfuzz {
namespace {

std::string read_file(const std::string &path) {
  std::ifstream f(path);
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

// The message of the std::invalid_argument that `f` throws; fails the test when it throws nothing else.
template <typename F>
std::string invalid_argument_of(F &&f) {
  try {
    f();
  } catch (const std::invalid_argument &e) {
    return e.what();
  } catch (const std::exception &e) {
    ADD_FAILURE() << "threw something else than std::invalid_argument: " << e.what();
    return "";
  }
  ADD_FAILURE() << "did not throw";
  return "";
}

void expect_one_line_error(const std::string &msg, const std::string &needle) {
  EXPECT_NE(msg.find(needle), std::string::npos) << "message: " << msg << "\nexpected to contain: " << needle;
  EXPECT_EQ(msg.find('\n'), std::string::npos) << "not one line: " << msg;
}

void load_example_plugin() {
  load_kernel_library(DETFUZZ_EXAMPLE_KERNELS_LIB);
  const auto names = load_op_spec_file(DETFUZZ_EXAMPLE_KERNELS_SPEC);
  ASSERT_EQ(names, (std::vector<std::string>{"detfuzz_example::rowwise_mm", "detfuzz_example::splitk_mm"}));
}

Target target_of(const std::string &op, const std::string &property, at::ScalarType dtype = at::kFloat) {
  Target t;
  t.op = op;
  t.impl = "torch";
  t.property = property;
  t.backend = Backend::cpu;
  t.dtype = dtype;
  return t;
}

struct SilentListener : rc::detail::TestListener {
  void onTestCaseFinished(const rc::detail::CaseDescription &) override {}
  void onShrinkTried(const rc::detail::CaseDescription &, bool) override {}
  void onTestFinished(const rc::detail::TestMetadata &, const rc::detail::TestResult &) override {}
};

struct RunResult {
  int cases = 0, shrink_steps = 0;
  std::optional<CaseSpec> minimal;  // the last failing case: where shrinking ended
  Verdict minimal_verdict;
  double seconds = 0;
};

// A RapidCheck run of one target as the campaign runs it: generate, check, and on the first
// failure shrink (each failing shrink candidate becomes the new minimal case).
RunResult run_target(const Target &t, int max_success, uint64_t seed) {
  RunResult r;
  const auto start = std::chrono::steady_clock::now();
  const rc::Gen<CaseSpec> gen = gen_case(t);
  bool shrinking = false;
  auto property = [&] {
    const CaseSpec c = *gen;
    const Verdict v = check_case(c);
    if (shrinking)
      ++r.shrink_steps;
    else
      ++r.cases;
    if (v.passed()) return;  // an error verdict fails the run too
    shrinking = true;
    r.minimal = c;
    r.minimal_verdict = v;
    RC_FAIL(v.detail);
  };
  rc::detail::TestParams params;
  params.seed = seed;
  params.maxSuccess = max_success;
  params.maxSize = 100;
  rc::detail::TestMetadata meta;
  meta.id = meta.description = t.name();
  SilentListener listener;
  rc::detail::checkProperty(rc::detail::toProperty(property), meta, params, listener);
  r.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  return r;
}

// ---- parsing ----

TEST(OpSpecParse, TheIssueExampleParses) {
  const OpSpec s = parse_op_spec(R"(
    # a comment
    op myns::my_mm
    arg a  tensor  [M, K]   batch=0
    arg b  tensor  [K, N]
    out    [M, N]  batch=0
    sizes  M=1..256 K=1..512 N=1..256
    dtypes float32 float16 bfloat16
  )",
                                 "issue.spec");
  EXPECT_EQ(s.name, "myns::my_mm");
  EXPECT_EQ(s.op_name, "myns::my_mm");
  EXPECT_EQ(s.overload, "");
  ASSERT_EQ(s.args.size(), 2u);
  EXPECT_EQ(s.args[0].dims, (std::vector<std::string>{"M", "K"}));
  EXPECT_EQ(s.args[0].batch, 0);
  EXPECT_EQ(s.args[1].batch, -1);
  EXPECT_EQ(s.out_batch, 0);
  ASSERT_EQ(s.sizes.size(), 3u);
  EXPECT_EQ(s.sizes[1].name, "K");
  EXPECT_EQ(s.sizes[1].lo, 1);
  EXPECT_EQ(s.sizes[1].hi, 512);
  EXPECT_EQ(s.batch_size_index(), 0);
  EXPECT_EQ(s.dtypes, (std::vector<at::ScalarType>{at::kFloat, at::kHalf, at::kBFloat16}));
}

TEST(OpSpecParse, ValueArgumentsAreEncodedAsCaseParams) {
  const OpSpec s = parse_op_spec(
      "op aten::mean.dim\narg self tensor [M, N] batch=0 dtype=float16\narg dim int[] [1]|[0, 1]|[]|none\n"
      "arg keepdim bool false|true\narg dtype dtype none|float32\nout batch=0\nsizes M=1..4 N=3\ndtypes float32\n",
      "v.spec");
  EXPECT_EQ(s.overload, "dim");
  EXPECT_EQ(s.args[0].dtype, at::kHalf);
  EXPECT_EQ(s.args[1].values, (std::vector<std::string>{"1", "0.1", "empty", "none"}));
  EXPECT_EQ(s.args[2].values, (std::vector<std::string>{"0", "1"}));
  EXPECT_EQ(s.args[3].values, (std::vector<std::string>{"none", "float32"}));
  EXPECT_EQ(s.sizes[1].lo, 3);
  EXPECT_EQ(s.sizes[1].hi, 3);
  const OpSpec f = parse_op_spec("op a::b\narg x tensor [M]\narg alpha float 1|0.5\nsizes M=1..2\ndtypes float32", "f");
  EXPECT_EQ(f.args[1].values, (std::vector<std::string>{"0x3ff0000000000000", "0x3fe0000000000000"}));
  EXPECT_FALSE(f.has_batch());
  EXPECT_EQ(spec_param_key("alpha"), "alpha");
  EXPECT_EQ(spec_param_key("i"), "arg.i");
}

TEST(OpSpecParse, ErrorsAreOneLineAndNameTheOriginAndLine) {
  const std::string good_tail = "out [M, N] batch=0\nsizes M=1..8 N=1..8 K=1..8\ndtypes float32\n";
  const std::vector<std::pair<std::string, std::string>> cases = {
      {"", "bad.spec:1: no 'op' line"},
      {"arg a tensor [M]\n", "bad.spec:1: 'arg' before any 'op' line"},
      {"op mm\n", "bad.spec:1: operator name 'mm' is not <namespace>::<name>"},
      {"op a::b c\n", "bad.spec:1: 'op' needs exactly one operator name"},
      {"op a::b\nfrobnicate x\n", "bad.spec:2: unknown directive 'frobnicate'"},
      {"op a::b\narg a matrix [M]\n", "bad.spec:2: unknown argument kind 'matrix'"},
      {"op a::b\narg a tensor\n", "bad.spec:2: tensor argument 'a' needs its sizes"},
      {"op a::b\narg a tensor M,K\n", "bad.spec:2: sizes of 'a' 'M,K' is not a bracketed list"},
      {"op a::b\narg a tensor [M, K] batch=2\n", "bad.spec:2: 'batch=2' of 'a' is not a dim of its 2 dims"},
      {"op a::b\narg a tensor [M, K] shuffle=1\n", "unknown tensor option 'shuffle=1'"},
      {"op a::b\narg a tensor [M, K] dtype=float8\n", "bad.spec:2: unknown dtype 'float8'"},
      {"op a::b\narg a tensor [M, -3]\n", "size '-3' of 'a' is neither a size variable"},
      {"op a::b\narg a tensor [M]\narg a tensor [M]\n", "bad.spec:3: argument 'a' is declared twice"},
      {"op a::b\narg n int x\n", "bad.spec:2: argument 'n': value 'x' is not an integer"},
      {"op a::b\narg n int 1 2\n", "needs exactly one value list"},
      {"op a::b\narg f bool yes\n", "value 'yes' is not true or false"},
      {"op a::b\narg l int[] [1,x]\n", "is not a list of integers"},
      {"op a::b\narg a tensor [M, K] batch=0\narg b tensor [K, N]\n" + good_tail + "sizes Q=1\n",
       "bad.spec:7: op a::b: size variable 'Q' is declared but no tensor uses it"},
      {"op a::b\narg a tensor [M, K] batch=0\narg b tensor [K, X]\n" + good_tail,
       "argument 'b' uses size variable 'X', which 'sizes' does not declare"},
      {"op a::b\narg a tensor [M, K] batch=0\narg b tensor [K, N] batch=1\n" + good_tail,
       "bad.spec:3: op a::b: batch dims disagree: 'b' has N where others have M"},
      {"op a::b\narg a tensor [M, K] batch=0\narg b tensor [K, N]\nout [M, N]\nsizes M=1 N=1 K=1\ndtypes float32\n",
       "arguments mark a batch dim but 'out' has no batch="},
      {"op a::b\narg a tensor [M, K]\narg b tensor [K, N]\n" + good_tail,
       "out has batch= but no argument marks a batch dim"},
      {"op a::b\narg a tensor [M, K] batch=0\narg b tensor [K, N]\nout [N, M] batch=0\nsizes M=1 N=1 K=1\ndtypes "
       "float32\n",
       "out batch dim is N but the arguments' batch is M"},
      {"op a::b\narg a tensor [M, K] batch=0\narg b tensor [K, N]\nout [M, N] batch=0\nsizes M=1 N=1 K=1\n",
       "bad.spec:1: op a::b: has no 'dtypes' line"},
      {"op a::b\narg a tensor [M]\nsizes M=5..2\n", "bad.spec:3: size 'M=5..2' needs 0 <= lo <= hi"},
      {"op a::b\narg a tensor [M]\nsizes M=1 M=2\n", "size variable 'M' is declared twice"},
      {"op a::b\narg n int 1\nsizes\n", "bad.spec:3: 'sizes' lists no size variables"},
      {"op a::b\narg n int 1\ndtypes float32\n", "op a::b: has no tensor argument"},
      {"op a::b\narg a tensor [M]\nsizes M=1\ndtypes float32\nop a::b\n", "bad.spec:5: op a::b is specified twice"},
      {"op a::b\narg a tensor [M]\nsizes M=1\ndtypes float32\ndtypes float16\n", "bad.spec:5: a second 'dtypes' line"},
  };
  for (const auto &[text, needle] : cases) {
    SCOPED_TRACE(text);
    expect_one_line_error(invalid_argument_of([&] { parse_op_specs(text, "bad.spec"); }), needle);
  }
  expect_one_line_error(invalid_argument_of([] { parse_op_spec(builtin_op_specs_text(), "two.spec"); }),
                        "expected one op spec, found 6");
}

// ---- schema ----

TEST(OpSpecSchema, BuiltinsMatchLibtorchAndAreListed) {
  const auto specs = parse_op_specs(builtin_op_specs_text(), "<builtin>");
  ASSERT_EQ(specs.size(), 6u);
  for (const auto &s : specs) EXPECT_NO_THROW(validate_op_spec(s)) << s.name;
  const auto ops = spec_ops();
  for (const char *name :
       {"aten::mm", "aten::addmm", "aten::bmm", "aten::baddbmm", "aten::_log_softmax", "aten::mean.dim"}) {
    EXPECT_NE(std::find(ops.begin(), ops.end(), name), ops.end()) << name;
    const OpSpec *s = find_op_spec(name);
    ASSERT_NE(s, nullptr) << name;
    EXPECT_TRUE(s->builtin);
  }
  EXPECT_EQ(find_op_spec("aten::nope"), nullptr);
  EXPECT_EQ(properties_for("aten::mm"),
            (std::vector<std::string>{"batch_slice", "batch_compose", "permute", "repeat", "variant_agree"}));
  EXPECT_TRUE(properties_for("aten::nope").empty());
}

TEST(OpSpecSchema, ContradictionsAreOneLineErrors) {
  const std::string mm_tail = "out [M, N] batch=0\nsizes M=1..8 N=1..8 K=1..8\ndtypes float32\n";
  const std::vector<std::pair<std::string, std::string>> cases = {
      {"op aten::mm\narg a tensor [M, K] batch=0\narg mat2 tensor [K, N]\n" + mm_tail,
       "s.spec:2: aten::mm: argument 1 is 'self' in the schema, the spec says 'a' (schema: aten::mm(Tensor self, "
       "Tensor mat2) -> Tensor)"},
      {"op aten::mm\narg self tensor [M, K] batch=0\narg mat2 int 3\nsizes M=1..8 K=1..8\nout [M, K] batch=0\ndtypes "
       "float32\n",
       "s.spec:3: aten::mm: argument 'mat2' is Tensor in the schema, the spec says int"},
      {"op aten::mm\narg self tensor [M, K] batch=0\narg mat2 tensor [K, N]\narg extra tensor [N]\n" + mm_tail,
       "s.spec:1: aten::mm takes 2 arguments, the spec gives 3"},
      {"op aten::mm\narg self tensor [M, K] batch=0\nout [M, K] batch=0\nsizes M=1..8 K=1..8\ndtypes float32\n",
       "s.spec:1: aten::mm: the spec leaves out argument 'mat2', which has no default"},
      {"op aten::_log_softmax\narg self tensor [M, N] batch=0\narg dim float 1\narg half_to_float bool false\nout [M, "
       "N] batch=0\nsizes M=1 N=1\ndtypes float32\n",
       "argument 'dim' is int in the schema, the spec says float"},
      {"op aten::_log_softmax\narg self tensor [M, N] batch=0\narg dim int 1|none\narg half_to_float bool false\nout "
       "[M, N] batch=0\nsizes M=1 N=1\ndtypes float32\n",
       "None is given but the schema's type is not optional"},
      {"op aten::mean.dim\narg self tensor [M, N] batch=0\narg dim int[] [1]\narg keepdim bool false\narg dtype int "
       "3\nout batch=0\nsizes M=1 N=1\ndtypes float32\n",
       "argument 'dtype' is ScalarType? in the schema, the spec says int"},
      {"op aten::max.dim\narg self tensor [M, N] batch=0\narg dim int 1\nout batch=0\nsizes M=1 N=1\ndtypes float32\n",
       "aten::max.dim must return exactly one Tensor"},
      {"op detfuzz_example::nope\narg a tensor [M]\nsizes M=1\ndtypes float32\n",
       "s.spec:1: operator detfuzz_example::nope is not registered with libtorch's dispatcher"},
      {"op aten::mm.nooverload\narg self tensor [M]\nsizes M=1\ndtypes float32\n",
       "operator aten::mm.nooverload is not registered"},
  };
  for (const auto &[text, needle] : cases) {
    SCOPED_TRACE(text);
    const OpSpec s = parse_op_spec(text, "s.spec");
    expect_one_line_error(invalid_argument_of([&] { validate_op_spec(s); }), needle);
    expect_one_line_error(invalid_argument_of([&] { register_op_spec(s); }), needle);
  }
  // Trailing arguments with defaults may be left out: mean.dim's keepdim and dtype.
  EXPECT_NO_THROW(
      validate_op_spec(parse_op_spec("op aten::mean.dim\narg self tensor [M, N] batch=0\narg dim int[] [1]\nout [M] "
                                     "batch=0\nsizes M=1 N=1\ndtypes float32\n",
                                     "d")));
}

TEST(OpSpecSchema, UnknownOpsAreErrorsNotVerdicts) {
  CaseSpec c;
  c.op = "detfuzz_example::nope";
  c.impl = "torch";
  c.property = "batch_slice";
  c.shape = {2, 2, 2};
  expect_one_line_error(invalid_argument_of([&] { check_case(c); }), "unknown op 'detfuzz_example::nope'");
  expect_one_line_error(invalid_argument_of([&] { gen_case(target_of("detfuzz_example::nope", "batch_slice")); }),
                        "unknown op 'detfuzz_example::nope'");
  c.op = "aten::mm";
  c.impl = "invariant";
  expect_one_line_error(invalid_argument_of([&] { check_case(c); }), "has only the impl 'torch'");
  c.impl = "torch";
  c.property = "accuracy";
  expect_one_line_error(invalid_argument_of([&] { check_case(c); }), "property 'accuracy' does not apply");
  c.property = "batch_slice";
  c.shape = {2, 2};
  expect_one_line_error(invalid_argument_of([&] { check_case(c); }), "needs a shape MxNxK, got '2x2'");
  expect_one_line_error(invalid_argument_of([] { gen_case(target_of("aten::mm", "batch_slice", at::kLong)); }),
                        "does not list dtype int64");
  c.op = "aten::addmm";
  c.shape = {2, 2, 2};
  c.params["beta"] = "0.5";
  expect_one_line_error(invalid_argument_of([&] { check_case(c); }),
                        "parameter beta='0.5' is not the hex bits of a double");
}

// ---- libraries ----

TEST(KernelLibrary, LoadFailuresAreOneLineErrors) {
  expect_one_line_error(invalid_argument_of([] { load_kernel_library("/nonexistent/libnope.so"); }),
                        "cannot load kernel library '/nonexistent/libnope.so': ");
  expect_one_line_error(invalid_argument_of([] { load_kernel_library(DETFUZZ_EXAMPLE_KERNELS_SPEC); }),
                        "cannot load kernel library '");
  expect_one_line_error(invalid_argument_of([] { load_op_spec_file("/nonexistent/x.spec"); }),
                        "cannot read op spec file '/nonexistent/x.spec'");
}

TEST(ExamplePlugin, LoadsAndRegistersItsOps) {
  load_example_plugin();
  load_kernel_library(DETFUZZ_EXAMPLE_KERNELS_LIB);  // a second load is harmless
  const OpSpec *s = find_op_spec("detfuzz_example::rowwise_mm");
  ASSERT_NE(s, nullptr);
  EXPECT_FALSE(s->builtin);
  const ImplInfo impl = spec_torch_impl(*s, Backend::cpu);
  EXPECT_EQ(impl.impl, "torch");
  EXPECT_EQ(impl.op, "detfuzz_example::rowwise_mm");
  EXPECT_EQ(impl.expectation, Expectation::must_hold);
  EXPECT_EQ(impl.dtypes, s->dtypes);
  EXPECT_EQ(spec_torch_impl(*find_op_spec("aten::mm"), Backend::cpu).expectation, Expectation::observed);
  // run: the op through the dispatcher; rowwise_mm is a plain fixed-order product.
  const at::Tensor a = at::tensor({1.f, 2.f, 3.f, 4.f}).view({2, 2}), b = at::tensor({5.f, 6.f, 7.f, 8.f}).view({2, 2});
  OpArgs args;
  args.tensors = {a, b};
  const at::Tensor out = impl.run(args);
  EXPECT_TRUE(at::equal(out, at::tensor({19.f, 22.f, 43.f, 50.f}).view({2, 2})));
}

TEST(ExamplePlugin, RowwiseMmPassesEveryPropertyOnGeneratedCases) {
  load_example_plugin();
  for (const auto &property : properties_for("detfuzz_example::rowwise_mm")) {
    for (auto dtype : {at::kFloat, at::kBFloat16}) {
      const Target t = target_of("detfuzz_example::rowwise_mm", property, dtype);
      SCOPED_TRACE(t.name());
      const RunResult r = run_target(t, 60, 7);
      EXPECT_FALSE(r.minimal.has_value()) << r.minimal->describe() << ": " << r.minimal_verdict.detail;
      EXPECT_EQ(r.cases, 60);
    }
  }
}

TEST(ExamplePlugin, SplitKMmIsCaughtWithin500CasesAndShrunk) {
  load_example_plugin();
  const Target t = target_of("detfuzz_example::splitk_mm", "batch_slice");
  const RunResult r = run_target(t, 500, 1);
  ASSERT_TRUE(r.minimal.has_value()) << "the planted split-K was not caught in " << r.cases << " cases";
  const CaseSpec &c = *r.minimal;
  std::cout << "caught after " << r.cases << " cases, shrunk in " << r.shrink_steps << " steps (" << r.seconds
            << " s) to: " << c.describe() << "\n  " << r.minimal_verdict.detail << std::endl;
  EXPECT_EQ(r.minimal_verdict.outcome, Verdict::Outcome::fail);
  EXPECT_GT(r.minimal_verdict.diff.differing, 0);
  // Minimal: 17 rows (one above the split threshold), at least 3 K terms (split 1 + 2 is the
  // first whose order differs), N = 1, contiguous data.
  ASSERT_EQ(c.shape.size(), 3u);  // M N K
  EXPECT_EQ(c.shape[0], 17);
  EXPECT_GE(c.shape[2], 3);
  EXPECT_LE(c.shape[2], 8);
  EXPECT_EQ(c.shape[1], 1);
  const int64_t rows = c.param_int("j", -1) - c.param_int("i", -1);  // the slice: at most 16 rows, not split
  EXPECT_GE(rows, 1);
  EXPECT_LE(rows, 16);
  EXPECT_EQ(c.layout, "cc");
  // The record replays: the same case fails again bit for bit.
  const Verdict again = check_case(c);
  EXPECT_EQ(again.outcome, Verdict::Outcome::fail);
  EXPECT_EQ(again.diff.expected_bits, r.minimal_verdict.diff.expected_bits);
  EXPECT_EQ(again.diff.actual_bits, r.minimal_verdict.diff.actual_bits);
}

TEST(ExamplePlugin, AnOpThatThrowsIsAnErrorVerdict) {
  load_example_plugin();
  // A (wrong) spec whose b is [N, K]: rowwise_mm refuses shapes whose inner sizes differ.
  register_op_spec(
      parse_op_spec("op detfuzz_example::rowwise_mm\narg a tensor [M, K] batch=0\narg b tensor [N, K]\n"
                    "out [M, N] batch=0\nsizes M=1..4 N=2 K=3\ndtypes float32\n",
                    "wrong.spec"));
  CaseSpec c;
  c.op = "detfuzz_example::rowwise_mm";
  c.impl = "torch";
  c.property = "batch_slice";
  c.shape = {4, 2, 3};
  c.layout = "cc";
  c.params = {{"i", "0"}, {"j", "1"}};
  const Verdict v = check_case(c);
  EXPECT_EQ(v.outcome, Verdict::Outcome::error);
  expect_one_line_error(v.detail, "rowwise_mm: shapes [4, 3] and [2, 3] cannot be multiplied");
  // A spec whose out shape is wrong is an error verdict too.
  register_op_spec(
      parse_op_spec("op detfuzz_example::rowwise_mm\narg a tensor [M, K] batch=0\narg b tensor [K, N]\n"
                    "out [M, K] batch=0\nsizes M=1..4 N=2 K=3\ndtypes float32\n",
                    "wrong_out.spec"));
  const Verdict w = check_case(c);
  EXPECT_EQ(w.outcome, Verdict::Outcome::error);
  expect_one_line_error(w.detail, "returned shape [4, 2] where the spec's out is [4, 3]");
  load_example_plugin();  // the right specs back
  EXPECT_TRUE(check_case(c).passed());
}

// ---- built-in aten specs through the dispatcher, with and without batch-invariant mode ----

TEST(BuiltinSpecs, PassEveryPropertyUnderBatchInvariantMode) {
  BatchInvariantMode on(true);
  for (const auto &op :
       {"aten::mm", "aten::addmm", "aten::bmm", "aten::baddbmm", "aten::_log_softmax", "aten::mean.dim"}) {
    for (const auto &property : properties_for(op)) {
      const Target t = target_of(op, property, at::kBFloat16);
      SCOPED_TRACE(t.name());
      const RunResult r = run_target(t, 15, 3);
      EXPECT_FALSE(r.minimal.has_value()) << r.minimal->describe() << ": " << r.minimal_verdict.detail;
    }
  }
}

TEST(BuiltinSpecs, FindLibtorchsCpuMmDifferenceWithoutTheMode) {
  disable_batch_invariant_mode();
  const RunResult r = run_target(target_of("aten::mm", "batch_slice"), 300, 1);
  ASSERT_TRUE(r.minimal.has_value()) << "libtorch's CPU mm passed " << r.cases << " cases";
  std::cout << "libtorch CPU mm: caught after " << r.cases << " cases, shrunk to " << r.minimal->describe() << "\n  "
            << r.minimal_verdict.detail << std::endl;
  EXPECT_EQ(r.minimal_verdict.outcome, Verdict::Outcome::fail);
  BatchInvariantMode on(true);
  EXPECT_TRUE(check_case(*r.minimal).passed()) << "the same case passes on our kernel";
}

}  // namespace
}  // namespace detfuzz
