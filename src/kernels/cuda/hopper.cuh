#pragma once
// Hopper (sm_90a) primitives of the warp-specialized kernels: mbarriers, TMA tile loads, proxy
// fences, named barriers, register reallocation, and wgmma with its shared-memory descriptors.
// Device code here compiles only for sm_90a (__CUDA_ARCH_FEAT_SM90_ALL); the files that include it
// are built for that target alone (src/kernels/cuda/CMakeLists.txt).
//
// wgmma (PTX ISA, "Asynchronous Warpgroup Level Matrix Multiply-Accumulate"): a warpgroup (4
// consecutive warps, the first a multiple of 4) computes D[64 x N] += A[64 x 16] B[16 x N]. B (and
// here A when it is not in registers) is read from shared memory through a 64-bit descriptor.
// The accumulator layout is mma.sync's m16n8 C layout per warp, repeated over N / 8 (g = lane / 4,
// t = lane % 4, warp w of the warpgroup): d[4j + 0], d[4j + 1] = D[16w + g][8j + 2t + {0, 1}],
// d[4j + 2], d[4j + 3] = D[16w + g + 8][8j + 2t + {0, 1}]. A from registers has mma.sync's A layout
// per warp: a0 = A[16w + g][2t..], a1 = A[16w + g + 8][2t..], a2 = A[16w + g][2t + 8..],
// a3 = A[16w + g + 8][2t + 8..] (so an S accumulator re-packed as 16-bit pairs is the A operand of
// the next product, FlashAttention-3's trick).
//
// Shared-memory layout of every operand here: 128-byte swizzle (TMA's CU_TENSOR_MAP_SWIZZLE_128B).
// A tile of R rows x 64 16-bit elements is R rows of 128 bytes; the 16-byte chunk c of row r lives
// at chunk c ^ (r % 8) of that row; a group of 8 rows (1,024 bytes, the swizzle atom) must start
// 1,024-byte aligned. Wider rows (head dim 128) are two such tiles one after the other ("halves").
//   K-major operand (Q, K: the reduced dimension contiguous): descriptor start = the row-group's
//   address + 32 bytes per k-step of 16 elements inside the 64; stride byte offset (SBO) = 1,024
//   (from one 8-row group to the next); leading byte offset unused (1).
//   MN-major operand (V in P V: the output dimension contiguous, transposed by the instruction):
//   start = + 2,048 bytes per k-step of 16 rows; SBO = 1,024 (8 rows of the reduced dimension);
//   LBO = the byte distance between 64-column halves.
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cstdint>

namespace pagoda::cuda::hopper {

__device__ __forceinline__ uint32_t smem_u32(const void* p) {
  return static_cast<uint32_t>(__cvta_generic_to_shared(p));
}

// ---- mbarriers (shared::cta, 8 bytes each) ----
__device__ __forceinline__ void mbar_init(uint64_t* bar, uint32_t count) {
  asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;\n" ::"r"(smem_u32(bar)), "r"(count));
}
/// Makes the inits visible to the async proxy (TMA) and the other threads (with a barrier after).
__device__ __forceinline__ void mbar_fence_init() {
  asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory");
}
__device__ __forceinline__ void mbar_arrive(uint64_t* bar) {
  asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];\n" ::"r"(smem_u32(bar)) : "memory");
}
/// One arrival that also expects `bytes` of asynchronous copies to complete on the barrier.
__device__ __forceinline__ void mbar_arrive_expect_tx(uint64_t* bar, uint32_t bytes) {
  asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;\n" ::"r"(smem_u32(bar)),
               "r"(bytes)
               : "memory");
}
/// Waits until the barrier's phase of this parity has completed. A fresh barrier counts as having
/// completed the phase of parity 1, so a producer's first wait on an "empty" barrier passes.
__device__ __forceinline__ void mbar_wait(uint64_t* bar, uint32_t parity) {
  asm volatile(
      "{\n.reg .pred done;\n"
      "WAIT_%=:\n"
      "mbarrier.try_wait.parity.shared::cta.b64 done, [%0], %1;\n"
      "@!done bra WAIT_%=;\n}\n" ::"r"(smem_u32(bar)),
      "r"(parity)
      : "memory");
}

// ---- TMA ----
/// Copies the box at (c0, c1) of a 2-D tensor map into shared memory, completing on `bar`.
__device__ __forceinline__ void tma_load_2d(void* dst, const void* map, int c0, int c1,
                                            uint64_t* bar) {
  asm volatile(
      "cp.async.bulk.tensor.2d.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1, {%2, "
      "%3}], [%4];\n" ::"r"(smem_u32(dst)),
      "l"(map), "r"(c0), "r"(c1), "r"(smem_u32(bar))
      : "memory");
}
/// The same for a 3-D tensor map, box at (c0, c1, c2).
__device__ __forceinline__ void tma_load_3d(void* dst, const void* map, int c0, int c1, int c2,
                                            uint64_t* bar) {
  asm volatile(
      "cp.async.bulk.tensor.3d.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1, {%2, "
      "%3, %4}], [%5];\n" ::"r"(smem_u32(dst)),
      "l"(map), "r"(c0), "r"(c1), "r"(c2), "r"(smem_u32(bar))
      : "memory");
}
__device__ __forceinline__ void prefetch_tensor_map(const void* map) {
  asm volatile("prefetch.tensormap [%0];\n" ::"l"(map) : "memory");
}

// ---- ordering ----
/// Orders this thread's ordinary shared-memory writes before later async-proxy reads (wgmma, TMA).
__device__ __forceinline__ void fence_proxy_async() {
  asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory");
}
/// A barrier among `threads` threads (a multiple of 32) under hardware barrier `id` (1..15; 0 is
/// __syncthreads).
__device__ __forceinline__ void named_barrier(int id, int threads) {
  asm volatile("bar.sync %0, %1;\n" ::"r"(id), "r"(threads) : "memory");
}

// ---- register reallocation (per warpgroup; the kernel needs __launch_bounds__(threads, 1)) ----
template <int kRegs>
__device__ __forceinline__ void regs_dec() {
  asm volatile("setmaxnreg.dec.sync.aligned.u32 %0;\n" ::"n"(kRegs));
}
template <int kRegs>
__device__ __forceinline__ void regs_inc() {
  asm volatile("setmaxnreg.inc.sync.aligned.u32 %0;\n" ::"n"(kRegs));
}

/// Signals barrier `id` without waiting (the other side of a named_barrier of `threads`).
__device__ __forceinline__ void named_barrier_arrive(int id, int threads) {
  asm volatile("bar.arrive %0, %1;\n" ::"r"(id), "r"(threads) : "memory");
}

// ---- arithmetic ----
/// 2^x by the special-function unit, denormal results flushed to zero (one MUFU.EX2; exp2f adds
/// a range fix-up around it).
__device__ __forceinline__ float exp2_ftz(float x) {
  float y;
  asm("ex2.approx.ftz.f32 %0, %1;\n" : "=f"(y) : "f"(x));
  return y;
}
/// Two floats -> one register of two 16-bit values (the first in the low half), one cvt.
template <typename T>
__device__ __forceinline__ uint32_t pack2_rn(float lo, float hi);
template <>
__device__ __forceinline__ uint32_t pack2_rn<__nv_bfloat16>(float lo, float hi) {
  const __nv_bfloat162 v = __floats2bfloat162_rn(lo, hi);
  return reinterpret_cast<const uint32_t&>(v);
}
template <>
__device__ __forceinline__ uint32_t pack2_rn<__half>(float lo, float hi) {
  const __half2 v = __floats2half2_rn(lo, hi);
  return reinterpret_cast<const uint32_t&>(v);
}

// ---- wgmma ----
/// A 128-byte-swizzle shared-memory matrix descriptor (see the file comment).
__device__ __forceinline__ uint64_t smem_desc(const void* start, uint32_t lbo_bytes,
                                              uint32_t sbo_bytes) {
  uint64_t d = 0;
  d |= static_cast<uint64_t>((smem_u32(start) & 0x3ffff) >> 4);
  d |= static_cast<uint64_t>((lbo_bytes >> 4) & 0x3fff) << 16;
  d |= static_cast<uint64_t>((sbo_bytes >> 4) & 0x3fff) << 32;
  d |= static_cast<uint64_t>(1) << 62;  // SWIZZLE_128B
  return d;
}
/// Before the first wgmma that reads registers (accumulators, A) written by ordinary code.
__device__ __forceinline__ void wgmma_fence() {
  asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory");
}
__device__ __forceinline__ void wgmma_commit() {
  asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory");
}
template <int N>
__device__ __forceinline__ void wgmma_wait() {
  asm volatile("wgmma.wait_group.sync.aligned %0;\n" ::"n"(N) : "memory");
}
/// Keeps the compiler from moving reads or writes of an accumulator across a wgmma wait.
template <int N>
__device__ __forceinline__ void pin(float (&d)[N]) {
#pragma unroll
  for (int i = 0; i < N; ++i) asm volatile("" : "+f"(d[i])::"memory");
}
/// The same for A-operand registers: keeps them live (unreused) until the wait that follows the
/// wgmma reading them.
template <int M, int N>
__device__ __forceinline__ void pin(uint32_t (&a)[M][N]) {
#pragma unroll
  for (int i = 0; i < M; ++i)
#pragma unroll
    for (int j = 0; j < N; ++j) asm volatile("" : "+r"(a[i][j])::"memory");
}

template <typename T>
struct WgmmaType {};
template <typename T>
inline constexpr bool kIsBf16 = false;
template <>
inline constexpr bool kIsBf16<__nv_bfloat16> = true;

// The accumulator operands of the inline assembly: "%0, ..., %(n-1)" and their "+f" bindings.
#define PAGODA_WGMMA_D32                                                                       \
  "%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, " \
  "%20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31"
#define PAGODA_WGMMA_D64                                                                    \
  PAGODA_WGMMA_D32                                                                          \
  ", %32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, %48, " \
  "%49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63"
#define PAGODA_WGMMA_DN64 PAGODA_WGMMA_D32  // m64nN: N / 2 accumulators per thread
#define PAGODA_WGMMA_DN128 PAGODA_WGMMA_D64
#define PAGODA_WGMMA_OPS32(d)                                                                     \
  "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]), \
      "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]),    \
      "+f"(d[15]), "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]),  \
      "+f"(d[22]), "+f"(d[23]), "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]),  \
      "+f"(d[29]), "+f"(d[30]), "+f"(d[31])
#define PAGODA_WGMMA_OPS64(d)                                                                    \
  PAGODA_WGMMA_OPS32(d), "+f"(d[32]), "+f"(d[33]), "+f"(d[34]), "+f"(d[35]), "+f"(d[36]),        \
      "+f"(d[37]), "+f"(d[38]), "+f"(d[39]), "+f"(d[40]), "+f"(d[41]), "+f"(d[42]), "+f"(d[43]), \
      "+f"(d[44]), "+f"(d[45]), "+f"(d[46]), "+f"(d[47]), "+f"(d[48]), "+f"(d[49]), "+f"(d[50]), \
      "+f"(d[51]), "+f"(d[52]), "+f"(d[53]), "+f"(d[54]), "+f"(d[55]), "+f"(d[56]), "+f"(d[57]), \
      "+f"(d[58]), "+f"(d[59]), "+f"(d[60]), "+f"(d[61]), "+f"(d[62]), "+f"(d[63])
// TY: "bf16" or "f16". SS m64n128k16: descriptors %64 (A), %65 (B), accumulate flag %66. RS
// m64nNk16 with B transposed: A registers after the accumulators, then B's descriptor and a 1
// that sets the scale-d predicate (always accumulate).
#define PAGODA_WGMMA_SS_N128(TY)                                                 \
  "{\n.reg .pred p;\nsetp.ne.b32 p, %66, 0;\n"                                   \
  "wgmma.mma_async.sync.aligned.m64n128k16.f32." TY "." TY " {" PAGODA_WGMMA_D64 \
  "}, %64, %65, p, 1, 1, 0, 0;\n}\n"
#define PAGODA_WGMMA_RS_TB(N, TY, A0, A1, A2, A3, B, ONE)                             \
  "{\n.reg .pred p;\nsetp.ne.b32 p, " ONE                                             \
  ", 0;\n"                                                                            \
  "wgmma.mma_async.sync.aligned.m64n" #N "k16.f32." TY "." TY " {" PAGODA_WGMMA_DN##N \
      "}, {" A0 ", " A1 ", " A2 ", " A3 "}, " B ", p, 1, 1, 1;\n}\n"

// D[64 x N] (+)= A[64 x 16] B[16 x N]: _ss both from shared memory, K-major (accumulate = 0
// overwrites D); _rs_..._tb A from registers, B MN-major (transposed), always accumulating.
template <typename T>
__device__ __forceinline__ void wgmma_ss_n128(WgmmaType<T>, float (&d)[64], uint64_t a, uint64_t b,
                                              int accumulate) {
  if constexpr (kIsBf16<T>) {
    asm volatile(PAGODA_WGMMA_SS_N128("bf16")
                 : PAGODA_WGMMA_OPS64(d)
                 : "l"(a), "l"(b), "r"(accumulate));
  } else {
    asm volatile(PAGODA_WGMMA_SS_N128("f16")
                 : PAGODA_WGMMA_OPS64(d)
                 : "l"(a), "l"(b), "r"(accumulate));
  }
}

template <typename T>
__device__ __forceinline__ void wgmma_rs_n128_tb(WgmmaType<T>, float (&d)[64],
                                                 const uint32_t (&a)[4], uint64_t b) {
  if constexpr (kIsBf16<T>) {
    asm volatile(PAGODA_WGMMA_RS_TB(128, "bf16", "%64", "%65", "%66", "%67", "%68", "%69")
                 : PAGODA_WGMMA_OPS64(d)
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(b), "r"(1));
  } else {
    asm volatile(PAGODA_WGMMA_RS_TB(128, "f16", "%64", "%65", "%66", "%67", "%68", "%69")
                 : PAGODA_WGMMA_OPS64(d)
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(b), "r"(1));
  }
}

template <typename T>
__device__ __forceinline__ void wgmma_rs_n64_tb(WgmmaType<T>, float (&d)[32],
                                                const uint32_t (&a)[4], uint64_t b) {
  if constexpr (kIsBf16<T>) {
    asm volatile(PAGODA_WGMMA_RS_TB(64, "bf16", "%32", "%33", "%34", "%35", "%36", "%37")
                 : PAGODA_WGMMA_OPS32(d)
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(b), "r"(1));
  } else {
    asm volatile(PAGODA_WGMMA_RS_TB(64, "f16", "%32", "%33", "%34", "%35", "%36", "%37")
                 : PAGODA_WGMMA_OPS32(d)
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(b), "r"(1));
  }
}

}  // namespace pagoda::cuda::hopper
