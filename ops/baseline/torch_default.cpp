// Impl `torch`: whatever libtorch's dispatcher runs for the op on the backend (MKL/oneDNN/ATen
// kernels on the CPU, cuBLAS and ATen reductions on CUDA). Expectation: observed.
#include "ops/registry.h"

namespace detfuzz {

std::vector<ImplInfo> torch_default_impls(Backend backend) {
  const auto e = Expectation::observed;
  const std::string where = backend == Backend::cpu ? "libtorch's default CPU kernel" : "libtorch's default CUDA kernel";
  return {
      {"torch", "mm", backend, float_dtypes(), e, "at::mm, " + where,
       [](const OpArgs &x) { return at::mm(x.tensors[0], x.tensors[1]); }},
      {"torch", "addmm", backend, float_dtypes(), e, "at::addmm, " + where,
       [](const OpArgs &x) { return at::addmm(x.tensors[0], x.tensors[1], x.tensors[2], x.beta, x.alpha); }},
      {"torch", "bmm", backend, float_dtypes(), e, "at::bmm, " + where,
       [](const OpArgs &x) { return at::bmm(x.tensors[0], x.tensors[1]); }},
      {"torch", "log_softmax", backend, float_dtypes(), e, "at::_log_softmax, " + where,
       [](const OpArgs &x) { return at::_log_softmax(x.tensors[0], x.dim, x.half_to_float); }},
      {"torch", "mean", backend, float_and_int_dtypes(), e, "at::mean (integers promoted to float32), " + where,
       [](const OpArgs &x) {
         auto dtype = x.out_dtype;
         if (!dtype && at::isIntegralType(x.tensors[0].scalar_type(), false)) dtype = at::kFloat;
         return at::mean(x.tensors[0], x.dims, x.keepdim, dtype);
       }},
  };
}

}  // namespace detfuzz
