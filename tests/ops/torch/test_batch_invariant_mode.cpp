// Batch-invariant mode (ops/torch): with it on, torch::mm, addmm, bmm, baddbmm, log_softmax, mean,
// matmul and nn::functional::linear run our kernels — their outputs are bitwise those of
// detfuzz::cpu_ops (cuda_ops) on the same inputs, where libtorch's own kernels give other bits —
// and pass batch_slice bitwise over many shapes; after disable or a scope's exit libtorch's
// kernels are back (the bits from before enabling, and libtorch's CPU mm row-0 difference
// reappears); scopes nest and restore exactly; enable is idempotent; the Python custom ops exist.
// Every comparison is bitwise, on normal-distributed data (never zeros).
#include "harness/diff.h"
#include "ops/cpu/cpu_ops.h"
#include "ops/torch/aten_overrides.h"
#include "ops/torch/batch_invariant_mode.h"
#include "properties/data.h"

#ifdef DETFUZZ_WITH_CUDA
#include "ops/cuda/cuda_ops.h"
#endif

#include <ATen/core/dispatch/Dispatcher.h>
#include <ATen/ops/mm_cpu_dispatch.h>
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <functional>
#include <optional>
#include <string>
#include <vector>

namespace detfuzz {
namespace {

bool same_bits(const at::Tensor &expected, const at::Tensor &actual) { return bitwise_diff(expected, actual).equal(); }

::testing::AssertionResult bitwise(const at::Tensor &expected, const at::Tensor &actual) {
  const DiffStats d = bitwise_diff(expected, actual);
  if (d.equal()) return ::testing::AssertionSuccess();
  return ::testing::AssertionFailure() << d.summary();
}

// Our kernels of one backend, by the signatures of cpu_ops.h.
struct Ours {
  std::function<at::Tensor(const at::Tensor &, const at::Tensor &)> mm, bmm;
  std::function<at::Tensor(const at::Tensor &, const at::Tensor &, const at::Tensor &, double, double)> addmm;
  std::function<at::Tensor(const at::Tensor &, int64_t, bool)> log_softmax;
  std::function<at::Tensor(const at::Tensor &, at::IntArrayRef, bool, std::optional<at::ScalarType>)> mean;
};

class ModeTest : public ::testing::TestWithParam<std::string> {
 protected:
  void SetUp() override {
    disable_batch_invariant_mode();
    if (GetParam() == "cpu") {
      device_ = at::Device(at::kCPU);
      ours_ = {cpu_ops::mm, cpu_ops::bmm, cpu_ops::addmm, cpu_ops::log_softmax, cpu_ops::mean};
      return;
    }
    if (!at::hasCUDA()) GTEST_SKIP() << "needs a CUDA GPU: none found";
#ifdef DETFUZZ_WITH_CUDA
    device_ = at::Device(at::kCUDA, 0);
    ours_ = {cuda_ops::mm, cuda_ops::bmm, cuda_ops::addmm, cuda_ops::log_softmax, cuda_ops::mean};
#else
    GTEST_SKIP() << "built without CUDA (DETFUZZ_CUDA=OFF): the mode registers no CUDA kernels";
#endif
  }
  void TearDown() override { disable_batch_invariant_mode(); }

  // Normal-distributed values (never all zero), rebuilt from (seed, tensor) on the host.
  at::Tensor data(std::vector<int64_t> sizes, at::ScalarType dtype = at::kFloat) {
    return make_values(seed_, next_tensor_++, sizes, dtype, "normal").to(device_);
  }

  at::Device device_{at::kCPU};
  Ours ours_;
  uint64_t seed_ = 20261121;
  uint64_t next_tensor_ = 0;
};

const std::vector<at::ScalarType> kFloatTypes = {at::kFloat, at::kHalf, at::kBFloat16};

// With the mode on every entry point gives our kernels' bits. Over the same inputs libtorch's
// kernels must differ somewhere (else equality would prove nothing): `native_differs` counts it.
TEST_P(ModeTest, EntryPointsRunOurKernels) {
  struct Shape {
    int64_t m, k, n;
  };
  const std::vector<Shape> shapes = {{1, 1, 1}, {4, 12, 2}, {7, 65, 9}, {17, 130, 33}, {33, 300, 64}, {64, 513, 17}};
  int native_mm_differs = 0, native_ls_differs = 0, native_mean_differs = 0, checked = 0;
  for (auto dtype : kFloatTypes) {
    for (const auto &s : shapes) {
      SCOPED_TRACE(std::string(c10::toString(dtype)) + " M=" + std::to_string(s.m) + " K=" + std::to_string(s.k) +
                   " N=" + std::to_string(s.n));
      const at::Tensor a = data({s.m, s.k}, dtype), b = data({s.k, s.n}, dtype), bias = data({s.n}, dtype);
      const at::Tensor w = data({s.n, s.k}, dtype);  // a linear layer's weight [out, in]
      const at::Tensor a3 = data({3, s.m, s.k}, dtype), b3 = data({3, s.k, s.n}, dtype),
                       c3 = data({3, s.m, s.n}, dtype);
      const at::Tensor x = data({s.m, s.k}, dtype) * 3;
      // Native results first (mode off).
      const at::Tensor native_mm = torch::mm(a, b), native_ls = torch::log_softmax(x, 1),
                       native_mean = torch::mean(x, {1});

      BatchInvariantMode on(true);
      ASSERT_TRUE(is_batch_invariant_mode_enabled());
      const at::Tensor our_mm = ours_.mm(a, b);
      ASSERT_GT(our_mm.abs().sum().item<double>(), 0.0);
      EXPECT_TRUE(bitwise(our_mm, torch::mm(a, b))) << "torch::mm";
      EXPECT_TRUE(bitwise(our_mm, torch::matmul(a, b))) << "torch::matmul 2-D";
      EXPECT_TRUE(bitwise(ours_.addmm(bias, a, b, 1.0, 1.0), torch::addmm(bias, a, b))) << "torch::addmm";
      EXPECT_TRUE(bitwise(ours_.addmm(bias, a, b, 0.5, -1.5), torch::addmm(bias, a, b, 0.5, -1.5)))
          << "torch::addmm beta alpha";
      EXPECT_TRUE(bitwise(ours_.bmm(a3, b3), torch::bmm(a3, b3))) << "torch::bmm";
      EXPECT_TRUE(bitwise(ours_.bmm(a3, b3), torch::matmul(a3, b3))) << "torch::matmul 3-D @ 3-D";
      // N-D @ 2-D folds into one mm over every row.
      EXPECT_TRUE(bitwise(ours_.mm(a3.reshape({-1, s.k}), b).view({3, s.m, s.n}), torch::matmul(a3, b)))
          << "matmul 3-D @ 2-D";
      // 1-D @ 2-D: a row vector.
      EXPECT_TRUE(bitwise(ours_.mm(a[0].unsqueeze(0), b).squeeze(0), torch::matmul(a[0], b))) << "matmul 1-D @ 2-D";
      // baddbmm: our addmm per batch entry.
      {
        const at::Tensor got = torch::baddbmm(c3, a3, b3, 0.5, 0.75);
        for (int64_t e = 0; e < 3; ++e)
          EXPECT_TRUE(bitwise(ours_.addmm(c3[e], a3[e], b3[e], 0.5, 0.75), got[e])) << "torch::baddbmm entry " << e;
        EXPECT_TRUE(bitwise(ours_.bmm(a3, b3), torch::baddbmm(c3, a3, b3, 0.0, 1.0)))
            << "baddbmm beta 0 alpha 1 is our bmm";
      }
      // linear. aten::linear (at::linear; Python's F.linear and nn.Linear): with bias -> addmm,
      // without -> mm, contiguous 3-D with bias -> addmm over the flattened rows, non-contiguous
      // 3-D with bias -> mm then add. The C++ frontend's torch::nn::functional::linear is its own
      // inline code: 2-D with bias -> addmm, else matmul then += bias.
      namespace F = torch::nn::functional;
      const at::Tensor our_lin = ours_.addmm(bias, a, w.t(), 1.0, 1.0);
      EXPECT_TRUE(bitwise(our_lin, at::linear(a, w, bias))) << "at::linear with bias";
      EXPECT_TRUE(bitwise(our_lin, F::linear(a, w, bias))) << "F::linear with bias";
      EXPECT_TRUE(bitwise(ours_.mm(a, w.t()), at::linear(a, w))) << "at::linear without bias";
      EXPECT_TRUE(bitwise(ours_.mm(a, w.t()), F::linear(a, w))) << "F::linear without bias";
      const at::Tensor our_mm3 = ours_.mm(a3.reshape({-1, s.k}), w.t()).view({3, s.m, s.n});
      EXPECT_TRUE(bitwise(ours_.addmm(bias, a3.reshape({-1, s.k}), w.t(), 1.0, 1.0).view({3, s.m, s.n}),
                          at::linear(a3, w, bias)))
          << "at::linear 3-D with bias";
      EXPECT_TRUE(bitwise(our_mm3 + bias, F::linear(a3, w, bias))) << "F::linear 3-D with bias";
      EXPECT_TRUE(bitwise(our_mm3, at::linear(a3, w))) << "at::linear 3-D";
      EXPECT_TRUE(bitwise(our_mm3, F::linear(a3, w))) << "F::linear 3-D";
      {
        const at::Tensor strided = data({s.m, 3, s.k}, dtype).transpose(0, 1);  // [3, M, K], not contiguous
        const at::Tensor want = ours_.mm(strided.reshape({-1, s.k}), w.t()).view({3, s.m, s.n}) + bias;
        // (With M = K = 1 the transposed view still counts as contiguous: the fused path.)
        const at::Tensor want_aten =
            strided.is_contiguous() ? ours_.addmm(bias, strided.reshape({-1, s.k}), w.t(), 1.0, 1.0).view({3, s.m, s.n})
                                    : want;
        EXPECT_TRUE(bitwise(want_aten, at::linear(strided, w, bias))) << "at::linear non-contiguous 3-D with bias";
        EXPECT_TRUE(bitwise(want, F::linear(strided, w, bias))) << "F::linear non-contiguous 3-D with bias";
      }
      const at::Tensor our_ls = ours_.log_softmax(x, 1, false);
      EXPECT_TRUE(bitwise(our_ls, torch::log_softmax(x, 1))) << "torch::log_softmax";
      EXPECT_TRUE(bitwise(our_ls, torch::log_softmax(x, -1))) << "torch::log_softmax dim -1";
      EXPECT_TRUE(bitwise(our_ls, F::log_softmax(x, F::LogSoftmaxFuncOptions(1)))) << "F::log_softmax";
      const at::Tensor our_mean = ours_.mean(x, {1}, false, std::nullopt);
      EXPECT_TRUE(bitwise(our_mean, torch::mean(x, {1}))) << "torch::mean dim";
      EXPECT_TRUE(bitwise(our_mean, x.mean(-1))) << "Tensor::mean(-1)";
      EXPECT_TRUE(bitwise(ours_.mean(x, {1}, true, at::kFloat), torch::mean(x, {1}, true, at::kFloat)))
          << "mean keepdim dtype";
      EXPECT_TRUE(bitwise(ours_.mean(x, {}, false, std::nullopt), torch::mean(x))) << "torch::mean of all";

      native_mm_differs += !same_bits(native_mm, our_mm);
      native_ls_differs += !same_bits(native_ls, our_ls);
      native_mean_differs += !same_bits(native_mean, our_mean);
      ++checked;
    }
  }
  // Our kernels are not libtorch's: on these inputs libtorch's bits differ somewhere.
  EXPECT_GT(native_mm_differs, 0) << "of " << checked;
  EXPECT_GT(native_ls_differs, 0) << "of " << checked;
  EXPECT_GT(native_mean_differs, 0) << "of " << checked;
}

// Inputs our kernels do not take go to libtorch's kernel, as if the mode were off.
TEST_P(ModeTest, OtherDtypesFallBackToLibtorch) {
  const at::Tensor a = data({9, 70}, at::kDouble), b = data({70, 5}, at::kDouble);
  const at::Tensor before = torch::mm(a, b);
  BatchInvariantMode on(true);
  EXPECT_TRUE(bitwise(before, torch::mm(a, b)));
  const at::Tensor ints = at::arange(12, at::TensorOptions().dtype(at::kLong).device(device_)).view({3, 4});
  if (device_.is_cpu()) {
    EXPECT_TRUE(bitwise(at::cpu::mm(ints, ints.t()), torch::mm(ints, ints.t())));
    EXPECT_EQ(torch::mm(ints, ints.t())[1][2].item<int64_t>(), 4 * 8 + 5 * 9 + 6 * 10 + 7 * 11);
  }
  EXPECT_THROW(torch::mean(ints, {1}), c10::Error);  // libtorch refuses integer mean without a dtype; so do we
}

TEST_P(ModeTest, BatchSliceHoldsBitwiseOverManyShapes) {
  BatchInvariantMode on(true);
  namespace F = torch::nn::functional;
  int compared = 0;
  for (auto dtype : kFloatTypes) {
    for (int64_t m : {2, 3, 7, 16, 17, 31, 64, 65, 130}) {
      for (int64_t k : {1, 7, 64, 65, 300}) {
        for (int64_t n : {1, 5, 64, 129}) {
          SCOPED_TRACE(std::string(c10::toString(dtype)) + " M=" + std::to_string(m) + " K=" + std::to_string(k) +
                       " N=" + std::to_string(n));
          const at::Tensor a = data({m, k}, dtype), b = data({k, n}, dtype), bias = data({n}, dtype),
                           w = data({n, k}, dtype);
          const at::Tensor full = torch::mm(a, b), full_addmm = torch::addmm(bias, a, b),
                           full_lin = F::linear(a, w, bias);
          const at::Tensor x = data({m, n}, dtype) * 4;
          const at::Tensor full_ls = torch::log_softmax(x, 1), full_mean = torch::mean(x, {1});
          const at::Tensor a3 = data({2, m, k}, dtype), b3 = data({2, k, n}, dtype);
          const at::Tensor full_bmm = torch::bmm(a3, b3);
          for (auto [i, j] : std::vector<std::pair<int64_t, int64_t>>{{0, 1}, {m - 1, m}, {m / 2, m}, {1, m}}) {
            if (i >= j) continue;
            const int64_t len = j - i;
            ASSERT_TRUE(bitwise(full.narrow(0, i, len), torch::mm(a.narrow(0, i, len), b)))
                << "mm [" << i << ":" << j << "]";
            ASSERT_TRUE(bitwise(full_addmm.narrow(0, i, len), torch::addmm(bias, a.narrow(0, i, len), b))) << "addmm";
            ASSERT_TRUE(bitwise(full_lin.narrow(0, i, len), F::linear(a.narrow(0, i, len), w, bias))) << "linear";
            ASSERT_TRUE(bitwise(full_ls.narrow(0, i, len), torch::log_softmax(x.narrow(0, i, len), 1)))
                << "log_softmax";
            ASSERT_TRUE(bitwise(full_mean.narrow(0, i, len), torch::mean(x.narrow(0, i, len), {1}))) << "mean";
            ASSERT_TRUE(bitwise(full_bmm.narrow(1, i, len), torch::bmm(a3.narrow(1, i, len), b3))) << "bmm";
            ++compared;
          }
        }
      }
    }
  }
  EXPECT_GT(compared, 500);
}

// libtorch's CPU mm is not batch invariant: row 0 of an M-row product differs from the 1-row
// product for some (shape, M). Counts (shape, M) pairs whose row 0 differs.
int row0_differences(const std::function<at::Tensor(int64_t, int64_t)> &make,
                     const std::vector<std::tuple<int64_t, int64_t>> &kn, const std::vector<int64_t> &ms) {
  int differ = 0;
  for (auto [k, n] : kn) {
    const at::Tensor b = make(k, n);
    for (int64_t m : ms) {
      const at::Tensor a = make(m, k);
      differ += !same_bits(torch::mm(a, b).narrow(0, 0, 1), torch::mm(a.narrow(0, 0, 1), b));
    }
  }
  return differ;
}

TEST_P(ModeTest, DisableAndScopeExitRestoreNativeKernels) {
  const at::Tensor a = data({48, 257}), b = data({257, 40}), x = data({48, 333}) * 3;
  const at::Tensor native_mm = torch::mm(a, b), native_ls = torch::log_softmax(x, 1), native_mean = torch::mean(x, {1});
  const at::Tensor our_mm = ours_.mm(a, b);
  ASSERT_FALSE(same_bits(native_mm, our_mm)) << "pick inputs where libtorch's and our mm differ";
  if (device_.is_cpu())
    EXPECT_TRUE(bitwise(at::cpu::mm(a, b), native_mm)) << "mode off: torch::mm is libtorch's CPU kernel";

  // The known non-invariance of libtorch's CPU mm, with the mode off, on and off again.
  const std::vector<std::tuple<int64_t, int64_t>> kn = {{12, 2},    {64, 96},   {300, 17},
                                                        {1024, 64}, {513, 129}, {128, 1000}};
  const std::vector<int64_t> ms = {2, 4, 8, 16, 33, 64, 128};
  auto make = [&](int64_t r, int64_t c) { return data({r, c}); };
  const int before = row0_differences(make, kn, ms);
  if (device_.is_cpu()) EXPECT_GT(before, 0) << "libtorch's CPU mm row 0 differs for some (shape, M)";

  {
    BatchInvariantMode on(true);
    EXPECT_TRUE(bitwise(our_mm, torch::mm(a, b)));
    EXPECT_EQ(row0_differences(make, kn, ms), 0) << "ours: row 0 never differs";
  }
  EXPECT_FALSE(is_batch_invariant_mode_enabled());
  EXPECT_TRUE(bitwise(native_mm, torch::mm(a, b))) << "after scope exit";
  EXPECT_TRUE(bitwise(native_ls, torch::log_softmax(x, 1)));
  EXPECT_TRUE(bitwise(native_mean, torch::mean(x, {1})));
  if (device_.is_cpu())
    EXPECT_GT(row0_differences(make, kn, ms), 0) << "libtorch's difference reappears after scope exit";

  enable_batch_invariant_mode();
  EXPECT_TRUE(bitwise(our_mm, torch::mm(a, b)));
  disable_batch_invariant_mode();
  EXPECT_FALSE(is_batch_invariant_mode_enabled());
  EXPECT_TRUE(bitwise(native_mm, torch::mm(a, b))) << "after disable";
  EXPECT_TRUE(bitwise(native_ls, torch::log_softmax(x, 1)));
  EXPECT_TRUE(bitwise(native_mean, torch::mean(x, {1})));
  if (device_.is_cpu()) EXPECT_GT(row0_differences(make, kn, ms), 0) << "libtorch's difference reappears after disable";
}

TEST_P(ModeTest, NestedScopesRestoreTheOuterStateExactly) {
  const at::Tensor a = data({48, 257}), b = data({257, 40});
  const at::Tensor native = torch::mm(a, b), ours = ours_.mm(a, b);
  ASSERT_FALSE(same_bits(native, ours));
  auto runs_ours = [&] { return same_bits(ours, torch::mm(a, b)); };
  auto runs_native = [&] { return same_bits(native, torch::mm(a, b)); };
  {
    BatchInvariantMode off(false);  // outer: disabled (as the seed's example)
    EXPECT_FALSE(is_batch_invariant_mode_enabled());
    EXPECT_TRUE(runs_native());
    {
      BatchInvariantMode on(true);
      EXPECT_TRUE(is_batch_invariant_mode_enabled());
      EXPECT_TRUE(runs_ours());
      {
        BatchInvariantMode off_again(false);
        EXPECT_FALSE(is_batch_invariant_mode_enabled());
        EXPECT_TRUE(runs_native());
        {
          BatchInvariantMode on_again(true);
          EXPECT_TRUE(runs_ours());
        }
        EXPECT_FALSE(is_batch_invariant_mode_enabled());
        EXPECT_TRUE(runs_native());
      }
      EXPECT_TRUE(is_batch_invariant_mode_enabled());
      EXPECT_TRUE(runs_ours());
      {
        BatchInvariantMode on_inside_on(true);  // a scope that finds the mode on leaves it on
        EXPECT_TRUE(runs_ours());
      }
      EXPECT_TRUE(is_batch_invariant_mode_enabled());
      EXPECT_TRUE(runs_ours());
    }
    EXPECT_FALSE(is_batch_invariant_mode_enabled());
    EXPECT_TRUE(runs_native());
  }
  // Started from on: a scope that turns it off gives it back on.
  enable_batch_invariant_mode();
  {
    BatchInvariantMode off(false);
    EXPECT_TRUE(runs_native());
    // Direct calls inside a scope do not survive it: the scope restores what it found.
    enable_batch_invariant_mode();
    EXPECT_TRUE(runs_ours());
    disable_batch_invariant_mode();
  }
  EXPECT_TRUE(is_batch_invariant_mode_enabled());
  EXPECT_TRUE(runs_ours());
  disable_batch_invariant_mode();
  EXPECT_TRUE(runs_native());
}

TEST_P(ModeTest, EnableAndDisableAreIdempotent) {
  const at::Tensor a = data({48, 257}), b = data({257, 40});
  const at::Tensor native = torch::mm(a, b), ours = ours_.mm(a, b);
  ASSERT_FALSE(same_bits(native, ours));
  enable_batch_invariant_mode();
  enable_batch_invariant_mode();
  enable_batch_invariant_mode();
  EXPECT_TRUE(is_batch_invariant_mode_enabled());
  EXPECT_TRUE(bitwise(ours, torch::mm(a, b)));
  disable_batch_invariant_mode();  // one disable undoes any number of enables: one registration only
  EXPECT_FALSE(is_batch_invariant_mode_enabled());
  EXPECT_TRUE(bitwise(native, torch::mm(a, b)));
  disable_batch_invariant_mode();
  EXPECT_FALSE(is_batch_invariant_mode_enabled());
  EXPECT_TRUE(bitwise(native, torch::mm(a, b)));
}

INSTANTIATE_TEST_SUITE_P(Backends, ModeTest, ::testing::Values("cpu", "cuda"),
                         [](const ::testing::TestParamInfo<std::string> &p) { return p.param; });

// The Python engines' switch: custom ops detfuzz::*, called here boxed as torch.ops would.
TEST(ModeCustomOps, AreRegisteredAndSwitchTheMode) {
  disable_batch_invariant_mode();
  auto &d = c10::Dispatcher::singleton();
  const auto enable = d.findSchema({"detfuzz::enable_batch_invariant_mode", ""});
  const auto disable = d.findSchema({"detfuzz::disable_batch_invariant_mode", ""});
  const auto query = d.findSchema({"detfuzz::is_batch_invariant_mode_enabled", ""});
  ASSERT_TRUE(enable.has_value());
  ASSERT_TRUE(disable.has_value());
  ASSERT_TRUE(query.has_value());
  auto ask = [&] {
    torch::jit::Stack s;
    query->callBoxed(s);
    EXPECT_EQ(s.size(), 1u);
    return s.at(0).toBool();
  };
  EXPECT_FALSE(ask());
  torch::jit::Stack s;
  enable->callBoxed(s);
  EXPECT_TRUE(is_batch_invariant_mode_enabled());
  EXPECT_TRUE(ask());
  const at::Tensor a = make_values(3, 0, {33, 300}, at::kFloat, "normal"),
                   b = make_values(3, 1, {300, 20}, at::kFloat, "normal");
  EXPECT_TRUE(bitwise(cpu_ops::mm(a, b), torch::mm(a, b)));
  disable->callBoxed(s);
  EXPECT_FALSE(is_batch_invariant_mode_enabled());
  EXPECT_FALSE(ask());
  EXPECT_TRUE(bitwise(at::cpu::mm(a, b), torch::mm(a, b)));
}

TEST(ModeCustomOps, OverriddenOpsAreTheSixOfTheIssue) {
  const std::vector<std::string> want = {"aten::mm",      "aten::addmm",        "aten::bmm",
                                         "aten::baddbmm", "aten::_log_softmax", "aten::mean.dim"};
  EXPECT_EQ(torch_mode::overridden_aten_ops(), want);
}

}  // namespace
}  // namespace detfuzz
