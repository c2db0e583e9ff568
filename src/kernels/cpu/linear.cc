// y = x * W^T + bias on the CPU.
//
// Two regimes. Decode-sized batches (m <= a few rows) are memory-bound: every weight byte is used
// only m times, so the kernel streams W exactly once, each thread owning a contiguous range of
// output rows, converting bf16/f16 to fp32 in registers and doing the FMAs against all m activation
// rows held in L1. Prefill-sized batches are compute-bound and go to oneDNN's matmul
// (linear_onednn.cc); a build without oneDNN (-DPAGODA_ONEDNN=OFF) streams them too, which reads
// W once per block of activation rows that fits in L2: exact, 1.6-2.5x slower.
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
// Bytes of packed activations the streaming kernel keeps hot while it sweeps its weight rows: a
// fraction of the 2 MiB per-core L2, leaving room for the weight rows and prefetch.
constexpr int64_t kActivationBlockBytes = 512 << 10;

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

// Loads 32 consecutive weights starting at w + index and widens them to two fp32 vectors.
// For bf16 the two halves come out interleaved (lo = even elements, hi = odd elements): one 512-bit
// load, one shift and one AND give 32 exact floats, half the ALU work of widening each 16-element
// half separately. pack_x permutes the activations the same way. f32 and f16 keep natural order.
template <DType D>
inline void load_w32(const void* w, int64_t index, __m512& lo, __m512& hi) {
  if constexpr (D == DType::kBF16) {
    const __m512i raw = _mm512_loadu_si512(static_cast<const uint16_t*>(w) + index);
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

// Accumulates R rows of W against M rows of packed activations over all of k and writes the R*M
// outputs. Register budget: 2R weight vectors + R*M accumulators + 2 activation vectors <= 32.
template <DType D, int R, int M>
void gemv_tile(const void* w, int64_t k, const float* xp, int64_t kp, int64_t row, int64_t m0,
               int64_t n, const float* bias, float* y) {
  const size_t esize = D == DType::kF32 ? 4 : 2;
  const char* wr[R];
  for (int r = 0; r < R; ++r) wr[r] = static_cast<const char*>(w) + (row + r) * k * esize;
  __m512 acc[R][M];
  for (int r = 0; r < R; ++r)
    for (int j = 0; j < M; ++j) acc[r][j] = _mm512_setzero_ps();
  const float* x = xp + m0 * kp;
  const int64_t k_main = k - k % kStep;
  for (int64_t i = 0; i < k_main; i += kStep) {
    __m512 lo[R], hi[R];
    for (int r = 0; r < R; ++r) load_w32<D>(wr[r], i, lo[r], hi[r]);
    for (int j = 0; j < M; ++j) {
      const __m512 xa = _mm512_loadu_ps(x + j * kp + i);
      const __m512 xb = _mm512_loadu_ps(x + j * kp + i + 16);
      for (int r = 0; r < R; ++r) {
        acc[r][j] = _mm512_fmadd_ps(lo[r], xa, acc[r][j]);
        acc[r][j] = _mm512_fmadd_ps(hi[r], xb, acc[r][j]);
      }
    }
  }
  if (k_main < k) {
    __m512 lo[R], hi[R];
    for (int r = 0; r < R; ++r) load_w32_tail<D>(wr[r], k_main, k - k_main, lo[r], hi[r]);
    for (int j = 0; j < M; ++j) {
      // The packed activations are zero-padded to kp, so full loads are safe here.
      const __m512 xa = _mm512_loadu_ps(x + j * kp + k_main);
      const __m512 xb = _mm512_loadu_ps(x + j * kp + k_main + 16);
      for (int r = 0; r < R; ++r) {
        acc[r][j] = _mm512_fmadd_ps(lo[r], xa, acc[r][j]);
        acc[r][j] = _mm512_fmadd_ps(hi[r], xb, acc[r][j]);
      }
    }
  }
  for (int r = 0; r < R; ++r) {
    const float b = bias ? bias[row + r] : 0.0f;
    for (int j = 0; j < M; ++j) y[(m0 + j) * n + row + r] = _mm512_reduce_add_ps(acc[r][j]) + b;
  }
}

// Runs gemv_tile<D, R, M> for a run-time M in [1, sizeof...(Ms)]: a table of the instantiations.
template <DType D, int R, int... Ms>
void gemv_tile_rows(int64_t m_tile, std::integer_sequence<int, Ms...>, const void* w, int64_t k,
                    const float* xp, int64_t kp, int64_t row, int64_t m0, int64_t n,
                    const float* bias, float* y) {
  using Tile = void (*)(const void*, int64_t, const float*, int64_t, int64_t, int64_t, int64_t,
                        const float*, float*);
  static constexpr Tile kTiles[] = {&gemv_tile<D, R, Ms + 1>...};
  kTiles[m_tile - 1](w, k, xp, kp, row, m0, n, bias, y);
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
    gemv_tile_rows<D, R>(tile, std::make_integer_sequence<int, kMaxTile>{}, w, k, xp, kp, row, m0,
                         n, bias, y);
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

template <DType D>
void gemv(const float* x, int64_t m, int64_t k, const void* w, int64_t n, const float* bias,
          float* y, ThreadPool& pool) {
  const int64_t kp = (k + kStep - 1) / kStep * kStep;
  float* xp = scratch(m * kp);
  pack_x(x, m, k, kp, D == DType::kBF16, xp);
  // Wide batches use 2-row blocks (see gemv_rows); split work in whole blocks of 4 rows either way.
  constexpr int64_t kBlock = 4;
  const int64_t num_blocks = (n + kBlock - 1) / kBlock;
  const int64_t grain = std::max<int64_t>(1, kGemvMinElementsPerThread / (kBlock * k));
  // For larger m the packed activations outgrow L2; walking them in blocks of rows that fit keeps
  // every re-read of x in L2 (W is then re-read once per block instead, from L3 or memory).
  const int64_t m_block =
      std::max<int64_t>(8, kActivationBlockBytes / (kp * static_cast<int64_t>(sizeof(float))));
  pool.parallel_for(num_blocks, grain, [&](int64_t b0, int64_t b1) {
    const int64_t row_end = std::min(n, b1 * kBlock);
    for (int64_t mb = 0; mb < m; mb += m_block) {
      const int64_t rows_m = std::min(m_block, m - mb);
      const float* xb = xp + mb * kp;
      float* yb = y + mb * n;
      int64_t row = b0 * kBlock;
      if (rows_m <= 4) {
        for (; row + 4 <= row_end; row += 4)
          gemv_rows<D, 4>(w, k, xb, kp, rows_m, row, n, bias, yb);
      } else {
        for (; row + 2 <= row_end; row += 2)
          gemv_rows<D, 2>(w, k, xb, kp, rows_m, row, n, bias, yb);
      }
      for (; row < row_end; ++row) gemv_rows<D, 1>(w, k, xb, kp, rows_m, row, n, bias, yb);
    }
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
            const float* bias, float* y, ThreadPool& pool, Bf16Matmul bf16) {
#ifdef PAGODA_HAVE_ONEDNN
  if (m > linear_streaming_max_rows(w_dtype))
    return linear_onednn(x, m, k, w, w_dtype, n, bias, y, pool, {.bf16 = bf16});
#else
  (void)bf16;  // the streaming kernel's products are exact
#endif
  linear_streaming(x, m, k, w, w_dtype, n, bias, y, pool);
}

}  // namespace pagoda::cpu
