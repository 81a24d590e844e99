// Raw-pointer launchers of the batch-invariant persistent matmul (no torch here; host C++ may
// include this header). C[b] = alpha * A[b] @ B[b] (+ beta * bias), for b in [0, batch).
//
// Layouts the kernels read directly (cuda_ops.cpp makes copies for anything else):
//   A: row-major, element (m, k) at a[m * lda + k]
//   B: b_kn == true : element (k, n) at b[k * ldb + n]   (row-major [K, N])
//      b_kn == false: element (k, n) at b[n * ldb + k]   (a transposed [N, K] row-major weight)
//   C: element (m, n) at c[m * ldc + n]
//   bias (optional): element (m, n) at bias[m * bias_stride_m + n * bias_stride_n] (strides may be 0)
// Alignment (gemm_check() says which is unmet): every pointer 16-byte aligned; for 16-bit types
// K, lda, ldb and the batch strides of A and B multiples of 8 (fp32: of 4). With b_kn, N too, or
// else every row of B must be readable up to N rounded up (a zero-padded copy): the kernels load
// 16-byte chunks and drop the columns past N.
//
// The bits of C[b, m, n] depend only on the dtype, K and the values of row m of A[b], column n of
// B[b] (and the bias): never on M, the batch, the CTA count, the stream or the B layout.
#pragma once

#include "ops/cuda/gemm_policy.h"

#include <cuda_runtime_api.h>

#include <cstdint>
#include <string>
#include <utility>

namespace detfuzz::cuda_kernels {

enum class DType { f32, f16, bf16, i32, i64 };
const char *dtype_name(DType t);
int dtype_size(DType t);

// GemmPath (the 16-bit paths), F32Path (the float32 ones), k_chunks and the rules that pick a
// path: ops/cuda/gemm_policy.h.
const char *gemm_path_name(GemmPath p);
// The paths this device can run for a 16-bit dtype (sm90 ones only on compute capability 9.x).
bool gemm_path_available(GemmPath p, int device);

const char *gemm_f32_path_name(F32Path path);
// cluster_* and column_stream: sm_90 code and GPU; tall: 202 KB of shared memory; split_*: any GPU
// (they need a workspace: gemm_workspace_bytes).
bool gemm_f32_path_available(F32Path path, int device);

struct GemmParams {
  DType dtype = DType::f32;  // A, B, C and bias all have this dtype
  const void *a = nullptr;
  int64_t lda = 0, batch_stride_a = 0;
  const void *b = nullptr;
  int64_t ldb = 0, batch_stride_b = 0;
  bool b_kn = true;
  void *c = nullptr;
  int64_t ldc = 0, batch_stride_c = 0;
  const void *bias = nullptr;  // nullptr: no bias (beta is then ignored)
  int64_t bias_stride_m = 0, bias_stride_n = 0, batch_stride_bias = 0;
  float alpha = 1.f, beta = 1.f;
  int64_t M = 0, N = 0, K = 0, batch = 1;
  int num_ctas = 0;                       // persistent CTA slots: cuda_ops passes the device's SM count (the 16-bit
                                          // kernel runs 2 co-resident CTAs per slot). Must be >= 1; never changes bits.
  GemmPath path = GemmPath::automatic;    // 16-bit dtypes only
  F32Path f32_path = F32Path::automatic;  // float32 only
  // Device scratch for the paths that need it (gemm_workspace_bytes; 16-byte aligned, used only by
  // the launch's own kernels on `stream`). Without it the automatic choice takes another path.
  void *workspace = nullptr;
  int64_t workspace_bytes = 0;
};

// The sizes the launch rules (gemm_policy.h) read.
inline gemm_policy::GemmShape gemm_shape(const GemmParams &p) { return {p.M, p.N, p.K, p.batch, p.num_ctas}; }

// The workspace bytes launch_gemm wants for p on `device`: those of the forced float32 path, or of
// the path the automatic choice takes when it is given a workspace; 0 when none is needed.
int64_t gemm_workspace_bytes(const GemmParams &p, int device);

// Empty string when the kernels can run these params as given, else why not.
std::string gemm_check(const GemmParams &p);
// Element alignment the kernels need for K / ld / N (8 for 16-bit types, 4 for fp32).
int gemm_alignment(DType t);

// Launches on `stream`; throws std::runtime_error (with the call site) on a bad configuration or
// a CUDA error. Does not synchronise.
void launch_gemm(const GemmParams &p, cudaStream_t stream);

// Internal: one per kernel file.
void launch_gemm_tc(const GemmParams &p, cudaStream_t stream);  // f16, bf16 (gemm_tc.cu)
// f16, bf16 on sm_90 (gemm_sm90.cu); path is automatic or one of the sm90 ones.
void launch_gemm_sm90(const GemmParams &p, GemmPath path, cudaStream_t stream);

// The automatic float32 path; with_workspace: as if p carried a large enough workspace.
F32Path gemm_f32_auto_path(const GemmParams &p, int device, bool with_workspace);
int64_t gemm_f32_workspace_bytes(const GemmParams &p, F32Path path);                // 0 unless path is split_*
void launch_gemm_f32_path(const GemmParams &p, F32Path path, cudaStream_t stream);  // f32 (gemm_f32.cu)
// The column-stream path (gemm_f32_stream.cu), launched through launch_gemm_f32_path: whether its
// grid and TMA coordinates can hold the problem, and the launch.
// split: the chunks' partials go to p.workspace, added by launch_gemm_f32_split_reduce.
bool gemm_f32_stream_fits(const GemmParams &p);
void launch_gemm_f32_stream(const GemmParams &p, bool split, int device, cudaStream_t stream);
// How many clusters of `size` CTAs of the column-stream kernel for p's M and B layout `device`
// runs at once (gemm_policy::f32_stream_split_pays weighs it).
int gemm_f32_stream_clusters(const GemmParams &p, int size, int device);
// The split paths' second kernel: C from the partials in p.workspace, added in chunk order.
void launch_gemm_f32_split_reduce(const GemmParams &p, cudaStream_t stream);
// k_chunks(K) (gemm_policy.h) as {chunk size, chunk count}.
std::pair<int64_t, int> gemm_k_chunks(int64_t K);

}  // namespace detfuzz::cuda_kernels
