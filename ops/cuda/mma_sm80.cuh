// Device primitives of the sm_80-style tensor-core kernels (the matmul in gemm_tc.cu and the
// paged attention kernel): 16-bit <-> float conversions on raw bit patterns, cp.async,
// ldmatrix and mma.sync.m16n8k16 with float32 accumulators.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cstdint>
#include <type_traits>

namespace detfuzz::cuda_kernels {

template <typename T>
__device__ __forceinline__ float to_f(uint16_t v);
template <>
__device__ __forceinline__ float to_f<__nv_bfloat16>(uint16_t v) {
  return __bfloat162float(__ushort_as_bfloat16(v));
}
template <>
__device__ __forceinline__ float to_f<__half>(uint16_t v) {
  return __half2float(__ushort_as_half(v));
}
template <typename T>
__device__ __forceinline__ uint16_t from_f(float v);
template <>
__device__ __forceinline__ uint16_t from_f<__nv_bfloat16>(float v) {
  return __bfloat16_as_ushort(__float2bfloat16_rn(v));
}
template <>
__device__ __forceinline__ uint16_t from_f<__half>(float v) {
  return __half_as_ushort(__float2half_rn(v));
}
// Element i of an output (or bias) buffer of dtype Out: float, or 16-bit bits as to_f / from_f
// convert them.
template <typename Out>
__device__ __forceinline__ float load_out(const void *p, int64_t i) {
  if constexpr (std::is_same_v<Out, float>)
    return static_cast<const float *>(p)[i];
  else
    return to_f<Out>(static_cast<const uint16_t *>(p)[i]);
}
template <typename Out>
__device__ __forceinline__ void store_out(void *p, int64_t i, float v) {
  if constexpr (std::is_same_v<Out, float>)
    static_cast<float *>(p)[i] = v;
  else
    static_cast<uint16_t *>(p)[i] = from_f<Out>(v);
}

__device__ __forceinline__ void ldmatrix_x4(uint32_t (&r)[4], uint32_t addr) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(addr));
}
__device__ __forceinline__ void ldmatrix_x4_trans(uint32_t (&r)[4], uint32_t addr) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0,%1,%2,%3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(addr));
}

template <typename T>
__device__ __forceinline__ void mma16816(float (&d)[4], const uint32_t (&a)[4], const uint32_t (&b)[2]);
template <>
__device__ __forceinline__ void mma16816<__nv_bfloat16>(float (&d)[4], const uint32_t (&a)[4], const uint32_t (&b)[2]) {
  asm volatile(
      "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
      "{%0,%1,%2,%3};\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
}
template <>
__device__ __forceinline__ void mma16816<__half>(float (&d)[4], const uint32_t (&a)[4], const uint32_t (&b)[2]) {
  asm volatile(
      "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
      "{%0,%1,%2,%3};\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
}

// 16-byte asynchronous copy global -> shared; an invalid source copies zeros (src-size 0).
__device__ __forceinline__ void cp_async16(uint32_t dst, const void *src, bool valid) {
  const int n = valid ? 16 : 0;
  asm volatile("cp.async.cg.shared.global.L2::256B [%0], [%1], 16, %2;\n" ::"r"(dst), "l"(src), "r"(n));
}
__device__ __forceinline__ void cp_async_commit() { asm volatile("cp.async.commit_group;\n" ::); }
template <int N>
__device__ __forceinline__ void cp_async_wait() {
  asm volatile("cp.async.wait_group %0;\n" ::"n"(N));
}

}  // namespace detfuzz::cuda_kernels
