// Launcher-level tests of the raw-pointer kernels: outputs poisoned before the run must be
// fully written, parameter checks, and CUDA errors that surface with their call site.
#include "harness/diff.h"
#include "ops/cuda/cuda_check.h"
#include "ops/cuda/cuda_ops.h"
#include "ops/cuda/gemm.cuh"
#include "ops/cuda/row_reduce.cuh"

#include <ATen/CPUGeneratorImpl.h>
#include <ATen/cuda/CUDAContext.h>
#include <gtest/gtest.h>
#include <torch/cuda.h>

#include <string>

namespace detfuzz {
namespace {

#define REQUIRE_GPU() \
  if (!torch::cuda::is_available()) GTEST_SKIP() << "needs a CUDA GPU: none found"

namespace ck = cuda_kernels;

at::Tensor rnd(at::IntArrayRef shape, at::ScalarType dtype, uint64_t seed) {
  auto gen = at::make_generator<at::CPUGeneratorImpl>(seed);
  return at::randn(shape, gen, at::TensorOptions().dtype(at::kFloat)).to(dtype).to(at::kCUDA);
}

ck::DType kdt(at::ScalarType t) {
  return t == at::kFloat ? ck::DType::f32 : t == at::kHalf ? ck::DType::f16 : ck::DType::bf16;
}

// Every byte 0xFF: a NaN in float32, float16 and bfloat16 alike.
at::Tensor poisoned(at::IntArrayRef shape, at::ScalarType dtype) {
  at::Tensor t = at::empty(shape, at::TensorOptions().dtype(dtype).device(at::kCUDA));
  cudaMemset(t.data_ptr(), 0xFF, t.nbytes());
  return t;
}

int sms() {
  int n = 0;
  DETFUZZ_CUDA_CHECK(cudaDeviceGetAttribute(&n, cudaDevAttrMultiProcessorCount, 0));
  return n;
}

void expect_bitwise(const at::Tensor &expected, const at::Tensor &actual, const std::string &what) {
  const DiffStats d = bitwise_diff(expected.cpu(), actual.cpu());
  EXPECT_TRUE(d.equal()) << what << ": " << d.summary();
}

// The launcher's parameters for C = A B, A [batch,] M x K and C [batch,] M x N contiguous, B a
// contiguous K x N (kn) or the transpose of a contiguous N x K; no bias. ctas 0: the SM count.
ck::GemmParams gemm_params(const at::Tensor &a, const at::Tensor &b, at::Tensor &c, bool kn, int ctas) {
  const int64_t M = a.size(-2), K = a.size(-1), N = c.size(-1);
  ck::GemmParams p;
  p.dtype = kdt(a.scalar_type());
  p.a = a.data_ptr();
  p.lda = K;
  p.batch_stride_a = M * K;
  p.b = b.data_ptr();
  p.b_kn = kn;
  p.ldb = kn ? N : K;
  p.batch_stride_b = K * N;
  p.c = c.data_ptr();
  p.ldc = N;
  p.batch_stride_c = M * N;
  p.M = M;
  p.N = N;
  p.K = K;
  p.batch = a.dim() == 3 ? a.size(0) : 1;
  p.num_ctas = ctas == 0 ? sms() : ctas;
  return p;
}

TEST(CudaLaunchers, GemmWritesEveryElementOfAPoisonedOutput) {
  REQUIRE_GPU();
  uint64_t seed = 1;
  for (auto dt : {at::kBFloat16, at::kHalf, at::kFloat})
    for (bool kn : {true, false})
      for (int ctas : {1, 7, 0}) {  // 0: the SM count; fewer CTAs walk more tiles each
        const int64_t M = 261, K = 200, N = 136, batch = 2;
        const at::Tensor a = rnd({batch, M, K}, dt, seed++);
        const at::Tensor b = kn ? rnd({batch, K, N}, dt, seed++) : rnd({batch, N, K}, dt, seed++).transpose(1, 2);
        const at::Tensor bias = rnd({N}, dt, seed++);
        at::Tensor c = poisoned({batch, M, N}, dt);
        ck::GemmParams p = gemm_params(a, b, c, kn, ctas);
        p.bias = bias.data_ptr();
        p.bias_stride_n = 1;
        p.beta = 1.f;
        ASSERT_EQ(ck::gemm_check(p), "");
        ck::launch_gemm(p, at::cuda::getCurrentCUDAStream().stream());
        EXPECT_FALSE(c.isnan().any().item<bool>()) << "unwritten (NaN-poisoned) outputs remain, " << dt;
        // Same bits as the op (bias added per row), whatever the CTA count.
        for (int64_t i = 0; i < batch; ++i)
          expect_bitwise(cuda_ops::addmm(bias, a[i], b[i], 1.0, 1.0), c[i], c10::str("launcher vs op, ctas ", ctas));
      }
}

// The persistent Hopper paths, forced, with fewer CTA slots than tiles: each CTA (or pair of CTAs)
// walks several tiles, and the bits are the automatic path's with every slot.
TEST(CudaLaunchers, HopperPersistentPathsGiveTheSameBitsWithFewerCtas) {
  REQUIRE_GPU();
  using ck::GemmPath;
  const GemmPath paths[] = {GemmPath::sm90_persistent_64x64,   GemmPath::sm90_persistent_64,
                            GemmPath::sm90_persistent,         GemmPath::sm90_persistent_64x256,
                            GemmPath::sm90_persistent_128x192, GemmPath::sm90_paired_128x192,
                            GemmPath::sm90_persistent_128x256};
  if (!ck::gemm_path_available(GemmPath::sm90_paired_128x192, 0)) GTEST_SKIP() << "needs an sm_90 GPU";
  uint64_t seed = 70;
  for (auto dt : {at::kBFloat16, at::kHalf}) {
    const int64_t M = 700, K = 1104, N = 400;  // 6 x 3 tiles of 128 x 192: 3 x 3 pairs
    const at::Tensor a = rnd({M, K}, dt, seed++), b = rnd({K, N}, dt, seed++);
    const at::Tensor expected = cuda_ops::mm(a, b);
    for (GemmPath path : paths)
      for (int ctas : {1, 2, 5}) {
        at::Tensor c = poisoned({M, N}, dt);
        ck::GemmParams p = gemm_params(a, b, c, true, ctas);
        p.path = path;
        ASSERT_EQ(ck::gemm_check(p), "");
        ck::launch_gemm(p, at::cuda::getCurrentCUDAStream().stream());
        expect_bitwise(expected, c, c10::str(ck::gemm_path_name(path), " with ", ctas, " CTA slots, ", dt));
      }
  }
}

TEST(CudaLaunchers, RowReductionsWriteEveryElementOfAPoisonedOutput) {
  REQUIRE_GPU();
  for (auto dt : {at::kFloat, at::kHalf, at::kBFloat16})
    for (int64_t len : {3, 1000, 32768, 45000}) {
      const int64_t rows = 37;
      const at::Tensor x = rnd({rows, len}, dt, len);
      at::Tensor y = poisoned({rows, len}, dt);
      ck::RowReduceParams p;
      p.in_dtype = kdt(dt);
      p.out_dtype = kdt(dt);
      p.x = x.data_ptr();
      p.rows = rows;
      p.len = len;
      p.x_row_stride = len;
      p.y = y.data_ptr();
      p.y_row_stride = len;
      ck::launch_log_softmax(p, at::cuda::getCurrentCUDAStream().stream());
      EXPECT_FALSE(y.isnan().any().item<bool>()) << "log_softmax left poisoned outputs, len " << len;
      at::Tensor m = poisoned({rows}, dt);
      p.y = m.data_ptr();
      ck::launch_mean(p, at::cuda::getCurrentCUDAStream().stream());
      EXPECT_FALSE(m.isnan().any().item<bool>()) << "mean left poisoned outputs, len " << len;
    }
}

TEST(CudaLaunchers, GemmRejectsBadParams) {
  REQUIRE_GPU();
  ck::GemmParams p;
  p.dtype = ck::DType::bf16;
  p.M = p.N = 8;
  p.K = 12;  // not a multiple of 8
  p.lda = p.ldb = p.ldc = 16;
  p.num_ctas = 1;
  EXPECT_NE(ck::gemm_check(p).find("K = 12"), std::string::npos) << ck::gemm_check(p);
  EXPECT_THROW(ck::launch_gemm(p, nullptr), std::invalid_argument);
  p.K = 16;
  p.num_ctas = 0;
  EXPECT_NE(ck::gemm_check(p).find("num_ctas"), std::string::npos);
}

// A CUDA error (here an invalid launch: a grid of 0 CTAs, which CUDA 13 reports as
// cudaErrorInvalidValue) surfaces as an exception naming the kernel file and line, the failing
// call and CUDA's error name.
TEST(CudaLaunchers, CudaErrorSurfacesWithItsCallSite) {
  REQUIRE_GPU();
  const at::Tensor a = rnd({16, 16}, at::kBFloat16, 1), b = rnd({16, 16}, at::kBFloat16, 2);
  at::Tensor c = at::empty({16, 16}, a.options());
  ck::GemmParams p;
  p.dtype = ck::DType::bf16;
  p.a = a.data_ptr();
  p.b = b.data_ptr();
  p.c = c.data_ptr();
  p.lda = p.ldb = p.ldc = 16;
  p.M = p.N = p.K = 16;
  p.num_ctas = 0;  // bypass launch_gemm's check: the internal launcher hands it to CUDA
  try {
    ck::launch_gemm_tc(p, at::cuda::getCurrentCUDAStream().stream());
    FAIL() << "a launch of 0 CTAs did not throw";
  } catch (const std::runtime_error &e) {
    const std::string what = e.what();
    EXPECT_NE(what.find("gemm_tc.cu:"), std::string::npos) << what;
    EXPECT_NE(what.find("kernel launch"), std::string::npos) << what;
    EXPECT_TRUE(what.find("cudaErrorInvalidValue") != std::string::npos ||
                what.find("cudaErrorInvalidConfiguration") != std::string::npos)
        << what;
  }
  p.dtype = ck::DType::f32;
  EXPECT_THROW(ck::launch_gemm_f32_path(p, ck::F32Path::automatic, at::cuda::getCurrentCUDAStream().stream()),
               std::runtime_error);
  // The error was not sticky: the device still works.
  EXPECT_NO_THROW(cuda_ops::mm(a, b));
  EXPECT_NO_THROW(DETFUZZ_CUDA_CHECK(cudaDeviceSynchronize()));
  // A failing runtime call names this file and the call text.
  try {
    DETFUZZ_CUDA_CHECK(cudaSetDevice(1 << 20));
    FAIL() << "cudaSetDevice(1<<20) did not throw";
  } catch (const std::runtime_error &e) {
    const std::string what = e.what();
    EXPECT_NE(what.find("test_cuda_launchers.cpp:"), std::string::npos) << what;
    EXPECT_NE(what.find("cudaSetDevice(1 << 20)"), std::string::npos) << what;
    EXPECT_NE(what.find("cudaErrorInvalidDevice"), std::string::npos) << what;
  }
  // cudaSetDevice's failure stays in the runtime's last-error slot: clear it so that the next
  // launch check does not report it.
  EXPECT_EQ(cudaGetLastError(), cudaErrorInvalidDevice);
  EXPECT_EQ(cudaGetLastError(), cudaSuccess);
}

}  // namespace
}  // namespace detfuzz
