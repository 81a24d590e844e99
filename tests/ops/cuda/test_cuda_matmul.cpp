// The batch-invariant CUDA matmul family (mm, addmm, bmm): accuracy against a float64 CPU
// reference, bitwise batch invariance over many batch sizes and slice positions, layout
// variants, streams, repeat runs, bad shapes; and a sanity check of the cuBLAS baselines.
#include "harness/diff.h"
#include "ops/cuda/cuda_ops.h"
#include "ops/registry.h"
#include "properties/defs/op_def.h"

#include <ATen/CPUGeneratorImpl.h>
#include <ATen/cuda/CUDAContext.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>
#include <gtest/gtest.h>
#include <torch/cuda.h>

#include <array>
#include <cmath>
#include <set>
#include <string>
#include <vector>

namespace detfuzz {
namespace {

#define REQUIRE_GPU() \
  if (!torch::cuda::is_available()) GTEST_SKIP() << "needs a CUDA GPU: none found"

const std::vector<at::ScalarType> kDtypes = {at::kBFloat16, at::kHalf, at::kFloat};

// Random normal data (no zeros in practice), made on the host from a seeded generator.
at::Tensor rnd(at::IntArrayRef shape, at::ScalarType dtype, uint64_t seed) {
  auto gen = at::make_generator<at::CPUGeneratorImpl>(seed);
  return at::randn(shape, gen, at::TensorOptions().dtype(at::kFloat)).to(dtype).to(at::kCUDA);
}

double unit_roundoff(at::ScalarType t) {
  switch (t) {
    case at::kBFloat16: return std::ldexp(1.0, -8);
    case at::kHalf: return std::ldexp(1.0, -11);
    default: return std::ldexp(1.0, -24);
  }
}

// |out - ref| <= u_out |ref| + (K + 4) 2^-22 (|alpha| |A||B| + |beta| |bias|) element-wise (a sound
// bound for float32 accumulation of exactly upcast inputs), plus a normwise relative error
// bound tight enough to catch TF32 (about 3e-4) for float32.
void expect_accurate(const at::Tensor &out, const at::Tensor &a, const at::Tensor &b, const at::Tensor *bias = nullptr,
                     double alpha = 1.0, double beta = 1.0) {
  const at::Tensor ad = a.cpu().to(at::kDouble), bd = b.cpu().to(at::kDouble);
  at::Tensor ref = at::matmul(ad, bd) * alpha;
  at::Tensor mag = at::matmul(ad.abs(), bd.abs()) * std::abs(alpha);
  if (bias && beta != 0.0) {
    const at::Tensor bias_d = bias->cpu().to(at::kDouble);
    ref = ref + bias_d * beta;
    mag = mag + bias_d.abs() * std::abs(beta);
  }
  const int64_t K = a.size(-1);
  const at::Tensor o = out.cpu().to(at::kDouble);
  ASSERT_EQ(o.sizes(), ref.sizes());
  ASSERT_FALSE(o.isnan().any().item<bool>()) << "NaN in output";
  const at::Tensor tol = ref.abs() * unit_roundoff(out.scalar_type()) + mag * ((K + 4) * std::ldexp(1.0, -22)) + 1e-30;
  const at::Tensor err = (o - ref).abs();
  const at::Tensor ratio = err / tol;
  const double worst = ratio.max().item<double>();
  EXPECT_LE(worst, 1.0) << "element-wise error over bound (worst error/bound " << worst << ") dtype "
                        << out.scalar_type() << " shapes " << a.sizes() << " x " << b.sizes();
  const double rel = (o - ref).norm().item<double>() / std::max(ref.norm().item<double>(), 1e-300);
  const double rel_bound = out.scalar_type() == at::kFloat ? 2e-5 : out.scalar_type() == at::kHalf ? 3e-3 : 2e-2;
  EXPECT_LE(rel, rel_bound) << "normwise relative error, dtype " << out.scalar_type();
}

void expect_bitwise(const at::Tensor &expected, const at::Tensor &actual, const std::string &what) {
  const DiffStats d = bitwise_diff(expected.cpu(), actual.cpu());
  EXPECT_TRUE(d.equal()) << what << ": " << d.summary();
}

TEST(CudaMatmul, AccuracyAgainstFloat64) {
  REQUIRE_GPU();
  const std::vector<std::array<int64_t, 3>> shapes = {{1, 64, 64},    {37, 100, 77}, {128, 256, 128}, {300, 1024, 520},
                                                      {5, 4096, 384}, {129, 8, 1},   {2, 1, 3}};
  uint64_t seed = 1;
  for (auto dt : kDtypes)
    for (const auto &s : shapes) {
      const at::Tensor a = rnd({s[0], s[1]}, dt, seed++), b = rnd({s[1], s[2]}, dt, seed++);
      expect_accurate(cuda_ops::mm(a, b), a, b);
      const at::Tensor w = rnd({s[2], s[1]}, dt, seed++);  // a Linear weight [N, K]: B = w^T
      expect_accurate(cuda_ops::mm(a, w.t()), a, w.t());
    }
}

TEST(CudaMatmul, EmptyAndZeroK) {
  REQUIRE_GPU();
  for (auto dt : kDtypes) {
    EXPECT_EQ(cuda_ops::mm(rnd({0, 16}, dt, 1), rnd({16, 8}, dt, 2)).sizes(), at::IntArrayRef({0, 8}));
    const at::Tensor z = cuda_ops::mm(rnd({3, 0}, dt, 1), rnd({0, 5}, dt, 2));
    EXPECT_TRUE(at::equal(z.cpu(), at::zeros({3, 5}, z.cpu().options())));
  }
}

// op(x[i:j]) == op(x)[i:j] bit for bit, over batch sizes 1..300 with tile edges, random starts.
TEST(CudaMatmul, MmBatchSliceInvariance) {
  REQUIRE_GPU();
  std::vector<int64_t> sizes;
  for (int64_t m = 1; m <= 17; ++m) sizes.push_back(m);
  for (int64_t m : {31, 32, 33, 63, 64, 65, 100, 127, 128, 129, 191, 192, 193, 255, 256, 257, 299, 300})
    sizes.push_back(m);
  const int64_t Mmax = 300;
  const std::vector<std::array<int64_t, 2>> kn = {{512, 384}, {1000, 136}, {4096, 200}};
  uint64_t seed = 100;
  for (auto dt : kDtypes)
    for (const auto &p : kn) {
      const at::Tensor a = rnd({Mmax, p[0]}, dt, seed++);
      const at::Tensor b = rnd({p[0], p[1]}, dt, seed++);
      const at::Tensor w = rnd({p[1], p[0]}, dt, seed++);
      const at::Tensor full_b = cuda_ops::mm(a, b), full_w = cuda_ops::mm(a, w.t());
      auto gen = at::make_generator<at::CPUGeneratorImpl>(seed++);
      for (int64_t m : sizes) {
        const int64_t i = m == Mmax ? 0 : at::randint(0, Mmax - m + 1, {1}, gen).item<int64_t>();
        const std::string what = c10::str(c10::toString(dt), " K=", p[0], " N=", p[1], " rows [", i, ",", i + m, ")");
        expect_bitwise(full_b.narrow(0, i, m), cuda_ops::mm(a.narrow(0, i, m), b), what + " B[K,N]");
        expect_bitwise(full_w.narrow(0, i, m), cuda_ops::mm(a.narrow(0, i, m), w.t()), what + " B=W^T");
      }
    }
}

TEST(CudaMatmul, AddmmBiasAndInvariance) {
  REQUIRE_GPU();
  const int64_t Mmax = 260, K = 320, N = 200;
  uint64_t seed = 300;
  for (auto dt : kDtypes) {
    const at::Tensor a = rnd({Mmax, K}, dt, seed++), b = rnd({K, N}, dt, seed++);
    const at::Tensor bias1 = rnd({N}, dt, seed++), bias2 = rnd({Mmax, N}, dt, seed++);
    for (auto [alpha, beta] : std::vector<std::pair<double, double>>{{1.0, 1.0}, {0.5, 2.0}, {-1.25, 0.75}}) {
      const at::Tensor f1 = cuda_ops::addmm(bias1, a, b, beta, alpha);
      expect_accurate(f1, a, b, &bias1, alpha, beta);
      const at::Tensor f2 = cuda_ops::addmm(bias2, a, b, beta, alpha);
      expect_accurate(f2, a, b, &bias2, alpha, beta);
      for (int64_t m : {1, 2, 7, 63, 64, 65, 127, 128, 129, 200}) {
        for (int64_t i : {int64_t(0), Mmax - m, (Mmax - m) / 3}) {
          expect_bitwise(f1.narrow(0, i, m), cuda_ops::addmm(bias1, a.narrow(0, i, m), b, beta, alpha),
                         c10::str("1-D bias ", dt, " rows ", i, "+", m));
          expect_bitwise(f2.narrow(0, i, m), cuda_ops::addmm(bias2.narrow(0, i, m), a.narrow(0, i, m), b, beta, alpha),
                         c10::str("2-D bias ", dt, " rows ", i, "+", m));
        }
      }
    }
    // beta == 0 ignores the bias, NaNs included (as torch).
    const at::Tensor nan_bias = at::full({N}, NAN, a.options());
    const at::Tensor z = cuda_ops::addmm(nan_bias, a, b, 0.0, 1.0);
    expect_bitwise(cuda_ops::mm(a, b), z, "beta=0");
    // Broadcast shapes [1,N] and [M,1] and a scalar.
    const at::Tensor col = rnd({Mmax, 1}, dt, seed++);
    expect_accurate(cuda_ops::addmm(col, a, b, 1.0, 1.0), a, b, &col);
    const at::Tensor row = bias1.unsqueeze(0);
    expect_bitwise(cuda_ops::addmm(bias1, a, b, 1.0, 1.0), cuda_ops::addmm(row, a, b, 1.0, 1.0), "[1,N] bias");
  }
}

TEST(CudaMatmul, BmmAccuracyAndInvariance) {
  REQUIRE_GPU();
  const int64_t B = 3, Mmax = 200, K = 136, N = 72;
  uint64_t seed = 400;
  for (auto dt : kDtypes) {
    const at::Tensor a = rnd({B, Mmax, K}, dt, seed++), b = rnd({B, K, N}, dt, seed++);
    const at::Tensor full = cuda_ops::bmm(a, b);
    expect_accurate(full, a, b);
    for (int64_t m : {1, 5, 63, 64, 65, 128, 129, 199}) {
      const int64_t i = (Mmax - m) / 2;
      expect_bitwise(full.narrow(1, i, m), cuda_ops::bmm(a.narrow(1, i, m), b),
                     c10::str("bmm ", dt, " rows ", i, "+", m));
    }
    expect_bitwise(full.narrow(0, 1, 1), cuda_ops::bmm(a.narrow(0, 1, 1), b.narrow(0, 1, 1)), "bmm batch slice");
    // A batch entry equals mm on that entry (the batch never enters a row's arithmetic).
    expect_bitwise(full[2], cuda_ops::mm(a[2], b[2]), "bmm vs mm");
    // Transposed B per batch.
    const at::Tensor bt = b.transpose(1, 2).contiguous().transpose(1, 2);
    expect_bitwise(full, cuda_ops::bmm(a, bt), "bmm with transposed B");
  }
}

// Layout variants of the same values give the same bits: transposed, offset slices, inner stride 2.
TEST(CudaMatmul, LayoutsAgreeBitwise) {
  REQUIRE_GPU();
  uint64_t seed = 500;
  for (auto dt : kDtypes)
    for (int64_t K : {96, 100, 7}) {
      const int64_t M = 70, N = 90;
      const at::Tensor a = rnd({M, K}, dt, seed++), b = rnd({K, N}, dt, seed++);
      const at::Tensor ref = cuda_ops::mm(a, b);
      expect_accurate(ref, a, b);
      const at::Tensor a_t = a.t().contiguous().t();  // column-major A
      const at::Tensor big = at::zeros({M + 3, 2 * K + 6}, a.options());
      big.narrow(0, 3, M).narrow(1, 5, K).copy_(a);
      const at::Tensor a_off = big.narrow(0, 3, M).narrow(1, 5, K);  // storage offset, odd ld
      const at::Tensor big2 = at::zeros({M, 2 * K}, a.options());
      big2.slice(1, 0, 2 * K, 2).copy_(a);
      const at::Tensor a_s2 = big2.slice(1, 0, 2 * K, 2);  // inner stride 2
      const at::Tensor b_t = b.t().contiguous().t();       // B = W^T
      const at::Tensor bbig = at::zeros({K, 2 * N}, b.options());
      bbig.slice(1, 0, 2 * N, 2).copy_(b);
      const at::Tensor b_s2 = bbig.slice(1, 0, 2 * N, 2);
      const std::string what = c10::str(dt, " K=", K);
      expect_bitwise(ref, cuda_ops::mm(a_t, b), what + " A transposed");
      expect_bitwise(ref, cuda_ops::mm(a_off, b), what + " A offset");
      expect_bitwise(ref, cuda_ops::mm(a_s2, b), what + " A stride 2");
      expect_bitwise(ref, cuda_ops::mm(a, b_t), what + " B transposed");
      expect_bitwise(ref, cuda_ops::mm(a, b_s2), what + " B stride 2");
      expect_bitwise(ref, cuda_ops::mm(a_s2, b_t), what + " both");
      // Slices of a transposed A are still invariant.
      expect_bitwise(ref.narrow(0, 10, 33), cuda_ops::mm(a_t.narrow(0, 10, 33), b_t), what + " slice of transposed");
    }
}

// On Hopper the 16-bit matmul has several paths (persistent tiles of five shapes, cluster split
// over the K chunks, each in 64 and 128 rows) that the launcher picks by tile count: each must give
// the others' bits on the same inputs, for both B layouts, with a bias, over a batch, with and
// without the TMA-stored epilogue, and for K below, at and across chunk boundaries. The
// mma.sync kernel (other GPUs) is checked for accuracy and batch invariance on its own bits.
TEST(CudaMatmul, HopperPathsAgreeBitwise) {
  REQUIRE_GPU();
  const int dev = at::cuda::current_device();
  if (cuda_ops::equivalent_matmul_paths(dev, at::kBFloat16).empty())
    GTEST_SKIP() << "needs an sm_90 GPU for the Hopper paths";
  uint64_t seed = 900;
  for (auto dt : {at::kBFloat16, at::kHalf})
    for (int64_t K : {8, 64, 520, 1000, 1024, 2050, 4096, 4104, 9000})
      // N = 100: rows of C not 16-byte aligned, so no TMA store (the epilogue stores from registers).
      for (int64_t N : {8, 100, 136, 264, 392})
        for (int64_t M : {1, 65, 300}) {
          const at::Tensor a = rnd({M, K}, dt, seed++), b = rnd({K, N}, dt, seed++), w = rnd({N, K}, dt, seed++);
          const at::Tensor bias = rnd({M, N}, dt, seed++);
          const std::string what = c10::str(dt, " M=", M, " N=", N, " K=", K);
          const auto paths = cuda_ops::equivalent_matmul_paths(dev, dt);
          std::vector<std::array<at::Tensor, 3>> per;
          for (const auto &path : paths) {
            cuda_ops::ScopedMatmulPath forced(path);
            per.push_back({cuda_ops::mm(a, b), cuda_ops::mm(a, w.t()), cuda_ops::addmm(bias, a, w.t(), 0.5, 1.5)});
          }
          for (size_t i = 1; i < paths.size(); ++i) {
            const std::string vs = std::string(" ") + paths[0].name() + " vs " + paths[i].name();
            expect_bitwise(per[0][0], per[i][0], what + " B[K,N]" + vs);
            expect_bitwise(per[0][1], per[i][1], what + " B=W^T" + vs);
            expect_bitwise(per[0][2], per[i][2], what + " addmm" + vs);
          }
          expect_bitwise(per[0][0], cuda_ops::mm(a, b), what + " automatic");
          if (M == 65) {
            expect_accurate(per[0][0], a, b);
            expect_accurate(per[1][1], a, w.t());
            expect_accurate(per[3][2], a, w.t(), &bias, 1.5, 0.5);
          }
        }
  // bmm: the batch in the tile space of both paths.
  for (auto dt : {at::kBFloat16, at::kHalf}) {
    const at::Tensor a = rnd({3, 70, 1040}, dt, seed++), b = rnd({3, 1040, 136}, dt, seed++);
    std::vector<at::Tensor> out;
    for (const auto &path : cuda_ops::equivalent_matmul_paths(dev, dt)) {
      cuda_ops::ScopedMatmulPath forced(path);
      out.push_back(cuda_ops::bmm(a, b));
    }
    for (size_t i = 1; i < out.size(); ++i) expect_bitwise(out[0], out[i], c10::str(dt, " bmm path ", i));
    for (int64_t j = 0; j < 3; ++j) expect_accurate(out[1][j], a[j], b[j]);
  }
}

TEST(CudaMatmul, MmaSyncPathIsAccurateAndInvariant) {
  REQUIRE_GPU();
  cuda_ops::ScopedMatmulPath forced(cuda_kernels::GemmPath::mma_sync);
  uint64_t seed = 950;
  for (auto dt : {at::kBFloat16, at::kHalf}) {
    const at::Tensor a = rnd({200, 1000}, dt, seed++), b = rnd({1000, 136}, dt, seed++);
    const at::Tensor full = cuda_ops::mm(a, b);
    expect_accurate(full, a, b);
    for (int64_t m : {1, 7, 64, 129})
      expect_bitwise(full.narrow(0, 50, m), cuda_ops::mm(a.narrow(0, 50, m), b), "mma.sync");
  }
}

TEST(CudaMatmul, StreamsAndRepeatsAgree) {
  REQUIRE_GPU();
  uint64_t seed = 600;
  for (auto dt : kDtypes) {
    const at::Tensor a = rnd({257, 512}, dt, seed++), b = rnd({512, 300}, dt, seed++);
    const at::Tensor ref = cuda_ops::mm(a, b);
    for (int rep = 0; rep < 3; ++rep) expect_bitwise(ref, cuda_ops::mm(a, b), "repeat");
    at::Tensor on_side;
    {
      c10::cuda::CUDAStream side = c10::cuda::getStreamFromPool(/*isHighPriority=*/true);
      c10::cuda::CUDAStreamGuard guard(side);
      on_side = cuda_ops::mm(a, b);
      side.synchronize();
    }
    expect_bitwise(ref, on_side, "side stream");
  }
}

TEST(CudaMatmul, BadShapesThrowWithMessage) {
  REQUIRE_GPU();
  const at::Tensor a = rnd({4, 3}, at::kFloat, 1), b = rnd({5, 6}, at::kFloat, 2);
  try {
    cuda_ops::mm(a, b);
    FAIL() << "mm of [4,3] x [5,6] did not throw";
  } catch (const c10::Error &e) {
    EXPECT_NE(std::string(e.what()).find("cannot be multiplied"), std::string::npos) << e.what();
  }
  EXPECT_THROW(cuda_ops::mm(a, rnd({3, 2}, at::kHalf, 3)), c10::Error);               // dtype mismatch
  EXPECT_THROW(cuda_ops::mm(a.cpu(), rnd({3, 2}, at::kFloat, 3).cpu()), c10::Error);  // not CUDA
  EXPECT_THROW(cuda_ops::bmm(rnd({2, 4, 3}, at::kFloat, 4), rnd({3, 3, 5}, at::kFloat, 5)), c10::Error);
  EXPECT_THROW(cuda_ops::addmm(rnd({7}, at::kFloat, 6), a, rnd({3, 5}, at::kFloat, 7), 1.0, 1.0), c10::Error);
  EXPECT_THROW(cuda_ops::mm(rnd({4, 3}, at::kInt, 8), rnd({3, 2}, at::kInt, 9)), c10::Error);
}

// Rows of an A with more than 2^31 elements: 64-bit offsets (and invariance at the far end).
TEST(CudaMatmul, Int64Offsets) {
  REQUIRE_GPU();
  const int64_t K = 2048, N = 136, M = (int64_t(1) << 31) / K + 300;  // A has > 2^31 elements
  size_t free_b = 0, total_b = 0;
  cudaMemGetInfo(&free_b, &total_b);
  if (free_b < size_t(12) << 30) GTEST_SKIP() << "needs 12 GiB of free GPU memory";
  at::manual_seed(7);
  const at::Tensor a = at::randn({M, K}, at::TensorOptions().dtype(at::kBFloat16).device(at::kCUDA));
  const at::Tensor b = rnd({K, N}, at::kBFloat16, 11);
  const at::Tensor full = cuda_ops::mm(a, b);
  const at::Tensor tail = a.narrow(0, M - 200, 200);
  expect_bitwise(full.narrow(0, M - 200, 200), cuda_ops::mm(tail, b), "last 200 rows");
  expect_accurate(full.narrow(0, M - 200, 200), tail, b);
}

// The baselines are observed, not held to invariance, but must compute the right product.
TEST(CudaBaselines, CublasImplsAreAccurate) {
  REQUIRE_GPU();
  uint64_t seed = 700;
  for (const char *impl : {"cublas", "cublaslt-noworkspace", "cublaslt-pinned"})
    for (auto dt : kDtypes) {
      const ImplInfo *mm = find_impl("mm", impl, Backend::cuda);
      const ImplInfo *addmm = find_impl("addmm", impl, Backend::cuda);
      const ImplInfo *bmm = find_impl("bmm", impl, Backend::cuda);
      ASSERT_TRUE(mm && addmm && bmm) << impl;
      EXPECT_EQ(mm->expectation, Expectation::observed);
      const at::Tensor a = rnd({65, 96}, dt, seed++), b = rnd({96, 40}, dt, seed++);
      OpArgs x;
      x.tensors = {a, b};
      expect_accurate(mm->run(x), a, b);
      x.tensors = {a.t().contiguous().t(), b.t().contiguous().t()};
      expect_accurate(mm->run(x), a, b);
      const at::Tensor bias = rnd({40}, dt, seed++);
      x.tensors = {bias, a, b};
      x.alpha = 0.5;
      x.beta = 2.0;
      expect_accurate(addmm->run(x), a, b, &bias, 0.5, 2.0);
      const at::Tensor a3 = rnd({3, 33, 64}, dt, seed++), b3 = rnd({3, 64, 24}, dt, seed++);
      x.tensors = {a3, b3};
      expect_accurate(bmm->run(x), a3, b3);
    }
}

TEST(CudaRegistry, InvariantImplsAreRegistered) {
  REQUIRE_GPU();
  // scaled_mm and the MoE ops have CPU impls only so far (their Hopper kernels are to come).
  const std::set<std::string> cpu_only = {"scaled_mm", "fused_moe", "fused_moe_fp8"};
  for (const auto &op : builtin_row_ops()) {
    if (cpu_only.count(op)) continue;
    const ImplInfo *i = find_impl(op, "invariant", Backend::cuda);
    ASSERT_NE(i, nullptr) << op;
    EXPECT_EQ(i->expectation, Expectation::must_hold);
  }
}

}  // namespace
}  // namespace detfuzz
