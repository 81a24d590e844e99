// Host dispatch of the fixed-order CPU mean.
//
// The reduced dimensions (all of them when none are named) are taken in ascending order, however
// the caller lists them, and every output element sums its n reduced elements in row-major order
// over those dimensions: the elements are converted to float32 (integers included) and added with
// fixed_order::blocked_sum, whose order depends on n alone, then divided by n in float32. An empty
// reduction gives 0/0 = NaN, as torch does. Output elements are spread over threads with
// at::parallel_for. The result has dtype `dtype` when given, else the input's floating dtype, else
// float32 (integer inputs are promoted), and is a fresh contiguous tensor.
#include "ops/cpu/cpu_ops.h"
#include "ops/cpu/output.h"
#include "ops/cpu/fixed_order.h"

#include <ATen/Parallel.h>
#include <ATen/WrapDimUtilsMulti.h>

#include <vector>

namespace detfuzz::cpu_ops {

at::Tensor mean(const at::Tensor &x, at::IntArrayRef dims, bool keepdim, std::optional<at::ScalarType> dtype) {
  TORCH_CHECK(x.defined() && x.device().is_cpu(), "mean: x must be a defined CPU tensor");
  const auto in_dtype = x.scalar_type();
  TORCH_CHECK(in_dtype == at::kFloat || in_dtype == at::kHalf || in_dtype == at::kBFloat16 || in_dtype == at::kInt ||
                  in_dtype == at::kLong,
              "mean: unsupported input dtype ", in_dtype, " (expected Float, Half, BFloat16, Int or Long)");
  const at::ScalarType out_dtype = dtype ? *dtype : at::isFloatingType(in_dtype) ? in_dtype : at::kFloat;
  TORCH_CHECK(out_dtype == at::kFloat || out_dtype == at::kHalf || out_dtype == at::kBFloat16,
              "mean: unsupported output dtype ", out_dtype, " (expected Float, Half or BFloat16)");

  const int64_t ndim = x.dim();
  std::bitset<at::dim_bitset_size> reduced = at::dim_list_to_bitset(dims, ndim);  // wraps; rejects repeats
  if (dims.empty()) reduced.set();

  std::vector<int64_t> kept_sizes, kept_strides, reduced_sizes, reduced_strides, out_shape;
  int64_t n = 1;
  for (int64_t d = 0; d < ndim; ++d) {
    if (reduced[d]) {
      reduced_sizes.push_back(x.size(d));
      reduced_strides.push_back(x.stride(d));
      n *= x.size(d);
      if (keepdim) out_shape.push_back(1);
    } else {
      kept_sizes.push_back(x.size(d));
      kept_strides.push_back(x.stride(d));
      out_shape.push_back(x.size(d));
    }
  }
  at::Tensor out = at::empty(out_shape, x.options().dtype(at::kFloat));
  const int64_t rows = out.numel();
  const float count = static_cast<float>(n);

  AT_DISPATCH_ALL_TYPES_AND2(at::kHalf, at::kBFloat16, in_dtype, "detfuzz_cpu_mean", [&] {
    const auto *x_data = x.const_data_ptr<scalar_t>();
    float *out_data = out.data_ptr<float>();
    const int64_t grain = std::max<int64_t>(1, 4096 / std::max<int64_t>(1, n));
    at::parallel_for(0, rows, grain, [&](int64_t begin, int64_t end) {
      std::vector<float> elements(static_cast<size_t>(n));
      for (int64_t r = begin; r < end; ++r) {
        float *cursor = elements.data();
        fixed_order::load_strided(x_data + fixed_order::strided_offset(r, kept_sizes, kept_strides),
                                  reduced_sizes.data(), reduced_strides.data(), reduced_sizes.size(), cursor);
        out_data[r] = fixed_order::blocked_sum(n, [&](int64_t k) { return elements[k]; }) / count;
      }
    });
  });
  return to_output(out, out_dtype);
}

}  // namespace detfuzz::cpu_ops
