// An example user kernel library, as sgl-kernel or vLLM's _C would be: it registers its ops with
// static TORCH_LIBRARY blocks when it is loaded (detfuzz fuzz --load libdetfuzz_example_kernels.so
// --spec tests/plugins/example_kernels.spec). Two ops of the same signature:
//
//   detfuzz_example::rowwise_mm(Tensor a, Tensor b) -> Tensor
//       correct and batch invariant: every output element sums its K products in one fixed
//       order (k = 0, 1, ...) in float32, whatever the row count.
//   detfuzz_example::splitk_mm(Tensor a, Tensor b) -> Tensor
//       a planted bug: above M = 16 rows it splits K in two halves, sums each, then adds the
//       halves, so a row's bits depend on how many rows came with it. The harness must catch it
//       and shrink it to M = 17.
//
// The CUDA kernels (CUDA builds only) are honest stand-ins: they copy the operands to the host,
// run the same CPU loop and copy the result back. Correct and invariant, not fast.
#include <torch/library.h>

#include <limits>
#include <ATen/ATen.h>

namespace {

constexpr int64_t kSplitKAboveRows = 16;

at::Tensor fixed_order_mm(const at::Tensor &a, const at::Tensor &b, bool split_k_when_large, const char *name) {
  TORCH_CHECK(a.dim() == 2 && b.dim() == 2, name, ": a and b must be 2-D, got shapes ", a.sizes(), " and ", b.sizes());
  TORCH_CHECK(a.size(1) == b.size(0), name, ": shapes ", a.sizes(), " and ", b.sizes(), " cannot be multiplied");
  TORCH_CHECK(a.scalar_type() == b.scalar_type(), name, ": a is ", a.scalar_type(), " but b is ", b.scalar_type());
  const auto dtype = a.scalar_type();
  TORCH_CHECK(dtype == at::kFloat || dtype == at::kHalf || dtype == at::kBFloat16, name, ": unsupported dtype ", dtype);
  const at::Tensor af = a.to(at::kFloat).contiguous(), bf = b.to(at::kFloat).contiguous();
  const int64_t m = a.size(0), k = a.size(1), n = b.size(1);
  at::Tensor out = at::empty({m, n}, af.options());
  const float *pa = af.const_data_ptr<float>(), *pb = bf.const_data_ptr<float>();
  float *po = out.data_ptr<float>();
  const bool split = split_k_when_large && m > kSplitKAboveRows;
  const int64_t half = k / 2;
  for (int64_t i = 0; i < m; ++i) {
    for (int64_t j = 0; j < n; ++j) {
      float acc;
      if (!split) {
        acc = 0.0f;
        for (int64_t p = 0; p < k; ++p) acc += pa[i * k + p] * pb[p * n + j];
      } else {
        float lo = 0.0f, hi = 0.0f;
        for (int64_t p = 0; p < half; ++p) lo += pa[i * k + p] * pb[p * n + j];
        for (int64_t p = half; p < k; ++p) hi += pa[i * k + p] * pb[p * n + j];
        acc = lo + hi;
      }
      po[i * n + j] = acc;
    }
  }
  // NaN bits: libtorch's float->half conversion keeps a NaN's payload in its vectorised body and
  // rewrites it in the scalar tail, so a NaN's bits would depend on the row's position in the
  // batch (detfuzz caught that here). One canonical NaN makes the op invariant on NaN too.
  out.masked_fill_(out.isnan(), std::numeric_limits<float>::quiet_NaN());
  return out.to(dtype);
}

at::Tensor rowwise_mm_cpu(const at::Tensor &a, const at::Tensor &b) {
  return fixed_order_mm(a, b, false, "rowwise_mm");
}
at::Tensor splitk_mm_cpu(const at::Tensor &a, const at::Tensor &b) { return fixed_order_mm(a, b, true, "splitk_mm"); }

#ifdef DETFUZZ_WITH_CUDA
at::Tensor rowwise_mm_cuda(const at::Tensor &a, const at::Tensor &b) {
  return rowwise_mm_cpu(a.cpu(), b.cpu()).to(a.device());
}
at::Tensor splitk_mm_cuda(const at::Tensor &a, const at::Tensor &b) {
  return splitk_mm_cpu(a.cpu(), b.cpu()).to(a.device());
}
#endif

}  // namespace

TORCH_LIBRARY(detfuzz_example, m) {
  m.def("rowwise_mm(Tensor a, Tensor b) -> Tensor");
  m.def("splitk_mm(Tensor a, Tensor b) -> Tensor");
}

TORCH_LIBRARY_IMPL(detfuzz_example, CPU, m) {
  m.impl("rowwise_mm", TORCH_FN(rowwise_mm_cpu));
  m.impl("splitk_mm", TORCH_FN(splitk_mm_cpu));
}

#ifdef DETFUZZ_WITH_CUDA
TORCH_LIBRARY_IMPL(detfuzz_example, CUDA, m) {
  m.impl("rowwise_mm", TORCH_FN(rowwise_mm_cuda));
  m.impl("splitk_mm", TORCH_FN(splitk_mm_cuda));
}
#endif
