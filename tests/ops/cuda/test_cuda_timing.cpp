// Early speed numbers (not a gate): invariant ops vs at::mm (cuBLAS) and torch's reductions in
// the same process, CUDA-event medians. Disabled by default; run with
//   test_ops_cuda --gtest_also_run_disabled_tests --gtest_filter='*DISABLED_*'
#include "ops/cuda/cuda_ops.h"

#include <ATen/Context.h>
#include <ATen/cuda/CUDAContext.h>
#include <ATen/cuda/CUDAEvent.h>
#include <gtest/gtest.h>
#include <torch/cuda.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <functional>
#include <vector>

namespace detfuzz {
namespace {

// Median milliseconds of fn over reps after warm-ups (events on the current stream).
double median_ms(const std::function<void()> &fn, int warm = 2, int reps = 9) {
  for (int i = 0; i < warm; ++i) fn();
  std::vector<double> t;
  auto stream = at::cuda::getCurrentCUDAStream();
  for (int i = 0; i < reps; ++i) {
    at::cuda::CUDAEvent start(cudaEventDefault), stop(cudaEventDefault);
    start.record(stream);
    fn();
    stop.record(stream);
    stop.synchronize();
    t.push_back(start.elapsed_time(stop));
  }
  std::sort(t.begin(), t.end());
  return t[t.size() / 2];
}

TEST(CudaTiming, DISABLED_MatmulVsCublas) {
  if (!torch::cuda::is_available()) GTEST_SKIP() << "needs a CUDA GPU: none found";
  at::globalContext().setAllowTF32CuBLAS(false);
  const auto props = at::cuda::getCurrentDeviceProperties();
  std::printf("device: %s, %d SMs\n", props->name, props->multiProcessorCount);
  const std::vector<std::pair<int64_t, int64_t>> nk = {{4096, 4096}, {14336, 4096}, {4096, 14336},
                                                       {1024, 8192}, {6144, 4096},  {128256, 4096}};
  const std::vector<int64_t> ms = {1, 8, 32, 128, 512, 2048, 8192};
  for (auto dt : {at::kBFloat16, at::kHalf, at::kFloat}) {
    double log_sum = 0;
    int count = 0;
    std::printf("%-9s %7s %6s %5s %11s %11s %7s %9s\n", "dtype", "N", "K", "M", "invariant_us", "at::mm_us", "ratio",
                "inv_TFLOPs");
    for (const auto &[N, K] : nk) {
      at::manual_seed(1);
      const auto opts = at::TensorOptions().dtype(dt).device(at::kCUDA);
      const at::Tensor w = at::randn({N, K}, opts);  // Linear weight; B = w^T
      const at::Tensor a_all = at::randn({ms.back(), K}, opts);
      for (int64_t M : ms) {
        const at::Tensor a = a_all.narrow(0, 0, M);
        const int reps = (dt == at::kFloat && M * N >= (int64_t(1) << 26)) ? 5 : 9;
        const double t_inv = median_ms([&] { cuda_ops::mm(a, w.t()); }, 2, reps);
        const double t_ref = median_ms([&] { at::mm(a, w.t()); }, 2, reps);
        const double ratio = t_ref / t_inv;
        log_sum += std::log(ratio);
        ++count;
        std::printf("%-9s %7ld %6ld %5ld %11.1f %11.1f %7.3f %9.1f\n", c10::toString(dt), static_cast<long>(N),
                    static_cast<long>(K), static_cast<long>(M), t_inv * 1e3, t_ref * 1e3, ratio,
                    2.0 * M * N * K / (t_inv * 1e-3) / 1e12);
      }
    }
    std::printf("GEOMEAN %s invariant/cuBLAS speed = %.3f over %d cases\n\n", c10::toString(dt),
                std::exp(log_sum / count), count);
    std::fflush(stdout);
  }
}

TEST(CudaTiming, DISABLED_ReductionsVsTorch) {
  if (!torch::cuda::is_available()) GTEST_SKIP() << "needs a CUDA GPU: none found";
  for (auto dt : {at::kFloat, at::kBFloat16}) {
    at::manual_seed(2);
    const at::Tensor x = at::randn({1024, 32768}, at::TensorOptions().dtype(dt).device(at::kCUDA));
    const double bytes = static_cast<double>(x.nbytes());
    const double l_inv = median_ms([&] { cuda_ops::log_softmax(x, -1, false); }, 3, 21);
    const double l_ref = median_ms([&] { at::_log_softmax(x, -1, false); }, 3, 21);
    const double m_inv = median_ms([&] { cuda_ops::mean(x, {1}, false, std::nullopt); }, 3, 21);
    const double m_ref = median_ms([&] { at::mean(x, {1}, false); }, 3, 21);
    std::printf("log_softmax %s 1024x32768: invariant %.1f us (%.0f GB/s r+w), torch %.1f us, ratio %.3f\n",
                c10::toString(dt), l_inv * 1e3, 2 * bytes / (l_inv * 1e-3) / 1e9, l_ref * 1e3, l_ref / l_inv);
    std::printf("mean        %s 1024x32768: invariant %.1f us (%.0f GB/s), torch %.1f us, ratio %.3f\n",
                c10::toString(dt), m_inv * 1e3, bytes / (m_inv * 1e-3) / 1e9, m_ref * 1e3, m_ref / m_inv);
  }
  std::fflush(stdout);
}

}  // namespace
}  // namespace detfuzz

namespace detfuzz {
namespace {

// One large bf16 product for a profiler to look at (ncu --kernel-name regex:gemm_tc --launch-skip 1).
TEST(CudaTiming, DISABLED_ProfileTarget) {
  if (!torch::cuda::is_available()) GTEST_SKIP() << "needs a CUDA GPU: none found";
  at::manual_seed(3);
  const auto opts = at::TensorOptions().dtype(at::kBFloat16).device(at::kCUDA);
  const at::Tensor a = at::randn({8192, 4096}, opts), w = at::randn({4096, 4096}, opts);
  for (int i = 0; i < 2; ++i) cuda_ops::mm(a, w.t());
  cudaDeviceSynchronize();
}

}  // namespace
}  // namespace detfuzz
