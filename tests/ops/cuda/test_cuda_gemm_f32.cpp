// The float32 matmul's paths (gemm_f32.cu): every schedule and tile shape the launcher can pick
// must give the same bits on the same inputs (so that the automatic choice may change with M),
// stay within a derived float64 error bound, write every output element (NaN-poisoned before
// the run) and nothing outside C's M x N window.
#include "harness/diff.h"
#include "ops/cuda/cuda_check.h"
#include "ops/cuda/cuda_ops.h"
#include "ops/cuda/gemm.cuh"

#include <ATen/CPUGeneratorImpl.h>
#include <ATen/cuda/CUDAContext.h>
#include <gtest/gtest.h>
#include <torch/cuda.h>

#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

namespace detfuzz {
namespace {

#define REQUIRE_GPU() \
  if (!torch::cuda::is_available()) GTEST_SKIP() << "needs a CUDA GPU: none found"

namespace ck = cuda_kernels;

const std::vector<ck::F32Path> kPaths = {ck::F32Path::persistent_tall,     ck::F32Path::persistent_large,
                                         ck::F32Path::persistent_small,    ck::F32Path::cluster_large,
                                         ck::F32Path::cluster_small,       ck::F32Path::column_stream,
                                         ck::F32Path::split_large,         ck::F32Path::split_small,
                                         ck::F32Path::column_stream_split, ck::F32Path::automatic};

at::Tensor rnd(at::IntArrayRef shape, uint64_t seed) {
  auto gen = at::make_generator<at::CPUGeneratorImpl>(seed);
  return at::randn(shape, gen, at::TensorOptions().dtype(at::kFloat)).to(at::kCUDA);
}

int sms() {
  int n = 0;
  DETFUZZ_CUDA_CHECK(cudaDeviceGetAttribute(&n, cudaDevAttrMultiProcessorCount, 0));
  return n;
}

struct Problem {
  int64_t batch, M, N, K;
  bool b_kn, bias;
  float alpha, beta;
};

std::string describe(const Problem &q) {
  return c10::str("batch ", q.batch, " M ", q.M, " N ", q.N, " K ", q.K, q.b_kn ? " B[K,N]" : " B[N,K]",
                  q.bias ? " bias" : "", " alpha ", q.alpha, " beta ", q.beta);
}

struct Operands {
  at::Tensor a, b, bias;  // a [batch, M, K]; b [batch, K, N] or [batch, N, K]; bias [batch, M, N]
};

Operands operands(const Problem &q, uint64_t seed) {
  Operands o;
  o.a = rnd({q.batch, q.M, q.K}, seed);
  o.b = q.b_kn ? rnd({q.batch, q.K, q.N}, seed + 1) : rnd({q.batch, q.N, q.K}, seed + 1);
  if (q.bias) o.bias = rnd({q.batch, q.M, q.N}, seed + 2);
  return o;
}

// C is [batch, M, ldc] with ldc = N + 5 (odd: no vector stores), every byte 0xFF (NaN) before the run.
constexpr int64_t kPadC = 5;

at::Tensor run_path(const Problem &q, const Operands &o, ck::F32Path path, int num_ctas) {
  const int64_t ldc = q.N + kPadC;
  at::Tensor c = at::empty({q.batch, q.M, ldc}, at::TensorOptions().dtype(at::kFloat).device(at::kCUDA));
  DETFUZZ_CUDA_CHECK(cudaMemset(c.data_ptr(), 0xFF, c.nbytes()));
  ck::GemmParams p;
  p.dtype = ck::DType::f32;
  p.a = o.a.data_ptr();
  p.lda = q.K;
  p.batch_stride_a = q.M * q.K;
  p.b = o.b.data_ptr();
  p.b_kn = q.b_kn;
  p.ldb = q.b_kn ? q.N : q.K;
  p.batch_stride_b = q.K * q.N;
  p.c = c.data_ptr();
  p.ldc = ldc;
  p.batch_stride_c = q.M * ldc;
  if (q.bias) {
    p.bias = o.bias.data_ptr();
    p.bias_stride_m = q.N;
    p.bias_stride_n = 1;
    p.batch_stride_bias = q.M * q.N;
  }
  p.alpha = q.alpha;
  p.beta = q.beta;
  p.M = q.M;
  p.N = q.N;
  p.K = q.K;
  p.batch = q.batch;
  p.num_ctas = num_ctas;
  EXPECT_EQ(ck::gemm_check(p), "") << describe(q);
  // The split paths' workspace, poisoned like C: every partial they read must have been written.
  p.f32_path = path;
  at::Tensor workspace;
  if (const int64_t bytes = ck::gemm_workspace_bytes(p, 0)) {
    workspace = at::empty({bytes}, at::TensorOptions().dtype(at::kByte).device(at::kCUDA));
    DETFUZZ_CUDA_CHECK(cudaMemset(workspace.data_ptr(), 0xFF, bytes));
    p.workspace = workspace.data_ptr();
    p.workspace_bytes = bytes;
  }
  ck::launch_gemm_f32_path(p, path, at::cuda::getCurrentCUDAStream().stream());
  DETFUZZ_CUDA_CHECK(cudaDeviceSynchronize());
  // Columns past N must still hold the poison: the kernel writes nothing outside M x N.
  const at::Tensor pad = c.narrow(2, q.N, kPadC).cpu();
  EXPECT_TRUE(pad.isnan().all().item<bool>()) << gemm_f32_path_name(path) << " wrote past N, " << describe(q);
  return c.narrow(2, 0, q.N);
}

// |out - ref| <= gamma_n (|alpha| sum_k |a||b| + |beta| |bias|) + tiny, n = the longest chunk + the
// chunk adds + the epilogue's three roundings (gamma_n = n u / (1 - n u), u = 2^-24): the standard
// bound for recursive summation of the chunk's FMA chain and the ordered sum of the partials. TF32
// (about 2^-11 per product) exceeds it by orders of magnitude.
void expect_within_bound(const at::Tensor &out, const Problem &q, const Operands &o, const std::string &what) {
  const at::Tensor ad = o.a.cpu().to(at::kDouble);
  const at::Tensor bd = q.b_kn ? o.b.cpu().to(at::kDouble) : o.b.cpu().to(at::kDouble).transpose(1, 2);
  at::Tensor ref = at::matmul(ad, bd) * static_cast<double>(q.alpha);
  at::Tensor mag = at::matmul(ad.abs(), bd.abs()) * std::abs(static_cast<double>(q.alpha));
  if (q.bias) {
    const at::Tensor bias = o.bias.cpu().to(at::kDouble);
    ref = ref + bias * static_cast<double>(q.beta);
    mag = mag + bias.abs() * std::abs(static_cast<double>(q.beta));
  }
  const auto [chunk, count] = ck::gemm_k_chunks(q.K);
  const double n = static_cast<double>(std::min(chunk, q.K) + count + 3);
  const double u = std::ldexp(1.0, -24);
  const double gamma = n * u / (1 - n * u);
  const at::Tensor o64 = out.cpu().to(at::kDouble);
  ASSERT_FALSE(o64.isnan().any().item<bool>()) << what << ": unwritten (NaN-poisoned) outputs remain";
  const at::Tensor excess = (o64 - ref).abs() - (mag * gamma + 1e-35);
  const double worst = excess.max().item<double>();
  EXPECT_LE(worst, 0.0) << what << ": error over the bound by " << worst;
}

void expect_bitwise(const at::Tensor &expected, const at::Tensor &actual, const std::string &what) {
  const DiffStats d = bitwise_diff(expected.cpu(), actual.cpu());
  EXPECT_TRUE(d.equal()) << what << ": " << d.summary();
}

// Every available path, on the same inputs: the same bits, within the bound, every element
// written. Shapes cover partial tiles in M and N, each kernel of the column stream (1, 2, 3-4,
// 5-8, 9-16, 17-32 rows and row tiles of 32), K below one chunk, K = 4, K not a multiple of the K
// step (16 or 32; 4, 8 or 12 k in the last step), K with a short last chunk, one to eight chunks,
// batches and the bias.
TEST(GemmF32Paths, EveryPathGivesTheSameBits) {
  REQUIRE_GPU();
  const int n_sms = sms();
  std::vector<Problem> problems;
  for (int64_t K : {4, 20, 28, 64, 100, 512, 516, 1000, 1036, 1540, 2048, 4100})
    for (const auto &mn : std::vector<std::pair<int64_t, int64_t>>{
             {1, 4}, {2, 36}, {3, 36}, {12, 200}, {17, 128}, {32, 260}, {33, 132}, {130, 200}, {257, 136}})
      problems.push_back({1, mn.first, mn.second, K, (K + mn.first) % 2 == 0, false, 1.f, 1.f});
  problems.push_back({3, 40, 136, 1200, true, true, 0.5f, 2.f});
  problems.push_back({3, 5, 136, 1200, false, true, -1.25f, 0.75f});
  problems.push_back({2, 200, 72, 4096, true, true, 1.f, 1.f});
  problems.push_back({2, 7, 300, 6000, false, false, 1.f, 1.f});
  problems.push_back({1, 129, 4100, 8192, true, false, 1.f, 1.f});
  uint64_t seed = 1;
  int compared = 0;
  for (const Problem &q : problems) {
    const Operands o = operands(q, seed);
    seed += 3;
    at::Tensor first;
    std::string first_name;
    for (ck::F32Path path : kPaths) {
      if (!ck::gemm_f32_path_available(path, 0)) continue;
      for (int ctas : {n_sms, 3}) {
        if (ctas == 3 && (path == ck::F32Path::cluster_large || path == ck::F32Path::cluster_small ||
                          path == ck::F32Path::column_stream))
          continue;
        const std::string what = c10::str(ck::gemm_f32_path_name(path), " ctas ", ctas, ", ", describe(q));
        const at::Tensor c = run_path(q, o, path, ctas);
        if (!first.defined()) {
          first = c;
          first_name = ck::gemm_f32_path_name(path);
          expect_within_bound(c, q, o, what);
        } else {
          expect_bitwise(first, c, what + " vs " + first_name);
          ++compared;
        }
      }
    }
  }
  EXPECT_GT(compared, 0);
}

// The automatic choice crosses every path as M grows (small cluster, large cluster, persistent on
// sm_90); rows of the big product equal the product of those rows alone, bit for bit.
TEST(GemmF32Paths, AutomaticPathChangesKeepBatchSliceInvariance) {
  REQUIRE_GPU();
  const int64_t K = 2048, N = 4096, Mmax = 2100;
  const at::Tensor a = rnd({Mmax, K}, 11), b = rnd({K, N}, 12), w = rnd({N, K}, 13);
  const at::Tensor full_b = cuda_ops::mm(a, b), full_w = cuda_ops::mm(a, w.t());
  ck::GemmParams p;
  p.N = N;
  p.K = K;
  p.batch = 1;
  p.num_ctas = sms();
  auto path_at = [&](int64_t m) {
    p.M = m;
    return ck::gemm_f32_auto_path(p, 0, true);
  };
  std::vector<int64_t> ms = {1, 2, 31, 32, 33, 100, 128, 129, 511, 512, 513, 700, 1024, 1025};
  for (int64_t m = 2; m <= Mmax; ++m)  // and both sides of every change of the automatic path
    if (path_at(m) != path_at(m - 1)) {
      ms.push_back(m - 1);
      ms.push_back(m);
    }
  std::vector<std::string> seen;
  for (int64_t m : ms) {
    seen.push_back(ck::gemm_f32_path_name(path_at(m)));
    for (int64_t i : {int64_t(0), (Mmax - m) / 2, Mmax - m}) {
      const std::string what = c10::str("rows [", i, ",", i + m, ") via ", seen.back());
      expect_bitwise(full_b.narrow(0, i, m), cuda_ops::mm(a.narrow(0, i, m), b), what + " B[K,N]");
      expect_bitwise(full_w.narrow(0, i, m), cuda_ops::mm(a.narrow(0, i, m), w.t()), what + " B=W^T");
    }
  }
  // On sm_90 the sweep must have used more than one path, or it proves nothing about path changes.
  if (ck::gemm_f32_path_available(ck::F32Path::cluster_small, 0)) {
    std::sort(seen.begin(), seen.end());
    EXPECT_GE(std::unique(seen.begin(), seen.end()) - seen.begin(), 3);
  }
}

// The split paths leave partials in the caller's workspace: without one (or with too small a one)
// the launcher says so instead of writing through a null or short pointer, and the automatic
// choice, given none, takes a path that needs none.
TEST(GemmF32Paths, SplitPathsNeedTheirWorkspace) {
  REQUIRE_GPU();
  const Problem q{1, 128, 4096, 4096, true, false, 1.f, 1.f};
  const Operands o = operands(q, 5);
  at::Tensor c = at::empty({q.M, q.N}, at::TensorOptions().dtype(at::kFloat).device(at::kCUDA));
  ck::GemmParams p;
  p.dtype = ck::DType::f32;
  p.a = o.a.data_ptr();
  p.lda = q.K;
  p.b = o.b.data_ptr();
  p.ldb = q.N;
  p.c = c.data_ptr();
  p.ldc = q.N;
  p.M = q.M;
  p.N = q.N;
  p.K = q.K;
  p.num_ctas = sms();
  const auto stream = at::cuda::getCurrentCUDAStream().stream();
  for (ck::F32Path path : {ck::F32Path::split_large, ck::F32Path::split_small, ck::F32Path::column_stream_split}) {
    if (!ck::gemm_f32_path_available(path, 0)) continue;
    p.f32_path = path;
    const int64_t bytes = ck::gemm_workspace_bytes(p, 0);
    EXPECT_EQ(bytes, ck::gemm_k_chunks(q.K).second * q.M * q.N * 4) << ck::gemm_f32_path_name(path);
    p.workspace = nullptr;
    p.workspace_bytes = 0;
    EXPECT_THROW(ck::launch_gemm_f32_path(p, path, stream), std::runtime_error) << ck::gemm_f32_path_name(path);
    at::Tensor short_ws = at::empty({bytes - 16}, at::TensorOptions().dtype(at::kByte).device(at::kCUDA));
    p.workspace = short_ws.data_ptr();
    p.workspace_bytes = bytes - 16;
    EXPECT_THROW(ck::launch_gemm_f32_path(p, path, stream), std::runtime_error) << ck::gemm_f32_path_name(path);
  }
  p.f32_path = ck::F32Path::automatic;
  p.workspace = nullptr;
  p.workspace_bytes = 0;
  const ck::F32Path without = ck::gemm_f32_auto_path(p, 0, false);
  EXPECT_NE(without, ck::F32Path::split_large);
  EXPECT_NE(without, ck::F32Path::split_small);
  EXPECT_NE(without, ck::F32Path::column_stream_split);
  ck::launch_gemm_f32_path(p, ck::F32Path::automatic, stream);
  DETFUZZ_CUDA_CHECK(cudaDeviceSynchronize());
  expect_bitwise(c, cuda_ops::mm(o.a[0], o.b[0]), "automatic without a workspace vs through cuda_ops");
}

// A chunk partial that is -0 (a product below half the smallest subnormal) stays -0 on every
// path: zero padding of the last K step is never multiplied in.
TEST(GemmF32Paths, NegativeZeroPartialsAgree) {
  REQUIRE_GPU();
  for (int64_t K : {4, 20, 1000}) {
    const Problem q{1, 9, 8, K, true, false, 1.f, 1.f};
    Operands o;
    o.a = at::full({1, q.M, K}, -1e-30f, at::TensorOptions().device(at::kCUDA));
    o.b = at::full({1, K, q.N}, 1e-30f, at::TensorOptions().device(at::kCUDA));
    for (ck::F32Path path : kPaths) {
      if (!ck::gemm_f32_path_available(path, 0)) continue;
      const at::Tensor c = run_path(q, o, path, sms()).cpu();
      EXPECT_TRUE(c.eq(0).all().item<bool>() && c.signbit().all().item<bool>())
          << ck::gemm_f32_path_name(path) << " K " << K << ": expected -0 everywhere";
    }
  }
}

}  // namespace
}  // namespace detfuzz
