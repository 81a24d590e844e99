// Host dispatch of the fixed-order CPU matmul family (mm, addmm, bmm).
//
// Shapes and dtypes are checked here (TORCH_CHECK, naming the bad value); the arithmetic is
// fixed_order::matmul_accumulate_rows, whose per-element order depends on K alone. Work is split
// over output rows, flattened across the batch for bmm, with at::parallel_for: each row is
// computed whole by one thread, so neither the thread count nor the batch size reaches the bits.
// Every product is computed as a float32 accumulator, then addmm's fixed epilogue
// (alpha*acc + beta*bias, dropping a term whose coefficient is zero, as torch does), then one
// rounding to the input dtype into a fresh contiguous tensor.
#include "ops/cpu/cpu_ops.h"
#include "ops/cpu/output.h"
#include "ops/cpu/fixed_order.h"

#include <ATen/ExpandUtils.h>
#include <ATen/Parallel.h>

#include <array>
#include <optional>
#include <vector>

namespace detfuzz::cpu_ops {
namespace {

void check_operand(const char *op, const char *name, const at::Tensor &t, int64_t rank) {
  TORCH_CHECK(t.defined(), op, ": ", name, " is an undefined tensor");
  TORCH_CHECK(t.device().is_cpu(), op, ": ", name, " must be a CPU tensor, got device ", t.device());
  TORCH_CHECK(t.dim() == rank, op, ": ", name, " must be ", rank, "-D, got a ", t.dim(), "-D tensor of shape ",
              t.sizes());
  const auto dtype = t.scalar_type();
  TORCH_CHECK(dtype == at::kFloat || dtype == at::kHalf || dtype == at::kBFloat16, op, ": ", name,
              " has unsupported dtype ", dtype, " (expected Float, Half or BFloat16)");
}

void check_same_dtype(const char *op, const at::Tensor &a, const char *other_name, const at::Tensor &other) {
  TORCH_CHECK(a.scalar_type() == other.scalar_type(), op, ": a has dtype ", a.scalar_type(), " but ", other_name,
              " has dtype ", other.scalar_type());
}

// Roughly this many multiply-adds per parallel chunk before splitting is worth a thread.
constexpr int64_t kMinWorkPerChunk = 1 << 15;

// out[b] = epilogue(a[b] @ b[b]) for a[B,M,K], b[B,K,N] and an optional bias already expanded to
// [B,M,N]; returns a fresh contiguous [B,M,N] tensor of a's dtype.
at::Tensor batched_product(const at::Tensor &a, const at::Tensor &b, const std::optional<at::Tensor> &bias,
                           double alpha, double beta) {
  const int64_t batch = a.size(0), m = a.size(1), k = a.size(2), n = b.size(2);
  thread_local std::vector<float> out_buf;  // the float32 result, staged on the calling thread
  out_buf.resize(static_cast<size_t>(batch * m * n));
  const float alpha_f = static_cast<float>(alpha), beta_f = static_cast<float>(beta);
  std::optional<at::Tensor> bias_f;
  if (bias) bias_f = bias->to(at::kFloat);
  // float16 operands are widened first (F16C), which is exact and much faster than c10's
  // element-by-element conversion in the loop; they are then dense [B, M, K] and [B, K, N]. The
  // one difference, a signalling NaN coming out quiet, cannot reach the bits: its first use is a
  // product, which quiets it.
  const bool widen = a.scalar_type() == at::kHalf;
  thread_local std::vector<float> a_buf, b_buf;
  const float *a_wide = widen ? float_values(a, a_buf) : nullptr, *b_wide = widen ? float_values(b, b_buf) : nullptr;
  const std::array<int64_t, 3> a_strides =
      widen ? std::array<int64_t, 3>{m * k, k, 1} : std::array<int64_t, 3>{a.stride(0), a.stride(1), a.stride(2)};
  const std::array<int64_t, 3> b_strides =
      widen ? std::array<int64_t, 3>{k * n, n, 1} : std::array<int64_t, 3>{b.stride(0), b.stride(1), b.stride(2)};
  const at::ScalarType loop_type = widen ? at::kFloat : a.scalar_type();
  AT_DISPATCH_FLOATING_TYPES_AND2(at::kHalf, at::kBFloat16, loop_type, "detfuzz_cpu_matmul", [&] {
    const auto *a_data = widen ? reinterpret_cast<const scalar_t *>(a_wide) : a.const_data_ptr<scalar_t>();
    const auto *b_data = widen ? reinterpret_cast<const scalar_t *>(b_wide) : b.const_data_ptr<scalar_t>();
    float *out_data = out_buf.data();
    const int64_t grain = std::max<int64_t>(1, kMinWorkPerChunk / std::max<int64_t>(1, n * k));
    at::parallel_for(0, batch * m, grain, [&](int64_t begin, int64_t end) {
      std::vector<float> acc;
      for (int64_t row = begin; row < end;) {
        const int64_t bi = row / m, i0 = row % m, i1 = std::min(m, i0 + (end - row));
        acc.resize(static_cast<size_t>((i1 - i0) * n));
        fixed_order::matmul_accumulate_rows<scalar_t>({a_data + bi * a_strides[0], a_strides[1], a_strides[2]},
                                                      {b_data + bi * b_strides[0], b_strides[1], b_strides[2]}, n, k,
                                                      i0, i1, acc.data());
        float *out_rows = out_data + (bi * m + i0) * n;
        if (!bias_f) {
          std::copy(acc.begin(), acc.end(), out_rows);
        } else {
          const float *bias_data = bias_f->const_data_ptr<float>() + bi * bias_f->stride(0);
          for (int64_t i = i0; i < i1; ++i)
            for (int64_t j = 0; j < n; ++j)
              out_rows[(i - i0) * n + j] = fixed_order::addmm_epilogue(
                  acc[(i - i0) * n + j], bias_data[i * bias_f->stride(1) + j * bias_f->stride(2)], alpha_f, beta_f);
        }
        row += i1 - i0;
      }
    });
  });
  return to_output(out_buf.data(), {batch, m, n}, a.scalar_type());
}

}  // namespace

at::Tensor mm(const at::Tensor &a, const at::Tensor &b) {
  check_operand("mm", "a", a, 2);
  check_operand("mm", "b", b, 2);
  check_same_dtype("mm", a, "b", b);
  TORCH_CHECK(a.size(1) == b.size(0), "mm: inner dimensions differ: a is ", a.sizes(), " and b is ", b.sizes(),
              " (a.size(1)=", a.size(1), " != b.size(0)=", b.size(0), ")");
  return batched_product(a.unsqueeze(0), b.unsqueeze(0), std::nullopt, 1.0, 0.0).squeeze(0);
}

at::Tensor addmm(const at::Tensor &bias, const at::Tensor &a, const at::Tensor &b, double beta, double alpha) {
  check_operand("addmm", "a", a, 2);
  check_operand("addmm", "b", b, 2);
  TORCH_CHECK(bias.defined() && bias.device().is_cpu(), "addmm: bias must be a defined CPU tensor");
  check_same_dtype("addmm", a, "b", b);
  check_same_dtype("addmm", a, "bias", bias);
  TORCH_CHECK(a.size(1) == b.size(0), "addmm: inner dimensions differ: a is ", a.sizes(), " and b is ", b.sizes(),
              " (a.size(1)=", a.size(1), " != b.size(0)=", b.size(0), ")");
  const int64_t m = a.size(0), n = b.size(1);
  TORCH_CHECK(bias.dim() <= 2 && at::is_expandable_to(bias.sizes(), {m, n}), "addmm: bias of shape ", bias.sizes(),
              " does not broadcast to the product's shape [", m, ", ", n, "]");
  const at::Tensor bias_mn = bias.expand({m, n});
  return batched_product(a.unsqueeze(0), b.unsqueeze(0), bias_mn.unsqueeze(0), alpha, beta).squeeze(0);
}

at::Tensor bmm(const at::Tensor &a, const at::Tensor &b) {
  check_operand("bmm", "a", a, 3);
  check_operand("bmm", "b", b, 3);
  check_same_dtype("bmm", a, "b", b);
  TORCH_CHECK(a.size(0) == b.size(0), "bmm: batch sizes differ: a is ", a.sizes(), " and b is ", b.sizes());
  TORCH_CHECK(a.size(2) == b.size(1), "bmm: inner dimensions differ: a is ", a.sizes(), " and b is ", b.sizes(),
              " (a.size(2)=", a.size(2), " != b.size(1)=", b.size(1), ")");
  return batched_product(a, b, std::nullopt, 1.0, 0.0);
}

}  // namespace detfuzz::cpu_ops
