// Planted non-invariance: impls that are correct ops (within the accuracy tolerance) but whose
// bits depend on the batch, each imitating a real kernel bug. They claim invariance (must-hold),
// so the harness has to catch them and shrink to a small case; when their trigger is off they
// return exactly the bits of the `invariant` impl.
//
// Each is built from the fixed-order pieces themselves, so the only thing that differs from the
// invariant impl is the one order change it plants: the matmul mutants regroup K by composing
// fixed-order float32 products of K slices (a product over one block is exactly that block's
// sequential partial sum); the row mutants reverse or perturb one row reduction.
#include "ops/cpu/cpu_ops.h"
#include "ops/cpu/fixed_order.h"
#include "ops/cpu/moe.h"
#include "ops/registry.h"

#include <ATen/WrapDimUtils.h>
#include <ATen/WrapDimUtilsMulti.h>

#include <algorithm>
#include <chrono>
#include <csignal>
#include <cstdlib>
#include <thread>

namespace detfuzz {
namespace {

// From this many rows on (M > 16) the split-K mutant splits.
constexpr int64_t kSplitKMinRows = 17;
// From this many matrices on (B >= 3) the batched split-K mutant splits.
constexpr int64_t kBatchSplitKMinMatrices = 3;
// From this many rows on the block-size mutant uses the smaller K block.
constexpr int64_t kSmallBlockMinRows = 8;
constexpr int64_t kSmallKBlock = 32;
// From this many rows on (rows > 4) the row-order mutants reverse the reduction.
constexpr int64_t kReverseMinRows = 5;

// Float32 product of K slice [k0, k0+len) of a[...,M,K] @ b[...,K,N] by the invariant kernel.
at::Tensor slice_product(const at::Tensor &a, const at::Tensor &b, int64_t k0, int64_t len) {
  const at::Tensor a_slice = a.narrow(-1, k0, len).to(at::kFloat), b_slice = b.narrow(-2, k0, len).to(at::kFloat);
  return a.dim() == 2 ? cpu_ops::mm(a_slice, b_slice) : cpu_ops::bmm(a_slice, b_slice);
}

// Split-K: the two halves of K reduced separately, then added.
at::Tensor split_k_accumulator(const at::Tensor &a, const at::Tensor &b) {
  const int64_t k = a.size(-1), half = k / 2;
  return slice_product(a, b, 0, half) + slice_product(a, b, half, k - half);
}

// The blocked order of fixed_order.h with K blocks of k_block instead of kMatmulKBlock.
at::Tensor blocked_accumulator(const at::Tensor &a, const at::Tensor &b, int64_t k_block) {
  const int64_t k = a.size(-1);
  at::Tensor acc = slice_product(a, b, 0, std::min(k, k_block));
  for (int64_t k0 = k_block; k0 < k; k0 += k_block) acc = acc + slice_product(a, b, k0, std::min(k_block, k - k0));
  return acc;
}

// addmm's fixed epilogue applied to a float32 accumulator, rounded to the inputs' dtype.
at::Tensor addmm_from_accumulator(const at::Tensor &acc, const at::Tensor &bias, double beta, double alpha) {
  const at::Tensor bias_f = bias.expand(acc.sizes()).to(at::kFloat).contiguous();
  at::Tensor out = at::empty_like(acc);
  const float *acc_data = acc.const_data_ptr<float>(), *bias_data = bias_f.const_data_ptr<float>();
  float *out_data = out.data_ptr<float>();
  for (int64_t e = 0; e < acc.numel(); ++e)
    out_data[e] =
        fixed_order::addmm_epilogue(acc_data[e], bias_data[e], static_cast<float>(alpha), static_cast<float>(beta));
  return out.to(bias.scalar_type());
}

// The three matmul entries of one mutant: `accumulator(a, b)` returns the float32 product, or an
// undefined tensor when the mutant's trigger is off for a's row count (then the invariant runs).
template <typename Accumulator>
std::vector<ImplInfo> matmul_mutant(const std::string &name, const std::string &description, Accumulator accumulator) {
  const auto e = Expectation::must_hold;
  return {
      {name, "mm", Backend::cpu, float_dtypes(), e, description,
       [accumulator](const OpArgs &x) {
         const at::Tensor &a = x.tensors.at(0), &b = x.tensors.at(1);
         const at::Tensor acc = accumulator(a, b);
         return acc.defined() ? acc.to(a.scalar_type()) : cpu_ops::mm(a, b);
       }},
      {name, "addmm", Backend::cpu, float_dtypes(), e, description,
       [accumulator](const OpArgs &x) {
         const at::Tensor &bias = x.tensors.at(0), &a = x.tensors.at(1), &b = x.tensors.at(2);
         const at::Tensor acc = accumulator(a, b);
         return acc.defined() ? addmm_from_accumulator(acc, bias, x.beta, x.alpha)
                              : cpu_ops::addmm(bias, a, b, x.beta, x.alpha);
       }},
      {name, "bmm", Backend::cpu, float_dtypes(), e, description,
       [accumulator](const OpArgs &x) {
         const at::Tensor &a = x.tensors.at(0), &b = x.tensors.at(1);
         const at::Tensor acc = accumulator(a, b);
         return acc.defined() ? acc.to(a.scalar_type()) : cpu_ops::bmm(a, b);
       }},
  };
}

int64_t matmul_rows(const at::Tensor &a) { return a.size(-2); }

// log_softmax over the last dim of a float32 [rows, n] matrix, row by row, where the max pass of
// row r also reads row r-1 when it exists (any shift is mathematically valid; the bits change).
at::Tensor log_softmax_rows_with_neighbour_max(const at::Tensor &rows_f) {
  const int64_t rows = rows_f.size(0), n = rows_f.size(1);
  at::Tensor out = at::empty_like(rows_f);
  const float *x = rows_f.const_data_ptr<float>();
  float *y = out.data_ptr<float>();
  for (int64_t r = 0; r < rows; ++r) {
    const float *row = x + r * n;
    float shift = fixed_order::row_max(row, n);
    if (r > 0) shift = fixed_order::nan_propagating_max(shift, fixed_order::row_max(row - n, n));
    fixed_order::log_softmax_store(row, n, shift, std::log(fixed_order::row_sum_exp(row, n, shift)), y + r * n);
  }
  return out;
}

at::Tensor neighbour_log_softmax(const OpArgs &args) {
  const at::Tensor &x = args.tensors.at(0);
  if (x.dim() == 0 || x.numel() == 0) return cpu_ops::log_softmax(x, args.dim, args.half_to_float);
  const int64_t d = c10::maybe_wrap_dim(args.dim, x.dim());
  const at::Tensor moved = x.to(at::kFloat).movedim(d, -1).contiguous();
  const at::Tensor out = log_softmax_rows_with_neighbour_max(moved.view({-1, moved.size(-1)}));
  return out.view(moved.sizes()).movedim(-1, d).contiguous().to(args.half_to_float ? at::kFloat : x.scalar_type());
}

at::Tensor reversed_log_softmax(const OpArgs &args) {
  const at::Tensor &x = args.tensors.at(0);
  const int64_t n = x.dim() == 0 ? 1 : x.size(c10::maybe_wrap_dim(args.dim, x.dim()));
  if (n == 0 || x.numel() / n < kReverseMinRows) return cpu_ops::log_softmax(x, args.dim, args.half_to_float);
  return cpu_ops::log_softmax(x.flip(args.dim), args.dim, args.half_to_float).flip(args.dim).contiguous();
}

// The dims mean reduces, ascending (all of them when none are named).
std::vector<int64_t> reduced_dims(const at::Tensor &x, at::IntArrayRef dims) {
  const auto named = at::dim_list_to_bitset(dims, x.dim());
  std::vector<int64_t> out;
  for (int64_t d = 0; d < x.dim(); ++d)
    if (dims.empty() || named[d]) out.push_back(d);
  return out;
}

at::Tensor reversed_mean(const OpArgs &args) {
  const at::Tensor &x = args.tensors.at(0);
  const std::vector<int64_t> dims = reduced_dims(x, args.dims);
  int64_t n = 1;
  for (int64_t d : dims) n *= x.size(d);
  if (n == 0 || x.numel() / n < kReverseMinRows) return cpu_ops::mean(x, args.dims, args.keepdim, args.out_dtype);
  return cpu_ops::mean(x.flip(dims), args.dims, args.keepdim, args.out_dtype);
}

// Planted crashes for the fork mode's isolation (`fuzz --workers`): a kernel that segfaults,
// aborts or hangs once the reduction has at least kCrashMinRows output rows; fewer rows run the
// invariant mean. Never selected by default (mutant-); outside --workers they end the campaign.
constexpr int64_t kCrashMinRows = 5;
bool crash_rows_reached(const OpArgs &args) {
  const at::Tensor &x = args.tensors.at(0);
  const std::vector<int64_t> dims = reduced_dims(x, args.dims);
  int64_t n = 1;
  for (int64_t d : dims) n *= x.size(d);
  return n > 0 && x.numel() / n >= kCrashMinRows;
}
at::Tensor segfaulting_mean(const OpArgs &args) {
  if (crash_rows_reached(args)) std::raise(SIGSEGV);
  return cpu_ops::mean(args.tensors.at(0), args.dims, args.keepdim, args.out_dtype);
}
at::Tensor aborting_mean(const OpArgs &args) {
  if (crash_rows_reached(args)) std::abort();
  return cpu_ops::mean(args.tensors.at(0), args.dims, args.keepdim, args.out_dtype);
}
// A library's fatal-error path: exit(1), the code a campaign uses for a must-hold failure.
at::Tensor exiting_mean(const OpArgs &args) {
  if (crash_rows_reached(args)) std::exit(1);
  return cpu_ops::mean(args.tensors.at(0), args.dims, args.keepdim, args.out_dtype);
}
at::Tensor hanging_mean(const OpArgs &args) {
  while (crash_rows_reached(args)) std::this_thread::sleep_for(std::chrono::hours(1));
  return cpu_ops::mean(args.tensors.at(0), args.dims, args.keepdim, args.out_dtype);
}

at::Tensor neighbour_mean(const OpArgs &args) {
  const at::Tensor &x = args.tensors.at(0);
  const at::Tensor invariant = cpu_ops::mean(x, args.dims, args.keepdim, args.out_dtype);  // shape, dtype, checks
  const std::vector<int64_t> dims = reduced_dims(x, args.dims);
  std::vector<int64_t> order;  // kept dims, then reduced dims: rows of n contiguous elements
  for (int64_t d = 0; d < x.dim(); ++d)
    if (std::find(dims.begin(), dims.end(), d) == dims.end()) order.push_back(d);
  order.insert(order.end(), dims.begin(), dims.end());
  const int64_t rows = invariant.numel(), n = rows == 0 ? 0 : x.numel() / rows;
  if (rows < 2 || n == 0) return invariant;
  const at::Tensor rows_f = x.to(at::kFloat).permute(order).contiguous();
  const float *data = rows_f.const_data_ptr<float>();
  at::Tensor out = at::empty({rows}, rows_f.options());
  float *out_data = out.data_ptr<float>();
  float previous_total = 0.f;
  for (int64_t r = 0; r < rows; ++r) {
    // The blocked sum of fixed_order.h, but starting from the previous row's total instead of zero.
    const float *row = data + r * n;
    float total = previous_total;
    for (int64_t k0 = 0; k0 < n; k0 += fixed_order::kReduceBlock) {
      float partial = 0.f;
      for (int64_t k = k0; k < std::min(n, k0 + fixed_order::kReduceBlock); ++k) partial += row[k];
      total = total + partial;
    }
    previous_total = total - previous_total;
    out_data[r] = previous_total / static_cast<float>(n);
  }
  return out.view(invariant.sizes()).to(invariant.scalar_type());
}

}  // namespace

std::vector<ImplInfo> cpu_mutant_impls() {
  std::vector<ImplInfo> all;
  auto add = [&all](std::vector<ImplInfo> more) {
    for (auto &i : more) all.push_back(std::move(i));
  };
  // Imitates a GEMM heuristic that switches to split-K (two fp32 partial products added) for tall problems.
  add(matmul_mutant("mutant-splitk", "split-K in two halves when M > 16", [](const at::Tensor &a, const at::Tensor &b) {
    return matmul_rows(a) >= kSplitKMinRows ? split_k_accumulator(a, b) : at::Tensor();
  }));
  // Imitates autotuning that picks a smaller K tile for larger batches.
  add(matmul_mutant(
      "mutant-blocksize", "K block of 32 when M >= 8, else 64", [](const at::Tensor &a, const at::Tensor &b) {
        return matmul_rows(a) >= kSmallBlockMinRows ? blocked_accumulator(a, b, kSmallKBlock) : at::Tensor();
      }));
  const auto e = Expectation::must_hold;
  const auto cpu = Backend::cpu;
  // Imitates a batched GEMM whose heuristic looks at the number of matrices (it grows with the
  // serving batch) and switches to split-K for many of them: invariant in the rows of each
  // matrix, caught only by slicing the batch of matrices.
  add({{"mutant-batchsplitk", "bmm", cpu, float_dtypes(), e, "split-K in two halves when the batch has >= 3 matrices",
        [](const OpArgs &x) {
          const at::Tensor &a = x.tensors.at(0), &b = x.tensors.at(1);
          return a.size(0) >= kBatchSplitKMinMatrices ? split_k_accumulator(a, b).to(a.scalar_type())
                                                      : cpu_ops::bmm(a, b);
        }}});
  add({
      // Imitates a reduction whose loop direction is chosen by a launch heuristic on the row count.
      {"mutant-roworder", "log_softmax", cpu, float_dtypes(), e, "reversed sum of exp when rows > 4",
       reversed_log_softmax},
      {"mutant-roworder", "mean", cpu, float_and_int_dtypes(), e, "reversed sum when output rows > 4", reversed_mean},
      // Imitates a max pass whose tile starts one row early because its row offset is off by one.
      {"mutant-neighbour", "log_softmax", cpu, float_dtypes(), e, "max pass also reads the previous row",
       neighbour_log_softmax},
      // Imitates a persistent loop that does not reset its accumulator between rows and subtracts
      // the previous row's total at the end instead.
      {"mutant-neighbour", "mean", cpu, float_and_int_dtypes(), e,
       "sum starts from the previous row's total, subtracted at the end", neighbour_mean},
      {"mutant-crash-segv", "mean", cpu, float_dtypes(), e, "raises SIGSEGV when output rows >= 5", segfaulting_mean},
      {"mutant-crash-abort", "mean", cpu, float_dtypes(), e, "calls abort() when output rows >= 5", aborting_mean},
      {"mutant-crash-exit", "mean", cpu, float_dtypes(), e, "calls exit(1) when output rows >= 5", exiting_mean},
      {"mutant-crash-hang", "mean", cpu, float_dtypes(), e, "never returns when output rows >= 5", hanging_mean},
  });
  add(cpu_ops::moe_mutant_impls());  // scaled_mm's and the MoE layer's (ops/cpu/moe_register.cpp)
  return all;
}

}  // namespace detfuzz
