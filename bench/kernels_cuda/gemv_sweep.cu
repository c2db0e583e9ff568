// gemv_sweep: standalone microbenchmark of bf16 decode-GEMV designs (y = x W^T, m = 1) on H200.
// Built with PAGODA_CUDA=ON (target gemv_sweep; only common.cuh's helpers come from src/);
// bench/device/run.sh --gemv-sweep runs it.
//
// Why: src/kernels/cuda/gemv.cu streams W at 100%+ of HBM on the big projections but only 78% on
// o (4096x4096, 32 MB): a roughly fixed ~2 us per call of ramp-up/tail. This file times, with the
// protocol of bench_kernels_cuda.cc (W rotated over copies totalling 512 MB so the 50 MB L2 never
// holds it; max(copies, 20) back-to-back programmatic-dependent launches between two events; median
// of 15 batches), a copy of that kernel (V0), parameter variants of the same design (V1-V4c), and
// a persistent kernel that streams W through shared memory with 1-D TMA bulk copies (V5a-d).
// Every variant is first checked against an fp32 one-warp-per-output reference.
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <thread>
#include <vector>

#include "bench_cuda.h"
#include "kernels/cuda/common.cuh"

namespace {

using bf16 = __nv_bfloat16;

constexpr double kHbmTBs = 4.19;
constexpr int kRepeats = 15;
constexpr size_t kRotateBytes = size_t{512} << 20;  // > 10x the 50 MB L2

// Everything a variant needs; one signature for all kernels so that the sweep is a table.
struct GemvArgs {
  const bf16* x;  // [k]
  const bf16* w;  // [n, k], row-major: row r is k contiguous elements
  bf16* y;        // [n]
  int m;          // always 1; read by the classic kernels exactly as gemv.cu reads its m
  int64_t k, n;
  float* part;   // [2 * grid] partial row sums (persistent kernel only)
  int* counter;  // [n] arrival tickets, zero between calls (persistent kernel only)
};

// The kernels take the fields as separate parameters, x/w/y __restrict__, as gemv.cu's kernel
// does: passing the struct itself costs V0 8 more registers (62 instead of gemv.cu's 54).
using GemvKernel = void (*)(const bf16*, const bf16*, bf16*, int, int64_t, int64_t, float*, int*);

// ---------------------------------------------------------------------------------------------
// Helpers of src/kernels/cuda/common.cuh; the kernels themselves are this file's own.
using pagoda::cuda::load_stream16;
using pagoda::cuda::warp_sum;

// Programmatic dependent launch: wait until the previous kernel in the stream has completed and
// its writes are visible, then let the next kernel be scheduled (it waits for us the same way).
__device__ __forceinline__ void pdl_wait() { asm volatile("griddepcontrol.wait;\n" ::: "memory"); }
__device__ __forceinline__ void pdl_launch_dependents() {
  asm volatile("griddepcontrol.launch_dependents;\n" ::);
}
__device__ __forceinline__ void begin_dependent_kernel() {
  pdl_wait();
  pdl_launch_dependents();
}

// Eight bf16 (one 16-byte vector) to fp32: a bf16 is the top half of an fp32.
__device__ __forceinline__ void unpack8(const uint4& raw, float (&out)[8]) {
  const uint32_t u[4] = {raw.x, raw.y, raw.z, raw.w};
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    out[2 * i] = __uint_as_float(u[i] << 16);
    out[2 * i + 1] = __uint_as_float(u[i] & 0xffff0000u);
  }
}

// ---------------------------------------------------------------------------------------------
// Reference: one warp per output, fp32 result (no bf16 rounding), plain loads.
__global__ void gemv_reference(const bf16* x, const bf16* w, float* y, int n, int k) {
  const int row = blockIdx.x * (blockDim.x / 32) + threadIdx.x / 32;
  const int lane = threadIdx.x & 31;
  if (row >= n) return;
  float s = 0.0f;
  for (int i = lane; i < k; i += 32)
    s += __bfloat162float(x[i]) * __bfloat162float(w[static_cast<int64_t>(row) * k + i]);
  s = warp_sum(s);
  if (lane == 0) y[row] = s;
}

// Deterministic pseudo-random bf16 in [-1, 1) from a hash of (seed, index): fills 512 MB in
// milliseconds, unlike a host generator plus copies.
__global__ void fill_random(bf16* p, size_t count, uint32_t seed) {
  for (size_t i = blockIdx.x * size_t{blockDim.x} + threadIdx.x; i < count;
       i += size_t{gridDim.x} * blockDim.x) {
    uint64_t h = (i + 1) * 0x9E3779B97F4A7C15ull ^ (uint64_t{seed} << 32);
    h ^= h >> 30;
    h *= 0xBF58476D1CE4E5B9ull;
    h ^= h >> 27;
    h *= 0x94D049BB133111EBull;
    h ^= h >> 31;
    const float u = static_cast<float>(h >> 40) * (1.0f / 16777216.0f);  // [0, 1)
    p[i] = __float2bfloat16_rn(2.0f * u - 1.0f);
  }
}

// ---------------------------------------------------------------------------------------------
// V0-V4c: the design of src/kernels/cuda/gemv.cu (m = 1, no bias), parameterised.
// A block owns kCols output rows and splits k across its warps (split-K inside the block, reduced
// through shared memory). Each thread issues kUnroll x kCols independent 16-byte loads of W before
// using them. kMinBlocks feeds __launch_bounds__ to cap registers and force more resident blocks;
// 0 means no minimum, as gemv.cu's __launch_bounds__(256) (an explicit 1 is not the same: ptxas
// then gives V0 78 registers instead of 54).
// The first round of W loads is issued before griddepcontrol.wait (W never depends on the previous
// kernel); x is read after it.
template <int kThreads, int kCols, int kUnroll, int kMinBlocks>
__global__ void __launch_bounds__(kThreads, kMinBlocks)
    gemv_classic(const bf16* __restrict__ x, const bf16* __restrict__ w, bf16* __restrict__ y,
                 int m, int64_t k, int64_t n, float* part, int* counter) {
  __shared__ float partial[kThreads / 32][kCols];
  const int64_t n0 = static_cast<int64_t>(blockIdx.x) * kCols;
  const int64_t chunks = k / 8;
  const bf16* wrow[kCols];
#pragma unroll
  for (int c = 0; c < kCols; ++c) wrow[c] = w + min(n0 + c, n - 1) * k;  // clamped, not stored

  float acc[kCols];
#pragma unroll
  for (int c = 0; c < kCols; ++c) acc[c] = 0.0f;

  uint4 wv[kUnroll][kCols];
  auto load_w = [&](int64_t base) {
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) {
      const int64_t ch = base + u * kThreads;
#pragma unroll
      for (int c = 0; c < kCols; ++c)
        wv[u][c] = ch < chunks ? load_stream16(wrow[c] + ch * 8) : make_uint4(0, 0, 0, 0);
    }
  };
  load_w(threadIdx.x);
  begin_dependent_kernel();
  for (int64_t base = threadIdx.x; base < chunks; base += kThreads * kUnroll) {
    if (base != threadIdx.x) load_w(base);
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) {
      const int64_t ch = base + u * kThreads;
      if (ch >= chunks) break;
      float wf[kCols][8];
#pragma unroll
      for (int c = 0; c < kCols; ++c) unpack8(wv[u][c], wf[c]);
      // The original's loop over the m rows of x, kept for m = 1: its runtime bound (a.m) stops
      // the compiler from hoisting the x loads of all kUnroll chunks, which costs registers.
      for (int i = 0; i < 1; ++i) {
        if (i >= m) break;
        float xf[8];
        unpack8(__ldg(reinterpret_cast<const uint4*>(x + ch * 8)), xf);
#pragma unroll
        for (int c = 0; c < kCols; ++c)
#pragma unroll
          for (int j = 0; j < 8; ++j) acc[c] = fmaf(xf[j], wf[c][j], acc[c]);
      }
    }
  }

  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
#pragma unroll
  for (int c = 0; c < kCols; ++c) {
    const float s = warp_sum(acc[c]);
    if (lane == 0) partial[warp][c] = s;
  }
  __syncthreads();
  if (threadIdx.x < kCols) {
    const int64_t col = n0 + threadIdx.x;
    if (col < n) {
      float s = 0.0f;
#pragma unroll
      for (int wi = 0; wi < kThreads / 32; ++wi) s += partial[wi][threadIdx.x];
      y[col] = __float2bfloat16_rn(s);
    }
  }
}

// ---------------------------------------------------------------------------------------------
// V5: persistent TMA kernel.
//
// Work split. W is cut into "units" of kUnitElems = 512 consecutive elements (1 KB) of one row
// (requires k % 512 == 0; k = 4096 -> 8 units per row, k = 14336 -> 28). Units in row-major order
// are consecutive bytes of W, so block b owning units [start(b), start(b+1)), start(b) =
// floor(b * U / grid), owns one contiguous byte range: every block streams the same number of
// bytes to within 1 KB (o: 248 or 249 KB per block on 132 SMs), whatever n is. A row may then be
// split between blocks: only a block's first ("head") and last ("tail") rows can be. Their partial
// sums are combined deterministically across blocks (see finalize_row), all other rows are summed
// inside the block.
//
// Pipeline. A stage is kStageBytes of consecutive units (a whole number of units, so a stage never
// splits a unit, but it may span rows). One producer thread (lane 0 of the last warp) fills a ring
// of kStages stages with cp.async.bulk (1-D TMA, no tensor map) completing on the stage's "full"
// mbarrier; kComputeWarps consumer warps wait on "full", compute, and arrive on the stage's "empty"
// mbarrier (count = kComputeWarps), which the producer waits on before refilling the slot. Stage i
// uses slot i % kStages; its full barrier completes its (i / kStages)-th phase, so consumers wait
// for parity (i / kStages) & 1 and the producer, refilling for stage i >= kStages, waits for the
// empty phase (i / kStages - 1), parity ((i / kStages) & 1) ^ 1. The first kStages copies are
// issued before griddepcontrol.wait: they overlap the previous kernel's tail.
//
// Compute. A consumer warp owns whole units: lane l multiplies 16-byte pieces l and l + 32 of the
// unit with the matching 16 bytes of x (x is staged once per block in shared memory as bf16, 8 KB
// or 28 KB), warp-reduces, and lane 0 stores the unit's sum in unit_sum[] (shared, one float per
// unit of the block). A row's result is the sum of its units' sums, always in the same order.
//
// Order of the stream. The block first streams its tail row's units, then the rest from the head
// row on: both rows that may need the cross-block combine are then complete after the first few
// stages, and their global-memory round trip (fence + atomic ticket) overlaps the streaming of the
// interior rows instead of sitting in the kernel's tail.
constexpr int kUnitElems = 512;
constexpr int kUnitBytes = kUnitElems * 2;

// The persistent grid's partition, shared by host (smem size) and device.
struct TmaSplit {
  int64_t units;  // U = n * k / kUnitElems
  int grid;
  __host__ __device__ int64_t start(int64_t b) const { return b * units / grid; }
  // The block owning unit u: the largest b with start(b) <= u (no block is empty: grid <= U).
  __host__ __device__ int64_t block_of(int64_t u) const { return ((u + 1) * grid - 1) / units; }
  __host__ __device__ int64_t max_units() const { return (units + grid - 1) / grid; }
};

// Dynamic shared memory: [ring: kStages x kStageBytes][x: k bf16][unit_sum: max_units floats]
// [full barriers][empty barriers]. The ring comes first: TMA destinations need 16-byte alignment
// (128 is kept by construction since stage sizes are multiples of 1 KB).
struct TmaLayout {
  size_t x_off, sums_off, bar_off, total;
  __host__ __device__ TmaLayout(int stage_bytes, int stages, int k, int64_t max_units) {
    x_off = static_cast<size_t>(stage_bytes) * stages;
    sums_off = x_off + static_cast<size_t>(k) * 2;
    bar_off = (sums_off + 4 * static_cast<size_t>(max_units) + 7) / 8 * 8;
    total = bar_off + 2 * 8 * static_cast<size_t>(stages);
  }
};

__device__ __forceinline__ uint32_t smem_addr(const void* p) {
  return static_cast<uint32_t>(__cvta_generic_to_shared(p));
}

__device__ __forceinline__ void mbar_init(uint64_t* bar, uint32_t count) {
  asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;" ::"r"(smem_addr(bar)), "r"(count)
               : "memory");
}

// Arrive (counts as the one expected arrival of a full barrier) and add `bytes` to the
// transaction count that the bulk copy will decrement as its bytes land.
__device__ __forceinline__ void mbar_arrive_expect_tx(uint64_t* bar, uint32_t bytes) {
  asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;" ::"r"(smem_addr(bar)),
               "r"(bytes)
               : "memory");
}

// Plain arrive (release semantics at CTA scope by default): the consumer's reads of the slot
// happen before the producer, after its wait, lets TMA overwrite it.
__device__ __forceinline__ void mbar_arrive(uint64_t* bar) {
  asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];" ::"r"(smem_addr(bar)) : "memory");
}

// Spin until the phase with the given parity has completed. try_wait has acquire semantics by
// default, which makes the bulk copy's shared-memory writes visible to the waiting thread.
__device__ __forceinline__ void mbar_wait(uint64_t* bar, uint32_t parity) {
  const uint32_t addr = smem_addr(bar);
  uint32_t done = 0;
  do {
    asm volatile(
        "{\n .reg .pred p;\n"
        " mbarrier.try_wait.parity.shared::cta.b64 p, [%1], %2;\n"
        " selp.u32 %0, 1, 0, p;\n}"
        : "=r"(done)
        : "r"(addr), "r"(parity)
        : "memory");
  } while (!done);
}

// 1-D bulk copy global -> shared of `bytes` (multiple of 16, both addresses 16-byte aligned),
// completing on `bar` with complete_tx. The .shared::cluster destination is this CTA's own
// shared memory (a non-cluster launch is a cluster of one).
__device__ __forceinline__ void bulk_copy_g2s(void* dst, const void* src, uint32_t bytes,
                                              uint64_t* bar) {
  asm volatile(
      "cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];" ::
          "r"(smem_addr(dst)),
      "l"(src), "r"(bytes), "r"(smem_addr(bar))
      : "memory");
}

__device__ __forceinline__ void compute_barrier(int threads) {
  // Named barrier 1 among the consumer warps only: the producer warp never joins it.
  asm volatile("bar.sync 1, %0;" ::"r"(threads) : "memory");
}

// The physical unit range of stage s: the tail segment [t0, u1) is streamed first, then the
// rest [u0, t0); each segment is cut into stages of `ups` units.
struct StageRange {
  int64_t first;
  int count;
};
__device__ __forceinline__ StageRange stage_range(int s, int64_t u0, int64_t u1, int64_t t0,
                                                  int stages_a, int ups) {
  if (s < stages_a) {
    const int64_t f = t0 + static_cast<int64_t>(s) * ups;
    return {f, static_cast<int>(min(static_cast<int64_t>(ups), u1 - f))};
  }
  const int64_t f = u0 + static_cast<int64_t>(s - stages_a) * ups;
  return {f, static_cast<int>(min(static_cast<int64_t>(ups), t0 - f))};
}

// Sums row r's units held by this block, in unit order (one thread: a row has only 8 or 28
// units, whose shared-memory loads pipeline; the final pass then does all rows at once instead of
// one warp-reduction per row in the kernel's tail), and produces y[r]:
// directly if the block holds the whole row, otherwise through the cross-block combine: publish
// the partial in part[2b] (head row) or part[2b + 1] (tail row), fence, take a ticket on
// counter[r]; the last of the row's blocks to arrive (the classic threadfence-reduction pattern)
// adds every block's partial in block order, so the result does not depend on who came last,
// writes y[r] and resets the counter for the next call (which only touches it after its
// griddepcontrol.wait, i.e. after this grid has completed).
__device__ void finalize_row(const GemvArgs& a, const TmaSplit& sp, const float* unit_sum,
                             int64_t r, int64_t u0, int64_t u1, int64_t head_row, int spr) {
  const int64_t row_lo = r * spr, row_hi = row_lo + spr;
  const int64_t lo = max(u0, row_lo), hi = min(u1, row_hi);
  float s = 0.0f;
  for (int64_t u = lo; u < hi; ++u) s += unit_sum[u - u0];
  if (lo == row_lo && hi == row_hi) {
    a.y[r] = __float2bfloat16_rn(s);
    return;
  }
  const int64_t b = blockIdx.x;
  a.part[2 * b + (r == head_row ? 0 : 1)] = s;
  __threadfence();  // release: the partial is visible before the ticket
  const int64_t bf = sp.block_of(row_lo), bl = sp.block_of(row_hi - 1);
  if (atomicAdd(&a.counter[r], 1) != static_cast<int>(bl - bf)) return;
  __threadfence();  // acquire: the other blocks' partials are visible after their tickets
  float total = 0.0f;
  for (int64_t c = bf; c <= bl; ++c) {
    const bool is_head = sp.start(c) / spr == r;
    total += __ldcg(&a.part[2 * c + (is_head ? 0 : 1)]);  // L2, never a stale L1 line
  }
  a.y[r] = __float2bfloat16_rn(total);
  a.counter[r] = 0;
}

template <int kStageBytes, int kStages, int kComputeWarps>
__global__ void __launch_bounds__((kComputeWarps + 1) * 32, 1)
    gemv_tma(const bf16* __restrict__ x, const bf16* __restrict__ w, bf16* __restrict__ y, int m,
             int64_t k, int64_t n, float* part, int* counter) {
  constexpr int kUnitsPerStage = kStageBytes / kUnitBytes;
  constexpr int kUnitsPerWarp = kUnitsPerStage / kComputeWarps;
  constexpr int kComputeThreads = kComputeWarps * 32;
  static_assert(kStageBytes % kUnitBytes == 0 && kUnitsPerStage % kComputeWarps == 0);

  extern __shared__ __align__(128) unsigned char smem[];
  const GemvArgs a{x, w, y, m, k, n, part, counter};
  const int spr = static_cast<int>(k / kUnitElems);
  const TmaSplit sp{n * spr, static_cast<int>(gridDim.x)};
  const TmaLayout lay(kStageBytes, kStages, static_cast<int>(k), sp.max_units());
  unsigned char* ring = smem;
  bf16* xs = reinterpret_cast<bf16*>(smem + lay.x_off);
  float* unit_sum = reinterpret_cast<float*>(smem + lay.sums_off);
  uint64_t* full = reinterpret_cast<uint64_t*>(smem + lay.bar_off);
  uint64_t* empty = full + kStages;

  // This block's units [u0, u1); head row h, tail row t; the tail row's units [t0, u1) go first.
  const int64_t u0 = sp.start(blockIdx.x), u1 = sp.start(blockIdx.x + 1);
  const int64_t h = u0 / spr, t = (u1 - 1) / spr;
  const int64_t t0 = max(u0, t * spr);
  const int stages_a = static_cast<int>((u1 - t0 + kUnitsPerStage - 1) / kUnitsPerStage);
  const int stages = stages_a + static_cast<int>((t0 - u0 + kUnitsPerStage - 1) / kUnitsPerStage);

  const int warp = threadIdx.x / 32, lane = threadIdx.x & 31;
  if (threadIdx.x == 0) {
    for (int i = 0; i < kStages; ++i) {
      mbar_init(&full[i], 1);  // the producer's arrive.expect_tx (+ the copy's bytes)
      mbar_init(&empty[i], kComputeWarps);
    }
    // Make the initialised barriers visible to the async proxy (the bulk copies' complete_tx).
    asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
  }
  __syncthreads();

  if (warp == kComputeWarps) {  // producer warp: lane 0 issues every copy
    if (lane == 0) {
      auto issue = [&](int s) {
        const StageRange st = stage_range(s, u0, u1, t0, stages_a, kUnitsPerStage);
        const int slot = s % kStages;
        const uint32_t bytes = static_cast<uint32_t>(st.count) * kUnitBytes;
        mbar_arrive_expect_tx(&full[slot], bytes);
        bulk_copy_g2s(ring + static_cast<size_t>(slot) * kStageBytes, a.w + st.first * kUnitElems,
                      bytes, &full[slot]);
      };
      // The ring starts empty: the first kStages copies need no wait, and W does not depend on
      // the previous kernel, so they go out before griddepcontrol.wait.
      const int prologue = min(stages, kStages);
      for (int s = 0; s < prologue; ++s) issue(s);
      begin_dependent_kernel();
      for (int s = prologue; s < stages; ++s) {
        mbar_wait(&empty[s % kStages], ((s / kStages) & 1) ^ 1);
        issue(s);
      }
    } else {
      begin_dependent_kernel();
    }
    return;
  }

  // Consumer warps. x is written by the previous kernel: read it only after the wait.
  begin_dependent_kernel();
  for (int i = threadIdx.x; i < k / 8; i += kComputeThreads)
    reinterpret_cast<uint4*>(xs)[i] = __ldg(reinterpret_cast<const uint4*>(a.x) + i);
  compute_barrier(kComputeThreads);

  // Stages after which the tail row (end of segment A) and the head row (if different) are
  // complete; their finalisation is done by lanes of two different warps.
  const int tail_done = stages_a - 1;
  const int64_t head_end = min(t0, (h + 1) * spr);
  const int head_done =
      h != t ? stages_a + static_cast<int>((head_end - u0 - 1) / kUnitsPerStage) : -1;

  for (int s = 0; s < stages; ++s) {
    const int slot = s % kStages;
    const StageRange st = stage_range(s, u0, u1, t0, stages_a, kUnitsPerStage);
    mbar_wait(&full[slot], (s / kStages) & 1);
    const unsigned char* stage = ring + static_cast<size_t>(slot) * kStageBytes;
    // Copy this warp's W pieces of the stage to registers first (2 per unit per lane), release
    // the slot, then compute: the producer can refill the slot while we do the arithmetic.
    uint4 wv[kUnitsPerWarp][2];
#pragma unroll
    for (int j = 0; j < kUnitsPerWarp; ++j) {
      const int unit = warp + j * kComputeWarps;
#pragma unroll
      for (int q = 0; q < 2; ++q)
        if (unit < st.count)
          wv[j][q] =
              *reinterpret_cast<const uint4*>(stage + unit * kUnitBytes + (lane + 32 * q) * 16);
    }
    // Every lane's reads of the slot are ordered before lane 0's arrive by __syncwarp (a memory
    // barrier among the warp's threads) and the arrive's release semantics.
    __syncwarp();
    if (lane == 0) mbar_arrive(&empty[slot]);
#pragma unroll
    for (int j = 0; j < kUnitsPerWarp; ++j) {
      const int unit = warp + j * kComputeWarps;
      if (unit < st.count) {
        const int col0 = static_cast<int>((st.first + unit) % spr) * kUnitElems;
        float acc = 0.0f;
#pragma unroll
        for (int q = 0; q < 2; ++q) {
          float wf[8], xf[8];
          unpack8(wv[j][q], wf);
          unpack8(*reinterpret_cast<const uint4*>(xs + col0 + (lane + 32 * q) * 8), xf);
#pragma unroll
          for (int e = 0; e < 8; ++e) acc = fmaf(xf[e], wf[e], acc);
        }
        acc = warp_sum(acc);
        if (lane == 0) unit_sum[st.first + unit - u0] = acc;
      }
    }
    if (s == tail_done || s == head_done) {
      compute_barrier(kComputeThreads);  // every unit sum of the row is in shared memory
      if (s == tail_done && threadIdx.x == 0) finalize_row(a, sp, unit_sum, t, u0, u1, h, spr);
      if (s == head_done && threadIdx.x == 32 % kComputeThreads)
        finalize_row(a, sp, unit_sum, h, u0, u1, h, spr);
    }
  }

  // Interior rows h+1 .. t-1: whole in this block, one thread per row.
  compute_barrier(kComputeThreads);
  for (int64_t r = h + 1 + threadIdx.x; r < t; r += kComputeThreads)
    finalize_row(a, sp, unit_sum, r, u0, u1, h, spr);
}

// ---------------------------------------------------------------------------------------------
// Host side.

enum class Kind { kClassic, kTma };

struct Variant {
  const char* name;
  const char* what;
  GemvKernel kernel;
  Kind kind;
  int threads;
  int cols;  // classic: output rows per block
  // TMA: ring geometry (must match the template arguments) and blocks per SM of the grid.
  int stage_bytes, stages, blocks_per_sm;
};

template <int T, int C, int U, int B>
Variant classic(const char* name, const char* what) {
  return {name, what, gemv_classic<T, C, U, B>, Kind::kClassic, T, C, 0, 0, 0};
}

template <int SB, int S, int W>
Variant tma(const char* name, const char* what, int blocks_per_sm) {
  return {name, what, gemv_tma<SB, S, W>, Kind::kTma, (W + 1) * 32, 0, SB, S, blocks_per_sm};
}

struct Shape {
  const char* name;
  int n, k;
};

struct Plan {
  dim3 grid;
  size_t smem = 0;
  const char* unsupported = nullptr;
};

Plan plan_for(const Variant& v, const Shape& s, int sms) {
  Plan p;
  if (v.kind == Kind::kClassic) {
    p.grid = dim3((s.n + v.cols - 1) / v.cols);
    return p;
  }
  if (s.k % kUnitElems != 0) {
    p.unsupported = "k % 512 != 0";
    return p;
  }
  const int64_t units = static_cast<int64_t>(s.n) * (s.k / kUnitElems);
  const int grid = static_cast<int>(std::min<int64_t>(int64_t{sms} * v.blocks_per_sm, units));
  const TmaSplit sp{units, grid};
  p.grid = dim3(grid);
  p.smem = TmaLayout(v.stage_bytes, v.stages, s.k, sp.max_units()).total;
  return p;
}

cudaError_t launch(const Variant& v, const Plan& p, const GemvArgs& a, cudaStream_t stream) {
  // Programmatic dependent launch, as launch_kernel in common.cuh does.
  cudaLaunchAttribute attribute[1];
  attribute[0].id = cudaLaunchAttributeProgrammaticStreamSerialization;
  attribute[0].val.programmaticStreamSerializationAllowed = 1;
  cudaLaunchConfig_t config{};
  config.gridDim = p.grid;
  config.blockDim = dim3(v.threads);
  config.dynamicSmemBytes = p.smem;
  config.stream = stream;
  config.attrs = attribute;
  config.numAttrs = 1;
  return cudaLaunchKernelEx(&config, v.kernel, a.x, a.w, a.y, a.m, a.k, a.n, a.part, a.counter);
}

// Waits for `ev` like cudaEventSynchronize, but gives up after `seconds`: a variant that hangs
// (e.g. an mbarrier waiting for a phase that never completes) would otherwise stall the machine.
// A hung kernel cannot be stopped from the host, so the process exits (the driver then tears the
// context down) after naming the culprit.
cudaError_t wait_event(cudaEvent_t ev, const char* what, double seconds = 5.0) {
  const auto t0 = std::chrono::steady_clock::now();
  for (;;) {
    const cudaError_t e = cudaEventQuery(ev);
    if (e != cudaErrorNotReady) return e;
    if (std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count() > seconds) {
      std::printf("TIMEOUT: %s did not finish in %.0f s; exiting\n", what, seconds);
      std::fflush(stdout);
      std::_Exit(3);
    }
    std::this_thread::sleep_for(std::chrono::microseconds(50));
  }
}

float bf16_float(uint16_t b) {
  const uint32_t u = uint32_t{b} << 16;
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

}  // namespace

int main() {
  cudaDeviceProp prop{};
  CHECK_CUDA(cudaGetDeviceProperties(&prop, 0));
  const int sms = prop.multiProcessorCount;
  std::printf("# gemv_sweep on %s: %d SMs, L2 %d MB, %zu KB smem/SM, reference %.2f TB/s\n",
              prop.name, sms, prop.l2CacheSize >> 20, prop.sharedMemPerMultiprocessor >> 10,
              kHbmTBs);
  if (prop.major < 9) {
    std::printf("needs sm_90 (griddepcontrol, cp.async.bulk)\n");
    return 1;
  }

  const std::vector<Variant> variants = {
      classic<256, 4, 2, 0>("V0", "gemv.cu today: 256 thr, 4 rows/blk, unroll 2"),
      classic<256, 4, 2, 5>("V1", "V0 + launch_bounds(256, 5): 5 blk/SM"),
      classic<128, 4, 4, 0>("V2", "128 thr, 4 rows, unroll 4: 256 B/thr in flight"),
      classic<256, 2, 4, 0>("V3", "256 thr, 2 rows, unroll 4: 2x the blocks"),
      classic<512, 8, 1, 0>("V4", "512 thr, 8 rows, unroll 1: 1/2 the blocks"),
      classic<256, 8, 1, 0>("V4b", "256 thr, 8 rows, unroll 1: o = 512 blk, 1 wave"),
      classic<256, 4, 1, 8>("V4c", "256 thr, 4 rows, unroll 1, bounds(256, 8): 1 wave"),
      tma<16384, 4, 8>("V5a", "TMA persistent 1 blk/SM, 4 x 16 KB ring", 1),
      tma<16384, 8, 8>("V5b", "TMA persistent 1 blk/SM, 8 x 16 KB ring", 1),
      tma<16384, 4, 8>("V5c", "TMA persistent 2 blk/SM, 4 x 16 KB ring each", 2),
      tma<32768, 6, 8>("V5d", "TMA persistent 1 blk/SM, 6 x 32 KB ring", 1),
  };
  const Shape shapes[] = {
      {"o", 4096, 4096}, {"qkv", 6144, 4096}, {"down", 4096, 14336}, {"gate_up", 28672, 4096}};

  std::printf("\n## variants\n");
  for (const Variant& v : variants) {
    cudaFuncAttributes attr{};
    CHECK_CUDA(cudaFuncGetAttributes(&attr, v.kernel));
    std::printf("%-4s %-48s regs %3d, spill %zu B, static smem %zu B\n", v.name, v.what,
                attr.numRegs, attr.localSizeBytes, attr.sharedSizeBytes);
  }

  // One 512 MB pool of random weights: shape s uses copies [0, copies) of n*k elements each.
  bf16* pool = nullptr;
  CHECK_CUDA(cudaMalloc(&pool, kRotateBytes));
  fill_random<<<4 * sms, 256>>>(pool, kRotateBytes / 2, 7);
  int max_n = 0, max_k = 0;
  for (const Shape& s : shapes) max_n = std::max(max_n, s.n), max_k = std::max(max_k, s.k);
  bf16 *x = nullptr, *y = nullptr;
  float *y_ref = nullptr, *part = nullptr;
  int* counter = nullptr;
  CHECK_CUDA(cudaMalloc(&x, max_k * 2));
  CHECK_CUDA(cudaMalloc(&y, max_n * 2));
  CHECK_CUDA(cudaMalloc(&y_ref, max_n * 4));
  CHECK_CUDA(cudaMalloc(&part, 2 * 4 * sms * sizeof(float)));  // up to 4 blocks per SM
  CHECK_CUDA(cudaMalloc(&counter, max_n * sizeof(int)));
  CHECK_CUDA(cudaMemset(counter, 0, max_n * sizeof(int)));
  fill_random<<<64, 256>>>(x, max_k, 3);
  CHECK_CUDA(cudaGetLastError());
  cudaStream_t stream;
  CHECK_CUDA(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
  cudaEvent_t ev_a, ev_b;
  CHECK_CUDA(cudaEventCreate(&ev_a));
  CHECK_CUDA(cudaEventCreate(&ev_b));

  std::printf(
      "\n## y = x W^T, m = 1, bf16 (TB/s = W + x + y bytes / time; err = max|y - ref| / "
      "max|ref|)\n");
  std::printf("%-4s %-7s %6s %6s | %6s %6s %4s %7s | %8s %6s %6s | %7s\n", "var", "shape", "n", "k",
              "grid", "blk/SM", "regs", "smem KB", "us", "TB/s", "%HBM", "err");
  for (const Shape& s : shapes) {
    const size_t w_elems = static_cast<size_t>(s.n) * s.k;
    const int copies = static_cast<int>(std::max<size_t>(1, kRotateBytes / (w_elems * 2)));
    const int per_batch = std::max(copies, 20);
    const double bytes = 2.0 * (w_elems + s.k + s.n);
    gemv_reference<<<(s.n + 7) / 8, 256>>>(x, pool, y_ref, s.n, s.k);
    CHECK_CUDA(cudaDeviceSynchronize());
    std::vector<float> ref(s.n);
    CHECK_CUDA(cudaMemcpy(ref.data(), y_ref, s.n * 4, cudaMemcpyDeviceToHost));
    double mag = 0.0;
    for (float r : ref) mag = std::max(mag, std::fabs(static_cast<double>(r)));

    for (const Variant& v : variants) {
      std::printf("%-4s %-7s %6d %6d | ", v.name, s.name, s.n, s.k);
      const Plan p = plan_for(v, s, sms);
      if (p.unsupported != nullptr) {
        std::printf("unsupported: %s\n", p.unsupported);
        continue;
      }
      cudaError_t e = cudaSuccess;
      if (p.smem > 48 * 1024)
        e = cudaFuncSetAttribute(v.kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                 static_cast<int>(p.smem));
      int occupancy = 0;
      if (e == cudaSuccess)
        e = cudaOccupancyMaxActiveBlocksPerMultiprocessor(&occupancy, v.kernel, v.threads, p.smem);
      cudaFuncAttributes attr{};
      CHECK_CUDA(cudaFuncGetAttributes(&attr, v.kernel));
      std::printf("%6u %6d %4d %7.1f | ", p.grid.x, occupancy, attr.numRegs, p.smem / 1024.0);
      if (e != cudaSuccess) {
        std::printf("setup failed: %s\n", cudaGetErrorString(e));
        cudaGetLastError();
        continue;
      }

      // Correctness on copy 0, run three times: the result must also be bitwise identical from
      // call to call (the TMA kernel's cross-block combine must be deterministic and must reset
      // its tickets).
      const GemvArgs args0{x, pool, y, 1, s.k, s.n, part, counter};
      std::vector<uint16_t> out(s.n), first(s.n);
      bool deterministic = true;
      for (int rep = 0; rep < 3 && e == cudaSuccess; ++rep) {
        CHECK_CUDA(cudaMemsetAsync(y, 0xff, s.n * 2, stream));  // NaN: unwritten outputs show
        e = launch(v, p, args0, stream);
        if (e == cudaSuccess) e = cudaEventRecord(ev_b, stream);
        if (e == cudaSuccess) e = wait_event(ev_b, v.name);
        if (e != cudaSuccess) break;
        CHECK_CUDA(cudaMemcpy(out.data(), y, s.n * 2, cudaMemcpyDeviceToHost));
        if (rep == 0) first = out;
        deterministic = deterministic && out == first;
      }
      if (e != cudaSuccess) {
        std::printf("launch failed: %s\n", cudaGetErrorString(e));
        cudaGetLastError();
        continue;
      }
      double diff = 0.0;
      for (int i = 0; i < s.n; ++i) {
        const double d = std::fabs(bf16_float(first[i]) - static_cast<double>(ref[i]));
        diff = std::isnan(d) ? INFINITY : std::max(diff, d);
      }
      const double err = mag > 0 ? diff / mag : diff;
      if (!(err <= 1e-2) || !deterministic) {
        std::printf("%8s %6s %6s | %7.1e MISMATCH%s\n", "-", "-", "-", err,
                    deterministic ? "" : " (not deterministic)");
        continue;
      }

      // Timing: the protocol of bench_kernels_cuda.cc's time_ms.
      auto batch = [&](int first_call) {
        for (int i = 0; i < per_batch; ++i) {
          const int c = (first_call + i) % copies;
          const GemvArgs ai{x, pool + c * w_elems, y, 1, s.k, s.n, part, counter};
          const cudaError_t le = launch(v, p, ai, stream);
          if (le != cudaSuccess && e == cudaSuccess) e = le;
        }
      };
      batch(0);  // warm-up
      CHECK_CUDA(cudaEventRecord(ev_b, stream));
      CHECK_CUDA(wait_event(ev_b, v.name));
      std::vector<double> ms;
      for (int r = 0; r < kRepeats && e == cudaSuccess; ++r) {
        CHECK_CUDA(cudaEventRecord(ev_a, stream));
        batch(r * per_batch);
        CHECK_CUDA(cudaEventRecord(ev_b, stream));
        CHECK_CUDA(wait_event(ev_b, v.name));
        float t = 0.0f;
        CHECK_CUDA(cudaEventElapsedTime(&t, ev_a, ev_b));
        ms.push_back(static_cast<double>(t) / per_batch);
      }
      if (e != cudaSuccess) {
        std::printf("launch failed while timing: %s\n", cudaGetErrorString(e));
        cudaGetLastError();
        continue;
      }
      std::sort(ms.begin(), ms.end());
      const double med = ms[ms.size() / 2];
      const double tbs = bytes / (med * 1e-3) / 1e12;
      std::printf("%8.2f %6.2f %5.1f%% | %7.1e\n", med * 1e3, tbs, 100 * tbs / kHbmTBs, err);
    }
    std::printf("\n");
  }
  CHECK_CUDA(cudaGetLastError());
  cudaFree(pool);
  cudaFree(x);
  cudaFree(y);
  cudaFree(y_ref);
  cudaFree(part);
  cudaFree(counter);
  return 0;
}
