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

// The transformer's row and element-wise ops (transformer_ops.cpp; formulas there):
// x [rows, H], weight [H] of x's dtype; the sum of squares in float32, order fixed by H.
at::Tensor rms_norm(const at::Tensor &x, const at::Tensor &weight, double eps);
// x [rows, 2*I] -> [rows, I] = silu(x[:, :I]) * x[:, I:], in float32, rounded once.
at::Tensor silu_and_mul(const at::Tensor &x);
// x [T, H, D] (D even), positions int32/int64 [T]: NeoX rotate-half RoPE with base theta.
at::Tensor rope(const at::Tensor &x, const at::Tensor &positions, double theta);
// weight [V, H], ids int32/int64 [T] -> [T, H] = weight[ids]; an id outside [0, V) is an error.
at::Tensor embedding(const at::Tensor &weight, const at::Tensor &ids);

// rms_norm's block of the fixed-order sum of squares (the CUDA kernel uses the same).
constexpr int64_t kRmsBlock = 64;
// theta^(-2i/D) in float64: RoPE's frequency i of a head of D (the CUDA kernel uses the same).
double rope_inv_freq(double theta, int64_t i, int64_t head_dim);

}  // namespace detfuzz::cpu_ops
