// Host dispatch of the fixed-order CPU log_softmax.
//
// The reduced dimension is moved last (a view: strides are honoured, nothing is copied); every
// other index names one row. A row is converted once to float32 and put through the three passes
// of fixed_order::log_softmax_row (sequential NaN-propagating max, blocked sum of exp(x - max),
// x - max - log(sum)), whose order depends on the row length alone. Rows are spread over threads
// with at::parallel_for. The float32 result is rounded to the input dtype, or kept as float32 when
// half_to_float is set (which is a no-op for float32 input).
#include "ops/cpu/cpu_ops.h"
#include "ops/cpu/output.h"
#include "ops/cpu/fixed_order.h"

#include <ATen/Parallel.h>
#include <ATen/WrapDimUtils.h>

#include <vector>

namespace detfuzz::cpu_ops {

at::Tensor log_softmax(const at::Tensor &x, int64_t dim, bool half_to_float) {
  TORCH_CHECK(x.defined() && x.device().is_cpu(), "log_softmax: x must be a defined CPU tensor");
  const auto dtype = x.scalar_type();
  TORCH_CHECK(dtype == at::kFloat || dtype == at::kHalf || dtype == at::kBFloat16, "log_softmax: unsupported dtype ",
              dtype, " (expected Float, Half or BFloat16)");
  const at::Tensor x_nd = x.dim() == 0 ? x.reshape({1}) : x;  // a scalar is a row of one
  const int64_t d = c10::maybe_wrap_dim(dim, x.dim());        // names the bad dim when out of range
  const at::ScalarType out_dtype = half_to_float ? at::kFloat : dtype;

  const at::Tensor rows_view = x_nd.movedim(d, -1);
  const int64_t n = rows_view.size(-1);
  const int64_t rows = n == 0 ? 0 : rows_view.numel() / n;
  const std::vector<int64_t> row_sizes(rows_view.sizes().begin(), rows_view.sizes().end() - 1);
  const std::vector<int64_t> row_strides(rows_view.strides().begin(), rows_view.strides().end() - 1);
  const int64_t x_stride = rows_view.stride(-1);
  at::Tensor out_rows = at::empty(rows_view.sizes(), x.options().dtype(at::kFloat));  // rows of n, moved back below

  AT_DISPATCH_FLOATING_TYPES_AND2(at::kHalf, at::kBFloat16, dtype, "detfuzz_cpu_log_softmax", [&] {
    const auto *x_data = rows_view.const_data_ptr<scalar_t>();
    float *out_data = out_rows.data_ptr<float>();
    const int64_t grain = std::max<int64_t>(1, 4096 / std::max<int64_t>(1, n));
    at::parallel_for(0, rows, grain, [&](int64_t begin, int64_t end) {
      std::vector<float> row(static_cast<size_t>(n));
      for (int64_t r = begin; r < end; ++r) {
        fixed_order::load_row(x_data + fixed_order::strided_offset(r, row_sizes, row_strides), n, x_stride, row.data());
        fixed_order::log_softmax_row(row.data(), n, out_data + r * n);
      }
    });
  });
  return to_output(out_rows.movedim(-1, d).contiguous(), out_dtype).view(x.sizes());
}

}  // namespace detfuzz::cpu_ops
