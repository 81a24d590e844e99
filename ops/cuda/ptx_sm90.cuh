// PTX wrappers for the Hopper (sm_90a) kernels: mbarriers, TMA tensor loads, cluster barriers and
// the warpgroup MMA (wgmma) with shared-memory descriptors. Device code only; every wrapper is
// compiled only for sm_90a (the callers guard their bodies with DETFUZZ_SM90A).
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cstdint>
#include <type_traits>

#if defined(__CUDA_ARCH__) && (__CUDA_ARCH__ >= 900) && defined(__CUDA_ARCH_FEAT_SM90_ALL)
#define DETFUZZ_SM90A 1
#else
#define DETFUZZ_SM90A 0
#endif

namespace detfuzz::cuda_kernels::sm90 {

#if DETFUZZ_SM90A

__device__ __forceinline__ void mbar_init(uint32_t bar, uint32_t count) {
  asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;" ::"r"(bar), "r"(count));
}
__device__ __forceinline__ void fence_mbar_init() { asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory"); }
__device__ __forceinline__ void mbar_expect_tx(uint32_t bar, uint32_t bytes) {
  asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;" ::"r"(bar), "r"(bytes) : "memory");
}
__device__ __forceinline__ void mbar_arrive(uint32_t bar) {
  asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];" ::"r"(bar) : "memory");
}
// Waits until the phase of parity `parity` has completed.
__device__ __forceinline__ void mbar_wait(uint32_t bar, uint32_t parity) {
  asm volatile(
      "{\n.reg .pred done;\n"
      "WAIT_%=:\n"
      "mbarrier.try_wait.parity.shared::cta.b64 done, [%0], %1;\n"
      "@!done bra WAIT_%=;\n}\n" ::"r"(bar),
      "r"(parity)
      : "memory");
}

// TMA tile loads into this CTA's shared memory, completing on `bar` (bytes counted by expect_tx).
__device__ __forceinline__ void tma_load_2d(uint32_t dst, const void *map, uint32_t bar, int c0, int c1) {
  asm volatile(
      "cp.async.bulk.tensor.2d.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1, {%3, %4}], [%2];" ::"r"(
          dst),
      "l"(map), "r"(bar), "r"(c0), "r"(c1)
      : "memory");
}
__device__ __forceinline__ void tma_load_3d(uint32_t dst, const void *map, uint32_t bar, int c0, int c1, int c2) {
  asm volatile(
      "cp.async.bulk.tensor.3d.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1, {%3, %4, %5}], [%2];" ::
          "r"(dst),
      "l"(map), "r"(bar), "r"(c0), "r"(c1), "r"(c2)
      : "memory");
}
// A box of a matrix map (tensor_map.h's matrix_map): rank 3 with the batch coordinate, else rank 2.
__device__ __forceinline__ void tma_load_matrix(uint32_t dst, const void *map, int rank3, uint32_t bar, int c0, int c1,
                                                int batch) {
  if (rank3)
    tma_load_3d(dst, map, bar, c0, c1, batch);
  else
    tma_load_2d(dst, map, bar, c0, c1);
}
// A box loaded once and written into the shared memory of every CTA of `cta_mask` (bit r: cluster
// rank r), at the same offset `dst` in each, completing on each one's mbarrier at offset `bar`.
__device__ __forceinline__ void tma_load_matrix_multicast(uint32_t dst, const void *map, int rank3, uint32_t bar,
                                                          int c0, int c1, int batch, uint16_t cta_mask) {
  if (rank3)
    asm volatile(
        "cp.async.bulk.tensor.3d.shared::cluster.global.mbarrier::complete_tx::bytes.multicast::cluster"
        " [%0], [%1, {%3, %4, %5}], [%2], %6;" ::"r"(dst),
        "l"(map), "r"(bar), "r"(c0), "r"(c1), "r"(batch), "h"(cta_mask)
        : "memory");
  else
    asm volatile(
        "cp.async.bulk.tensor.2d.shared::cluster.global.mbarrier::complete_tx::bytes.multicast::cluster"
        " [%0], [%1, {%3, %4}], [%2], %5;" ::"r"(dst),
        "l"(map), "r"(bar), "r"(c0), "r"(c1), "h"(cta_mask)
        : "memory");
}
// TMA tile stores from this CTA's shared memory (a bulk group: commit, then wait for it).
__device__ __forceinline__ void tma_store_matrix(const void *map, int rank3, uint32_t src, int c0, int c1, int batch) {
  if (rank3)
    asm volatile("cp.async.bulk.tensor.3d.global.shared::cta.bulk_group [%0, {%2, %3, %4}], [%1];" ::"l"(map), "r"(src),
                 "r"(c0), "r"(c1), "r"(batch)
                 : "memory");
  else
    asm volatile("cp.async.bulk.tensor.2d.global.shared::cta.bulk_group [%0, {%2, %3}], [%1];" ::"l"(map), "r"(src),
                 "r"(c0), "r"(c1)
                 : "memory");
}
__device__ __forceinline__ void bulk_commit_group() { asm volatile("cp.async.bulk.commit_group;" ::: "memory"); }
// Until this thread's committed stores have read their shared memory (it may be written again).
__device__ __forceinline__ void bulk_wait_read_all() { asm volatile("cp.async.bulk.wait_group.read 0;" ::: "memory"); }
// Until this thread's committed stores are complete in global memory.
__device__ __forceinline__ void bulk_wait_all() { asm volatile("cp.async.bulk.wait_group 0;" ::: "memory"); }
// Named barrier `id` over `threads` threads (a multiple of 32).
__device__ __forceinline__ void named_barrier_sync(int id, int threads) {
  asm volatile("bar.sync %0, %1;" ::"r"(id), "r"(threads) : "memory");
}
// Arrives on named barrier `id` over `threads` threads without waiting (a bar.sync of the same id
// by the other threads completes it).
__device__ __forceinline__ void named_barrier_arrive(int id, int threads) {
  asm volatile("bar.arrive %0, %1;" ::"r"(id), "r"(threads) : "memory");
}
__device__ __forceinline__ void prefetch_tensor_map(const void *map) {
  asm volatile("prefetch.tensormap [%0];" ::"l"(map) : "memory");
}

// Shared-memory matrix descriptors for 128-byte-swizzled tiles (TMA's CU_TENSOR_MAP_SWIZZLE_128B),
// tiles based at 1024-byte-aligned addresses.
//   K-major: rows of 64 16-bit elements (128 B) along K; 8-row groups 1024 B apart.
//   MN-major: rows of 64 elements along M/N, one row per k; 8-k groups 1024 B apart (SBO) and
//   64-element M/N blocks `mn_block_bytes` apart (LBO).
__device__ __forceinline__ uint64_t desc_k_major(uint32_t addr) {
  return static_cast<uint64_t>((addr & 0x3FFFF) >> 4) | (uint64_t(1) << 16) | (uint64_t(1024 >> 4) << 32) |
         (uint64_t(1) << 62);
}
__device__ __forceinline__ uint64_t desc_mn_major(uint32_t addr, uint32_t mn_block_bytes) {
  return static_cast<uint64_t>((addr & 0x3FFFF) >> 4) | (static_cast<uint64_t>(mn_block_bytes >> 4) << 16) |
         (uint64_t(1024 >> 4) << 32) | (uint64_t(1) << 62);
}
// The descriptor of the tile `offset` bytes (a multiple of 16) past the one `desc` describes.
// Shared-memory addresses stay below 256 KB, so the 14-bit start-address field just adds, and
// never carries out of the low word: one 32-bit add per MMA, the high word (strides, swizzle)
// kept as it is, instead of rebuilding the descriptor or a 64-bit add.
__device__ __forceinline__ uint64_t desc_advance(uint64_t desc, uint32_t offset) {
  return (desc & 0xFFFFFFFF00000000ull) | (static_cast<uint32_t>(desc) + (offset >> 4));
}

__device__ __forceinline__ void wgmma_fence() { asm volatile("wgmma.fence.sync.aligned;" ::: "memory"); }
__device__ __forceinline__ void wgmma_commit() { asm volatile("wgmma.commit_group.sync.aligned;" ::: "memory"); }
template <int N>
__device__ __forceinline__ void wgmma_wait() {
  asm volatile("wgmma.wait_group.sync.aligned %0;" ::"n"(N) : "memory");
}
// Tells the compiler that the accumulators may change here (the async MMA writes them), so no
// read of them moves across a wait.
template <int R>
__device__ __forceinline__ void fence_registers(float (&d)[R]) {
#pragma unroll
  for (int i = 0; i < R; ++i) asm volatile("" : "+f"(d[i])::"memory");
}

// A wgmma's accumulator operands, 8 or 32 at a time: d[B] .. d[B + 7] or d[B + 31] (the asm's %B ...).
#define DETFUZZ_WGMMA_ACC8(B)                                                                                 \
  "+f"(d[B]), "+f"(d[B + 1]), "+f"(d[B + 2]), "+f"(d[B + 3]), "+f"(d[B + 4]), "+f"(d[B + 5]), "+f"(d[B + 6]), \
      "+f"(d[B + 7])
#define DETFUZZ_WGMMA_ACC32(B) \
  DETFUZZ_WGMMA_ACC8(B), DETFUZZ_WGMMA_ACC8(B + 8), DETFUZZ_WGMMA_ACC8(B + 16), DETFUZZ_WGMMA_ACC8(B + 24)

// D(64x128, f32) = A(64x16) * B(16x128) + (accumulate ? D : 0), A K-major, B K-major (TRANS_B = 0)
// or N-major (TRANS_B = 1). Accumulator layout: thread t of the warpgroup holds, for n8 block j,
// d[4j + 2h + e] = D[16 (t / 32) + (t % 32) / 4 + 8h][8j + 2 (t % 4) + e].
template <typename T, int TRANS_B>
__device__ __forceinline__ void wgmma_m64n128k16(float (&d)[64], uint64_t desc_a, uint64_t desc_b, int accumulate) {
  static_assert(std::is_same_v<T, __nv_bfloat16> || std::is_same_v<T, __half>, "16-bit inputs");
  constexpr bool kBf16 = std::is_same_v<T, __nv_bfloat16>;
#define DETFUZZ_WGMMA_N128(TYPE)                                                                                    \
  asm volatile(                                                                                                     \
      "{\n.reg .pred p;\nsetp.ne.b32 p, %66, 0;\n"                                                                  \
      "wgmma.mma_async.sync.aligned.m64n128k16.f32." TYPE "." TYPE                                                  \
      " {%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, %20, %21, %22, " \
      "%23, %24, %25, %26, %27, %28, %29, %30, %31, %32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, "   \
      "%44, %45, %46, %47, %48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63}, "       \
      "%64, %65, p, 1, 1, 0, %67;\n}\n"                                                                             \
      : DETFUZZ_WGMMA_ACC32(0), DETFUZZ_WGMMA_ACC32(32)                                                             \
      : "l"(desc_a), "l"(desc_b), "r"(accumulate), "n"(TRANS_B))
  if constexpr (kBf16)
    DETFUZZ_WGMMA_N128("bf16");
  else
    DETFUZZ_WGMMA_N128("f16");
#undef DETFUZZ_WGMMA_N128
}

// D(64x192, f32) = A(64x16) * B(16x192) + (accumulate ? D : 0): m64n128k16 with 24 n8 blocks
// instead of 16 (same operand layouts, same accumulator layout per n8 block).
template <typename T, int TRANS_B>
__device__ __forceinline__ void wgmma_m64n192k16(float (&d)[96], uint64_t desc_a, uint64_t desc_b, int accumulate) {
  static_assert(std::is_same_v<T, __nv_bfloat16> || std::is_same_v<T, __half>, "16-bit inputs");
  constexpr bool kBf16 = std::is_same_v<T, __nv_bfloat16>;
#define DETFUZZ_WGMMA_N192(TYPE)                                                                                       \
  asm volatile(                                                                                                        \
      "{\n.reg .pred p;\nsetp.ne.b32 p, %98, 0;\n"                                                                     \
      "wgmma.mma_async.sync.aligned.m64n192k16.f32." TYPE "." TYPE                                                     \
      " {%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, %20, %21, %22, "    \
      "%23, %24, %25, %26, %27, %28, %29, %30, %31, %32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, " \
      "%45, %46, %47, %48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63, %64, %65, %66, " \
      "%67, %68, %69, %70, %71, %72, %73, %74, %75, %76, %77, %78, %79, %80, %81, %82, %83, %84, %85, %86, %87, %88, " \
      "%89, %90, %91, %92, %93, %94, %95}, %96, %97, p, 1, 1, 0, %99;\n}\n"                                            \
      : DETFUZZ_WGMMA_ACC32(0), DETFUZZ_WGMMA_ACC32(32), DETFUZZ_WGMMA_ACC32(64)                                       \
      : "l"(desc_a), "l"(desc_b), "r"(accumulate), "n"(TRANS_B))
  if constexpr (kBf16)
    DETFUZZ_WGMMA_N192("bf16");
  else
    DETFUZZ_WGMMA_N192("f16");
#undef DETFUZZ_WGMMA_N192
}

// D(64x256, f32) = A(64x16) * B(16x256) + (accumulate ? D : 0): m64n128k16 with 32 n8 blocks
// instead of 16 (same operand layouts, same accumulator layout per n8 block).
template <typename T, int TRANS_B>
__device__ __forceinline__ void wgmma_m64n256k16(float (&d)[128], uint64_t desc_a, uint64_t desc_b, int accumulate) {
  static_assert(std::is_same_v<T, __nv_bfloat16> || std::is_same_v<T, __half>, "16-bit inputs");
  constexpr bool kBf16 = std::is_same_v<T, __nv_bfloat16>;
#define DETFUZZ_WGMMA_N256(TYPE)                                                                               \
  asm volatile(                                                                                                \
      "{\n.reg .pred p;\nsetp.ne.b32 p, %130, 0;\n"                                                            \
      "wgmma.mma_async.sync.aligned.m64n256k16.f32." TYPE "." TYPE                                             \
      " {%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, %20, %21, " \
      "%22, %23, %24, %25, %26, %27, %28, %29, %30, %31, %32, %33, %34, %35, %36, %37, %38, %39, %40, %41, "   \
      "%42, %43, %44, %45, %46, %47, %48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, "   \
      "%62, %63, %64, %65, %66, %67, %68, %69, %70, %71, %72, %73, %74, %75, %76, %77, %78, %79, %80, %81, "   \
      "%82, %83, %84, %85, %86, %87, %88, %89, %90, %91, %92, %93, %94, %95, %96, %97, %98, %99, %100, %101, " \
      "%102, %103, %104, %105, %106, %107, %108, %109, %110, %111, %112, %113, %114, %115, %116, %117, %118, " \
      "%119, %120, %121, %122, %123, %124, %125, %126, %127}, %128, %129, p, 1, 1, 0, %131;\n}\n"              \
      : DETFUZZ_WGMMA_ACC32(0), DETFUZZ_WGMMA_ACC32(32), DETFUZZ_WGMMA_ACC32(64), DETFUZZ_WGMMA_ACC32(96)      \
      : "l"(desc_a), "l"(desc_b), "r"(accumulate), "n"(TRANS_B))
  if constexpr (kBf16)
    DETFUZZ_WGMMA_N256("bf16");
  else
    DETFUZZ_WGMMA_N256("f16");
#undef DETFUZZ_WGMMA_N256
}

// D(64x64, f32) = A(64x16) * B(16x64) + (accumulate ? D : 0), A and B from shared memory, A
// K-major, B K-major (TRANS_B = 0: S = Q K^T, Q rows and K rows along the head dim) or N-major
// (TRANS_B = 1). Accumulator layout as m64n128k16's.
template <typename T, int TRANS_B = 0>
__device__ __forceinline__ void wgmma_m64n64k16_ss(float (&d)[32], uint64_t desc_a, uint64_t desc_b, int accumulate) {
  static_assert(std::is_same_v<T, __nv_bfloat16> || std::is_same_v<T, __half>, "16-bit inputs");
  constexpr bool kBf16 = std::is_same_v<T, __nv_bfloat16>;
#define DETFUZZ_WGMMA_SS(TYPE)                                                                                      \
  asm volatile(                                                                                                     \
      "{\n.reg .pred p;\nsetp.ne.b32 p, %34, 0;\n"                                                                  \
      "wgmma.mma_async.sync.aligned.m64n64k16.f32." TYPE "." TYPE                                                   \
      " {%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, %20, %21, %22, " \
      "%23, %24, %25, %26, %27, %28, %29, %30, %31}, %32, %33, p, 1, 1, 0, %35;\n}\n"                               \
      : DETFUZZ_WGMMA_ACC32(0)                                                                                      \
      : "l"(desc_a), "l"(desc_b), "r"(accumulate), "n"(TRANS_B))
  if constexpr (kBf16)
    DETFUZZ_WGMMA_SS("bf16");
  else
    DETFUZZ_WGMMA_SS("f16");
#undef DETFUZZ_WGMMA_SS
}

// D(64x64, f32) = A(64x16) * B(16x64) + (accumulate ? D : 0), A from registers (the m16n8k16
// A-fragment layout per warp: a[0] row g cols 2t.., a[1] row g+8, a[2] row g cols 8+2t.., a[3] row
// g+8), B from shared memory N-major (TRANS_B = 1: O += P V, V rows along the head dim) or K-major
// (TRANS_B = 0: S = Q K^T with Q in registers). Accumulator layout as m64n128k16's.
template <typename T, int TRANS_B = 1>
__device__ __forceinline__ void wgmma_m64n64k16_rs(float (&d)[32], const uint32_t (&a)[4], uint64_t desc_b,
                                                   int accumulate = 1) {
  static_assert(std::is_same_v<T, __nv_bfloat16> || std::is_same_v<T, __half>, "16-bit inputs");
  constexpr bool kBf16 = std::is_same_v<T, __nv_bfloat16>;
#define DETFUZZ_WGMMA_RS(TYPE)                                                                                      \
  asm volatile(                                                                                                     \
      "{\n.reg .pred p;\nsetp.ne.b32 p, %37, 0;\n"                                                                  \
      "wgmma.mma_async.sync.aligned.m64n64k16.f32." TYPE "." TYPE                                                   \
      " {%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, %20, %21, %22, " \
      "%23, %24, %25, %26, %27, %28, %29, %30, %31}, {%32, %33, %34, %35}, %36, p, 1, 1, %38;\n}\n"                 \
      : DETFUZZ_WGMMA_ACC32(0)                                                                                      \
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(desc_b), "r"(accumulate), "n"(TRANS_B))
  if constexpr (kBf16)
    DETFUZZ_WGMMA_RS("bf16");
  else
    DETFUZZ_WGMMA_RS("f16");
#undef DETFUZZ_WGMMA_RS
}

// D(64x128, f32) += A(64x16) * B(16x128), A from registers (the m16n8k16 A-fragment layout per warp:
// a[0] row g cols 2t.., a[1] row g+8, a[2] row g cols 8+2t.., a[3] row g+8), B from shared memory
// N-major (O += P V: V rows along the head dim). Accumulator layout as m64n128k16's.
template <typename T>
__device__ __forceinline__ void wgmma_m64n128k16_rs(float (&d)[64], const uint32_t (&a)[4], uint64_t desc_b) {
  static_assert(std::is_same_v<T, __nv_bfloat16> || std::is_same_v<T, __half>, "16-bit inputs");
  constexpr bool kBf16 = std::is_same_v<T, __nv_bfloat16>;
#define DETFUZZ_WGMMA_RS(TYPE)                                                                                         \
  asm volatile(                                                                                                        \
      "{\n.reg .pred p;\nsetp.ne.b32 p, %69, 0;\n"                                                                     \
      "wgmma.mma_async.sync.aligned.m64n128k16.f32." TYPE "." TYPE                                                     \
      " {%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, %20, %21, %22, "    \
      "%23, %24, %25, %26, %27, %28, %29, %30, %31, %32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, " \
      "%45, %46, %47, %48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63}, {%64, %65, "    \
      "%66, %67}, %68, p, 1, 1, 1;\n}\n"                                                                               \
      : DETFUZZ_WGMMA_ACC32(0), DETFUZZ_WGMMA_ACC32(32)                                                                \
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(desc_b), "r"(1))
  if constexpr (kBf16)
    DETFUZZ_WGMMA_RS("bf16");
  else
    DETFUZZ_WGMMA_RS("f16");
#undef DETFUZZ_WGMMA_RS
}

// D(64xN, f32) = A(64x32) * B(32xN) + (accumulate ? D : 0) for N = 128 and 64, A and B float8
// e4m3 from shared memory, both K-major (8-bit wgmma has no transpose). Accumulator layout as
// m64n128k16's. The tensor core keeps fewer bits than float32 in this sum (about 14: DeepSeek-V3,
// section 3.3.2); callers promote its partials into float32 every few instructions.
__device__ __forceinline__ void wgmma_m64n128k32_e4m3(float (&d)[64], uint64_t desc_a, uint64_t desc_b,
                                                      int accumulate) {
  asm volatile(
      "{\n.reg .pred p;\nsetp.ne.b32 p, %66, 0;\n"
      "wgmma.mma_async.sync.aligned.m64n128k32.f32.e4m3.e4m3 {%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, "
      "%13, %14, %15, %16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, %32, %33, %34, "
      "%35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, %48, %49, %50, %51, %52, %53, %54, %55, %56, "
      "%57, %58, %59, %60, %61, %62, %63}, %64, %65, p, 1, 1;\n}\n"
      : DETFUZZ_WGMMA_ACC32(0), DETFUZZ_WGMMA_ACC32(32)
      : "l"(desc_a), "l"(desc_b), "r"(accumulate));
}
__device__ __forceinline__ void wgmma_m64n64k32_e4m3(float (&d)[32], uint64_t desc_a, uint64_t desc_b, int accumulate) {
  asm volatile(
      "{\n.reg .pred p;\nsetp.ne.b32 p, %34, 0;\n"
      "wgmma.mma_async.sync.aligned.m64n64k32.f32.e4m3.e4m3 {%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, "
      "%13, %14, %15, %16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31}, %32, %33, p, 1, "
      "1;\n}\n"
      : DETFUZZ_WGMMA_ACC32(0)
      : "l"(desc_a), "l"(desc_b), "r"(accumulate));
}

// The narrow tiles of small-M matmuls (more CTAs over few columns); same layout, N / 2 values.
__device__ __forceinline__ void wgmma_m64n32k32_e4m3(float (&d)[16], uint64_t desc_a, uint64_t desc_b, int accumulate) {
  asm volatile(
      "{\n.reg .pred p;\nsetp.ne.b32 p, %18, 0;\n"
      "wgmma.mma_async.sync.aligned.m64n32k32.f32.e4m3.e4m3 {%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, "
      "%13, %14, %15}, %16, %17, p, 1, 1;\n}\n"
      : DETFUZZ_WGMMA_ACC8(0), DETFUZZ_WGMMA_ACC8(8)
      : "l"(desc_a), "l"(desc_b), "r"(accumulate));
}
__device__ __forceinline__ void wgmma_m64n16k32_e4m3(float (&d)[8], uint64_t desc_a, uint64_t desc_b, int accumulate) {
  asm volatile(
      "{\n.reg .pred p;\nsetp.ne.b32 p, %10, 0;\n"
      "wgmma.mma_async.sync.aligned.m64n16k32.f32.e4m3.e4m3 {%0, %1, %2, %3, %4, %5, %6, %7}, %8, %9, p, 1, 1;\n}\n"
      : DETFUZZ_WGMMA_ACC8(0)
      : "l"(desc_a), "l"(desc_b), "r"(accumulate));
}
__device__ __forceinline__ void wgmma_m64n8k32_e4m3(float (&d)[4], uint64_t desc_a, uint64_t desc_b, int accumulate) {
  asm volatile(
      "{\n.reg .pred p;\nsetp.ne.b32 p, %6, 0;\n"
      "wgmma.mma_async.sync.aligned.m64n8k32.f32.e4m3.e4m3 {%0, %1, %2, %3}, %4, %5, p, 1, 1;\n}\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
      : "l"(desc_a), "l"(desc_b), "r"(accumulate));
}
#undef DETFUZZ_WGMMA_ACC32
#undef DETFUZZ_WGMMA_ACC8

// Orders this thread's ordinary (generic-proxy) shared-memory writes, cp.async's included, before
// later reads by the async proxy (wgmma operands, TMA); put it before the barrier that publishes them.
__device__ __forceinline__ void fence_proxy_async_shared() {
  asm volatile("fence.proxy.async.shared::cta;" ::: "memory");
}

// Moves registers between warpgroups: the producer gives its own back, the consumers take them.
template <int N>
__device__ __forceinline__ void release_registers() {
  asm volatile("setmaxnreg.dec.sync.aligned.u32 %0;" ::"n"(N));
}
template <int N>
__device__ __forceinline__ void claim_registers() {
  asm volatile("setmaxnreg.inc.sync.aligned.u32 %0;" ::"n"(N));
}

__device__ __forceinline__ void cluster_sync() {
  asm volatile("barrier.cluster.arrive.release.aligned;\nbarrier.cluster.wait.acquire.aligned;" ::: "memory");
}
__device__ __forceinline__ uint32_t cluster_ctarank() {
  uint32_t r;
  asm volatile("mov.u32 %0, %%cluster_ctarank;" : "=r"(r));
  return r;
}
// This CTA's shared address `addr` mapped into CTA `rank` of the cluster; read with ld_dsmem4.
__device__ __forceinline__ uint32_t map_dsmem(uint32_t addr, uint32_t rank) {
  uint32_t r;
  asm volatile("mapa.shared::cluster.u32 %0, %1, %2;" : "=r"(r) : "r"(addr), "r"(rank));
  return r;
}
// Arrives on the mbarrier at `cluster_addr` (map_dsmem's address, this CTA's or another's), with
// the default release at CTA scope: what it orders is this thread's finished wgmma reads of a
// stage, which another CTA's TMA then overwrites (as CUTLASS's ClusterBarrier::arrive does).
__device__ __forceinline__ void mbar_arrive_cluster(uint32_t cluster_addr) {
  asm volatile("mbarrier.arrive.shared::cluster.b64 _, [%0];" ::"r"(cluster_addr) : "memory");
}
__device__ __forceinline__ float4 ld_dsmem4(uint32_t addr) {
  float4 v;
  asm volatile("ld.shared::cluster.v4.f32 {%0, %1, %2, %3}, [%4];"
               : "=f"(v.x), "=f"(v.y), "=f"(v.z), "=f"(v.w)
               : "r"(addr)
               : "memory");
  return v;
}

#endif  // DETFUZZ_SM90A

}  // namespace detfuzz::cuda_kernels::sm90
