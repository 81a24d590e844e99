// A test library of planted GPU faults (libdetfuzz_gpu_faults.so, CUDA builds only; specs in
// gpu_faults.spec), for `ci/gpu-check faults`: what a kernel under change does to a campaign.
//
//   detfuzz_gpu_faults::oob_rows(Tensor a) -> Tensor          out = 2 a; at 7 rows an
//       out-of-bounds store: cudaErrorIllegalAddress, which poisons the process's CUDA context.
//   detfuzz_gpu_faults::spin_rows(Tensor a) -> Tensor         out = 2 a; at 13 rows the kernel
//       never ends.
//   detfuzz_gpu_faults::atomic_splitk_mm(Tensor a, Tensor b) -> Tensor   a float32 matmul whose
//       split-K partial sums (chunks of 4 along K) meet in float atomics: run-to-run
//       nondeterministic, caught by `repeat`.
// Each must end in the right record: one `crash` record at 7 rows, a `timeout` record at 13
// rows, a `repeat` failure; shrunk, with a finished report, in one process and with workers.
#include <ATen/ATen.h>
#include <ATen/cuda/CUDAContext.h>
#include <c10/cuda/CUDAGuard.h>
#include <torch/library.h>

namespace detfuzz_gpu_faults {

void launch_oob_rows(const float *a, float *out, int64_t elements, bool planted, cudaStream_t stream);
void launch_spin_rows(const float *a, float *out, int64_t elements, bool planted, const int *never_set,
                      cudaStream_t stream);
void launch_atomic_splitk_mm(const float *a, const float *b, float *out, int64_t m, int64_t n, int64_t k, int64_t chunk,
                             cudaStream_t stream);

namespace {

constexpr int64_t kOobRows = 7, kSpinRows = 13, kSplitChunk = 4;

void check_rows(const at::Tensor &a, const char *name) {
  TORCH_CHECK(a.is_cuda(), name, ": a CUDA tensor is expected");
  TORCH_CHECK(a.dim() == 2, name, ": a 2-D tensor is expected, got ", a.sizes());
  TORCH_CHECK(a.scalar_type() == at::kFloat, name, ": float32 only, got ", a.scalar_type());
}

at::Tensor oob_rows(const at::Tensor &a) {
  check_rows(a, "oob_rows");
  const c10::cuda::CUDAGuard guard(a.device());
  const at::Tensor ac = a.contiguous();
  at::Tensor out = at::empty_like(ac);
  launch_oob_rows(ac.const_data_ptr<float>(), out.data_ptr<float>(), ac.numel(), a.size(0) == kOobRows,
                  at::cuda::getCurrentCUDAStream());
  C10_CUDA_KERNEL_LAUNCH_CHECK();
  return out;
}

at::Tensor spin_rows(const at::Tensor &a) {
  check_rows(a, "spin_rows");
  const c10::cuda::CUDAGuard guard(a.device());
  const at::Tensor ac = a.contiguous();
  at::Tensor out = at::empty_like(ac);
  const at::Tensor never_set = at::zeros({1}, ac.options().dtype(at::kInt));
  launch_spin_rows(ac.const_data_ptr<float>(), out.data_ptr<float>(), ac.numel(), a.size(0) == kSpinRows,
                   never_set.const_data_ptr<int>(), at::cuda::getCurrentCUDAStream());
  C10_CUDA_KERNEL_LAUNCH_CHECK();
  return out;
}

at::Tensor atomic_splitk_mm(const at::Tensor &a, const at::Tensor &b) {
  check_rows(a, "atomic_splitk_mm");
  check_rows(b, "atomic_splitk_mm");
  TORCH_CHECK(a.size(1) == b.size(0), "atomic_splitk_mm: shapes ", a.sizes(), " and ", b.sizes(),
              " cannot be multiplied");
  const c10::cuda::CUDAGuard guard(a.device());
  const at::Tensor ac = a.contiguous(), bc = b.contiguous();
  at::Tensor out = at::zeros({a.size(0), b.size(1)}, ac.options());
  launch_atomic_splitk_mm(ac.const_data_ptr<float>(), bc.const_data_ptr<float>(), out.data_ptr<float>(), a.size(0),
                          b.size(1), a.size(1), kSplitChunk, at::cuda::getCurrentCUDAStream());
  C10_CUDA_KERNEL_LAUNCH_CHECK();
  return out;
}

}  // namespace
}  // namespace detfuzz_gpu_faults

TORCH_LIBRARY(detfuzz_gpu_faults, m) {
  m.def("oob_rows(Tensor a) -> Tensor");
  m.def("spin_rows(Tensor a) -> Tensor");
  m.def("atomic_splitk_mm(Tensor a, Tensor b) -> Tensor");
}

TORCH_LIBRARY_IMPL(detfuzz_gpu_faults, CUDA, m) {
  m.impl("oob_rows", TORCH_FN(detfuzz_gpu_faults::oob_rows));
  m.impl("spin_rows", TORCH_FN(detfuzz_gpu_faults::spin_rows));
  m.impl("atomic_splitk_mm", TORCH_FN(detfuzz_gpu_faults::atomic_splitk_mm));
}
