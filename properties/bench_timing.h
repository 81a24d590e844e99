// Timing and bit checks that `detfuzz bench` and the families' own benches share: medians of CUDA
// event times (eager, or replayed from a CUDA graph as engines replay their steps) and bitwise
// equality on the device. CUDA builds only.
#pragma once

#include "ops/registry.h"

#include <functional>
#include <string>
#include <vector>

#ifdef DETFUZZ_WITH_CUDA
#include <cuda_runtime_api.h>
#endif

namespace detfuzz {

// printf-style formatting of one number ("%.3f" by default).
std::string fmt(double v, const char *f = "%.3f");

#ifdef DETFUZZ_WITH_CUDA
// CUDA events and the stream they time, made once for a bench.
struct BenchClock {
  cudaEvent_t start = nullptr, stop = nullptr;
  cudaStream_t stream = nullptr;  // the current stream when made
  BenchClock();
  ~BenchClock();
  BenchClock(const BenchClock &) = delete;
  BenchClock &operator=(const BenchClock &) = delete;
};

// Device time of one call of fn, in microseconds.
double time_one_call_us(const std::function<void()> &fn, const BenchClock &clock);
// Median of `reps` device times of fn (after 3 warm-up calls), in microseconds.
double median_us(const std::function<void()> &fn, int reps, const BenchClock &clock);
// Medians of `reps` device times of each of fns (after 3 warm-up calls each), the calls taken in
// turn, repetition by repetition, so that a drift of the GPU's clocks reaches every fn alike
// rather than their ratios.
std::vector<double> interleaved_medians_us(const std::vector<std::function<void()>> &fns, int reps,
                                           const BenchClock &clock);
// Median device time of one call of fn replayed from a CUDA graph: the events see the kernels
// only, not the host's launch cost.
double median_graph_us(const std::function<void()> &fn, int reps, const BenchClock &clock);
// Bitwise equality on the device: compares the integer views of the two tensors.
bool same_bits(const at::Tensor &a, const at::Tensor &b);
#endif

}  // namespace detfuzz
