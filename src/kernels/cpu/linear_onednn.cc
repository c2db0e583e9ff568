// The batched (prefill) path of cpu::linear: oneDNN's matmul primitive, whose brgemm kernels use
// AVX512-BF16 dot products, or AMX tiles where the CPU has them.
//
// How it works.
// - Threads. Debian's libdnnl is built on OpenMP. It never opens an OpenMP team here: each thread
//   of our pool runs oneDNN single-threaded (omp_set_num_threads(1), once per thread, before its
//   first primitive) on its own range of output columns. The engine's thread count is then the only
//   one, read from nowhere else, and no OpenMP workers spin on the cores after a call to slow the
//   next kernel down (OpenBLAS's threads did: the streaming kernel fell from ~60 to ~14 GFLOP/s).
// - Weights. W [n, k] row-major is oneDNN's weights [k, n] in the "ba" layout (strides 1, k), so a
//   thread's columns [c0, c1) are rows c0..c1 of W, used in place: oneDNN copies the block it works
//   on into its scratchpad in the layout its kernel wants, O(n k) per call against O(m n k) of
//   products. Nothing is converted or cached per weight.
// - bf16 weights. oneDNN 2.6 has no fp32 x bf16 matmul; its bf16 kernels multiply bf16 by bf16 and
//   accumulate in fp32. Bf16Matmul::kRound rounds x to bf16 (8 significant bits) and runs one such
//   product: what PyTorch and llama.cpp do, twice the fp32 rate without AMX. Bf16Matmul::kExact
//   keeps fp32 activations in one of two ways, both giving fp32 products of fp32 x and the exact
//   weights, accumulated in fp32:
//     kWiden: each thread widens its columns of W to fp32 in L3-sized panels and runs an fp32
//       matmul per panel (the conversion is O(n k), the product O(m n k)).
//     kTerms: x = t0 + t1 + t2 exactly, with t0 = bf16(x), t1 = bf16(x - t0), t2 = x - t0 - t1 (24
//       significant bits in three 8-bit terms); the [3m, k] stack of the terms is one bf16 matmul
//       and y sums the three [m, n] parts, smallest first. Every t * w product is exact in fp32.
//   Without AMX the bf16 rate is twice the fp32 rate, so three terms cost 1.5x the fp32 product,
//   but the widening is an O(n k) pass per call: kAuto takes the terms below kWidenMinRows rows
//   and widens from there. AMX's bf16 rate is many times the fp32 one, so there kAuto always takes
//   the terms (not measured: no AMX machine here). docs/engine.md has the figures.
// - f16 weights: widened to fp32 as kWiden does (no f16 matmul without AVX512-FP16).
// - Primitives are cached by shape and data types. Creating one JIT-compiles its kernels (0.3-2
//   ms), so a new m costs that much the first time: worth it for large products (brgemm with a
//   fixed m is 15-30% faster than the alternative at m = 64-128), not for small ones, where a
//   continuous batch brings a new m nearly every step. A call under `fixed_m_min_flops` runs a
//   primitive created once per (n, k) with m given at run time (oneDNN then takes its jit gemm).
#include <omp.h>

#include <algorithm>
#include <cstring>
#include <memory>
#include <mutex>
#include <oneapi/dnnl/dnnl.hpp>
#include <unordered_map>
#include <vector>

#include "core/half.h"
#include "kernels/cpu/linear_paths.h"
#include "kernels/cpu/simd.h"

#if DNNL_VERSION_MAJOR != 2
#error "linear_onednn.cc uses oneDNN's 2.x API (matmul::desc), as Debian 12's libdnnl-dev 2.6 has"
#endif

namespace pagoda::cpu {
namespace {

using dnnl::memory;
using mdt = memory::data_type;

// Output columns per unit of work: oneDNN's bf16 kernels block n by 64.
constexpr int64_t kColumnBlock = 64;
// Minimum multiply-adds per thread before a call is split across threads.
constexpr int64_t kMinMacsPerThread = int64_t{1} << 22;
// Bytes of one panel of widened weights. Smaller panels leave oneDNN too few columns per call: at
// k = 8192, 1 MiB panels (32 columns) took twice as long as 4 MiB ones on the Zen 5 machine.
constexpr int64_t kPanelBytes = 4 << 20;
// Without AMX, kAuto widens the weights from this many rows up and splits x into bf16 terms below:
// the widening is an O(n k) pass per call, the terms cost 1.5x the fp32 product. One Zen 5 core,
// ms, terms / widened: 8192x2048 at m = 16: 6.9 / 12.9, m = 64: 18.5 / 18.2, m = 128: 37 / 30.
constexpr int64_t kWidenMinRows = 64;
// Rows of x per matmul with three bf16 terms: bounds the [3 rows, k] bf16 terms of x and each
// thread's [3 rows, columns] fp32 parts (for k = 14336, 44 MB of terms), and is past the size
// where a larger m speeds brgemm up.
constexpr int64_t kTermBlockRows = 512;
// Cached primitives; past this the cache starts over (a new prompt length adds a few).
constexpr size_t kMaxCachedPrimitives = 1024;

dnnl::engine& cpu_engine() {
  static dnnl::engine engine(dnnl::engine::kind::cpu, 0);
  return engine;
}

// See "Threads" above.
void run_onednn_on_this_thread_only() {
  thread_local bool done = false;
  if (!done) {
    omp_set_num_threads(1);
    done = true;
  }
}

// Per-thread scratch buffers, grown on demand and reused: the hot path does not allocate.
template <typename T>
T* thread_buffer(int which, int64_t count) {
  thread_local std::vector<T> buffers[3];
  auto& buf = buffers[which];
  if (static_cast<int64_t>(buf.size()) < count) buf.resize(static_cast<size_t>(count));
  return buf.data();
}

// One matmul shape: y[m, n] (row stride ldy) = x[m, k] (row stride k) * W^T, W [n, k] row-major.
// m is DNNL_RUNTIME_DIM_VAL for a primitive that takes m at run time.
struct MatmulKey {
  int64_t m, n, k, ldy;
  mdt dtype;  // of x and W; y is f32
  bool bias;
  bool operator==(const MatmulKey&) const = default;
};

struct MatmulKeyHash {
  size_t operator()(const MatmulKey& key) const {
    size_t h = 0;
    for (int64_t v : {key.m, key.n, key.k, key.ldy, static_cast<int64_t>(key.dtype),
                      static_cast<int64_t>(key.bias)})
      h = h * 1000003u ^ std::hash<int64_t>()(v);
    return h;
  }
};

struct Matmul {
  dnnl::matmul primitive;
  memory::desc src, weights, bias, dst, scratchpad;
};

std::shared_ptr<const Matmul> make_matmul(const MatmulKey& key) {
  auto mm = std::make_shared<Matmul>();
  mm->src = memory::desc({key.m, key.k}, key.dtype, memory::dims{key.k, 1});
  mm->weights = memory::desc({key.k, key.n}, key.dtype, memory::dims{1, key.k});
  mm->dst = memory::desc({key.m, key.n}, mdt::f32, memory::dims{key.ldy, 1});
  if (key.bias) mm->bias = memory::desc({1, key.n}, mdt::f32, memory::dims{key.n, 1});
  dnnl::primitive_attr attr;
  attr.set_scratchpad_mode(dnnl::scratchpad_mode::user);
  const auto desc = key.bias ? dnnl::matmul::desc(mm->src, mm->weights, mm->bias, mm->dst)
                             : dnnl::matmul::desc(mm->src, mm->weights, mm->dst);
  const dnnl::matmul::primitive_desc pd(desc, attr, cpu_engine());
  mm->scratchpad = pd.scratchpad_desc();
  mm->primitive = dnnl::matmul(pd);
  return mm;
}

std::shared_ptr<const Matmul> get_matmul(const MatmulKey& key) {
  // The engine first, so that it is destroyed after the cached primitives at exit.
  (void)cpu_engine();
  static std::mutex mutex;
  static std::unordered_map<MatmulKey, std::shared_ptr<const Matmul>, MatmulKeyHash> cache;
  {
    std::lock_guard lock(mutex);
    const auto it = cache.find(key);
    if (it != cache.end()) return it->second;
  }
  auto mm = make_matmul(key);  // outside the lock: the other threads' lookups need not wait
  std::lock_guard lock(mutex);
  if (cache.size() >= kMaxCachedPrimitives) cache.clear();
  return cache.emplace(key, std::move(mm)).first->second;
}

// y[m, n] (row stride ldy) = x[m, k] * W[n, k]^T (+ bias[n]); x and W in `dtype`.
void run_matmul(const OnednnOptions& options, mdt dtype, const void* x, int64_t m, int64_t k,
                const void* w, int64_t n, const float* bias, float* y, int64_t ldy) {
  run_onednn_on_this_thread_only();
  const bool fixed_m = 2 * m * n * k >= options.fixed_m_min_flops;
  const auto mm =
      get_matmul({fixed_m ? m : DNNL_RUNTIME_DIM_VAL, n, k, ldy, dtype, bias != nullptr});
  auto& engine = cpu_engine();
  thread_local dnnl::stream stream(engine);
  auto* scratch = thread_buffer<char>(0, static_cast<int64_t>(mm->scratchpad.get_size()));
  const memory::desc src = fixed_m ? mm->src : memory::desc({m, k}, dtype, memory::dims{k, 1});
  const memory::desc dst = fixed_m ? mm->dst : memory::desc({m, n}, mdt::f32, memory::dims{ldy, 1});
  std::unordered_map<int, memory> args{
      {DNNL_ARG_SRC, memory(src, engine, const_cast<void*>(x))},
      {DNNL_ARG_WEIGHTS, memory(mm->weights, engine, const_cast<void*>(w))},
      {DNNL_ARG_DST, memory(dst, engine, y)},
      {DNNL_ARG_SCRATCHPAD, memory(mm->scratchpad, engine, scratch)}};
  if (bias) args.emplace(DNNL_ARG_BIAS, memory(mm->bias, engine, const_cast<float*>(bias)));
  mm->primitive.execute(stream, args);
  stream.wait();
}

// The bf16 terms of x: out + t * term_stride holds term t of x[0, count), where term 0 = bf16(x)
// (round to nearest even, as float_to_bf16) and term t = bf16(x - terms 0..t-1), the remainder
// being exact in fp32. Three terms hold every bit of an fp32 value whose terms stay normal.
void to_bf16_terms(const float* x, int64_t count, int terms, uint16_t* out, int64_t term_stride) {
  int64_t i = 0;
#if defined(__AVX512F__)
  const __m512i round = _mm512_set1_epi32(0x7fff), one = _mm512_set1_epi32(1);
  auto convert = [&](__m512 v) {
    const __m512i u = _mm512_castps_si512(v);
    const __m512i odd = _mm512_and_si512(_mm512_srli_epi32(u, 16), one);
    __m512i r = _mm512_srli_epi32(_mm512_add_epi32(u, _mm512_add_epi32(round, odd)), 16);
    const __mmask16 nan = _mm512_cmp_ps_mask(v, v, _CMP_UNORD_Q);
    r = _mm512_mask_or_epi32(r, nan, _mm512_srli_epi32(u, 16), _mm512_set1_epi32(0x40));
    return r;  // 16 bf16 values in the low halves of the lanes
  };
  for (; i + 16 <= count; i += 16) {
    __m512 v = _mm512_loadu_ps(x + i);
    for (int t = 0; t < terms; ++t) {
      const __m512i h = convert(v);
      _mm256_storeu_si256(reinterpret_cast<__m256i*>(out + t * term_stride + i),
                          _mm512_cvtepi32_epi16(h));
      v = _mm512_sub_ps(v, _mm512_castsi512_ps(_mm512_slli_epi32(h, 16)));
    }
  }
#endif
  for (; i < count; ++i) {
    float v = x[i];
    for (int t = 0; t < terms; ++t) {
      out[t * term_stride + i] = float_to_bf16(v);
      v -= bf16_to_float(out[t * term_stride + i]);
    }
  }
}

// How bf16 weights are multiplied: x in bf16 terms (1 = rounded, 3 = exact), or W widened.
enum class Bf16Path { kRound, kTerms, kWiden };

Bf16Path bf16_path(const OnednnOptions& options, int64_t m) {
  if (options.bf16 == Bf16Matmul::kRound) return Bf16Path::kRound;
  if (options.method == Bf16Method::kTerms) return Bf16Path::kTerms;
  if (options.method == Bf16Method::kWiden) return Bf16Path::kWiden;
  static const bool amx = dnnl::get_effective_cpu_isa() == dnnl::cpu_isa::avx512_core_amx;
  return amx || m < kWidenMinRows ? Bf16Path::kTerms : Bf16Path::kWiden;
}

// The columns [c0, c1) of y [m, n] for bf16 weights, from xb: the [terms * m, k] stack of the bf16
// terms of x (to_bf16_terms), term t in rows [t m, (t + 1) m).
void bf16_columns(const OnednnOptions& options, const uint16_t* xb, int terms, int64_t m, int64_t k,
                  const void* w, int64_t n, const float* bias, float* y, int64_t c0, int64_t c1) {
  const auto* w16 = static_cast<const uint16_t*>(w) + c0 * k;
  const int64_t cols = c1 - c0;
  if (terms == 1) {
    run_matmul(options, mdt::bf16, xb, m, k, w16, cols, bias ? bias + c0 : nullptr, y + c0, n);
    return;
  }
  // parts [terms * m, cols]: term t of x times W^T in rows [t m, (t + 1) m); summed smallest first.
  float* parts = thread_buffer<float>(1, terms * m * cols);
  run_matmul(options, mdt::bf16, xb, terms * m, k, w16, cols, nullptr, parts, cols);
  for (int64_t r = 0; r < m; ++r) {
    float* out = y + r * n + c0;
    for (int64_t j = 0; j < cols; ++j) {
      float acc = parts[((terms - 1) * m + r) * cols + j];
      for (int t = terms - 2; t >= 0; --t) acc += parts[(t * m + r) * cols + j];
      out[j] = acc + (bias ? bias[c0 + j] : 0.0f);
    }
  }
}

// The columns [c0, c1) of y for bf16/f16 weights widened to fp32 panel by panel.
void widened_columns(const OnednnOptions& options, const float* x, int64_t m, int64_t k,
                     const void* w, DType w_dtype, int64_t n, const float* bias, float* y,
                     int64_t c0, int64_t c1) {
  const int64_t panel_cols =
      std::max<int64_t>(kColumnBlock, kPanelBytes / (k * static_cast<int64_t>(sizeof(float))) /
                                          kColumnBlock * kColumnBlock);
  float* panel = thread_buffer<float>(2, std::min(panel_cols, c1 - c0) * k);
  const auto* w16 = static_cast<const uint16_t*>(w);
  for (int64_t p0 = c0; p0 < c1; p0 += panel_cols) {
    const int64_t cols = std::min(panel_cols, c1 - p0);
    for (int64_t r = 0; r < cols; ++r)
      simd::convert_row(w16 + (p0 + r) * k, w_dtype, k, panel + r * k);
    run_matmul(options, mdt::f32, x, m, k, panel, cols, bias ? bias + p0 : nullptr, y + p0, n);
  }
}

}  // namespace

void linear_onednn(const float* x, int64_t m, int64_t k, const void* w, DType w_dtype, int64_t n,
                   const float* bias, float* y, ThreadPool& pool, const OnednnOptions& options) {
  if (m <= 0 || n <= 0) return;
  if (k <= 0) {
    for (int64_t r = 0; r < m; ++r)
      for (int64_t j = 0; j < n; ++j) y[r * n + j] = bias ? bias[j] : 0.0f;
    return;
  }
  const Bf16Path path = bf16_path(options, m);
  const bool widen =
      w_dtype == DType::kF16 || (w_dtype == DType::kBF16 && path == Bf16Path::kWiden);
  const int terms = path == Bf16Path::kTerms ? 3 : 1;
  const bool bf16_matmul = w_dtype == DType::kBF16 && !widen;
  // Work is split over blocks of 64 output columns; a thread runs one matmul on its range. With
  // bf16 terms of x, rows go in blocks of kTermBlockRows (bounding the terms and parts buffers).
  const int64_t blocks = (n + kColumnBlock - 1) / kColumnBlock;
  const int64_t row_block = bf16_matmul && terms > 1 ? kTermBlockRows : m;
  for (int64_t r0 = 0; r0 < m; r0 += row_block) {
    const int64_t rows = std::min(row_block, m - r0);
    const float* xr = x + r0 * k;
    float* yr = y + r0 * n;
    uint16_t* xb = nullptr;
    if (bf16_matmul) {
      xb = thread_buffer<uint16_t>(0, terms * rows * k);  // [terms * rows, k]
      const int64_t grain = std::max<int64_t>(1, (int64_t{1} << 16) / k);
      pool.parallel_for(rows, grain, [&](int64_t i0, int64_t i1) {
        to_bf16_terms(xr + i0 * k, (i1 - i0) * k, terms, xb + i0 * k, rows * k);
      });
    }
    const int64_t grain = std::max<int64_t>(1, kMinMacsPerThread / (rows * k * kColumnBlock));
    pool.parallel_for(blocks, grain, [&](int64_t b0, int64_t b1) {
      const int64_t c0 = b0 * kColumnBlock, c1 = std::min(n, b1 * kColumnBlock);
      if (xb) return bf16_columns(options, xb, terms, rows, k, w, n, bias, yr, c0, c1);
      if (widen) return widened_columns(options, xr, rows, k, w, w_dtype, n, bias, yr, c0, c1);
      run_matmul(options, mdt::f32, xr, rows, k, static_cast<const float*>(w) + c0 * k, c1 - c0,
                 bias ? bias + c0 : nullptr, yr + c0, n);
    });
  }
}

}  // namespace pagoda::cpu
