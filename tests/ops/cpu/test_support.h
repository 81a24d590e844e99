// Shared helpers of the CPU op tests: seeded random data, the four layouts the harness uses,
// and assertions for bitwise equality, accuracy and TORCH_CHECK messages.
#pragma once

#include "harness/diff.h"
#include "ops/op_args.h"
#include "properties/accuracy.h"

#include <ATen/CPUGeneratorImpl.h>
#include <ATen/Parallel.h>
#include <ATen/ATen.h>
#include <gtest/gtest.h>

#include <functional>
#include <string>
#include <vector>

namespace detfuzz::test {

inline const std::vector<at::ScalarType> &float_types() {
  static const std::vector<at::ScalarType> types = {at::kFloat, at::kHalf, at::kBFloat16};
  return types;
}

// Standard normal values (rounded to dtype) from a generator seeded with `seed`.
inline at::Tensor randn(at::IntArrayRef sizes, at::ScalarType dtype, uint64_t seed) {
  at::Generator gen = at::make_generator<at::CPUGeneratorImpl>(seed);
  return at::randn(sizes, gen, at::TensorOptions().dtype(at::kFloat)).to(dtype);
}

// Integers in [-1000, 1000).
inline at::Tensor randint(at::IntArrayRef sizes, at::ScalarType dtype, uint64_t seed) {
  at::Generator gen = at::make_generator<at::CPUGeneratorImpl>(seed);
  return at::randint(-1000, 1000, sizes, gen, at::TensorOptions().dtype(dtype));
}

enum class Layout { contiguous, transposed, offset, strided };
inline const std::vector<Layout> &all_layouts() {
  static const std::vector<Layout> layouts = {Layout::contiguous, Layout::transposed, Layout::offset, Layout::strided};
  return layouts;
}
inline const char *name(Layout l) {
  switch (l) {
    case Layout::contiguous: return "contiguous";
    case Layout::transposed: return "transposed";
    case Layout::offset: return "offset";
    default: return "strided";
  }
}

// The same values as `values` in a view of the given layout: transposed storage (dims reversed in
// memory), a slice of a padded buffer with a storage offset, or every other element of a buffer
// twice as wide. Padding holds poison (NaN, or a huge integer) so a stray read shows.
inline at::Tensor with_layout(const at::Tensor &values, Layout layout) {
  const bool floating = at::isFloatingType(values.scalar_type());
  auto poisoned = [&](at::IntArrayRef sizes) {
    return at::full(sizes, floating ? std::numeric_limits<double>::quiet_NaN() : 1e9, values.options());
  };
  const int64_t rank = values.dim();
  switch (layout) {
    case Layout::contiguous: return values.clone();
    case Layout::transposed: {
      std::vector<int64_t> reversed(static_cast<size_t>(rank));
      for (int64_t d = 0; d < rank; ++d) reversed[static_cast<size_t>(d)] = rank - 1 - d;
      at::Tensor stored = values.permute(reversed).contiguous();
      return stored.permute(reversed);
    }
    case Layout::offset: {
      std::vector<int64_t> padded(values.sizes().begin(), values.sizes().end());
      for (auto &s : padded) s += 3;
      at::Tensor view = poisoned(padded);
      for (int64_t d = 0; d < rank; ++d) view = view.narrow(d, 1, values.size(d));
      view.copy_(values);
      return view;
    }
    default: {
      if (rank == 0) return values.clone();
      std::vector<int64_t> wide(values.sizes().begin(), values.sizes().end());
      wide.back() = 2 * wide.back() + 1;
      at::Tensor view = poisoned(wide).slice(-1, 1, wide.back(), 2);
      view.copy_(values);
      return view;
    }
  }
}

inline ::testing::AssertionResult bitwise_equal(const at::Tensor &expected, const at::Tensor &actual) {
  const DiffStats diff = bitwise_diff(expected, actual);
  if (diff.equal()) return ::testing::AssertionSuccess();
  return ::testing::AssertionFailure() << diff.summary();
}

inline ::testing::AssertionResult accurate(const std::string &op, const OpArgs &args, const at::Tensor &out) {
  const AccuracyResult r = check_accuracy(op, args, out);
  if (r.ok) return ::testing::AssertionSuccess();
  return ::testing::AssertionFailure() << r.detail;
}

// Passes when fn throws c10::Error whose message contains `needle`.
inline ::testing::AssertionResult throws_with(const std::function<void()> &fn, const std::string &needle) {
  try {
    fn();
  } catch (const c10::Error &e) {
    const std::string message = e.what_without_backtrace();
    if (message.find(needle) != std::string::npos) return ::testing::AssertionSuccess();
    return ::testing::AssertionFailure() << "message lacks '" << needle << "': " << message;
  }
  return ::testing::AssertionFailure() << "no c10::Error thrown (wanted one mentioning '" << needle << "')";
}

// Runs fn with the given intra-op thread count, restoring the previous count afterwards.
template <typename Fn>
auto with_threads(int threads, Fn fn) {
  const int before = at::get_num_threads();
  at::set_num_threads(threads);
  auto result = fn();
  at::set_num_threads(before);
  return result;
}

}  // namespace detfuzz::test
