// y = x * W^T + bias on the CPU.
//
// Two regimes, one arithmetic. Decode-sized batches (m <= 4) are memory-bound: every weight byte
// is used only m times, so the kernel streams W exactly once, each thread owning a contiguous range
// of output rows, converting bf16/f16 to fp32 in registers and doing the FMAs against all m
// activation rows held in L1. Prefill-sized batches are compute-bound: gemm_blocked runs the same
// per-output arithmetic (gemv_tile) in cache blocks, so that a row's result has the same bits
// whatever m is (batch invariance, docs/engine.md). With LinearOptions::batch_invariant off (or
// rounded bf16 activations), m > 4 goes to oneDNN's matmul instead (linear_onednn.cc): faster at
// prefill sizes, but its order depends on m.
#include "kernels/cpu/linear.h"

#include <algorithm>
#include <utility>
#include <vector>

#include "kernels/cpu/linear_paths.h"
#include "kernels/cpu/simd.h"

namespace pagoda::cpu {
namespace {

// Above this many activation rows, oneDNN wins over the streaming kernel. One AMD EPYC (Zen 5)
// core, ms of CPU time, streaming against oneDNN's default: bf16 8192x2048 at m = 4: 4.2 / 3.5
// (three bf16 terms), m = 8: 5.9 / 4.6; f32 at m = 4: 6.6 / 4.7. f16 weights are widened to fp32
// on every call (an O(n k) pass), which pays off later: m = 24: 11.9 / 12.3, m = 32: 15.6 / 13.6.
constexpr int64_t kGemvMaxRows = 4;
constexpr int64_t kGemvMaxRowsF16 = 24;
// Minimum weight elements per thread before a GEMV is split across threads: below that the wake-up
// of the pool costs more than the work.
constexpr int64_t kGemvMinElementsPerThread = 1 << 15;
// gemm_blocked's blocking: tiles of kBlockedR rows of W by kBlockedM rows of x, in blocks of
// kColumnBlock rows of W by kRowBlock rows of x by kDepthBlock elements of k (a multiple of kStep).
constexpr int64_t kBlockedR = 4, kBlockedM = 4;
constexpr int64_t kColumnBlock = 64, kRowBlock = 64, kDepthBlock = 512;
// Minimum multiply-adds per thread before gemm_blocked splits a call across threads.
constexpr int64_t kMinMacsPerThread = int64_t{1} << 22;

// Scratch memory reused across calls on the same calling thread, so the hot path does not allocate.
// Each calling thread has its own, so concurrent linear() calls from different threads are safe.
float* scratch(int64_t count) {
  thread_local std::vector<float> buf;
  if (static_cast<int64_t>(buf.size()) < count) buf.resize(static_cast<size_t>(count));
  return buf.data();
}

// ---------------------------------------------------------------------------------------------
// The streaming GEMV / skinny GEMM kernel.
// ---------------------------------------------------------------------------------------------

#if defined(__AVX512F__)

constexpr int64_t kStep = 32;  // k elements per inner iteration: two 16-lane vectors

// One packed row of x for pack_x_tiled.
float* scratch_row(int64_t count) {
  thread_local std::vector<float> buf;
  if (static_cast<int64_t>(buf.size()) < count) buf.resize(static_cast<size_t>(count));
  return buf.data();
}

// Keeps a loaded vector in a register: without this GCC folds the load into each FMA that uses
// it (a memory operand), loading x R times and W twice per chunk, and L1 loads, not FMAs, then
// bound the tile (53 against ~110 GFLOP/s on one Zen 5 core).
template <typename V>
inline void in_register(V& v) {
  asm("" : "+v"(v));
}

// Loads 32 consecutive weights starting at w + index and widens them to two fp32 vectors.
// For bf16 the two halves come out interleaved (lo = even elements, hi = odd elements): one 512-bit
// load, one shift and one AND give 32 exact floats, half the ALU work of widening each 16-element
// half separately. pack_x permutes the activations the same way. f32 and f16 keep natural order.
template <DType D>
inline void load_w32(const void* w, int64_t index, __m512& lo, __m512& hi) {
  if constexpr (D == DType::kBF16) {
    __m512i raw = _mm512_loadu_si512(static_cast<const uint16_t*>(w) + index);
    in_register(raw);
    lo = _mm512_castsi512_ps(_mm512_slli_epi32(raw, 16));
    hi = _mm512_castsi512_ps(
        _mm512_and_si512(raw, _mm512_set1_epi32(static_cast<int>(0xffff0000u))));
  } else if constexpr (D == DType::kF16) {
    const auto* p = static_cast<const uint16_t*>(w) + index;
    lo = _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p)));
    hi = _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p + 16)));
  } else {
    const float* p = static_cast<const float*>(w) + index;
    lo = _mm512_loadu_ps(p);
    hi = _mm512_loadu_ps(p + 16);
  }
}

// The same for the last `count` (< 32) weights of a row; missing lanes are zero.
template <DType D>
inline void load_w32_tail(const void* w, int64_t index, int64_t count, __m512& lo, __m512& hi) {
  if constexpr (D == DType::kBF16) {
    const __mmask32 mask = static_cast<__mmask32>((uint64_t{1} << count) - 1);
    const __m512i raw = _mm512_maskz_loadu_epi16(mask, static_cast<const uint16_t*>(w) + index);
    lo = _mm512_castsi512_ps(_mm512_slli_epi32(raw, 16));
    hi = _mm512_castsi512_ps(
        _mm512_and_si512(raw, _mm512_set1_epi32(static_cast<int>(0xffff0000u))));
  } else {
    lo = simd::load_as_f32(w, D, index, simd::tail_mask(count));
    hi = simd::load_as_f32(w, D, index + 16, simd::tail_mask(count - 16));
  }
}

// Accumulates R rows of W against M rows of packed activations over k and writes the R*M outputs.
// Register budget: 2R weight vectors + R*M accumulators + 2 activation vectors <= 32.
//
// This fixes the arithmetic of every output y[i, j] whatever the batch: one 16-lane fp32
// accumulator, for each 32-element chunk of k in order two FMAs (the chunk's first and second
// vector, in load_w32's order), the tail zero-padded, then _mm512_reduce_add_ps plus the bias. The
// tile shape, the thread split and the blocking of k (below) only regroup outputs, so a row of x
// gets the same bits alone, in a decode batch or in a prefill of hundreds of rows.
//
// [k0, k1) is the part of k this call covers (k0 a multiple of kStep; k1 one too, or k): a call
// with k0 > 0 resumes from the accumulators saved in `state` (R * M * 16 floats), and one with
// k1 < k saves them there instead of writing y. The decode path covers [0, k) in one call.
template <DType D, int R, int M>
void gemv_tile(const void* w, int64_t k, int64_t row, const float* x, int64_t x_row,
               int64_t x_scale, float* y, int64_t n, const float* bias, int64_t k0, int64_t k1,
               float* state) {
  const size_t esize = D == DType::kF32 ? 4 : 2;
  const char* wr[R];
  for (int r = 0; r < R; ++r) wr[r] = static_cast<const char*>(w) + (row + r) * k * esize;
  __m512 acc[R][M];
  for (int r = 0; r < R; ++r)
    for (int j = 0; j < M; ++j)
      acc[r][j] = k0 == 0 ? _mm512_setzero_ps() : _mm512_loadu_ps(state + (r * M + j) * 16);
  const int64_t k_main = std::min(k1, k - k % kStep);
  for (int64_t i = k0; i < k_main; i += kStep) {
    __m512 lo[R], hi[R];
    for (int r = 0; r < R; ++r) load_w32<D>(wr[r], i, lo[r], hi[r]);
    for (int j = 0; j < M; ++j) {
      __m512 xa = _mm512_loadu_ps(x + j * x_row + i * x_scale);
      __m512 xb = _mm512_loadu_ps(x + j * x_row + i * x_scale + 16);
      in_register(xa);
      in_register(xb);
      for (int r = 0; r < R; ++r) {
        acc[r][j] = _mm512_fmadd_ps(lo[r], xa, acc[r][j]);
        acc[r][j] = _mm512_fmadd_ps(hi[r], xb, acc[r][j]);
      }
    }
  }
  if (k_main < k1) {
    __m512 lo[R], hi[R];
    for (int r = 0; r < R; ++r) load_w32_tail<D>(wr[r], k_main, k - k_main, lo[r], hi[r]);
    for (int j = 0; j < M; ++j) {
      // The packed activations are zero-padded to kp, so full loads are safe here.
      const __m512 xa = _mm512_loadu_ps(x + j * x_row + k_main * x_scale);
      const __m512 xb = _mm512_loadu_ps(x + j * x_row + k_main * x_scale + 16);
      for (int r = 0; r < R; ++r) {
        acc[r][j] = _mm512_fmadd_ps(lo[r], xa, acc[r][j]);
        acc[r][j] = _mm512_fmadd_ps(hi[r], xb, acc[r][j]);
      }
    }
  }
  if (k1 < k) {
    for (int r = 0; r < R; ++r)
      for (int j = 0; j < M; ++j) _mm512_storeu_ps(state + (r * M + j) * 16, acc[r][j]);
    return;
  }
  for (int r = 0; r < R; ++r) {
    const float b = bias ? bias[row + r] : 0.0f;
    for (int j = 0; j < M; ++j) y[j * n + row + r] = _mm512_reduce_add_ps(acc[r][j]) + b;
  }
}

using TileFn = void (*)(const void*, int64_t, int64_t, const float*, int64_t, int64_t, float*,
                        int64_t, const float*, int64_t, int64_t, float*);

// gemv_tile<D, R, M> for a run-time M in [1, sizeof...(Ms)]: a table of the instantiations.
template <DType D, int R, int... Ms>
TileFn tile_for_rows(int64_t m_tile, std::integer_sequence<int, Ms...>) {
  static constexpr TileFn kTiles[] = {&gemv_tile<D, R, Ms + 1>...};
  return kTiles[m_tile - 1];
}

// One row block of R rows of W against every activation row, in tiles of at most 4 rows (R >= 4:
// more independent weight streams) or 8 (R <= 2: registers for the wider tile). The weight block
// stays in L1/L2 across the tiles, so W still comes from memory once.
template <DType D, int R>
void gemv_rows(const void* w, int64_t k, const float* xp, int64_t kp, int64_t m, int64_t row,
               int64_t n, const float* bias, float* y) {
  constexpr int kMaxTile = R >= 4 ? 4 : 8;
  for (int64_t m0 = 0; m0 < m;) {
    const int64_t tile = std::min<int64_t>(m - m0, kMaxTile);
    tile_for_rows<D, R>(tile, std::make_integer_sequence<int, kMaxTile>{})(
        w, k, row, xp + m0 * kp, kp, 1, y + m0 * n, n, bias, 0, k, nullptr);
    m0 += tile;
  }
}

// Copies x [m, k] into a zero-padded [m, kp] buffer, with every 32-element chunk de-interleaved
// (even elements first, then odd) when the weights are bf16, to match load_w32<kBF16>.
void pack_x(const float* x, int64_t m, int64_t k, int64_t kp, bool deinterleave, float* xp) {
  for (int64_t j = 0; j < m; ++j) {
    const float* src = x + j * k;
    float* dst = xp + j * kp;
    std::fill(dst + k - k % kStep, dst + kp, 0.0f);
    if (!deinterleave) {
      std::copy(src, src + k, dst);
      continue;
    }
    for (int64_t i = 0; i < k; i += kStep) {
      const int64_t count = std::min<int64_t>(kStep, k - i);
      for (int64_t t = 0; t < count; ++t) dst[i + (t & 1) * 16 + t / 2] = src[i + t];
    }
  }
}

// pack_x for gemm_blocked: x as tiles of kBlockedM rows, each tile [kp / 32][kBlockedM][32] (a
// chunk of every row of the tile together); rows past m in the last tile are zero.
void pack_x_tiled(const float* x, int64_t m, int64_t k, int64_t kp, bool deinterleave, float* xt) {
  float* row = scratch_row(kp);
  for (int64_t r = 0; r < (m + kBlockedM - 1) / kBlockedM * kBlockedM; ++r) {
    if (r < m) {
      pack_x(x + r * k, 1, k, kp, deinterleave, row);
    } else {
      std::fill(row, row + kp, 0.0f);
    }
    float* tile = xt + r / kBlockedM * kBlockedM * kp + r % kBlockedM * kStep;
    for (int64_t c = 0; c < kp; c += kStep)
      std::copy(row + c, row + c + kStep, tile + c * kBlockedM);
  }
}

// Per-thread accumulator state of gemm_blocked: one R x M tile's 16-lane sums per tile of a block.
float* tile_state(int64_t count) {
  thread_local std::vector<float> buf;
  if (static_cast<int64_t>(buf.size()) < count) buf.resize(static_cast<size_t>(count));
  return buf.data();
}

// The tile of gemv_tile<D, R, M> for run-time R and M in [1, 4].
template <DType D>
TileFn blocked_tile(int64_t r, int64_t m) {
  const auto rows = std::make_integer_sequence<int, kBlockedM>{};
  switch (r) {
    case 1:
      return tile_for_rows<D, 1>(m, rows);
    case 2:
      return tile_for_rows<D, 2>(m, rows);
    case 3:
      return tile_for_rows<D, 3>(m, rows);
    default:
      return tile_for_rows<D, 4>(m, rows);
  }
}

// The same products as the streaming kernel for larger m, blocked for the caches: each thread
// takes blocks of kColumnBlock rows of W (columns of y); for each block of kRowBlock rows of x and
// each kDepthBlock slice of k, it runs 4 x 4 tiles (4 rows of W, 4 of x) whose sums wait in
// tile_state between the slices. The slice of W (64 x 512) stays in L1/L2 while every tile of x
// passes over it, and a tile of x (4 x 512) in L1 while the block's 16 tiles of W pass over it.
// Each output's arithmetic is gemv_tile's, in the same order: the results equal the streaming
// kernel's bit for bit.
template <DType D>
void gemm_blocked(const float* xp, int64_t m, int64_t k, int64_t kp, const void* w, int64_t n,
                  const float* bias, float* y, ThreadPool& pool) {
  const int64_t blocks = (n + kColumnBlock - 1) / kColumnBlock;
  const int64_t grain = std::max<int64_t>(1, kMinMacsPerThread / (m * k * kColumnBlock));
  pool.parallel_for(blocks, grain, [&](int64_t b0, int64_t b1) {
    float* state = tile_state(kRowBlock * kColumnBlock * 16);
    for (int64_t c0 = b0 * kColumnBlock; c0 < std::min(n, b1 * kColumnBlock); c0 += kColumnBlock) {
      const int64_t c1 = std::min(n, c0 + kColumnBlock);
      for (int64_t r0 = 0; r0 < m; r0 += kRowBlock) {
        const int64_t r1 = std::min(m, r0 + kRowBlock);
        for (int64_t k0 = 0; k0 < k; k0 += kDepthBlock) {
          const int64_t k1 = std::min(k, k0 + kDepthBlock);
          float* tile = state;
          for (int64_t t0 = r0; t0 < r1; t0 += kBlockedM) {
            const int64_t tm = std::min(kBlockedM, r1 - t0);
            for (int64_t row = c0; row < c1; row += kBlockedR, tile += kBlockedR * kBlockedM * 16) {
              const int64_t tr = std::min(kBlockedR, c1 - row);
              blocked_tile<D>(tr, tm)(w, k, row, xp + t0 * kp, kStep, kBlockedM, y + t0 * n, n,
                                      bias, k0, k1, tile);
            }
          }
        }
      }
    }
  });
}

template <DType D>
void gemv(const float* x, int64_t m, int64_t k, const void* w, int64_t n, const float* bias,
          float* y, ThreadPool& pool) {
  const int64_t kp = (k + kStep - 1) / kStep * kStep;
  if (m > kGemvMaxRows) {
    // Tiles of 4 rows interleaved per 32-element chunk, so that a tile is read sequentially.
    const int64_t tiles = (m + kBlockedM - 1) / kBlockedM;
    float* xt = scratch(tiles * kBlockedM * kp);
    pack_x_tiled(x, m, k, kp, D == DType::kBF16, xt);
    return gemm_blocked<D>(xt, m, k, kp, w, n, bias, y, pool);
  }
  float* xp = scratch(m * kp);
  pack_x(x, m, k, kp, D == DType::kBF16, xp);
  // Decode: W streamed once, each thread a range of blocks of 4 rows.
  constexpr int64_t kBlock = 4;
  const int64_t num_blocks = (n + kBlock - 1) / kBlock;
  const int64_t grain = std::max<int64_t>(1, kGemvMinElementsPerThread / (kBlock * k));
  pool.parallel_for(num_blocks, grain, [&](int64_t b0, int64_t b1) {
    const int64_t row_end = std::min(n, b1 * kBlock);
    int64_t row = b0 * kBlock;
    for (; row + 4 <= row_end; row += 4) gemv_rows<D, 4>(w, k, xp, kp, m, row, n, bias, y);
    for (; row < row_end; ++row) gemv_rows<D, 1>(w, k, xp, kp, m, row, n, bias, y);
  });
}

void gemv_dispatch(const float* x, int64_t m, int64_t k, const void* w, DType dtype, int64_t n,
                   const float* bias, float* y, ThreadPool& pool) {
  switch (dtype) {
    case DType::kBF16:
      return gemv<DType::kBF16>(x, m, k, w, n, bias, y, pool);
    case DType::kF16:
      return gemv<DType::kF16>(x, m, k, w, n, bias, y, pool);
    default:
      return gemv<DType::kF32>(x, m, k, w, n, bias, y, pool);
  }
}

#else  // portable path: plain loops the compiler vectorises

void gemv_dispatch(const float* x, int64_t m, int64_t k, const void* w, DType dtype, int64_t n,
                   const float* bias, float* y, ThreadPool& pool) {
  const int64_t grain = std::max<int64_t>(1, kGemvMinElementsPerThread / k);
  pool.parallel_for(n, grain, [&](int64_t r0, int64_t r1) {
    std::vector<float> row(static_cast<size_t>(k));
    const size_t esize = dtype == DType::kF32 ? 4 : 2;
    for (int64_t r = r0; r < r1; ++r) {
      simd::convert_row(static_cast<const char*>(w) + r * k * esize, dtype, k, row.data());
      for (int64_t j = 0; j < m; ++j) {
        const float* xr = x + j * k;
        float acc = 0.0f;
        for (int64_t i = 0; i < k; ++i) acc += xr[i] * row[i];
        y[j * n + r] = acc + (bias ? bias[r] : 0.0f);
      }
    }
  });
}

#endif  // __AVX512F__

// y = bias (or 0) broadcast over rows: the product with an empty k.
void fill_bias(int64_t m, int64_t n, const float* bias, float* y) {
  for (int64_t j = 0; j < m; ++j)
    for (int64_t r = 0; r < n; ++r) y[j * n + r] = bias ? bias[r] : 0.0f;
}

}  // namespace

int64_t linear_streaming_max_rows(DType w_dtype) {
  return w_dtype == DType::kF16 ? kGemvMaxRowsF16 : kGemvMaxRows;
}

void linear_streaming(const float* x, int64_t m, int64_t k, const void* w, DType w_dtype, int64_t n,
                      const float* bias, float* y, ThreadPool& pool) {
  if (m <= 0 || n <= 0) return;
  if (k <= 0) return fill_bias(m, n, bias, y);
  gemv_dispatch(x, m, k, w, w_dtype, n, bias, y, pool);
}

void linear(const float* x, int64_t m, int64_t k, const void* w, DType w_dtype, int64_t n,
            const float* bias, float* y, ThreadPool& pool, const LinearOptions& options) {
#ifdef PAGODA_HAVE_ONEDNN
  const bool onednn = !options.batch_invariant || options.bf16 == Bf16Matmul::kRound;
  if (onednn && m > linear_streaming_max_rows(w_dtype))
    return linear_onednn(x, m, k, w, w_dtype, n, bias, y, pool, {.bf16 = options.bf16});
#else
  (void)options;  // the streaming kernel's products are exact
#endif
  linear_streaming(x, m, k, w, w_dtype, n, bias, y, pool);
}

}  // namespace pagoda::cpu
