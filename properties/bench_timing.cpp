#include "properties/bench_timing.h"

#include <cstdio>

#ifdef DETFUZZ_WITH_CUDA
#include <ATen/cuda/CUDAContext.h>
#include <ATen/cuda/CUDAGraph.h>
#include <c10/cuda/CUDAException.h>
#include <c10/cuda/CUDAGuard.h>

#include <algorithm>
#include <vector>
#endif

namespace detfuzz {

std::string fmt(double v, const char *f) {
  char buf[48];
  std::snprintf(buf, sizeof buf, f, v);
  return buf;
}

#ifdef DETFUZZ_WITH_CUDA
BenchClock::BenchClock() : stream(at::cuda::getCurrentCUDAStream()) {
  C10_CUDA_CHECK(cudaEventCreate(&start));
  C10_CUDA_CHECK(cudaEventCreate(&stop));
}

BenchClock::~BenchClock() {
  cudaEventDestroy(start);  // (a destructor reports nothing; the events go with the context anyway)
  cudaEventDestroy(stop);
}

double time_one_call_us(const std::function<void()> &fn, const BenchClock &clock) {
  C10_CUDA_CHECK(cudaEventRecord(clock.start, clock.stream));
  fn();
  C10_CUDA_CHECK(cudaEventRecord(clock.stop, clock.stream));
  C10_CUDA_CHECK(cudaEventSynchronize(clock.stop));
  float ms = 0;
  C10_CUDA_CHECK(cudaEventElapsedTime(&ms, clock.start, clock.stop));
  return ms * 1e3;
}

double median_us(const std::function<void()> &fn, int reps, const BenchClock &clock) {
  for (int w = 0; w < 3; ++w) fn();
  std::vector<double> t;
  for (int r = 0; r < reps; ++r) t.push_back(time_one_call_us(fn, clock));
  std::sort(t.begin(), t.end());
  return t[t.size() / 2];
}

std::vector<double> interleaved_medians_us(const std::vector<std::function<void()>> &fns, int reps,
                                           const BenchClock &clock) {
  for (int w = 0; w < 3; ++w)
    for (const auto &fn : fns) fn();
  std::vector<std::vector<double>> t(fns.size());
  for (int r = 0; r < reps; ++r)
    for (size_t i = 0; i < fns.size(); ++i) t[i].push_back(time_one_call_us(fns[i], clock));
  std::vector<double> medians;
  for (auto &times : t) {
    std::sort(times.begin(), times.end());
    medians.push_back(times[times.size() / 2]);
  }
  return medians;
}

double median_graph_us(const std::function<void()> &fn, int reps, const BenchClock &clock) {
  fn();  // first use (kernel attributes, allocator) outside the capture
  C10_CUDA_CHECK(cudaStreamSynchronize(clock.stream));
  at::cuda::CUDAGraph graph;
  {
    c10::cuda::CUDAStreamGuard guard(c10::cuda::getStreamFromPool());
    graph.capture_begin();
    fn();
    graph.capture_end();
  }
  return median_us([&] { graph.replay(); }, reps, clock);
}

bool same_bits(const at::Tensor &a, const at::Tensor &b) {
  if (!a.sizes().equals(b.sizes()) || a.scalar_type() != b.scalar_type()) return false;
  const auto as_int = [](const at::Tensor &t) {
    const auto width = t.element_size();
    return t.contiguous().view(width == 2 ? at::kShort : width == 4 ? at::kInt : at::kLong);
  };
  return at::equal(as_int(a), as_int(b));
}
#endif

}  // namespace detfuzz
