#include "properties/device_diff.h"

#include <cstring>
#include <stdexcept>

#ifdef DETFUZZ_WITH_CUDA
#include <c10/cuda/CUDAException.h>
#include "properties/cuda/device_kernels.h"

#include <ATen/cuda/CUDAContext.h>
#include <c10/cuda/CUDAGuard.h>
#endif

namespace detfuzz {
namespace {

#ifdef DETFUZZ_WITH_CUDA
bool device_kind(at::ScalarType t, device_kernels::DiffKind &kind) {
  using device_kernels::DiffKind;
  switch (t) {
    case at::kFloat: kind = DiffKind::float32; return true;
    case at::kHalf: kind = DiffKind::float16; return true;
    case at::kBFloat16: kind = DiffKind::bfloat16; return true;
    case at::kDouble: kind = DiffKind::float64; return true;
    case at::kInt: kind = DiffKind::int32; return true;
    case at::kLong: kind = DiffKind::int64; return true;
    default: return false;
  }
}

// The bit pattern of element `index` of a contiguous CUDA tensor (zero-extended).
uint64_t bits_at(const at::Tensor &t, int64_t index) {
  const at::Tensor one = t.reshape(-1).narrow(0, index, 1).cpu();
  uint64_t bits = 0;
  std::memcpy(&bits, one.data_ptr(), one.element_size());
  return bits;
}
#endif

bool same_shape_and_dtype(const at::Tensor &a, const at::Tensor &b) {
  return a.scalar_type() == b.scalar_type() && a.sizes().equals(b.sizes());
}

}  // namespace

DiffStats device_bitwise_diff(const at::Tensor &expected, const at::Tensor &actual) {
#ifndef DETFUZZ_WITH_CUDA
  (void)expected;
  (void)actual;
  throw std::invalid_argument("device_bitwise_diff: built without CUDA");
#else
  device_kernels::DiffKind kind;
  if (!expected.is_cuda() || !actual.is_cuda() || expected.device() != actual.device() ||
      !device_kind(expected.scalar_type(), kind))
    throw std::invalid_argument(
        "device_bitwise_diff: needs two tensors on one CUDA device, of float32/16, bfloat16, float64 or int32/64");
  if (!same_shape_and_dtype(expected, actual))
    return bitwise_diff(expected, actual);  // the mismatch report, nothing copied
  const c10::cuda::CUDAGuard guard(expected.device());
  const at::Tensor e = expected.contiguous(), a = actual.contiguous();
  DiffStats s;
  s.dtype = e.scalar_type();
  s.numel = e.numel();
  const at::Tensor result =
      at::empty({static_cast<int64_t>(sizeof(device_kernels::DeviceDiff))}, e.options().dtype(at::kByte));
  auto *r = reinterpret_cast<device_kernels::DeviceDiff *>(result.data_ptr());
  const cudaStream_t stream = at::cuda::getCurrentCUDAStream();
  device_kernels::launch_bitwise_diff(e.data_ptr(), a.data_ptr(), s.numel, kind, r, stream);
  device_kernels::DeviceDiff host{};
  C10_CUDA_CHECK(cudaMemcpyAsync(&host, r, sizeof host, cudaMemcpyDeviceToHost, stream));
  C10_CUDA_CHECK(cudaStreamSynchronize(stream));
  s.differing = static_cast<int64_t>(host.differing);
  if (s.differing == 0) return s;
  s.first_index = host.first_index;
  s.first_coords = coords_string(s.first_index, e.sizes());
  s.expected_bits = bits_at(e, s.first_index);
  s.actual_bits = bits_at(a, s.first_index);
  s.max_ulp = host.max_ulp;
  std::memcpy(&s.max_abs_diff, &host.max_abs_bits, sizeof(double));
  return s;
#endif
}

DiffStats compare_bits(const at::Tensor &expected, const at::Tensor &actual) {
#ifdef DETFUZZ_WITH_CUDA
  device_kernels::DiffKind kind;
  if (expected.is_cuda() && actual.is_cuda() && expected.device() == actual.device() &&
      device_kind(expected.scalar_type(), kind))
    return device_bitwise_diff(expected, actual);
#endif
  return bitwise_diff(expected, actual);
}

}  // namespace detfuzz
