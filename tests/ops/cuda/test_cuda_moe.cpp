// The fp8 scaled matmul and the fused MoE layer on CUDA (ops/cuda/scaled_mm.cu, scaled_mm_sm90.cu,
// fused_moe.cu)
// and the CUDA baselines of both: exact against the float64 reference (or the CPU kernel) where
// every value is exact (so any order gives the same bits), accurate within the definition's bound
// on normal data, a row's or a token's bits alone and in any batch (bitwise), every scale mode
// and dtype, the one-line errors; the planted CUDA mutants' triggers; and the libtorch pipelines
// (torch-scaled-mm, torch-grouped, torch) on exactly computable data.
#include "ops/cpu/moe.h"
#include "ops/cuda/fused_moe.cuh"
#include "ops/cuda/gemm.cuh"
#include "ops/cuda/moe_ops.h"
#include "ops/registry.h"
#include "properties/accuracy.h"
#include "tests/ops/cpu/test_support.h"

#include <ATen/cuda/CUDAContext.h>
#include <ATen/cuda/CUDAGraph.h>
#include <c10/cuda/CUDAGuard.h>
#include <gtest/gtest.h>
#include <torch/cuda.h>

#include <algorithm>
#include <array>
#include <iostream>
#include <limits>
#include <string>
#include <vector>

namespace detfuzz {
namespace {

#define REQUIRE_GPU() \
  if (!torch::cuda::is_available()) GTEST_SKIP() << "needs a CUDA GPU: none found"

using cpu_ops::ScaleMode;
using test::bitwise_equal;

const ScaleMode kModes[] = {ScaleMode::tensor, ScaleMode::channel, ScaleMode::block};

const ImplInfo &cuda_impl(const std::string &impl, const std::string &op) {
  if (const ImplInfo *i = find_impl(op, impl, Backend::cuda)) return *i;
  throw std::runtime_error("no CUDA impl " + impl + " of " + op);
}

at::Tensor ints(at::IntArrayRef sizes, int64_t lo, int64_t hi, at::ScalarType dtype, uint64_t seed) {
  at::Generator gen = at::make_generator<at::CPUGeneratorImpl>(seed);
  return at::randint(lo, hi + 1, sizes, gen, at::TensorOptions().dtype(at::kFloat)).to(dtype);
}

// The same arguments with every tensor on the GPU.
OpArgs on_gpu(OpArgs a) {
  for (at::Tensor &t : a.tensors) t = t.to(at::kCUDA);
  return a;
}

// scaled_mm's arguments on the host: integers in [-lim, lim] with power-of-two scales in
// [1/4, 4] (every product and sum exact), or normal values with positive scales.
OpArgs scaled_mm_args(ScaleMode mode, int64_t m, int64_t n, int64_t k, bool bias, at::ScalarType out, uint64_t seed,
                      int64_t lim = 0) {
  OpArgs a;
  const auto fp8 = at::kFloat8_e4m3fn;
  const auto sa = cpu_ops::scale_a_sizes(mode, m, k), sb = cpu_ops::scale_b_sizes(mode, k, n);
  if (lim > 0) {
    a.tensors = {ints({m, k}, -lim, lim, fp8, seed), ints({k, n}, -lim, lim, fp8, seed + 1),
                 at::pow(2.0, ints(sa, -2, 2, at::kFloat, seed + 2)),
                 at::pow(2.0, ints(sb, -2, 2, at::kFloat, seed + 3))};
    if (bias) a.tensors.push_back(ints({n}, -50, 50, out, seed + 4));
  } else {
    a.tensors = {test::randn({m, k}, fp8, seed), test::randn({k, n}, fp8, seed + 1),
                 test::randn(sa, at::kFloat, seed + 2).abs() + 0.01,
                 test::randn(sb, at::kFloat, seed + 3).abs() + 0.01};
    if (bias) a.tensors.push_back(test::randn({n}, out, seed + 4));
  }
  a.params = {{"scale", cpu_ops::to_string(mode)}, {"bias", bias ? "1" : "0"}};
  a.out_dtype = out;
  return a;
}

// The first `rows` rows of a's batch (a and, where it has rows, scale_a).
OpArgs first_rows(const OpArgs &a, ScaleMode mode, int64_t begin, int64_t rows) {
  OpArgs s = a;
  s.tensors[0] = a.tensors[0].narrow(0, begin, rows);
  if (mode != ScaleMode::tensor) s.tensors[2] = a.tensors[2].narrow(0, begin, rows);
  return s;
}

TEST(CudaScaledMm, ExactOnIntegersAgainstTheReference) {
  REQUIRE_GPU();
  const ImplInfo &impl = cuda_impl("invariant", "scaled_mm");
  uint64_t seed = 1;
  for (ScaleMode mode : kModes)
    for (at::ScalarType out : test::float_types())
      for (int64_t k : {1, 15, 128, 129, 300}) {
        // |a|, |b| <= 4, scales 2^-2..2^2: every partial and sum is exact in float32, so the
        // output is the exact value rounded once, as the reference's is.
        const OpArgs host = scaled_mm_args(mode, 70, 131, k, seed % 2 == 0, out, seed, 4);
        ++seed;
        const at::Tensor want = reference_f64("scaled_mm", host).to(out);
        EXPECT_TRUE(bitwise_equal(want, impl.run(on_gpu(host)).cpu()))
            << cpu_ops::to_string(mode) << " " << out << " K=" << k;
      }
}

TEST(CudaScaledMm, AccurateWithinTheDefinitionsBound) {
  REQUIRE_GPU();
  const ImplInfo &impl = cuda_impl("invariant", "scaled_mm");
  uint64_t seed = 100;
  for (ScaleMode mode : kModes)
    for (at::ScalarType out : test::float_types())
      for (auto [m, n, k] :
           std::vector<std::array<int64_t, 3>>{{1, 1, 1}, {5, 131, 127}, {70, 65, 512}, {33, 200, 1000}}) {
        const OpArgs host = scaled_mm_args(mode, m, n, k, true, out, seed++);
        const at::Tensor got = impl.run(on_gpu(host)).cpu();
        EXPECT_EQ(got.scalar_type(), out);
        EXPECT_TRUE(test::accurate("scaled_mm", host, got))
            << cpu_ops::to_string(mode) << " " << out << " " << m << "x" << n << "x" << k;
      }
}

// Row i of an M-row call equals the 1-row call and the rows of every shorter prefix, bit for bit,
// across the 64-row tiles (M up to 200) and for every scale mode.
TEST(CudaScaledMm, RowsHaveTheSameBitsAloneAndInAnyBatch) {
  REQUIRE_GPU();
  const ImplInfo &impl = cuda_impl("invariant", "scaled_mm");
  for (ScaleMode mode : kModes)
    for (at::ScalarType out : {at::kFloat, at::kBFloat16}) {
      const OpArgs all = on_gpu(scaled_mm_args(mode, 200, 150, 300, true, out, 7));
      const at::Tensor whole = impl.run(all).cpu();
      for (int64_t i : {0, 1, 63, 64, 65, 127, 128, 199})
        EXPECT_TRUE(bitwise_equal(whole.narrow(0, i, 1), impl.run(first_rows(all, mode, i, 1)).cpu()))
            << cpu_ops::to_string(mode) << " " << out << " row " << i << " alone";
      for (int64_t m : {2, 17, 64, 65, 130})
        EXPECT_TRUE(bitwise_equal(whole.narrow(0, 0, m), impl.run(first_rows(all, mode, 0, m)).cpu()))
            << cpu_ops::to_string(mode) << " " << out << " first " << m << " rows";
      EXPECT_TRUE(bitwise_equal(whole.narrow(0, 37, 100), impl.run(first_rows(all, mode, 37, 100)).cpu()))
          << cpu_ops::to_string(mode) << " " << out << " rows 37..136";
    }
}

// cuda_ops::scaled_mm on one of the kernels or tile shapes, b as given (any strides).
at::Tensor run_path(const OpArgs &a, const at::Tensor &b, cuda_kernels::ScaledMmPath path) {
  const ScaleMode mode = cpu_ops::scale_mode_from_string(a.params.at("scale"));
  const at::Tensor bias = a.tensors.size() == 5 ? a.tensors[4] : at::Tensor();
  return cuda_ops::scaled_mm(a.tensors[0], b, a.tensors[2], a.tensors[3], bias, mode, *a.out_dtype, path);
}

bool hopper() { return cuda_kernels::gemm_path_available(cuda_kernels::GemmPath::sm90_persistent, 0); }

// The Hopper kernel's tile shapes (128 x 128 down to 64 x 8) give the same bits, from b column-major (read as it is)
// and row-major (copied into column-major first), so the launcher may pick any for any M.
TEST(CudaScaledMm, HopperTileShapesAndLayoutsGiveTheSameBits) {
  REQUIRE_GPU();
  if (!hopper()) GTEST_SKIP() << "needs an sm_90 GPU for the Hopper kernel";
  using cuda_kernels::ScaledMmPath;
  uint64_t seed = 300;
  for (ScaleMode mode : kModes)
    for (at::ScalarType out : {at::kFloat, at::kBFloat16})
      for (auto [m, n, k] : std::vector<std::array<int64_t, 3>>{
               {1, 150, 300}, {5, 64, 129}, {70, 131, 1000}, {200, 300, 256}, {130, 257, 4096}}) {
        const OpArgs host = scaled_mm_args(mode, m, n, k, seed % 2 == 0, out, seed), a = on_gpu(host);
        ++seed;
        const at::Tensor b_col = a.tensors[1].t().contiguous().t();
        const at::Tensor want = run_path(a, b_col, ScaledMmPath::wgmma_128x128).cpu();
        const std::string what = std::string(cpu_ops::to_string(mode)) + " " + c10::toString(out) + " " +
                                 std::to_string(m) + "x" + std::to_string(n) + "x" + std::to_string(k);
        EXPECT_TRUE(test::accurate("scaled_mm", host, want)) << what;
        EXPECT_TRUE(bitwise_equal(want, run_path(a, b_col, ScaledMmPath::wgmma_64x128).cpu())) << what << " 64x128";
        for (auto [path, name] :
             std::vector<std::pair<ScaledMmPath, const char *>>{{ScaledMmPath::wgmma_64x64, "64x64"},
                                                                {ScaledMmPath::wgmma_64x32, "64x32"},
                                                                {ScaledMmPath::wgmma_64x16, "64x16"},
                                                                {ScaledMmPath::wgmma_64x8, "64x8"}})
          EXPECT_TRUE(bitwise_equal(want, run_path(a, b_col, path).cpu())) << what << " " << name;
        EXPECT_TRUE(bitwise_equal(want, run_path(a, a.tensors[1], ScaledMmPath::automatic).cpu()))
            << what << " b row-major";
      }
}

// Both kernels against the bound at a real width (K = 4096, 32 blocks): the Hopper kernel's fp8
// accumulation and the mma.sync kernel's float16 one. Prints the worst error as a share of its
// bound, for docs/moe.md.
TEST(CudaScaledMm, BothKernelsWithinTheBoundAtRealWidths) {
  REQUIRE_GPU();
  using cuda_kernels::ScaledMmPath;
  for (ScaleMode mode : kModes) {
    const OpArgs host = scaled_mm_args(mode, 64, 256, 4096, false, at::kFloat, 500), a = on_gpu(host);
    for (ScaledMmPath path : {ScaledMmPath::automatic, ScaledMmPath::mma_sync}) {
      const AccuracyResult r = check_accuracy("scaled_mm", host, run_path(a, a.tensors[1], path).cpu());
      EXPECT_TRUE(r.ok) << r.detail;
      std::cout << "scaled_mm " << cpu_ops::to_string(mode) << " K=4096 "
                << (path == ScaledMmPath::mma_sync ? "mma.sync"
                    : hopper()                     ? "wgmma"
                                                   : "automatic")
                << ": worst |err| / bound = " << r.worst_error / r.worst_bound << std::endl;
    }
  }
}

TEST(CudaScaledMm, EmptyAndOneLineErrors) {
  REQUIRE_GPU();
  const ImplInfo &impl = cuda_impl("invariant", "scaled_mm");
  const OpArgs k0 = on_gpu(scaled_mm_args(ScaleMode::tensor, 3, 5, 0, true, at::kFloat, 1));
  EXPECT_TRUE(bitwise_equal(k0.tensors[4].cpu().reshape({1, 5}).expand({3, 5}), impl.run(k0).cpu()));
  EXPECT_EQ(impl.run(on_gpu(scaled_mm_args(ScaleMode::channel, 0, 5, 9, false, at::kFloat, 1))).sizes().vec(),
            (std::vector<int64_t>{0, 5}));
  OpArgs a = on_gpu(scaled_mm_args(ScaleMode::block, 4, 4, 200, false, at::kFloat, 1));
  a.params["scale"] = "channel";
  EXPECT_TRUE(test::throws_with([&] { impl.run(a); }, "scale_a must be [4, 1]"));
  OpArgs b = on_gpu(scaled_mm_args(ScaleMode::tensor, 4, 4, 8, false, at::kFloat, 1));
  b.tensors[0] = b.tensors[0].to(at::kHalf);
  EXPECT_TRUE(test::throws_with([&] { impl.run(b); }, "float8_e4m3fn"));
  OpArgs c = on_gpu(scaled_mm_args(ScaleMode::tensor, 4, 4, 8, false, at::kFloat, 1));
  c.tensors[3] = c.tensors[3].cpu();
  EXPECT_TRUE(test::throws_with([&] { impl.run(c); }, "scale_b must be on"));
}

TEST(CudaScaledMm, Registered) {
  REQUIRE_GPU();
  EXPECT_EQ(cuda_impl("invariant", "scaled_mm").expectation, Expectation::must_hold);
  EXPECT_EQ(cuda_impl("torch-scaled-mm", "scaled_mm").expectation, Expectation::observed);
  for (const char *op : {"fused_moe", "fused_moe_fp8"}) {
    EXPECT_EQ(cuda_impl("invariant", op).expectation, Expectation::must_hold);
    EXPECT_EQ(cuda_impl("torch-grouped", op).expectation, Expectation::observed);
  }
}

// cuBLASLt's fp8 GEMM on integers small enough that any accumulation is exact: the reference's
// bits per tensor and rowwise (K and N off cuBLASLt's alignment: the zero padding), and for block
// scales the same bits or libtorch's one-line refusal on this device.
TEST(CudaTorchBaselines, ScaledMmExactOnIntegers) {
  REQUIRE_GPU();
  const ImplInfo &impl = cuda_impl("torch-scaled-mm", "scaled_mm");
  for (ScaleMode mode : kModes)
    for (int64_t k : {40, 128, 256}) {
      const OpArgs host = scaled_mm_args(mode, 9, 20, k, false, at::kBFloat16, 30 + k, 2);
      const at::Tensor want = reference_f64("scaled_mm", host).to(at::kBFloat16);
      if (mode != ScaleMode::block) {
        EXPECT_TRUE(bitwise_equal(want, impl.run(on_gpu(host)).cpu())) << cpu_ops::to_string(mode) << " K=" << k;
        continue;
      }
      try {
        EXPECT_TRUE(bitwise_equal(want, impl.run(on_gpu(host)).cpu())) << "block K=" << k;
      } catch (const c10::Error &e) {
        const std::string what = e.what_without_backtrace();
        EXPECT_EQ(what.find('\n'), std::string::npos) << what;
        std::cout << "torch-scaled-mm, block scales, K=" << k << ": " << what << std::endl;
      }
    }
}

// A MoE layer whose every value is exact in the dtype, so that any GEMM order, padding and combine
// order gives the same bits: top-2 of two logits tied at 5 (weights 1/2 each, the others negative),
// integer x and gate rows making every gate >= 20 (silu(g) == g in float32), integer up rows, down
// rows with one +-1 each (y = +-a). float32: x, gate weights in [1, 3], up in [-2, 2];
// bfloat16 (8 significant bits): x and gate weights 1, up in [-1, 1], so a = 20 u.
OpArgs exact_moe(at::ScalarType dtype, bool fp8, int64_t t, int64_t h, int64_t e, int64_t i, uint64_t seed) {
  const bool wide = dtype == at::kFloat;
  const at::Tensor x = wide ? ints({t, h}, 1, 3, at::kFloat, seed) : at::ones({t, h});
  at::Tensor logits = -1 - ints({t, e}, 0, 20, at::kFloat, seed + 1) / 8;
  at::Generator gen = at::make_generator<at::CPUGeneratorImpl>(seed + 2);
  for (int64_t r = 0; r < t; ++r) {
    const at::Tensor pick = at::randperm(e, gen).narrow(0, 0, 2);
    logits[r].index_fill_(0, pick, 5.0);
  }
  const at::Tensor gate = wide ? ints({e, i, h}, 1, 3, at::kFloat, seed + 3) : at::ones({e, i, h});
  const at::Tensor up = ints({e, i, h}, wide ? -2 : -1, wide ? 2 : 1, at::kFloat, seed + 4);
  const at::Tensor cols = ints({e, h, 1}, 0, i - 1, at::kLong, seed + 5);
  const at::Tensor signs = ints({e, h, 1}, 0, 1, at::kFloat, seed + 6) * 2 - 1;
  const at::Tensor down = at::zeros({e, h, i}).scatter_(2, cols, signs);
  OpArgs a;
  const at::ScalarType wt = fp8 ? at::kFloat8_e4m3fn : dtype;
  a.tensors = {x.to(dtype), logits, at::cat({gate, up}, 1).to(wt), down.to(wt)};
  if (fp8) {
    a.tensors.push_back(at::ones({e, (2 * i + 127) / 128, (h + 127) / 128}));
    a.tensors.push_back(at::ones({e, (h + 127) / 128, (i + 127) / 128}));
  }
  a.params = {{"topk", "2"}};
  return a;
}

TEST(CudaTorchBaselines, MoePipelinesExactOnExactData) {
  REQUIRE_GPU();
  const ImplInfo *cpu = find_impl("fused_moe", "invariant", Backend::cpu);
  ASSERT_NE(cpu, nullptr);
  uint64_t seed = 1;
  for (bool fp8 : {false, true})
    for (at::ScalarType dtype : {at::kFloat, at::kBFloat16})
      for (auto [t, h, e, i] : std::vector<std::array<int64_t, 4>>{{1, 20, 8, 12}, {37, 20, 8, 12}, {64, 24, 64, 16}}) {
        const OpArgs host = exact_moe(dtype, fp8, t, h, e, i, seed++);
        const at::Tensor want = cpu->run(host);
        for (const char *name : {"invariant", "torch", "torch-grouped"}) {
          const std::string what = std::string(name) + (fp8 ? " fp8 " : " ") + c10::toString(dtype) + " " +
                                   std::to_string(t) + "x" + std::to_string(h) + "x" + std::to_string(e) + "x" +
                                   std::to_string(i);
          EXPECT_TRUE(bitwise_equal(want, cuda_impl(name, fp8 ? "fused_moe_fp8" : "fused_moe").run(on_gpu(host)).cpu()))
              << what;
        }
      }
}

// A MoE layer's arguments on the host: normal x and logits (ties: logits rounded to halves),
// weights of x's dtype or fp8 with positive block scales.
OpArgs moe_args(at::ScalarType dtype, bool fp8, int64_t t, int64_t h, int64_t e, int64_t i, int64_t k, uint64_t seed,
                bool ties = false) {
  OpArgs a;
  at::Tensor logits = test::randn({t, e}, at::kFloat, seed + 1);
  if (ties) logits = at::round(logits * 2) / 2;
  const at::ScalarType wt = fp8 ? at::kFloat8_e4m3fn : dtype;
  const double scale = fp8 ? 1.0 : 0.2;
  a.tensors = {test::randn({t, h}, dtype, seed), logits,
               (test::randn({e, 2 * i, h}, at::kFloat, seed + 2) * scale).to(wt),
               (test::randn({e, h, i}, at::kFloat, seed + 3) * scale).to(wt)};
  if (fp8) {
    a.tensors.push_back(test::randn({e, (2 * i + 127) / 128, (h + 127) / 128}, at::kFloat, seed + 4).abs() * 0.1 +
                        0.01);
    a.tensors.push_back(test::randn({e, (h + 127) / 128, (i + 127) / 128}, at::kFloat, seed + 5).abs() * 0.1 + 0.01);
  }
  a.params = {{"topk", std::to_string(k)}};
  return a;
}

// Tokens [begin, begin + n) of a MoE layer's batch (x and logits).
OpArgs tokens(const OpArgs &a, int64_t begin, int64_t n) {
  OpArgs s = a;
  s.tensors[0] = a.tensors[0].narrow(0, begin, n);
  s.tensors[1] = a.tensors[1].narrow(0, begin, n);
  return s;
}

TEST(CudaFusedMoe, AccurateWithinTheDefinitionsBound) {
  REQUIRE_GPU();
  uint64_t seed = 1;
  for (bool fp8 : {false, true})
    for (at::ScalarType dtype : test::float_types())
      for (auto [t, h, e, i, k] : std::vector<std::array<int64_t, 5>>{
               {1, 1, 8, 1, 1}, {13, 160, 8, 70, 2}, {24, 129, 64, 200, 8}, {5, 300, 128, 33, 8}}) {
        const char *op = fp8 ? "fused_moe_fp8" : "fused_moe";
        const OpArgs host = moe_args(dtype, fp8, t, h, e, i, k, seed++);
        const at::Tensor got = cuda_impl("invariant", op).run(on_gpu(host)).cpu();
        EXPECT_EQ(got.scalar_type(), dtype);
        EXPECT_TRUE(test::accurate(op, host, got))
            << op << " " << dtype << " T=" << t << " H=" << h << " E=" << e << " I=" << i << " k=" << k;
      }
}

// A token's bits alone, in the batch, in any slice of it, and beside tokens that all route to its
// own experts (copies of its logits: one expert's tile fills up and splits), bit for bit.
TEST(CudaFusedMoe, TokensHaveTheSameBitsAloneAndInAnyBatch) {
  REQUIRE_GPU();
  for (bool fp8 : {false, true})
    for (at::ScalarType dtype : {at::kFloat, at::kBFloat16}) {
      const ImplInfo &impl = cuda_impl("invariant", fp8 ? "fused_moe_fp8" : "fused_moe");
      const OpArgs all = on_gpu(moe_args(dtype, fp8, 70, 150, 8, 40, 2, 11, true));
      const at::Tensor whole = impl.run(all).cpu();
      for (int64_t i : {0, 1, 31, 32, 69})
        EXPECT_TRUE(bitwise_equal(whole.narrow(0, i, 1), impl.run(tokens(all, i, 1)).cpu()))
            << (fp8 ? "fp8 " : "") << dtype << " token " << i << " alone";
      EXPECT_TRUE(bitwise_equal(whole.narrow(0, 20, 45), impl.run(tokens(all, 20, 45)).cpu()))
          << (fp8 ? "fp8 " : "") << dtype << " tokens 20..64";
      OpArgs crowd = all;
      crowd.tensors[1] = all.tensors[1].narrow(0, 5, 1).expand({70, 8}).contiguous();
      crowd.tensors[0] = all.tensors[0].roll(1, 0);  // token 5 at row 6, its x beside 69 others'
      const at::Tensor crowded = impl.run(crowd).cpu();
      EXPECT_TRUE(bitwise_equal(whole.narrow(0, 5, 1), crowded.narrow(0, 6, 1)))
          << (fp8 ? "fp8 " : "") << dtype << " token 5 among 69 tokens routed to its experts";
    }
}

// The Hopper grouped GEMMs (16-bit x; 16-bit weights with H and I multiples of 8, or fp8 block-
// scaled weights with H and I multiples of 128): within the bound, and a token's bits alone
// (64-row tiles, 64-column down tiles) equal to its bits in a batch of 600 (128-row tiles,
// 128-column down tiles, its experts' tiles full of other tokens) and among tokens that all route
// to its experts.
TEST(CudaFusedMoe, HopperGroupedGemmsAccurateAndInvariant) {
  REQUIRE_GPU();
  if (!hopper()) GTEST_SKIP() << "needs an sm_90 GPU for the Hopper kernels";
  uint64_t seed = 700;
  for (bool fp8 : {false, true})
    for (at::ScalarType dtype : {at::kBFloat16, at::kHalf}) {
      const char *op = fp8 ? "fused_moe_fp8" : "fused_moe";
      const std::vector<std::array<int64_t, 5>> shapes =
          fp8 ? std::vector<std::array<int64_t, 5>>{{1, 128, 8, 128, 1},
                                                    {70, 256, 8, 384, 2},
                                                    {40, 512, 64, 256, 8},
                                                    {600, 128, 8, 128, 2}}
              : std::vector<std::array<int64_t, 5>>{
                    {1, 64, 8, 64, 1}, {70, 256, 8, 136, 2}, {40, 512, 64, 256, 8}, {600, 128, 8, 72, 2}};
      for (auto [t, h, e, i, k] : shapes) {
        const OpArgs host = moe_args(dtype, fp8, t, h, e, i, k, seed++);
        const at::Tensor got = cuda_impl("invariant", op).run(on_gpu(host)).cpu();
        EXPECT_TRUE(test::accurate(op, host, got))
            << op << " " << dtype << " T=" << t << " H=" << h << " E=" << e << " I=" << i << " k=" << k;
      }
      const ImplInfo &impl = cuda_impl("invariant", op);
      const OpArgs all = on_gpu(moe_args(dtype, fp8, 600, 2048, 8, fp8 ? 128 : 72, 2, seed++));
      const at::Tensor whole = impl.run(all).cpu();
      for (int64_t i : {0, 1, 127, 128, 599})
        EXPECT_TRUE(bitwise_equal(whole.narrow(0, i, 1), impl.run(tokens(all, i, 1)).cpu()))
            << op << " " << dtype << " token " << i << " alone";
      EXPECT_TRUE(bitwise_equal(whole.narrow(0, 100, 300), impl.run(tokens(all, 100, 300)).cpu()))
          << op << " " << dtype << " tokens 100..399";
      OpArgs crowd = all;
      crowd.tensors[1] = all.tensors[1].narrow(0, 5, 1).expand({600, 8}).contiguous();
      crowd.tensors[0] = all.tensors[0].roll(1, 0);  // token 5 at row 6, beside 599 routed to its experts
      EXPECT_TRUE(bitwise_equal(whole.narrow(0, 5, 1), impl.run(crowd).cpu().narrow(0, 6, 1)))
          << op << " " << dtype << " token 5 among 599 tokens routed to its experts";
    }
}

// The grouping on the device (launch_moe_group) against the grouping written out on the host:
// pairs in p order within each expert, tiles of at most tile_rows pairs expert by expert, then
// empty tiles up to moe_max_tiles, then the count of the others. Routings with idle experts, one
// expert taking every pair, more pairs than a warp or a block (the one-block grouping), and more
// than a block's chunk (the three-launch grouping over chunks, with its workspace), up to the most
// experts it takes.
TEST(CudaFusedMoe, DeviceGroupingIsTheHostGrouping) {
  REQUIRE_GPU();
  for (auto [pairs, experts, tile_rows, skew] : std::vector<std::array<int64_t, 4>>{{0, 8, 32, 0},
                                                                                    {1, 8, 32, 0},
                                                                                    {31, 8, 32, 0},
                                                                                    {33, 64, 32, 1},
                                                                                    {1000, 8, 32, 0},
                                                                                    {1024, 4000, 32, 0},
                                                                                    {1025, 8, 32, 1},
                                                                                    {5000, 256, 64, 1},
                                                                                    {4096, 16, 128, 0},
                                                                                    {70001, 128, 64, 0},
                                                                                    {70001, 4000, 128, 1}}) {
    const at::Tensor host_ids =
        (skew ? at::full({pairs}, experts - 1, at::kInt) : at::randint(experts, {pairs}, at::kInt)).contiguous();
    if (skew && pairs > 2) host_ids.narrow(0, 0, pairs / 3).fill_(2);  // two busy experts, the rest idle
    const at::Tensor ids = host_ids.cuda();
    const int64_t max_tiles = cuda_kernels::moe_max_tiles(pairs, experts, tile_rows);
    at::Tensor order = at::full({pairs}, -7, ids.options());
    at::Tensor tiles = at::full({3 * max_tiles + 1}, -7, ids.options());
    at::Tensor workspace = at::full({cuda_kernels::moe_group_workspace(pairs, experts)}, -7, ids.options());
    cuda_kernels::launch_moe_group(ids.const_data_ptr<int32_t>(), pairs, experts, tile_rows,
                                   workspace.data_ptr<int32_t>(), order.data_ptr<int32_t>(), tiles.data_ptr<int32_t>(),
                                   at::cuda::getCurrentCUDAStream().stream());
    std::vector<std::vector<int32_t>> by_expert(static_cast<size_t>(experts));
    const int32_t *id = host_ids.const_data_ptr<int32_t>();
    for (int32_t p = 0; p < pairs; ++p) by_expert[static_cast<size_t>(id[p])].push_back(p);
    std::vector<int32_t> want_order, want_tiles;
    for (int32_t e = 0; e < experts; ++e) {
      const int32_t start = static_cast<int32_t>(want_order.size());
      want_order.insert(want_order.end(), by_expert[static_cast<size_t>(e)].begin(),
                        by_expert[static_cast<size_t>(e)].end());
      for (int32_t first = start; first < static_cast<int32_t>(want_order.size()); first += tile_rows)
        want_tiles.insert(
            want_tiles.end(),
            {e, first, std::min(static_cast<int32_t>(tile_rows), static_cast<int32_t>(want_order.size()) - first)});
    }
    ASSERT_LE(static_cast<int64_t>(want_tiles.size()), 3 * max_tiles) << pairs << " pairs: the bound is too small";
    const int32_t live = static_cast<int32_t>(want_tiles.size() / 3);
    want_tiles.resize(static_cast<size_t>(3 * max_tiles), 0);
    want_tiles.push_back(live);
    const at::Tensor got_order = order.cpu(), got_tiles = tiles.cpu();
    EXPECT_TRUE(std::equal(want_order.begin(), want_order.end(), got_order.const_data_ptr<int32_t>()))
        << pairs << " pairs over " << experts << " experts: the order";
    EXPECT_TRUE(std::equal(want_tiles.begin(), want_tiles.end(), got_tiles.const_data_ptr<int32_t>()))
        << pairs << " pairs over " << experts << " experts, tiles of " << tile_rows << ": the tiles";
  }
}

// No host round trip is left in the layer: captured in a CUDA graph (after a warm-up run), its
// replay writes the eager run's bits into the graph's output, which is poisoned first; 140 pairs
// (the one-block grouping) and 1400 (the grouping over chunks). float32 x runs the CUDA-core
// kernels, bf16 x the Hopper ones on an sm_90 GPU.
TEST(CudaFusedMoe, ReplaysFromACudaGraphWithTheEagerBits) {
  REQUIRE_GPU();
  for (int64_t tokens : {70, 700})
    for (bool fp8 : {false, true})
      for (at::ScalarType dtype : {at::kFloat, at::kBFloat16}) {
        const ImplInfo &impl = cuda_impl("invariant", fp8 ? "fused_moe_fp8" : "fused_moe");
        const OpArgs args = on_gpu(moe_args(dtype, fp8, tokens, 256, 8, 128, 2, 31));
        const at::Tensor eager = impl.run(args).cpu();
        at::cuda::CUDAGraph graph;
        at::Tensor replayed;
        {
          const at::cuda::CUDAStreamGuard side(at::cuda::getStreamFromPool());
          impl.run(args);  // first-call setup (kernel attributes, tensor maps) outside the capture
          graph.capture_begin();
          replayed = impl.run(args);
          graph.capture_end();
        }
        replayed.fill_(std::numeric_limits<float>::quiet_NaN());
        graph.replay();
        torch::cuda::synchronize();
        EXPECT_TRUE(bitwise_equal(eager, replayed.cpu()))
            << tokens << " tokens, " << (fp8 ? "fp8 " : "") << dtype << ": replay against eager";
      }
}

// The CUDA mutants (ops/cuda/register.cpp): the unmutated kernel's bits where the trigger is
// off, other bits where it is on, within the accuracy bound; float32 x, so that the CUDA-core
// kernels run for both (a 16-bit output would round most one-ulp float32 differences away).
TEST(CudaMutants, KeepTheKernelsBitsUntilTheirTrigger) {
  REQUIRE_GPU();
  for (bool fp8 : {false, true}) {
    const char *op = fp8 ? "fused_moe_fp8" : "fused_moe";
    const ImplInfo &inv = cuda_impl("invariant", op);
    auto shared = [&](int64_t tokens, int64_t k) {  // every token on the same experts
      OpArgs a = moe_args(at::kFloat, fp8, tokens, 200, 8, 136, k, 7);
      a.tensors[1] = a.tensors[1].narrow(0, 0, 1).expand({tokens, 8}).contiguous();
      return on_gpu(a);
    };
    auto run = [&](const ImplInfo &impl, const OpArgs &a) { return impl.run(a).cpu(); };
    const ImplInfo &splitk = cuda_impl("mutant-moe-splitk", op);  // experts with <= 2 tokens
    EXPECT_TRUE(bitwise_equal(run(inv, shared(3, 2)), run(splitk, shared(3, 2)))) << op;
    EXPECT_FALSE(bitwise_equal(run(inv, shared(1, 2)), run(splitk, shared(1, 2)))) << op;
    EXPECT_TRUE(test::accurate(op, moe_args(at::kFloat, fp8, 1, 200, 8, 136, 2, 7), run(splitk, shared(1, 2)))) << op;
    const ImplInfo &tile = cuda_impl("mutant-moe-tile", op);  // experts with >= 4 tokens
    EXPECT_TRUE(bitwise_equal(run(inv, shared(3, 2)), run(tile, shared(3, 2)))) << op;
    EXPECT_FALSE(bitwise_equal(run(inv, shared(4, 2)), run(tile, shared(4, 2)))) << op;
    const ImplInfo &atomic = cuda_impl("mutant-moe-atomic", op);  // top-1: one term, nothing to reorder
    const OpArgs top1 = moe_args(at::kFloat, fp8, 12, 64, 8, 40, 1, 9),
                 top8 = moe_args(at::kFloat, fp8, 12, 64, 64, 40, 8, 9);
    EXPECT_TRUE(bitwise_equal(run(inv, on_gpu(top1)), run(atomic, on_gpu(top1)))) << op;
    const at::Tensor reordered = run(atomic, on_gpu(top8));
    EXPECT_FALSE(bitwise_equal(run(inv, on_gpu(top8)), reordered)) << op;
    EXPECT_TRUE(test::accurate(op, top8, reordered)) << op;
  }
  // The promotion mutant on the mma.sync kernel: its bits below 16 rows, others from 16 on.
  using cuda_kernels::ScaledMmPath;
  const ImplInfo &promote = cuda_impl("mutant-fp8-promote", "scaled_mm");
  for (ScaleMode mode : kModes) {
    const OpArgs small = on_gpu(scaled_mm_args(mode, 15, 24, 600, false, at::kFloat, 5));
    EXPECT_TRUE(
        bitwise_equal(run_path(small, small.tensors[1], ScaledMmPath::mma_sync).cpu(), promote.run(small).cpu()))
        << cpu_ops::to_string(mode);
    const OpArgs host = scaled_mm_args(mode, 16, 24, 600, false, at::kFloat, 5), tall = on_gpu(host);
    const at::Tensor got = promote.run(tall).cpu();
    EXPECT_FALSE(bitwise_equal(run_path(tall, tall.tensors[1], ScaledMmPath::mma_sync).cpu(), got))
        << cpu_ops::to_string(mode);
    EXPECT_TRUE(test::accurate("scaled_mm", host, got)) << cpu_ops::to_string(mode);
  }
}

TEST(CudaFusedMoe, RoutingIsTheCpuRouting) {
  REQUIRE_GPU();
  for (int64_t k : {1, 2, 8})
    for (bool ties : {false, true}) {
      OpArgs host = moe_args(at::kFloat, false, 50, 16, 64, 16, k, 40 + k, ties);
      host.tensors[1][3][7] = NAN;
      host.params["routing"] = "1";
      const at::Tensor got = cuda_impl("invariant", "fused_moe").run(on_gpu(host)).cpu();
      const at::Tensor want = find_impl("fused_moe", "invariant", Backend::cpu)->run(host);
      EXPECT_TRUE(bitwise_equal(want.narrow(1, k, k), got.narrow(1, k, k))) << "expert ids, k=" << k;
      // The weights against the float64 softmax of the chosen logits, within the definition's
      // bound w (2 |l - l_max| + k + 6) u (properties/defs/fused_moe.cpp).
      const at::Tensor chosen = host.tensors[1].to(at::kDouble).gather(1, want.narrow(1, k, k).to(at::kLong));
      const at::Tensor d = chosen - chosen.narrow(1, 0, 1);
      const at::Tensor ref = d.exp() / d.exp().sum(1, true);
      const at::Tensor bound = ref * (2 * d.abs() + k + 6) * kUnitRoundoffF32;
      const at::Tensor err = (got.narrow(1, 0, k).to(at::kDouble) - ref).abs();
      const at::Tensor finite = at::isfinite(ref);
      EXPECT_TRUE((err <= bound).logical_or(finite.logical_not()).all().item<bool>())
          << "weights, k=" << k << ": worst error/bound " << (err / bound).masked_select(finite).max().item<double>();
      EXPECT_TRUE(at::equal(at::isnan(got.narrow(1, 0, k)), at::isnan(ref))) << "NaN weights, k=" << k;
    }
}

TEST(CudaFusedMoe, OneLineErrors) {
  REQUIRE_GPU();
  const ImplInfo &impl = cuda_impl("invariant", "fused_moe");
  OpArgs a = on_gpu(moe_args(at::kFloat, false, 3, 8, 8, 4, 2, 1));
  a.params["topk"] = "9";
  EXPECT_TRUE(test::throws_with([&] { impl.run(a); }, "top_k=9 must be in [1, E]"));
  OpArgs b = on_gpu(moe_args(at::kFloat, true, 3, 8, 8, 4, 2, 1));
  b.tensors[4] = b.tensors[4].narrow(0, 0, 7);
  EXPECT_TRUE(test::throws_with([&] { cuda_impl("invariant", "fused_moe_fp8").run(b); }, "block scales must be"));
  OpArgs c = on_gpu(moe_args(at::kFloat, false, 3, 8, 8, 4, 2, 1));
  c.tensors[1] = c.tensors[1].to(at::kHalf);
  EXPECT_TRUE(test::throws_with([&] { impl.run(c); }, "logits must be float32"));
}

}  // namespace
}  // namespace detfuzz
