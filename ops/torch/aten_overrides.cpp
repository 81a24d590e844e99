// Our kernels registered over libtorch's for six aten operators, through the dispatcher.
//
// What is replaced. aten::mm, aten::addmm, aten::bmm, aten::baddbmm, aten::_log_softmax and
// aten::mean.dim, on the CPU key (detfuzz::cpu_ops) and, in CUDA builds, on the CUDA key
// (detfuzz::cuda_ops), with one torch::Library(IMPL, "aten", key) per key. Destroying the
// libraries deregisters our kernels and libtorch's own are back (the dispatcher keeps them
// underneath; nothing is copied or patched). Inputs our kernels do not take — dtypes other than
// float32/float16/bfloat16 (float64, integers, complex), mixed dtypes, complex scalars — are
// forwarded to libtorch's kernel for that key (at::cpu::mm, at::cuda::mm, ...: the structured
// kernels themselves, not the dispatcher, so there is no recursion), so they behave natively.
//
// baddbmm is ours: beta*self + alpha*(batch1 @ batch2) is computed per batch entry by our addmm
// (float32 accumulator in the fixed K order, then the fixed epilogue alpha*acc + beta*bias and one
// rounding), with self broadcast to [B, M, N] first; beta == 0 and alpha == 1 is our bmm. On CUDA
// that is one addmm launch per batch entry: correct and invariant, not fast.
//
// Which entry points reach these operators (libtorch 2.11; checked by tests/ops/torch):
//   torch.mm / at::mm, torch.addmm, torch.bmm, torch.baddbmm       the ops themselves: covered.
//   torch.matmul / `@` (aten::matmul, CompositeImplicitAutograd):
//     2-D @ 2-D                              -> mm: covered.
//     N-D @ 2-D (N >= 3, e.g. [B,S,K] @ [K,N]) -> folded into one mm over all B*S rows: covered
//                                               (a row's bits depend on K, not on the row count).
//     1-D @ 2-D                              -> unsqueeze + mm: covered.
//     batched (both >= 3-D, or 2-D @ N-D)    -> bmm after expand/reshape (bitwise copies), or
//                                               the transposed fold into mm: covered (our mm is
//                                               invariant in N as well as in M).
//     N-D @ 1-D                              -> mv (aten::mv / addmv): NOT covered, native.
//     1-D @ 1-D                              -> dot: NOT covered, native.
//   torch.nn.functional.linear / nn.Linear (aten::linear, CompositeImplicitAutograd):
//     2-D input with bias                    -> addmm: covered.
//     any input without bias                 -> matmul -> mm (or bmm): covered.
//     contiguous N-D input with bias         -> flattened to 2-D, addmm: covered.
//     non-contiguous N-D input with bias     -> matmul (mm) then add_: covered, invariant, but the
//                                               bias is added after a rounding (bits differ from
//                                               the contiguous path's fused addmm epilogue).
//   torch::nn::functional::linear (the C++ frontend's own inline code, not aten::linear):
//     2-D input with bias                    -> addmm: covered.
//     anything else                          -> matmul (mm / bmm) then `+= bias`: covered, with the
//                                               same caveat (for float16/bfloat16 its bits differ
//                                               from at::linear's fused addmm on the same input).
//   torch.log_softmax / F.log_softmax / nn.LogSoftmax / F.cross_entropy (aten::log_softmax.int)
//                                            -> _log_softmax (after a dtype cast when dtype= is
//                                               given): covered. softmax (aten::_softmax): NOT.
//   Tensor.mean(dim) / torch.mean(x, dim)    -> mean.dim: covered.
//   torch.mean(x) (aten::mean, no dim)       -> mean.dim over all dims: covered (no batch left).
//   einsum / tensordot                       -> bmm / mm: covered.
//   out= variants (mm.out, addmm.out, bmm.out, baddbmm.out, _log_softmax.out, mean.out) and
//   in-place addmm_ / baddbmm_               -> separate operators: NOT covered, native.
//   _addmm_activation (fused Linear+GELU), scaled_dot_product_attention's fused kernels,
//   sum / nanmean / mean.names_dim           -> NOT covered, native.
//   Autograd: backward formulas call mm/bmm/... through the dispatcher again, so they run ours.
//   Sparse, quantized, MKLDNN and meta tensors dispatch to other keys: untouched.
#include "ops/torch/aten_overrides.h"

#include "ops/cpu/cpu_ops.h"
#ifdef DETFUZZ_WITH_CUDA
#include "ops/cuda/cuda_ops.h"
#include <ATen/ops/_log_softmax_cuda_dispatch.h>
#include <ATen/ops/addmm_cuda_dispatch.h>
#include <ATen/ops/baddbmm_cuda_dispatch.h>
#include <ATen/ops/bmm_cuda_dispatch.h>
#include <ATen/ops/mean_cuda_dispatch.h>
#include <ATen/ops/mm_cuda_dispatch.h>
#endif

#include <ATen/ATen.h>
#include <ATen/ops/_log_softmax_cpu_dispatch.h>
#include <ATen/ops/addmm_cpu_dispatch.h>
#include <ATen/ops/baddbmm_cpu_dispatch.h>
#include <ATen/ops/bmm_cpu_dispatch.h>
#include <ATen/ops/mean_cpu_dispatch.h>
#include <ATen/ops/mm_cpu_dispatch.h>

#include <initializer_list>

namespace detfuzz::torch_mode {
namespace {

bool our_float(at::ScalarType t) { return t == at::kFloat || t == at::kHalf || t == at::kBFloat16; }

// Every tensor dense, of one of our dtypes, all of the same dtype.
bool ours_take(std::initializer_list<const at::Tensor *> ts) {
  const at::ScalarType first = (*ts.begin())->scalar_type();
  if (!our_float(first)) return false;
  for (const at::Tensor *t : ts)
    if (!t->defined() || t->layout() != at::kStrided || t->is_quantized() || t->scalar_type() != first) return false;
  return true;
}

bool real_scalars(const at::Scalar &beta, const at::Scalar &alpha) { return !beta.isComplex() && !alpha.isComplex(); }

bool ours_take_mean(const at::Tensor &self, std::optional<at::ScalarType> dtype) {
  if (self.layout() != at::kStrided || self.is_quantized()) return false;
  const auto in = self.scalar_type();
  if (our_float(in)) return !dtype || our_float(*dtype);
  // Integers only with an explicit floating dtype: without one libtorch refuses them, and so do we.
  return (in == at::kInt || in == at::kLong) && dtype && our_float(*dtype);
}

std::vector<int64_t> dims_of(at::OptionalIntArrayRef dim) { return dim ? dim->vec() : std::vector<int64_t>{}; }

// beta*self + alpha*(batch1 @ batch2) from an addmm and a bmm of one backend (see the note above).
template <typename Addmm, typename Bmm>
at::Tensor baddbmm_from(const at::Tensor &self, const at::Tensor &batch1, const at::Tensor &batch2, double beta,
                        double alpha, Addmm addmm, Bmm bmm) {
  TORCH_CHECK(batch1.dim() == 3 && batch2.dim() == 3, "baddbmm: batch1 and batch2 must be 3-D, got shapes ",
              batch1.sizes(), " and ", batch2.sizes());
  TORCH_CHECK(batch1.size(0) == batch2.size(0) && batch1.size(2) == batch2.size(1), "baddbmm: shapes ", batch1.sizes(),
              " and ", batch2.sizes(), " cannot be multiplied batch-wise");
  const int64_t b = batch1.size(0), m = batch1.size(1), n = batch2.size(2);
  const at::Tensor bias = self.expand({b, m, n});  // throws when self does not broadcast
  if (beta == 0.0 && alpha == 1.0) return bmm(batch1, batch2);
  at::Tensor out = at::empty({b, m, n}, batch1.options());
  for (int64_t e = 0; e < b; ++e)
    out.select(0, e).copy_(addmm(bias.select(0, e), batch1.select(0, e), batch2.select(0, e), beta, alpha));
  return out;
}

// ---- CPU ----

at::Tensor mm_cpu(const at::Tensor &self, const at::Tensor &mat2) {
  if (!ours_take({&self, &mat2})) return at::cpu::mm(self, mat2);
  return cpu_ops::mm(self, mat2);
}

at::Tensor addmm_cpu(const at::Tensor &self, const at::Tensor &mat1, const at::Tensor &mat2, const at::Scalar &beta,
                     const at::Scalar &alpha) {
  if (!ours_take({&self, &mat1, &mat2}) || !real_scalars(beta, alpha))
    return at::cpu::addmm(self, mat1, mat2, beta, alpha);
  return cpu_ops::addmm(self, mat1, mat2, beta.toDouble(), alpha.toDouble());
}

at::Tensor bmm_cpu(const at::Tensor &self, const at::Tensor &mat2) {
  if (!ours_take({&self, &mat2})) return at::cpu::bmm(self, mat2);
  return cpu_ops::bmm(self, mat2);
}

at::Tensor baddbmm_cpu(const at::Tensor &self, const at::Tensor &batch1, const at::Tensor &batch2,
                       const at::Scalar &beta, const at::Scalar &alpha) {
  if (!ours_take({&self, &batch1, &batch2}) || !real_scalars(beta, alpha))
    return at::cpu::baddbmm(self, batch1, batch2, beta, alpha);
  return baddbmm_from(self, batch1, batch2, beta.toDouble(), alpha.toDouble(), &cpu_ops::addmm, &cpu_ops::bmm);
}

at::Tensor log_softmax_cpu(const at::Tensor &self, int64_t dim, bool half_to_float) {
  if (!ours_take({&self})) return at::cpu::_log_softmax(self, dim, half_to_float);
  return cpu_ops::log_softmax(self, dim, half_to_float);
}

at::Tensor mean_cpu(const at::Tensor &self, at::OptionalIntArrayRef dim, bool keepdim,
                    std::optional<at::ScalarType> dtype) {
  if (!ours_take_mean(self, dtype)) return at::cpu::mean(self, dim, keepdim, dtype);
  return cpu_ops::mean(self, dims_of(dim), keepdim, dtype);
}

// ---- CUDA ----
#ifdef DETFUZZ_WITH_CUDA

at::Tensor mm_cuda(const at::Tensor &self, const at::Tensor &mat2) {
  if (!ours_take({&self, &mat2})) return at::cuda::mm(self, mat2);
  return cuda_ops::mm(self, mat2);
}

at::Tensor addmm_cuda(const at::Tensor &self, const at::Tensor &mat1, const at::Tensor &mat2, const at::Scalar &beta,
                      const at::Scalar &alpha) {
  if (!ours_take({&self, &mat1, &mat2}) || !real_scalars(beta, alpha))
    return at::cuda::addmm(self, mat1, mat2, beta, alpha);
  return cuda_ops::addmm(self, mat1, mat2, beta.toDouble(), alpha.toDouble());
}

at::Tensor bmm_cuda(const at::Tensor &self, const at::Tensor &mat2) {
  if (!ours_take({&self, &mat2})) return at::cuda::bmm(self, mat2);
  return cuda_ops::bmm(self, mat2);
}

at::Tensor baddbmm_cuda(const at::Tensor &self, const at::Tensor &batch1, const at::Tensor &batch2,
                        const at::Scalar &beta, const at::Scalar &alpha) {
  if (!ours_take({&self, &batch1, &batch2}) || !real_scalars(beta, alpha))
    return at::cuda::baddbmm(self, batch1, batch2, beta, alpha);
  return baddbmm_from(self, batch1, batch2, beta.toDouble(), alpha.toDouble(), &cuda_ops::addmm, &cuda_ops::bmm);
}

at::Tensor log_softmax_cuda(const at::Tensor &self, int64_t dim, bool half_to_float) {
  if (!ours_take({&self})) return at::cuda::_log_softmax(self, dim, half_to_float);
  return cuda_ops::log_softmax(self, dim, half_to_float);
}

at::Tensor mean_cuda(const at::Tensor &self, at::OptionalIntArrayRef dim, bool keepdim,
                     std::optional<at::ScalarType> dtype) {
  if (!ours_take_mean(self, dtype)) return at::cuda::mean(self, dim, keepdim, dtype);
  return cuda_ops::mean(self, dims_of(dim), keepdim, dtype);
}

#endif

}  // namespace

const std::vector<std::string> &overridden_aten_ops() {
  static const std::vector<std::string> ops = {"aten::mm",      "aten::addmm",        "aten::bmm",
                                               "aten::baddbmm", "aten::_log_softmax", "aten::mean.dim"};
  return ops;
}

std::vector<std::unique_ptr<torch::Library>> register_aten_overrides() {
  std::vector<std::unique_ptr<torch::Library>> libs;
  auto cpu = std::make_unique<torch::Library>(torch::Library::IMPL, "aten", c10::DispatchKey::CPU, __FILE__, __LINE__);
  cpu->impl("mm", TORCH_FN(mm_cpu));
  cpu->impl("addmm", TORCH_FN(addmm_cpu));
  cpu->impl("bmm", TORCH_FN(bmm_cpu));
  cpu->impl("baddbmm", TORCH_FN(baddbmm_cpu));
  cpu->impl("_log_softmax", TORCH_FN(log_softmax_cpu));
  cpu->impl("mean.dim", TORCH_FN(mean_cpu));
  libs.push_back(std::move(cpu));
#ifdef DETFUZZ_WITH_CUDA
  auto cuda =
      std::make_unique<torch::Library>(torch::Library::IMPL, "aten", c10::DispatchKey::CUDA, __FILE__, __LINE__);
  cuda->impl("mm", TORCH_FN(mm_cuda));
  cuda->impl("addmm", TORCH_FN(addmm_cuda));
  cuda->impl("bmm", TORCH_FN(bmm_cuda));
  cuda->impl("baddbmm", TORCH_FN(baddbmm_cuda));
  cuda->impl("_log_softmax", TORCH_FN(log_softmax_cuda));
  cuda->impl("mean.dim", TORCH_FN(mean_cuda));
  libs.push_back(std::move(cuda));
#endif
  return libs;
}

}  // namespace detfuzz::torch_mode
