// The batch-invariant CUDA row reductions (log_softmax, mean): accuracy against float64 CPU
// torch, -inf/NaN rows, any dim, half_to_float, multi-dim and integer mean, bitwise batch
// invariance over many row counts, layout/alignment variants and streams.
#include "harness/diff.h"
#include "ops/cuda/cuda_ops.h"
#include "ops/cuda/row_reduce.cuh"

#include <ATen/CPUGeneratorImpl.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>
#include <gtest/gtest.h>
#include <torch/cuda.h>

#include <cmath>
#include <string>
#include <vector>

namespace detfuzz {
namespace {

#define REQUIRE_GPU() \
  if (!torch::cuda::is_available()) GTEST_SKIP() << "needs a CUDA GPU: none found"

const std::vector<at::ScalarType> kDtypes = {at::kFloat, at::kHalf, at::kBFloat16};

at::Tensor rnd(at::IntArrayRef shape, at::ScalarType dtype, uint64_t seed, double scale = 3.0) {
  auto gen = at::make_generator<at::CPUGeneratorImpl>(seed);
  return (at::randn(shape, gen, at::TensorOptions().dtype(at::kFloat)) * scale).to(dtype).to(at::kCUDA);
}

double unit_roundoff(at::ScalarType t) {
  switch (t) {
    case at::kBFloat16: return std::ldexp(1.0, -8);
    case at::kHalf: return std::ldexp(1.0, -11);
    default: return std::ldexp(1.0, -24);
  }
}

void expect_bitwise(const at::Tensor &expected, const at::Tensor &actual, const std::string &what) {
  const DiffStats d = bitwise_diff(expected.cpu(), actual.cpu());
  EXPECT_TRUE(d.equal()) << what << ": " << d.summary();
}

// Non-finite reference values must be matched in kind; finite ones within tol (element-wise).
void expect_close(const at::Tensor &out, const at::Tensor &ref, const at::Tensor &tol, const std::string &what) {
  const at::Tensor o = out.cpu().to(at::kDouble);
  ASSERT_EQ(o.sizes(), ref.sizes()) << what;
  const at::Tensor ref_nan = ref.isnan(), out_nan = o.isnan();
  EXPECT_TRUE(at::equal(ref_nan, out_nan)) << what << ": NaN positions differ";
  const at::Tensor ref_inf = ref.isinf();
  EXPECT_TRUE(at::equal(ref_inf, o.isinf())) << what << ": inf positions differ";
  if (ref_inf.any().item<bool>())
    EXPECT_TRUE(at::equal(ref.masked_select(ref_inf), o.masked_select(ref_inf))) << what << ": inf signs differ";
  const at::Tensor fin = at::isfinite(ref);
  if (fin.any().item<bool>()) {
    const at::Tensor ratio = ((o - ref).abs() / tol).masked_select(fin);
    const double worst = ratio.max().item<double>();
    EXPECT_LE(worst, 1.0) << what << ": error over bound (worst error/bound " << worst << ")";
  }
}

void expect_log_softmax_accurate(const at::Tensor &out, const at::Tensor &x, int64_t dim) {
  const at::Tensor xd = x.cpu().to(at::kDouble);
  const at::Tensor ref = at::_log_softmax(xd, dim, false);
  const int64_t len = x.dim() == 0 ? 1 : x.size(dim);
  // float32 arithmetic on exactly upcast inputs: (x - max) and the final subtraction (a few u),
  // exp/log (a few ulp), the sum (len u relative, so len u absolute on its log); then the output rounding.
  const at::Tensor tol = ref.abs() * unit_roundoff(out.scalar_type()) +
                         (xd.abs() + ref.abs() + 1.0) * std::ldexp(1.0, -20) + (len + 8) * std::ldexp(1.0, -22);
  expect_close(out, ref, tol, c10::str("log_softmax ", x.scalar_type(), " ", x.sizes(), " dim ", dim));
}

TEST(CudaLogSoftmax, AccuracyOverLengths) {
  REQUIRE_GPU();
  uint64_t seed = 1;
  for (auto dt : kDtypes)
    for (int64_t len : {1, 2, 7, 100, 1000, 4096, 5000, 32768, 50000}) {
      const at::Tensor x = rnd({5, len}, dt, seed++);
      expect_log_softmax_accurate(cuda_ops::log_softmax(x, -1, false), x, 1);
    }
}

TEST(CudaLogSoftmax, AnyDimAndHalfToFloat) {
  REQUIRE_GPU();
  uint64_t seed = 50;
  for (auto dt : kDtypes) {
    const at::Tensor x = rnd({6, 7, 9}, dt, seed++);
    for (int64_t d : {0, 1, 2, -1, -3}) {
      const at::Tensor out = cuda_ops::log_softmax(x, d, false);
      EXPECT_EQ(out.scalar_type(), dt);
      expect_log_softmax_accurate(out, x, d);
      // Invariance along a non-reduced dim: slicing dim (d+1)%3.
      const int64_t wd = d < 0 ? d + 3 : d;
      const int64_t sd = (wd + 1) % 3;
      expect_bitwise(out.narrow(sd, 2, 3), cuda_ops::log_softmax(x.narrow(sd, 2, 3), d, false),
                     c10::str("log_softmax dim ", d, " slice of dim ", sd));
    }
    if (dt != at::kFloat) {
      const at::Tensor out = cuda_ops::log_softmax(x, 1, true);
      EXPECT_EQ(out.scalar_type(), at::kFloat);
      expect_log_softmax_accurate(out, x, 1);
    }
  }
  EXPECT_THROW(cuda_ops::log_softmax(rnd({3, 4}, at::kFloat, 1), 0, true), c10::Error);
  EXPECT_THROW(cuda_ops::log_softmax(rnd({3, 4}, at::kFloat, 1), 2, false), c10::Error);
}

TEST(CudaLogSoftmax, InfAndNanRows) {
  REQUIRE_GPU();
  for (auto dt : kDtypes)
    for (int64_t len : {5, 300, 40000}) {
      at::Tensor x = rnd({6, len}, dt, 77).cpu();
      x[0].fill_(-INFINITY);  // all -inf: NaN (as torch)
      x[1][len / 2] = NAN;    // one NaN: NaN row
      x[2][0] = -INFINITY;    // one -inf: -inf there, finite elsewhere
      x[2][len - 1] = -INFINITY;
      x[3][len - 1] = INFINITY;  // +inf: NaN row (as torch)
      x[4].fill_(2.5);           // constant row
      const at::Tensor xc = x.to(at::kCUDA);
      const at::Tensor out = cuda_ops::log_softmax(xc, 1, false);
      expect_log_softmax_accurate(out, xc, 1);
      // Each special row alone gives the same bits as inside the batch.
      for (int64_t r = 0; r < 6; ++r)
        expect_bitwise(out.narrow(0, r, 1), cuda_ops::log_softmax(xc.narrow(0, r, 1), 1, false),
                       c10::str("special row ", r, " len ", len));
    }
}

TEST(CudaLogSoftmax, BatchSliceInvariance) {
  REQUIRE_GPU();
  uint64_t seed = 200;
  for (auto dt : kDtypes)
    for (int64_t len : {33, 1000, 32768, 50000}) {
      const int64_t R = len > 10000 ? 70 : 300;
      const at::Tensor x = rnd({R, len}, dt, seed++);
      const at::Tensor full = cuda_ops::log_softmax(x, -1, false);
      for (int64_t m : {1, 2, 3, 7, 8, 9, 31, 63, 64, 65, 69, 127, 128, 129, 255, 299}) {
        if (m > R) continue;
        const int64_t i = (R - m) / 2;
        expect_bitwise(full.narrow(0, i, m), cuda_ops::log_softmax(x.narrow(0, i, m), -1, false),
                       c10::str(dt, " len ", len, " rows ", i, "+", m));
      }
    }
}

// Misaligned rows (scalar loads), strided rows and the cached / re-read paths fold the same order.
TEST(CudaLogSoftmax, AlignmentAndStridesAgree) {
  REQUIRE_GPU();
  uint64_t seed = 300;
  for (auto dt : kDtypes)
    for (int64_t len : {100, 4097, 32768}) {
      const at::Tensor big = rnd({9, len + 3}, dt, seed++);
      const at::Tensor view = big.narrow(1, 1, len);  // offset by one element: misaligned, strided rows
      const at::Tensor copy = view.contiguous();
      expect_bitwise(cuda_ops::log_softmax(copy, 1, false), cuda_ops::log_softmax(view, 1, false),
                     c10::str(dt, " len ", len, " misaligned view"));
      const at::Tensor tr = copy.t().contiguous().t();  // column-major: moved through a copy
      expect_bitwise(cuda_ops::log_softmax(copy, 1, false), cuda_ops::log_softmax(tr, 1, false),
                     c10::str(dt, " len ", len, " column-major"));
    }
}

void expect_mean_accurate(const at::Tensor &out, const at::Tensor &x, at::IntArrayRef dims, bool keepdim) {
  const at::Tensor xd = x.cpu().to(at::kDouble);
  const at::Tensor ref = dims.empty() ? xd.mean() : xd.mean(dims, keepdim);
  const double len = static_cast<double>(x.numel()) / std::max<int64_t>(ref.numel(), 1);
  const at::Tensor mean_abs = dims.empty() ? xd.abs().mean() : xd.abs().mean(dims, keepdim);
  const at::Tensor tol =
      ref.abs() * unit_roundoff(out.scalar_type()) + mean_abs * ((len + 2) * std::ldexp(1.0, -23)) + 1e-30;
  expect_close(out.reshape(ref.sizes()), ref, tol, c10::str("mean ", x.scalar_type(), " ", x.sizes(), " dims ", dims));
}

TEST(CudaMean, SingleMultiAllDims) {
  REQUIRE_GPU();
  uint64_t seed = 400;
  for (auto dt : kDtypes) {
    const at::Tensor x = rnd({6, 10, 12, 5}, dt, seed++);
    const std::vector<std::vector<int64_t>> dim_sets = {{3}, {1}, {0}, {1, 2}, {-1, 1}, {0, 3}, {1, 2, 3}, {}};
    for (const auto &dims : dim_sets)
      for (bool keepdim : {false, true}) {
        const at::Tensor out = cuda_ops::mean(x, dims, keepdim, std::nullopt);
        EXPECT_EQ(out.scalar_type(), dt);
        if (!dims.empty()) {
          const at::Tensor ref_shape = at::empty_like(x.cpu()).mean(dims, keepdim);
          EXPECT_EQ(out.sizes(), ref_shape.sizes()) << "dims " << dims;
        }
        expect_mean_accurate(out, x, dims, keepdim);
      }
    // Output dtype float32 from a 16-bit input.
    const at::Tensor f = cuda_ops::mean(x, {1, 2}, false, at::kFloat);
    EXPECT_EQ(f.scalar_type(), at::kFloat);
    expect_mean_accurate(f, x, {1, 2}, false);
  }
  for (int64_t len : {1, 3, 1000, 32768, 100000}) {
    const at::Tensor x = rnd({4, len}, at::kFloat, seed++);
    expect_mean_accurate(cuda_ops::mean(x, {1}, false, std::nullopt), x, {1}, false);
  }
  EXPECT_THROW(cuda_ops::mean(rnd({3, 4}, at::kFloat, 1), {0, 0}, false, std::nullopt), c10::Error);
  EXPECT_THROW(cuda_ops::mean(rnd({3, 4}, at::kFloat, 1), {2}, false, std::nullopt), c10::Error);
}

TEST(CudaMean, IntegersPromoteToFloat32) {
  REQUIRE_GPU();
  auto gen = at::make_generator<at::CPUGeneratorImpl>(9);
  for (auto it : {at::kInt, at::kLong}) {
    const at::Tensor x = at::randint(-1000, 1000, {7, 33, 4}, gen, at::TensorOptions().dtype(it)).to(at::kCUDA);
    for (const std::vector<int64_t> &dims :
         {std::vector<int64_t>{1}, std::vector<int64_t>{1, 2}, std::vector<int64_t>{}}) {
      const at::Tensor out = cuda_ops::mean(x, dims, false, std::nullopt);
      EXPECT_EQ(out.scalar_type(), at::kFloat);
      expect_mean_accurate(out, x, dims, false);
    }
    const at::Tensor full = cuda_ops::mean(x, {1, 2}, false, std::nullopt);
    expect_bitwise(full.narrow(0, 2, 3), cuda_ops::mean(x.narrow(0, 2, 3), {1, 2}, false, std::nullopt),
                   "int mean slice");
  }
}

TEST(CudaMean, BatchSliceInvarianceAndLayouts) {
  REQUIRE_GPU();
  uint64_t seed = 500;
  for (auto dt : kDtypes) {
    for (int64_t len : {17, 1000, 32768}) {
      const int64_t R = 260;
      const at::Tensor x = rnd({R, len}, dt, seed++);
      const at::Tensor full = cuda_ops::mean(x, {1}, false, std::nullopt);
      for (int64_t m : {1, 2, 5, 63, 64, 65, 127, 128, 129, 255, 260}) {
        const int64_t i = (R - m) / 3;
        expect_bitwise(full.narrow(0, i, m), cuda_ops::mean(x.narrow(0, i, m), {1}, false, std::nullopt),
                       c10::str("mean ", dt, " len ", len, " rows ", i, "+", m));
      }
    }
    // Multi-dim: x[B, S, H] mean over (1, 2); slices of dim 0; a permuted layout of the same values.
    const at::Tensor x = rnd({40, 24, 30}, dt, seed++);
    const at::Tensor full = cuda_ops::mean(x, {1, 2}, false, std::nullopt);
    for (int64_t m : {1, 7, 39})
      expect_bitwise(full.narrow(0, 40 - m, m), cuda_ops::mean(x.narrow(0, 40 - m, m), {1, 2}, false, std::nullopt),
                     c10::str("multi-dim mean ", dt, " last ", m, " rows"));
    const at::Tensor perm = x.permute({2, 0, 1}).contiguous().permute({1, 2, 0});  // same values, other strides
    expect_bitwise(full, cuda_ops::mean(perm, {1, 2}, false, std::nullopt), "permuted layout");
    // Reducing a leading dim: the mean over dim 0 of x^T equals the mean over dim 1 of x.
    const at::Tensor x2 = rnd({50, 77}, dt, seed++);
    expect_bitwise(cuda_ops::mean(x2, {1}, false, std::nullopt), cuda_ops::mean(x2.t(), {0}, false, std::nullopt),
                   "dim 0 of the transpose");
    // Misaligned rows.
    const at::Tensor big = rnd({11, 1003}, dt, seed++);
    expect_bitwise(cuda_ops::mean(big.narrow(1, 1, 1000).contiguous(), {1}, false, std::nullopt),
                   cuda_ops::mean(big.narrow(1, 1, 1000), {1}, false, std::nullopt), "misaligned rows");
  }
}

TEST(CudaReductions, StreamsAgree) {
  REQUIRE_GPU();
  const at::Tensor x = rnd({64, 5000}, at::kBFloat16, 600);
  const at::Tensor lsm = cuda_ops::log_softmax(x, -1, false);
  const at::Tensor mn = cuda_ops::mean(x, {1}, false, std::nullopt);
  at::Tensor lsm2, mn2;
  {
    c10::cuda::CUDAStream side = c10::cuda::getStreamFromPool();
    c10::cuda::CUDAStreamGuard guard(side);
    lsm2 = cuda_ops::log_softmax(x, -1, false);
    mn2 = cuda_ops::mean(x, {1}, false, std::nullopt);
    side.synchronize();
  }
  expect_bitwise(lsm, lsm2, "log_softmax side stream");
  expect_bitwise(mn, mn2, "mean side stream");
}

TEST(CudaReductions, EmptyInputs) {
  REQUIRE_GPU();
  EXPECT_EQ(cuda_ops::log_softmax(rnd({0, 5}, at::kFloat, 1), 1, false).sizes(), at::IntArrayRef({0, 5}));
  EXPECT_EQ(cuda_ops::mean(rnd({0, 5}, at::kFloat, 1), {1}, false, std::nullopt).sizes(), at::IntArrayRef({0}));
  const at::Tensor e = cuda_ops::mean(rnd({3, 0}, at::kFloat, 1), {1}, false, std::nullopt);
  EXPECT_TRUE(e.cpu().isnan().all().item<bool>()) << "mean over an empty dim is NaN, as torch";
}

TEST(CudaReductions, ThreadsDependOnLengthOnly) {
  REQUIRE_GPU();
  using cuda_kernels::DType;
  EXPECT_EQ(cuda_kernels::row_reduce_threads(DType::f32, 1), 32);
  EXPECT_EQ(cuda_kernels::row_reduce_threads(DType::f32, 32768), 512);
  EXPECT_EQ(cuda_kernels::row_reduce_threads(DType::bf16, 32768), 512);
  EXPECT_EQ(cuda_kernels::row_reduce_threads(DType::f32, int64_t(1) << 40), 1024);
  EXPECT_EQ(cuda_kernels::log_softmax_threads(DType::f32, 32768), 1024);
  EXPECT_EQ(cuda_kernels::log_softmax_threads(DType::bf16, 32768), 512);
  EXPECT_EQ(cuda_kernels::log_softmax_threads(DType::f16, 100), 32);
}

}  // namespace
}  // namespace detfuzz
