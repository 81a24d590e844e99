// The planted mutants: each returns the invariant impl's bits when its trigger is off, different
// bits for some data when it is on, breaks batch_slice, and still passes the accuracy check (so
// only the invariance properties can catch it).
#include "ops/registry.h"
#include "test_support.h"

#include <map>

namespace detfuzz {
namespace {

using test::bitwise_equal;

const ImplInfo &find(const std::vector<ImplInfo> &impls, const std::string &impl, const std::string &op) {
  for (const auto &i : impls)
    if (i.impl == impl && i.op == op) return i;
  throw std::runtime_error("no impl " + impl + " for " + op);
}

const ImplInfo &mutant(const std::string &impl, const std::string &op) {
  static const std::vector<ImplInfo> impls = cpu_mutant_impls();
  return find(impls, impl, op);
}

const ImplInfo &invariant(const std::string &op) {
  static const std::vector<ImplInfo> impls = cpu_invariant_impls();
  return find(impls, "invariant", op);
}

// Builds an op's arguments with `rows` rows (the dim the mutants key on), slices them, and
// slices its output the same way.
// Normal values scaled element-wise by 2^e, e uniform in [-12, 12]: float32 sums of 16-bit values
// of one binade are exact in any order, so the mean mutants need a wide range to show.
at::Tensor wide_randn(at::IntArrayRef sizes, at::ScalarType dtype, uint64_t seed) {
  const at::Tensor exponents = test::randint(sizes, at::kInt, seed + 1000).remainder(25) - 12;
  return (test::randn(sizes, at::kFloat, seed) * at::pow(2.0, exponents.to(at::kFloat))).to(dtype);
}

struct RowOp {
  std::function<OpArgs(int64_t rows, uint64_t seed)> make;
  int64_t row_dim_of_output;
  std::function<OpArgs(const OpArgs &, int64_t i, int64_t j)> slice;
};

// Reduction length of the matmul cases (above every block size involved) and their width: wide
// enough that float32-level differences show after rounding to float16 / bfloat16 for some element.
const int64_t kK = 300, kN = 512;

RowOp row_op(const std::string &op, at::ScalarType dtype) {
  if (op == "mm")
    return {[dtype](int64_t m, uint64_t seed) {
              return OpArgs{{test::randn({m, kK}, dtype, seed), test::randn({kK, kN}, dtype, seed + 1)}};
            },
            0,
            [](const OpArgs &x, int64_t i, int64_t j) {
              return OpArgs{{x.tensors[0].slice(0, i, j), x.tensors[1]}};
            }};
  if (op == "addmm")
    return {[dtype](int64_t m, uint64_t seed) {
              OpArgs args{{test::randn({kN}, dtype, seed + 2), test::randn({m, kK}, dtype, seed),
                           test::randn({kK, kN}, dtype, seed + 1)}};
              args.beta = 2.0;
              args.alpha = 0.5;
              return args;
            },
            0,
            [](const OpArgs &x, int64_t i, int64_t j) {
              OpArgs args = x;
              args.tensors[1] = x.tensors[1].slice(0, i, j);
              return args;
            }};
  if (op == "bmm")
    return {[dtype](int64_t m, uint64_t seed) {
              return OpArgs{{test::randn({3, m, kK}, dtype, seed), test::randn({3, kK, kN}, dtype, seed + 1)}};
            },
            1,
            [](const OpArgs &x, int64_t i, int64_t j) {
              return OpArgs{{x.tensors[0].slice(1, i, j), x.tensors[1]}};
            }};
  if (op == "log_softmax")
    return {[dtype](int64_t rows, uint64_t seed) {
              OpArgs args{{test::randn({rows, 150}, dtype, seed) * 3}};
              args.dim = 1;
              args.half_to_float = dtype != at::kFloat;  // float32 output: a rounding to 16 bits hides the mutants
              return args;
            },
            0,
            [](const OpArgs &x, int64_t i, int64_t j) {
              OpArgs args = x;
              args.tensors[0] = x.tensors[0].slice(0, i, j);
              return args;
            }};
  return {[dtype](int64_t rows, uint64_t seed) {
            OpArgs args{{wide_randn({rows, 150}, dtype, seed)}};
            args.dims = {1};
            args.out_dtype = at::kFloat;  // a rounding to 16 bits would hide the mutants
            return args;
          },
          0,
          [](const OpArgs &x, int64_t i, int64_t j) {
            OpArgs args = x;
            args.tensors[0] = x.tensors[0].slice(0, i, j);
            return args;
          }};
}

struct MutantCase {
  std::string impl;
  std::vector<std::string> ops;
  int64_t quiet_rows;    // largest row count with the trigger off
  int64_t trigger_rows;  // smallest row count with the trigger on
};

const std::vector<MutantCase> kMutants = {
    {"mutant-splitk", {"mm", "addmm", "bmm"}, 16, 17},
    {"mutant-blocksize", {"mm", "addmm", "bmm"}, 7, 8},
    {"mutant-roworder", {"log_softmax", "mean"}, 4, 5},
    // The neighbour mutants trigger on any row that has a next row.
    {"mutant-neighbour", {"log_softmax", "mean"}, 1, 2},
};

TEST(CpuMutants, RegistryListsEveryMutantAsMustHoldCpu) {
  std::map<std::string, int> count;
  for (const auto &i : cpu_mutant_impls()) {
    EXPECT_EQ(i.backend, Backend::cpu) << i.impl;
    EXPECT_EQ(i.expectation, Expectation::must_hold) << i.impl;
    EXPECT_TRUE(i.supports(at::kFloat) && i.supports(at::kHalf) && i.supports(at::kBFloat16)) << i.impl;
    EXPECT_FALSE(i.description.empty());
    ++count[i.impl + "/" + i.op];
  }
  size_t expected = 0;
  for (const auto &m : kMutants)
    for (const auto &op : m.ops) {
      EXPECT_EQ(count[m.impl + "/" + op], 1) << m.impl << "/" << op;
      ++expected;
    }
  // mutant-batchsplitk (bmm) triggers on the number of matrices, not rows: tests/properties/test_row_params.cpp.
  EXPECT_EQ(count["mutant-batchsplitk/bmm"], 1);
  // The planted crashes of fork mode's test (tests/cli/test_workers.sh).
  for (const char *crash :
       {"mutant-crash-segv/mean", "mutant-crash-abort/mean", "mutant-crash-exit/mean", "mutant-crash-hang/mean"})
    EXPECT_EQ(count[crash], 1) << crash;
  // The fp8 and MoE mutants (their triggers: tests/ops/cpu/test_moe_ops.cpp).
  for (const char *op : {"fused_moe", "fused_moe_fp8"})
    for (const char *m : {"mutant-moe-atomic", "mutant-moe-tile", "mutant-moe-splitk"})
      EXPECT_EQ(count[std::string(m) + "/" + op], 1) << m << "/" << op;
  EXPECT_EQ(count["mutant-fp8-promote/scaled_mm"], 1);
  EXPECT_EQ(cpu_mutant_impls().size(), expected + 5 + 7);
}

TEST(CpuMutants, MatchInvariantBitsWhenTheTriggerIsOff) {
  for (const auto &m : kMutants)
    for (const auto &op : m.ops)
      for (auto dtype : test::float_types())
        for (int64_t rows = 1; rows <= m.quiet_rows; ++rows) {
          const OpArgs args = row_op(op, dtype).make(rows, 7 * static_cast<uint64_t>(rows));
          EXPECT_TRUE(bitwise_equal(invariant(op).run(args), mutant(m.impl, op).run(args)))
              << m.impl << " " << op << " " << c10::toString(dtype) << " rows " << rows;
        }
}

TEST(CpuMutants, DifferFromInvariantWhenTriggeredYetStayAccurate) {
  for (const auto &m : kMutants)
    for (const auto &op : m.ops)
      for (auto dtype : test::float_types())
        for (int64_t rows : {m.trigger_rows, m.trigger_rows + 9}) {
          bool differed = false;
          for (uint64_t seed = 1; seed <= 12 && !differed; ++seed) {
            const OpArgs args = row_op(op, dtype).make(rows, seed);
            const at::Tensor out = mutant(m.impl, op).run(args);
            EXPECT_TRUE(test::accurate(op, args, out)) << m.impl << " " << op << " " << c10::toString(dtype);
            differed = !bitwise_diff(invariant(op).run(args), out).equal();
          }
          EXPECT_TRUE(differed) << m.impl << " " << op << " " << c10::toString(dtype) << " rows " << rows
                                << ": never differed from invariant";
        }
}

// The property the harness checks: some row alone differs from the same row inside the batch.
TEST(CpuMutants, BreakBatchSlice) {
  for (const auto &m : kMutants)
    for (const auto &op : m.ops)
      for (auto dtype : test::float_types()) {
        const RowOp row = row_op(op, dtype);
        const int64_t rows = m.trigger_rows + 3;
        bool broken = false;
        for (uint64_t seed = 1; seed <= 12 && !broken; ++seed) {
          const OpArgs args = row.make(rows, seed);
          const at::Tensor full = mutant(m.impl, op).run(args);
          const at::Tensor full_invariant = invariant(op).run(args);
          for (int64_t i = 0; i < rows; ++i) {
            const OpArgs one = row.slice(args, i, i + 1);
            broken |= !bitwise_diff(full.slice(row.row_dim_of_output, i, i + 1), mutant(m.impl, op).run(one)).equal();
            EXPECT_TRUE(bitwise_equal(full_invariant.slice(row.row_dim_of_output, i, i + 1), invariant(op).run(one)));
          }
        }
        EXPECT_TRUE(broken) << m.impl << " " << op << " " << c10::toString(dtype) << ": batch_slice held";
      }
}

// The neighbour mutants read data of the previous row: changing it changes this row's bits
// (for some new value), while the invariant row stays put. Mean is shown on float32 data: the
// float32 sums of two 16-bit rows usually add and cancel exactly, hiding the carried total.
TEST(CpuMutants, NeighbourMutantsDependOnThePreviousRowsData) {
  for (const std::string op : {"log_softmax", "mean"})
    for (auto dtype : op == "mean" ? std::vector<at::ScalarType>{at::kFloat} : test::float_types()) {
      const OpArgs args = row_op(op, dtype).make(3, 11);
      const at::Tensor before = mutant("mutant-neighbour", op).run(args)[1];
      bool changed_bits = false;
      for (double value : {args.tensors[0].max().item<double>() + 1.5, 0.1, -250.0, 30000.0}) {
        OpArgs changed = args;
        changed.tensors[0] = args.tensors[0].clone();
        changed.tensors[0][0][0] = value;
        EXPECT_TRUE(bitwise_equal(invariant(op).run(args)[1], invariant(op).run(changed)[1]));
        changed_bits |= !bitwise_diff(before, mutant("mutant-neighbour", op).run(changed)[1]).equal();
      }
      EXPECT_TRUE(changed_bits) << op << " " << c10::toString(dtype);
    }
}

}  // namespace
}  // namespace detfuzz
