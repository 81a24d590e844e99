// Host dispatch of the batch-invariant CUDA ops: argument checks (TORCH_CHECK, naming the bad
// value), output allocation, and the layout work that lets the raw-pointer launchers see only
// the layouts they read. Every copy made here is a bitwise copy (or a zero padding of K, which
// the kernels would zero-fill anyway), and every decision depends on K, N, the dtype and the
// strides, never on M: the kernel, its tiles and its K order are the same for a row alone or in
// any batch.
#include "ops/cuda/cuda_ops.h"

#include "ops/cuda/cuda_check.h"
#include "ops/cuda/gemm.cuh"
#include "ops/cuda/row_reduce.cuh"

#include <ATen/cuda/CUDAContext.h>
#include <ATen/WrapDimUtils.h>
#include <c10/cuda/CUDAGuard.h>

#include <algorithm>
#include <mutex>
#include <vector>

namespace detfuzz::cuda_ops {
namespace {

namespace ck = detfuzz::cuda_kernels;

ck::DType kernel_dtype(at::ScalarType t) {
  switch (t) {
    case at::kFloat: return ck::DType::f32;
    case at::kHalf: return ck::DType::f16;
    case at::kBFloat16: return ck::DType::bf16;
    case at::kInt: return ck::DType::i32;
    case at::kLong: return ck::DType::i64;
    default: TORCH_CHECK(false, "detfuzz cuda_ops: unsupported dtype ", t);
  }
}

int sm_count(const at::Device &device) {
  static std::mutex mu;
  static std::vector<int> counts;
  const int idx = device.index() < 0 ? 0 : device.index();
  std::lock_guard<std::mutex> lock(mu);
  if (static_cast<int>(counts.size()) <= idx) counts.resize(idx + 1, 0);
  if (counts[idx] == 0) {
    int n = 0;
    DETFUZZ_CUDA_CHECK(cudaDeviceGetAttribute(&n, cudaDevAttrMultiProcessorCount, idx));
    counts[idx] = n;
  }
  return counts[idx];
}

thread_local ck::GemmPath forced_path = ck::GemmPath::automatic;
thread_local ck::F32Path forced_f32_path = ck::F32Path::automatic;

bool aligned16(const at::Tensor &t) { return (reinterpret_cast<uintptr_t>(t.data_ptr()) & 15) == 0; }
int64_t round_up(int64_t v, int64_t m) { return (v + m - 1) / m * m; }

void check_matmul_operand(const at::Tensor &t, const char *op, const char *name, int64_t dims) {
  TORCH_CHECK(t.defined(), op, ": ", name, " is undefined");
  TORCH_CHECK(t.is_cuda(), op, ": ", name, " must be a CUDA tensor, got device ", t.device());
  TORCH_CHECK(t.dim() == dims, op, ": ", name, " must be ", dims, "-D, got shape ", t.sizes());
  const auto s = t.scalar_type();
  TORCH_CHECK(s == at::kFloat || s == at::kHalf || s == at::kBFloat16, op, ": ", name,
              " must be float32, float16 or bfloat16, got ", s);
}

// C[b] = alpha * A[b] @ B[b] (+ beta * bias[b]); a3 [batch, M, K], b3 [batch, K, N], bias3
// (optional) broadcast to [batch, M, N].
at::Tensor gemm(const at::Tensor &a3, const at::Tensor &b3, const c10::optional<at::Tensor> &bias3, double alpha,
                double beta) {
  const int64_t batch = a3.size(0), M = a3.size(1), K = a3.size(2), N = b3.size(2);
  const auto dtype = a3.scalar_type();
  c10::cuda::CUDAGuard guard(a3.device());
  at::Tensor c = at::empty({batch, M, N}, a3.options());
  if (batch == 0 || M == 0 || N == 0) return c;

  const int64_t al = ck::gemm_alignment(kernel_dtype(dtype));
  const bool pad_k = K % al != 0;
  const int64_t Kp = round_up(K, al);

  // A: row-major with aligned rows, else a (K-padded) copy. A stride of a size-1 dim is unused.
  at::Tensor A = a3;
  int64_t lda = M > 1 ? A.stride(1) : Kp, sa = batch > 1 ? A.stride(0) : 0;
  const bool a_ok = !pad_k && (K <= 1 || A.stride(2) == 1) && lda % al == 0 && sa % al == 0 && aligned16(A);
  if (!a_ok) {
    A = pad_k ? at::zeros({batch, M, Kp}, a3.options()) : at::empty({batch, M, K}, a3.options());
    A.narrow(2, 0, K).copy_(a3);
    lda = Kp;
    sa = M * Kp;
  }

  // B: [K,N] row-major or a transposed [N,K] row-major weight, read in place; else a padded copy.
  at::Tensor B = b3;
  bool b_kn = true;
  int64_t ldb = 0, sb = batch > 1 ? B.stride(0) : 0;
  bool b_ok = false;
  if (!pad_k && sb % al == 0 && aligned16(B)) {
    const int64_t ld_kn = K > 1 ? B.stride(1) : round_up(N, al);
    const int64_t ld_nk = N > 1 ? B.stride(2) : Kp;
    if ((N <= 1 || B.stride(2) == 1) && N % al == 0 && ld_kn % al == 0) {
      b_ok = true;
      b_kn = true;
      ldb = ld_kn;
    } else if ((K <= 1 || B.stride(1) == 1) && ld_nk % al == 0) {
      b_ok = true;
      b_kn = false;
      ldb = ld_nk;
    }
  }
  if (!b_ok) {
    const int64_t Np = round_up(N, al);
    B = (pad_k || Np != N) ? at::zeros({batch, Kp, Np}, b3.options()) : at::empty({batch, K, N}, b3.options());
    B.narrow(1, 0, K).narrow(2, 0, N).copy_(b3);
    b_kn = true;
    ldb = Np;
    sb = Kp * Np;
  }

  ck::GemmParams p;
  p.dtype = kernel_dtype(dtype);
  p.a = A.data_ptr();
  p.lda = lda;
  p.batch_stride_a = sa;
  p.b = B.data_ptr();
  p.ldb = ldb;
  p.batch_stride_b = sb;
  p.b_kn = b_kn;
  p.c = c.data_ptr();
  p.ldc = N;
  p.batch_stride_c = M * N;
  at::Tensor bias;
  if (bias3 && beta != 0.0) {
    bias = *bias3;
    p.bias = bias.data_ptr();
    p.batch_stride_bias = bias.stride(0);
    p.bias_stride_m = bias.stride(1);
    p.bias_stride_n = bias.stride(2);
  }
  p.alpha = static_cast<float>(alpha);
  p.beta = static_cast<float>(beta);
  p.M = M;
  p.N = N;
  p.K = Kp;
  p.batch = batch;
  p.num_ctas = sm_count(a3.device());
  p.path = p.dtype == ck::DType::f32 ? ck::GemmPath::automatic : forced_path;
  p.f32_path = p.dtype == ck::DType::f32 ? forced_f32_path : ck::F32Path::automatic;
  at::Tensor workspace;  // the caching allocator's, ordered on the current stream like the launch
  if (const int64_t bytes = ck::gemm_workspace_bytes(p, a3.device().index())) {
    workspace = at::empty({bytes}, a3.options().dtype(at::kByte));
    p.workspace = workspace.data_ptr();
    p.workspace_bytes = bytes;
  }
  ck::launch_gemm(p, at::cuda::getCurrentCUDAStream(a3.device().index()).stream());
  return c;
}

ck::RowReduceParams row_params(const at::Tensor &x2, at::ScalarType out_dtype) {
  ck::RowReduceParams p;
  p.in_dtype = kernel_dtype(x2.scalar_type());
  p.out_dtype = kernel_dtype(out_dtype);
  p.x = x2.data_ptr();
  p.rows = x2.size(0);
  p.len = x2.size(1);
  p.x_row_stride = p.rows > 1 ? x2.stride(0) : p.len;
  return p;
}

// [rows, len] view (or copy) of t with unit inner stride.
at::Tensor as_rows(const at::Tensor &t, int64_t rows, int64_t len) {
  at::Tensor x2 = t.reshape({rows, len});
  if (len > 1 && x2.stride(1) != 1) x2 = x2.contiguous();
  return x2;
}

}  // namespace

ScopedMatmulPath::ScopedMatmulPath(ck::GemmPath path) : saved_{forced_path, forced_f32_path} { forced_path = path; }
ScopedMatmulPath::ScopedMatmulPath(const MatmulPathChoice &choice) : saved_{forced_path, forced_f32_path} {
  forced_path = choice.half;
  forced_f32_path = choice.f32;
}
ScopedMatmulPath::~ScopedMatmulPath() {
  forced_path = saved_.half;
  forced_f32_path = saved_.f32;
}

const char *MatmulPathChoice::name() const {
  return f32 != ck::F32Path::automatic ? ck::gemm_f32_path_name(f32) : ck::gemm_path_name(half);
}

namespace {
// Every forceable path of each kernel (automatic excluded).
constexpr ck::GemmPath kHopperPaths[] = {ck::GemmPath::sm90_persistent,        ck::GemmPath::sm90_split,
                                         ck::GemmPath::sm90_persistent_64,     ck::GemmPath::sm90_split_64,
                                         ck::GemmPath::sm90_persistent_64x64,  ck::GemmPath::sm90_persistent_128x192,
                                         ck::GemmPath::sm90_persistent_64x256, ck::GemmPath::sm90_paired_128x192,
                                         ck::GemmPath::sm90_persistent_128x256};
constexpr ck::F32Path kF32Paths[] = {
    ck::F32Path::persistent_tall, ck::F32Path::persistent_large, ck::F32Path::persistent_small,
    ck::F32Path::cluster_large,   ck::F32Path::cluster_small,    ck::F32Path::column_stream,
    ck::F32Path::split_large,     ck::F32Path::split_small,      ck::F32Path::column_stream_split};
}  // namespace

std::vector<MatmulPathChoice> equivalent_matmul_paths(int device, at::ScalarType dtype) {
  std::vector<MatmulPathChoice> out;
  if (dtype == at::kFloat) {
    for (const auto p : kF32Paths)
      if (ck::gemm_f32_path_available(p, device)) out.push_back({ck::GemmPath::automatic, p});
    return out;
  }
  if (!ck::gemm_path_available(ck::GemmPath::sm90_persistent, device)) return out;
  for (const auto p : kHopperPaths) out.push_back({p, ck::F32Path::automatic});
  return out;
}

std::optional<MatmulPathChoice> matmul_path_by_name(const std::string &name) {
  if (name == ck::gemm_path_name(ck::GemmPath::mma_sync))
    return MatmulPathChoice{ck::GemmPath::mma_sync, ck::F32Path::automatic};
  for (const auto p : kHopperPaths)
    if (name == ck::gemm_path_name(p)) return MatmulPathChoice{p, ck::F32Path::automatic};
  for (const auto p : kF32Paths)
    if (name == ck::gemm_f32_path_name(p)) return MatmulPathChoice{ck::GemmPath::automatic, p};
  return std::nullopt;
}

at::Tensor mm(const at::Tensor &a, const at::Tensor &b) {
  check_matmul_operand(a, "mm", "a", 2);
  check_matmul_operand(b, "mm", "b", 2);
  TORCH_CHECK(a.scalar_type() == b.scalar_type(), "mm: a and b must have the same dtype, got ", a.scalar_type(),
              " and ", b.scalar_type());
  TORCH_CHECK(a.device() == b.device(), "mm: a and b must be on the same device, got ", a.device(), " and ",
              b.device());
  TORCH_CHECK(a.size(1) == b.size(0), "mm: shapes ", a.sizes(), " and ", b.sizes(), " cannot be multiplied (",
              a.size(1), " != ", b.size(0), ")");
  return gemm(a.unsqueeze(0), b.unsqueeze(0), c10::nullopt, 1.0, 0.0).squeeze(0);
}

at::Tensor addmm(const at::Tensor &bias, const at::Tensor &a, const at::Tensor &b, double beta, double alpha) {
  check_matmul_operand(a, "addmm", "a", 2);
  check_matmul_operand(b, "addmm", "b", 2);
  TORCH_CHECK(bias.defined() && bias.is_cuda(), "addmm: bias must be a CUDA tensor");
  TORCH_CHECK(a.scalar_type() == b.scalar_type() && bias.scalar_type() == a.scalar_type(),
              "addmm: bias, a and b must have the same dtype, got ", bias.scalar_type(), ", ", a.scalar_type(), " and ",
              b.scalar_type());
  TORCH_CHECK(a.device() == b.device() && bias.device() == a.device(), "addmm: bias, a and b must be on one device");
  TORCH_CHECK(a.size(1) == b.size(0), "addmm: shapes ", a.sizes(), " and ", b.sizes(), " cannot be multiplied (",
              a.size(1), " != ", b.size(0), ")");
  const int64_t M = a.size(0), N = b.size(1);
  TORCH_CHECK(bias.dim() <= 2, "addmm: bias must be 0-, 1- or 2-D, got shape ", bias.sizes());
  const bool ok = (bias.dim() < 1 || bias.size(-1) == 1 || bias.size(-1) == N) &&
                  (bias.dim() < 2 || bias.size(0) == 1 || bias.size(0) == M);
  TORCH_CHECK(ok, "addmm: bias of shape ", bias.sizes(), " does not broadcast to [", M, ", ", N, "]");
  const at::Tensor bias3 = bias.expand({M, N}).unsqueeze(0);
  return gemm(a.unsqueeze(0), b.unsqueeze(0), bias3, alpha, beta).squeeze(0);
}

at::Tensor bmm(const at::Tensor &a, const at::Tensor &b) {
  check_matmul_operand(a, "bmm", "a", 3);
  check_matmul_operand(b, "bmm", "b", 3);
  TORCH_CHECK(a.scalar_type() == b.scalar_type(), "bmm: a and b must have the same dtype, got ", a.scalar_type(),
              " and ", b.scalar_type());
  TORCH_CHECK(a.device() == b.device(), "bmm: a and b must be on the same device");
  TORCH_CHECK(a.size(0) == b.size(0), "bmm: batch sizes differ: ", a.sizes(), " and ", b.sizes());
  TORCH_CHECK(a.size(2) == b.size(1), "bmm: shapes ", a.sizes(), " and ", b.sizes(), " cannot be multiplied (",
              a.size(2), " != ", b.size(1), ")");
  return gemm(a, b, c10::nullopt, 1.0, 0.0);
}

at::Tensor log_softmax(const at::Tensor &x, int64_t dim, bool half_to_float) {
  TORCH_CHECK(x.defined() && x.is_cuda(), "log_softmax: x must be a CUDA tensor");
  const auto st = x.scalar_type();
  TORCH_CHECK(st == at::kFloat || st == at::kHalf || st == at::kBFloat16,
              "log_softmax: x must be float32, float16 or bfloat16, got ", st);
  TORCH_CHECK(!half_to_float || st == at::kHalf || st == at::kBFloat16,
              "log_softmax: half_to_float needs a float16 or bfloat16 input, got ", st);
  const at::ScalarType out_dtype = half_to_float ? at::kFloat : st;
  c10::cuda::CUDAGuard guard(x.device());
  const at::Tensor xx = x.dim() == 0 ? x.reshape({1}) : x;
  const int64_t d = at::maybe_wrap_dim(dim, xx.dim());
  const at::Tensor xt = xx.movedim(d, -1);
  const int64_t len = xt.size(-1);
  at::Tensor y = at::empty(xt.sizes(), x.options().dtype(out_dtype));
  if (xt.numel() > 0) {
    const int64_t rows = xt.numel() / len;
    const at::Tensor x2 = as_rows(xt, rows, len);
    auto p = row_params(x2, out_dtype);
    p.y = y.data_ptr();
    p.y_row_stride = len;
    ck::launch_log_softmax(p, at::cuda::getCurrentCUDAStream(x.device().index()).stream());
  }
  at::Tensor out = y.movedim(-1, d);
  if (d != xx.dim() - 1) out = out.contiguous();
  return x.dim() == 0 ? out.reshape({}) : out;
}

at::Tensor mean(const at::Tensor &x, at::IntArrayRef dims, bool keepdim, std::optional<at::ScalarType> dtype) {
  TORCH_CHECK(x.defined() && x.is_cuda(), "mean: x must be a CUDA tensor");
  at::Tensor xin = x;
  const auto st = x.scalar_type();
  if (at::isIntegralType(st, /*includeBool=*/false) && st != at::kInt && st != at::kLong) xin = x.to(at::kInt);
  TORCH_CHECK(xin.scalar_type() == at::kFloat || xin.scalar_type() == at::kHalf || xin.scalar_type() == at::kBFloat16 ||
                  xin.scalar_type() == at::kInt || xin.scalar_type() == at::kLong,
              "mean: unsupported input dtype ", st);
  const at::ScalarType out_dtype = dtype ? *dtype : (at::isIntegralType(st, false) ? at::kFloat : st);
  TORCH_CHECK(out_dtype == at::kFloat || out_dtype == at::kHalf || out_dtype == at::kBFloat16,
              "mean: output dtype must be float32, float16 or bfloat16, got ", out_dtype);
  c10::cuda::CUDAGuard guard(x.device());

  const int64_t nd = xin.dim();
  std::vector<bool> reduced(static_cast<size_t>(nd), dims.empty());
  for (const int64_t d0 : dims) {
    const int64_t d = at::maybe_wrap_dim(d0, nd == 0 ? 1 : nd);
    TORCH_CHECK(nd == 0 || !reduced[static_cast<size_t>(d)], "mean: dim ", d0, " appears more than once in ", dims);
    if (nd > 0) reduced[static_cast<size_t>(d)] = true;
  }
  std::vector<int64_t> perm, out_shape;
  int64_t rows = 1, len = 1;
  for (int64_t d = 0; d < nd; ++d)
    if (!reduced[static_cast<size_t>(d)]) {
      perm.push_back(d);
      rows *= xin.size(d);
      out_shape.push_back(xin.size(d));
    } else if (keepdim) {
      out_shape.push_back(1);
    }
  for (int64_t d = 0; d < nd; ++d)
    if (reduced[static_cast<size_t>(d)]) {
      perm.push_back(d);
      len *= xin.size(d);
    }
  at::Tensor y = at::empty({rows}, x.options().dtype(out_dtype));
  if (rows > 0) {
    const at::Tensor x2 = as_rows(nd == 0 ? xin.reshape({1}) : xin.permute(perm), rows, len);
    auto p = row_params(x2, out_dtype);
    p.y = y.data_ptr();
    ck::launch_mean(p, at::cuda::getCurrentCUDAStream(x.device().index()).stream());
  }
  return y.view(out_shape);
}

}  // namespace detfuzz::cuda_ops
