// Batch-invariant CPU implementations (the CI backend and the executable spec of the CUDA kernels).
// Every output element is reduced in an order fixed by the reduction length and the block
// constants in fixed_order.h alone: never by the batch size, the row index or the thread count.
#pragma once

#include <ATen/ATen.h>

#include <optional>

namespace detfuzz::cpu_ops {

at::Tensor mm(const at::Tensor &a, const at::Tensor &b);
at::Tensor addmm(const at::Tensor &bias, const at::Tensor &a, const at::Tensor &b, double beta, double alpha);
at::Tensor bmm(const at::Tensor &a, const at::Tensor &b);
at::Tensor log_softmax(const at::Tensor &x, int64_t dim, bool half_to_float);
at::Tensor mean(const at::Tensor &x, at::IntArrayRef dims, bool keepdim, std::optional<at::ScalarType> dtype);

}  // namespace detfuzz::cpu_ops
