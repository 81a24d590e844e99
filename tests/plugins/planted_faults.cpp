// Planted faults on the host, for the tests of fault handling on a machine without a GPU
// (libdetfuzz_planted_faults.so, loaded with --load, specs in planted_faults.spec). Each op is a
// row-wise op (a row's result depends on that row alone) that misbehaves at one batch size, as a
// kernel under change does on the GPU:
//
//   detfuzz_planted::sticky_rows(Tensor a) -> Tensor
//       at 7 rows it "faults the device": it throws as a CUDA error does, and from then on every
//       planted op of the process throws the same error, as every call in a poisoned CUDA context
//       fails. The library exports detfuzz_planted_device_error(), which detfuzz asks after every
//       case (harness/device_faults.h), so the poisoned state is seen as a sticky device error.
//   detfuzz_planted::hang_rows(Tensor a) -> Tensor
//       at 13 rows it never returns (a kernel that spins).
//   detfuzz_planted::known_min_mm(Tensor a, Tensor b) -> Tensor
//       a fixed-order matmul that, from 9 rows on and with K >= 4 and N >= 2, flips the lowest bit
//       of column 1: a planted non-invariance whose smallest batch_slice case is exactly
//       9x2x4 (M x N x K) with i=0 j=1, whatever the data.
#include <torch/library.h>

#include <ATen/ATen.h>

#include <atomic>
#include <chrono>
#include <cstring>
#include <thread>

namespace {

constexpr int64_t kStickyRows = 7;
constexpr int64_t kHangRows = 13;
constexpr int64_t kKnownMinRows = 9, kKnownMinK = 4, kKnownMinN = 2;

std::atomic<bool> poisoned{false};
constexpr const char *kPlantedError = "cudaErrorIllegalAddress";

void fail_if_poisoned(const char *name) {
  TORCH_CHECK(!poisoned.load(), name,
              ": CUDA error: an illegal memory access was encountered (planted: the process is poisoned)");
}

at::Tensor rows_times_two(const at::Tensor &a) {
  TORCH_CHECK(a.dim() == 2, "expected a 2-D tensor, got ", a.sizes());
  return (a.to(at::kFloat) * 2).to(a.scalar_type());
}

at::Tensor sticky_rows(const at::Tensor &a) {
  fail_if_poisoned("sticky_rows");
  if (a.dim() == 2 && a.size(0) == kStickyRows) {
    poisoned = true;
    fail_if_poisoned("sticky_rows");
  }
  return rows_times_two(a);
}

at::Tensor hang_rows(const at::Tensor &a) {
  fail_if_poisoned("hang_rows");
  while (a.dim() == 2 && a.size(0) == kHangRows) std::this_thread::sleep_for(std::chrono::hours(1));
  return rows_times_two(a);
}

at::Tensor known_min_mm(const at::Tensor &a, const at::Tensor &b) {
  fail_if_poisoned("known_min_mm");
  TORCH_CHECK(a.dim() == 2 && b.dim() == 2 && a.size(1) == b.size(0), "known_min_mm: shapes ", a.sizes(), " and ",
              b.sizes());
  TORCH_CHECK(a.scalar_type() == at::kFloat && b.scalar_type() == at::kFloat, "known_min_mm: float32 only");
  const at::Tensor ac = a.contiguous(), bc = b.contiguous();
  const int64_t m = a.size(0), k = a.size(1), n = b.size(1);
  at::Tensor out = at::empty({m, n}, ac.options());
  const float *pa = ac.const_data_ptr<float>(), *pb = bc.const_data_ptr<float>();
  float *po = out.data_ptr<float>();
  const bool planted = m >= kKnownMinRows && k >= kKnownMinK && n >= kKnownMinN;
  for (int64_t i = 0; i < m; ++i)
    for (int64_t j = 0; j < n; ++j) {
      float acc = 0.0f;
      for (int64_t p = 0; p < k; ++p) acc += pa[i * k + p] * pb[p * n + j];
      if (planted && j == 1) {  // the lowest bit flipped: always a different bit pattern
        uint32_t bits;
        std::memcpy(&bits, &acc, sizeof bits);
        bits ^= 1u;
        std::memcpy(&acc, &bits, sizeof bits);
      }
      po[i * n + j] = acc;
    }
  return out;
}

}  // namespace

extern "C" __attribute__((visibility("default"))) const char *detfuzz_planted_device_error() {
  return poisoned.load() ? kPlantedError : nullptr;
}

// For tests that run several campaigns in one process: a fresh "device".
extern "C" __attribute__((visibility("default"))) void detfuzz_planted_reset() { poisoned = false; }

TORCH_LIBRARY(detfuzz_planted, m) {
  m.def("sticky_rows(Tensor a) -> Tensor");
  m.def("hang_rows(Tensor a) -> Tensor");
  m.def("known_min_mm(Tensor a, Tensor b) -> Tensor");
}

TORCH_LIBRARY_IMPL(detfuzz_planted, CPU, m) {
  m.impl("sticky_rows", TORCH_FN(sticky_rows));
  m.impl("hang_rows", TORCH_FN(hang_rows));
  m.impl("known_min_mm", TORCH_FN(known_min_mm));
}
