// Baselines `cublas`, `cublaslt-noworkspace` and `cublaslt-pinned` for mm, addmm and bmm.
// Expectation: observed.
//
//   cublas                cublasGemmEx / cublasGemmStridedBatchedEx with CUBLAS_COMPUTE_32F and
//                         the default algorithm choice (what torch's CUDA mm reaches through
//                         cuBLAS); our own handle in CUBLAS_DEFAULT_MATH, so float32 never uses TF32.
//   cublaslt-noworkspace  cublasLtMatmul, first heuristic result under a preference of no
//                         workspace and reduction scheme NONE (no split-K reduction), the
//                         setting inference engines use for batch invariance.
//   cublaslt-pinned       the same preference, but one algorithm per (N, K, dtype, transposes)
//                         chosen at M = 4096 and reused for every M: the cheap fix engines try.
//
// Row-major C[M,N] = A[M,K] B[K,N] is run as column-major C^T = B^T A^T. A row-major or
// column-major operand is passed in place with the matching op and leading dimension; any
// other layout is made contiguous first (a bitwise copy; fine for a baseline). addmm copies the
// broadcast bias into the output and uses beta * C (beta == 0: C is not read, as torch).
#include "ops/cuda/cuda_check.h"
#include "ops/registry.h"

#include <ATen/cuda/CUDAContext.h>
#include <c10/cuda/CUDAGuard.h>

#include <map>
#include <mutex>
#include <tuple>

namespace detfuzz {
namespace {

cudaDataType_t cuda_dtype(at::ScalarType t) {
  switch (t) {
    case at::kFloat: return CUDA_R_32F;
    case at::kHalf: return CUDA_R_16F;
    case at::kBFloat16: return CUDA_R_16BF;
    default: TORCH_CHECK(false, "cublas baseline: unsupported dtype ", t);
  }
}

cublasHandle_t blas_handle(int device) {
  static std::mutex mu;
  static std::map<int, cublasHandle_t> handles;
  std::lock_guard<std::mutex> lock(mu);
  auto it = handles.find(device);
  if (it != handles.end()) return it->second;
  cublasHandle_t h = nullptr;
  DETFUZZ_CUDA_CHECK(cublasCreate(&h));
  DETFUZZ_CUDA_CHECK(cublasSetMathMode(h, CUBLAS_DEFAULT_MATH));
  handles[device] = h;
  return h;
}

cublasLtHandle_t lt_handle(int device) {
  static std::mutex mu;
  static std::map<int, cublasLtHandle_t> handles;
  std::lock_guard<std::mutex> lock(mu);
  auto it = handles.find(device);
  if (it != handles.end()) return it->second;
  cublasLtHandle_t h = nullptr;
  DETFUZZ_CUDA_CHECK(cublasLtCreate(&h));
  handles[device] = h;
  return h;
}

// One operand as cuBLAS sees it: the matrix X^T (X row-major [r, c] logically) in column-major
// storage, possibly through op T.
struct ColOperand {
  at::Tensor t;  // keeps a copy alive
  const void *ptr = nullptr;
  bool trans = false;
  int64_t ld = 1, batch_stride = 0;
  int64_t rows_stored = 0, cols_stored = 0;  // of the stored column-major matrix
};

// x3: [batch, r, c]. Yields X^T (c x r) as an op of a stored column-major matrix.
ColOperand as_col_operand(const at::Tensor &x3) {
  const int64_t batch = x3.size(0), r = x3.size(1), c = x3.size(2);
  int64_t sr = x3.stride(1), sc = x3.stride(2);
  if (r == 1) sr = std::max<int64_t>(c, 1);  // the stride of a size-1 dim is never used
  if (c == 1) sc = 1;
  ColOperand o;
  if (sc == 1 && sr >= std::max<int64_t>(c, 1)) {
    o.t = x3;
    o.trans = false;
    o.ld = sr;
    o.rows_stored = c;
    o.cols_stored = r;
  } else if (sr == 1 && sc >= std::max<int64_t>(r, 1)) {
    o.t = x3;
    o.trans = true;
    o.ld = sc;
    o.rows_stored = r;
    o.cols_stored = c;
  } else {
    o.t = x3.contiguous();
    o.trans = false;
    o.ld = std::max<int64_t>(c, 1);
    o.rows_stored = c;
    o.cols_stored = r;
  }
  o.ptr = o.t.data_ptr();
  o.batch_stride = batch > 1 ? o.t.stride(0) : 0;
  return o;
}

void check_operands(const char *op, const at::Tensor &a3, const at::Tensor &b3) {
  TORCH_CHECK(a3.is_cuda() && b3.is_cuda(), op, ": operands must be CUDA tensors");
  TORCH_CHECK(a3.scalar_type() == b3.scalar_type(), op, ": dtypes differ: ", a3.scalar_type(), " and ",
              b3.scalar_type());
  TORCH_CHECK(a3.size(0) == b3.size(0) && a3.size(2) == b3.size(1), op, ": shapes ", a3.sizes(), " and ", b3.sizes(),
              " cannot be multiplied");
}

// out [batch, M, N] contiguous, already holding C when beta != 0.
void run_cublas(const at::Tensor &a3, const at::Tensor &b3, at::Tensor &out, float alpha, float beta) {
  const int64_t batch = a3.size(0), M = a3.size(1), K = a3.size(2), N = b3.size(2);
  const ColOperand opA = as_col_operand(b3);  // cuBLAS "A" = B^T (N x K)
  const ColOperand opB = as_col_operand(a3);  // cuBLAS "B" = A^T (K x M)
  const int dev = a3.device().index();
  cublasHandle_t h = blas_handle(dev);
  DETFUZZ_CUDA_CHECK(cublasSetStream(h, at::cuda::getCurrentCUDAStream(dev).stream()));
  const cudaDataType_t dt = cuda_dtype(a3.scalar_type());
  const auto ta = opA.trans ? CUBLAS_OP_T : CUBLAS_OP_N;
  const auto tb = opB.trans ? CUBLAS_OP_T : CUBLAS_OP_N;
  if (batch == 1) {
    DETFUZZ_CUDA_CHECK(cublasGemmEx(h, ta, tb, static_cast<int>(N), static_cast<int>(M), static_cast<int>(K), &alpha,
                                    opA.ptr, dt, static_cast<int>(opA.ld), opB.ptr, dt, static_cast<int>(opB.ld), &beta,
                                    out.data_ptr(), dt, static_cast<int>(N), CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT));
  } else {
    DETFUZZ_CUDA_CHECK(cublasGemmStridedBatchedEx(
        h, ta, tb, static_cast<int>(N), static_cast<int>(M), static_cast<int>(K), &alpha, opA.ptr, dt,
        static_cast<int>(opA.ld), opA.batch_stride, opB.ptr, dt, static_cast<int>(opB.ld), opB.batch_stride, &beta,
        out.data_ptr(), dt, static_cast<int>(N), M * N, static_cast<int>(batch), CUBLAS_COMPUTE_32F,
        CUBLAS_GEMM_DEFAULT));
  }
}

struct LtLayout {
  cublasLtMatrixLayout_t l = nullptr;
  LtLayout(cudaDataType_t dt, int64_t rows, int64_t cols, int64_t ld, int64_t batch, int64_t stride) {
    DETFUZZ_CUDA_CHECK(
        cublasLtMatrixLayoutCreate(&l, dt, static_cast<uint64_t>(rows), static_cast<uint64_t>(cols), ld));
    if (batch > 1) {
      const int32_t count = static_cast<int32_t>(batch);
      DETFUZZ_CUDA_CHECK(
          cublasLtMatrixLayoutSetAttribute(l, CUBLASLT_MATRIX_LAYOUT_BATCH_COUNT, &count, sizeof(count)));
      DETFUZZ_CUDA_CHECK(
          cublasLtMatrixLayoutSetAttribute(l, CUBLASLT_MATRIX_LAYOUT_STRIDED_BATCH_OFFSET, &stride, sizeof(stride)));
    }
  }
  ~LtLayout() {
    if (l) cublasLtMatrixLayoutDestroy(l);
  }
  LtLayout(const LtLayout &) = delete;
  LtLayout &operator=(const LtLayout &) = delete;
};

// The first heuristic algorithm under a preference of no workspace and no split-K reduction.
cublasLtMatmulAlgo_t lt_heuristic(cublasLtHandle_t h, cublasLtMatmulDesc_t desc, cublasLtMatrixLayout_t la,
                                  cublasLtMatrixLayout_t lb, cublasLtMatrixLayout_t lc, const char *who) {
  cublasLtMatmulPreference_t pref = nullptr;
  DETFUZZ_CUDA_CHECK(cublasLtMatmulPreferenceCreate(&pref));
  struct PrefGuard {
    cublasLtMatmulPreference_t p;
    ~PrefGuard() { cublasLtMatmulPreferenceDestroy(p); }
  } pref_guard{pref};
  const uint64_t workspace = 0;
  const uint32_t scheme = CUBLASLT_REDUCTION_SCHEME_NONE;
  DETFUZZ_CUDA_CHECK(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &workspace,
                                                          sizeof(workspace)));
  DETFUZZ_CUDA_CHECK(
      cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_REDUCTION_SCHEME_MASK, &scheme, sizeof(scheme)));
  cublasLtMatmulHeuristicResult_t result{};
  int found = 0;
  DETFUZZ_CUDA_CHECK(cublasLtMatmulAlgoGetHeuristic(h, desc, la, lb, lc, lc, pref, 1, &result, &found));
  TORCH_CHECK(found > 0, who, ": no cuBLASLt algorithm without workspace for this problem");
  return result.algo;
}

// cublaslt-pinned: one algorithm per (device, dtype, N, K, transposes, batched), chosen by the
// heuristic for M = kPinM and reused for every M. Where cuBLASLt rejects the pinned algorithm for
// some M (or it would want workspace), that call takes the heuristic's choice for its own M: a
// deterministic fallback, and exactly the kind of M-dependence the fuzzer looks for.
constexpr int64_t kPinM = 4096;
struct PinKey {
  int dev;
  cudaDataType_t dt;
  int64_t n, k;
  bool ta, tb, batched;
  bool operator<(const PinKey &o) const {
    return std::tie(dev, dt, n, k, ta, tb, batched) < std::tie(o.dev, o.dt, o.n, o.k, o.ta, o.tb, o.batched);
  }
};

void run_lt(const at::Tensor &a3, const at::Tensor &b3, at::Tensor &out, float alpha, float beta, bool pinned) {
  const int64_t batch = a3.size(0), M = a3.size(1), K = a3.size(2), N = b3.size(2);
  const ColOperand opA = as_col_operand(b3);
  const ColOperand opB = as_col_operand(a3);
  const int dev = a3.device().index();
  cublasLtHandle_t h = lt_handle(dev);
  const cudaDataType_t dt = cuda_dtype(a3.scalar_type());

  cublasLtMatmulDesc_t desc = nullptr;
  DETFUZZ_CUDA_CHECK(cublasLtMatmulDescCreate(&desc, CUBLAS_COMPUTE_32F, CUDA_R_32F));
  struct DescGuard {
    cublasLtMatmulDesc_t d;
    ~DescGuard() { cublasLtMatmulDescDestroy(d); }
  } desc_guard{desc};
  const cublasOperation_t ta = opA.trans ? CUBLAS_OP_T : CUBLAS_OP_N, tb = opB.trans ? CUBLAS_OP_T : CUBLAS_OP_N;
  DETFUZZ_CUDA_CHECK(cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_TRANSA, &ta, sizeof(ta)));
  DETFUZZ_CUDA_CHECK(cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_TRANSB, &tb, sizeof(tb)));

  LtLayout la(dt, opA.rows_stored, opA.cols_stored, opA.ld, batch, opA.batch_stride);
  LtLayout lb(dt, opB.rows_stored, opB.cols_stored, opB.ld, batch, opB.batch_stride);
  LtLayout lc(dt, N, M, N, batch, M * N);

  cublasLtMatmulAlgo_t algo;
  if (!pinned) {
    algo = lt_heuristic(h, desc, la.l, lb.l, lc.l, "cublaslt-noworkspace");
  } else {
    static std::mutex mu;
    static std::map<PinKey, cublasLtMatmulAlgo_t> pins;
    const PinKey key{dev, dt, N, K, opA.trans, opB.trans, batch > 1};
    std::lock_guard<std::mutex> lock(mu);
    auto it = pins.find(key);
    if (it == pins.end()) {
      // A's operand at M = kPinM (B's and the layout kinds unchanged).
      LtLayout lb_ref(dt, opB.trans ? kPinM : K, opB.trans ? K : kPinM, opB.trans ? kPinM : K, batch,
                      batch > 1 ? kPinM * K : 0);
      LtLayout lc_ref(dt, N, kPinM, N, batch, kPinM * N);
      it = pins.emplace(key, lt_heuristic(h, desc, la.l, lb_ref.l, lc_ref.l, "cublaslt-pinned")).first;
    }
    algo = it->second;
    cublasLtMatmulHeuristicResult_t check{};
    if (cublasLtMatmulAlgoCheck(h, desc, la.l, lb.l, lc.l, lc.l, &algo, &check) != CUBLAS_STATUS_SUCCESS ||
        check.workspaceSize > 0)
      algo = lt_heuristic(h, desc, la.l, lb.l, lc.l, "cublaslt-pinned");
  }
  DETFUZZ_CUDA_CHECK(cublasLtMatmul(h, desc, &alpha, opA.ptr, la.l, opB.ptr, lb.l, &beta, out.data_ptr(), lc.l,
                                    out.data_ptr(), lc.l, &algo, nullptr, 0,
                                    at::cuda::getCurrentCUDAStream(dev).stream()));
}

void run_cublaslt(const at::Tensor &a3, const at::Tensor &b3, at::Tensor &out, float alpha, float beta) {
  run_lt(a3, b3, out, alpha, beta, false);
}
void run_cublaslt_pinned(const at::Tensor &a3, const at::Tensor &b3, at::Tensor &out, float alpha, float beta) {
  run_lt(a3, b3, out, alpha, beta, true);
}

using Runner = void (*)(const at::Tensor &, const at::Tensor &, at::Tensor &, float, float);

at::Tensor matmul3(Runner run, const char *op, const at::Tensor &a3, const at::Tensor &b3, const at::Tensor *bias,
                   double beta, double alpha) {
  check_operands(op, a3, b3);
  c10::cuda::CUDAGuard guard(a3.device());
  const int64_t batch = a3.size(0), M = a3.size(1), K = a3.size(2), N = b3.size(2);
  at::Tensor out;
  const bool use_bias = bias != nullptr && beta != 0.0;
  if (use_bias) {
    TORCH_CHECK(bias->scalar_type() == a3.scalar_type(), op, ": bias dtype ", bias->scalar_type(), " differs from ",
                a3.scalar_type());
    out = bias->expand({batch, M, N}).contiguous().clone();
  } else {
    out = at::empty({batch, M, N}, a3.options());
  }
  if (batch == 0 || M == 0 || N == 0) return out;
  if (K == 0) {  // cuBLAS would not touch C: out = beta * C
    return use_bias ? out.mul_(beta) : out.zero_();
  }
  run(a3, b3, out, static_cast<float>(alpha), use_bias ? static_cast<float>(beta) : 0.f);
  return out;
}

std::vector<ImplInfo> impls_for(const std::string &name, Runner run, const std::string &what) {
  const auto e = Expectation::observed;
  const auto bk = Backend::cuda;
  return {
      {name, "mm", bk, float_dtypes(), e, what,
       [run](const OpArgs &x) {
         TORCH_CHECK(x.tensors.at(0).dim() == 2 && x.tensors.at(1).dim() == 2, "mm: operands must be 2-D");
         return matmul3(run, "mm", x.tensors[0].unsqueeze(0), x.tensors[1].unsqueeze(0), nullptr, 0.0, 1.0).squeeze(0);
       }},
      {name, "addmm", bk, float_dtypes(), e, what + ", bias as beta * C",
       [run](const OpArgs &x) {
         const at::Tensor &a = x.tensors.at(1), &b = x.tensors.at(2);
         TORCH_CHECK(a.dim() == 2 && b.dim() == 2, "addmm: operands must be 2-D");
         const at::Tensor bias3 = x.tensors.at(0).expand({a.size(0), b.size(1)}).unsqueeze(0);
         return matmul3(run, "addmm", a.unsqueeze(0), b.unsqueeze(0), &bias3, x.beta, x.alpha).squeeze(0);
       }},
      {name, "bmm", bk, float_dtypes(), e, what + ", strided batched",
       [run](const OpArgs &x) {
         TORCH_CHECK(x.tensors.at(0).dim() == 3 && x.tensors.at(1).dim() == 3, "bmm: operands must be 3-D");
         return matmul3(run, "bmm", x.tensors[0], x.tensors[1], nullptr, 0.0, 1.0);
       }},
  };
}

}  // namespace

std::vector<ImplInfo> cublas_impls() {
  std::vector<ImplInfo> all =
      impls_for("cublas", run_cublas, "cublasGemmEx, CUBLAS_COMPUTE_32F, default heuristics (no TF32)");
  for (auto &i : impls_for("cublaslt-noworkspace", run_cublaslt,
                           "cublasLtMatmul, workspace 0, reduction scheme NONE, first heuristic"))
    all.push_back(std::move(i));
  for (auto &i :
       impls_for("cublaslt-pinned", run_cublaslt_pinned,
                 "cublasLtMatmul, workspace 0, one algorithm per (N, K, dtype) chosen at M = 4096 for every M"))
    all.push_back(std::move(i));
  return all;
}

}  // namespace detfuzz
