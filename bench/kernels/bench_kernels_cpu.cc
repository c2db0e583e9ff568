// Benchmark of the CPU kernels (not a test): prints tables of
//   1. the machine's memory read bandwidth (sum over a 1 GiB buffer on every pool thread),
//   2. decode-size linear (m = 1, 16) on the Llama-3.2-1B shapes with bf16 weights, as GB/s of
//      weight bytes and as a fraction of (1),
//   3. prefill-size linear (m = 64, 512) in GFLOP/s: oneDNN with f32 weights and with bf16 weights
//      (each exact method, and rounded activations) against the batch-invariant kernel (the
//      streaming kernel's arithmetic, blocked for m > 4), and the streaming / oneDNN crossover in m
//      (a build without oneDNN skips this section),
//   4. paged attention: a decode batch (16 sequences x 1024 context) and a 512-token prefill.
// Weights rotate through enough copies to fill ~1 GiB, so they come from DRAM and not from the
// (here 260 MiB) L3, as they would in a real forward pass.
// Usage: bench_kernels_cpu [--quick] [--threads=N] [--only=bw|decode|prefill|crossover|attention].
// GCC 12 warns inside its own AVX-512 headers (bug 105593); see kernels/cpu/simd.h.
#if defined(__GNUC__) && !defined(__clang__) && __GNUC__ == 12
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif
#include <immintrin.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include "core/half.h"
#include "core/thread_pool.h"
#include "kernels/cpu/linear.h"
#include "kernels/cpu/linear_paths.h"
#include "kernels/cpu/paged_attention.h"

namespace pagoda::cpu {
namespace {

using Clock = std::chrono::steady_clock;

// Best-of-`reps` seconds per call of fn, after one warm-up call.
double time_best(int reps, const std::function<void()>& fn) {
  fn();
  double best = 1e30;
  for (int i = 0; i < reps; ++i) {
    const auto t0 = Clock::now();
    fn();
    best = std::min(best, std::chrono::duration<double>(Clock::now() - t0).count());
  }
  return best;
}

std::vector<float> random_floats(size_t count, uint32_t seed) {
  std::mt19937 gen(seed);
  std::uniform_real_distribution<float> dist(-1.0f, 1.0f);
  std::vector<float> v(count);
  for (auto& x : v) x = dist(gen);
  return v;
}

double measure_bandwidth(ThreadPool& pool, size_t bytes) {
  const size_t count = bytes / sizeof(float);
  std::vector<float> buf(count);
  pool.parallel_for(static_cast<int64_t>(count), 1 << 20, [&](int64_t b, int64_t e) {
    for (int64_t i = b; i < e; ++i) buf[i] = static_cast<float>(i & 1023);
  });
  std::vector<float> sums(pool.num_threads());
  const double seconds = time_best(5, [&] {
    pool.run_on_all([&](int t, int nt) {
      const size_t begin = count * t / nt / 64 * 64, end = count * (t + 1) / nt / 64 * 64;
#if defined(__AVX512F__)
      __m512 a0 = _mm512_setzero_ps(), a1 = a0, a2 = a0, a3 = a0;
      for (size_t i = begin; i < end; i += 64) {
        a0 = _mm512_add_ps(a0, _mm512_loadu_ps(&buf[i]));
        a1 = _mm512_add_ps(a1, _mm512_loadu_ps(&buf[i + 16]));
        a2 = _mm512_add_ps(a2, _mm512_loadu_ps(&buf[i + 32]));
        a3 = _mm512_add_ps(a3, _mm512_loadu_ps(&buf[i + 48]));
      }
      sums[t] = _mm512_reduce_add_ps(_mm512_add_ps(_mm512_add_ps(a0, a1), _mm512_add_ps(a2, a3)));
#else
      float acc[16] = {};
      for (size_t i = begin; i < end; i += 16)
        for (int j = 0; j < 16; ++j) acc[j] += buf[i + j];
      sums[t] = acc[0] + acc[15];
#endif
    });
  });
  if (sums[0] == 12345.678f) std::printf(" ");  // keep the sums alive
  return static_cast<double>(bytes) / seconds / 1e9;
}

struct Shape {
  const char* name;
  int64_t n, k;
};

const Shape kShapes[] = {{"q/o 2048x2048", 2048, 2048},
                         {"k/v 512x2048", 512, 2048},
                         {"gate/up 8192x2048", 8192, 2048},
                         {"down 2048x8192", 2048, 8192},
                         {"lm_head 128256x2048", 128256, 2048}};

// Weight bytes for all the copies; lives for the whole run.
struct WeightPool {
  std::vector<uint16_t> bf16;
  explicit WeightPool(size_t bytes) : bf16(bytes / 2) {
    std::mt19937 gen(7);
    std::uniform_real_distribution<float> dist(-1.0f, 1.0f);
    for (size_t i = 0; i < (1 << 20); ++i) bf16[i] = float_to_bf16(dist(gen));
    for (size_t i = (1 << 20); i < bf16.size(); i += (1 << 20))
      std::memcpy(&bf16[i], &bf16[0], std::min<size_t>(1 << 20, bf16.size() - i) * 2);
  }
};

void bench_decode_linear(ThreadPool& pool, const WeightPool& weights, double bandwidth,
                         bool quick) {
  std::printf(
      "\n== linear, decode sizes, bf16 weights (GB/s of weight bytes; %% of measured BW)\n");
  std::printf("%-22s %5s %10s %10s %8s\n", "shape", "m", "us/call", "GB/s", "of BW");
  for (const auto& s : kShapes) {
    const size_t matrix_bytes = static_cast<size_t>(s.n * s.k) * 2;
    const size_t copies = std::max<size_t>(1, weights.bf16.size() * 2 / matrix_bytes);
    for (int64_t m : {1, 16}) {
      const auto x = random_floats(static_cast<size_t>(m * s.k), 1);
      std::vector<float> y(static_cast<size_t>(m * s.n));
      size_t next = 0;
      const int calls = static_cast<int>(std::max<size_t>(copies, quick ? 2 : 4));
      const double seconds = time_best(quick ? 2 : 3, [&] {
        for (int c = 0; c < calls; ++c) {
          const uint16_t* w = weights.bf16.data() + (next++ % copies) * matrix_bytes / 2;
          linear(x.data(), m, s.k, w, DType::kBF16, s.n, nullptr, y.data(), pool);
        }
      });
      const double per_call = seconds / calls;
      const double gbs = matrix_bytes / per_call / 1e9;
      std::printf("%-22s %5ld %10.1f %10.2f %7.0f%%\n", s.name, static_cast<long>(m),
                  per_call * 1e6, gbs, 100.0 * gbs / bandwidth);
    }
  }
}

#ifdef PAGODA_HAVE_ONEDNN  // section 3 times the oneDNN path (not built with PAGODA_ONEDNN=OFF)
void bench_prefill_linear(ThreadPool& pool, bool quick) {
  std::printf(
      "\n== linear, prefill sizes (GFLOP/s), oneDNN: f32 weights; bf16 weights exact (widened to\n"
      "   fp32, or x as three bf16 terms) or with x rounded to bf16; the batch-invariant kernel "
      "(bf16)\n");
  std::printf("%-22s %5s %8s %12s %12s %12s %10s\n", "shape", "m", "f32", "bf16 widen",
              "bf16 terms", "bf16 round", "invariant");
  for (const int64_t m : {64, 512}) {
    for (const auto& s : kShapes) {
      if (s.n > 8192) continue;  // lm_head runs on the last token only
      const auto x = random_floats(static_cast<size_t>(m * s.k), 2);
      const auto wf = random_floats(static_cast<size_t>(s.n * s.k), 3);
      std::vector<uint16_t> wb(wf.size());
      for (size_t i = 0; i < wf.size(); ++i) wb[i] = float_to_bf16(wf[i]);
      std::vector<float> y(static_cast<size_t>(m * s.n));
      const double flops = 2.0 * static_cast<double>(m * s.n * s.k);
      const int reps = quick ? 1 : 3;
      auto gflops = [&](const void* w, DType dt, OnednnOptions options) {
        return flops /
               time_best(reps,
                         [&] {
                           linear_onednn(x.data(), m, s.k, w, dt, s.n, nullptr, y.data(), pool,
                                         options);
                         }) /
               1e9;
      };
      const double f32 = gflops(wf.data(), DType::kF32, {});
      const double widen = gflops(wb.data(), DType::kBF16, {.method = Bf16Method::kWiden});
      const double terms = gflops(wb.data(), DType::kBF16, {.method = Bf16Method::kTerms});
      const double round = gflops(wb.data(), DType::kBF16, {.bf16 = Bf16Matmul::kRound});
      const double streaming =
          flops /
          time_best(1,
                    [&] {
                      linear_streaming(x.data(), m, s.k, wb.data(), DType::kBF16, s.n, nullptr,
                                       y.data(), pool);
                    }) /
          1e9;
      std::printf("%-22s %5ld %8.1f %12.1f %12.1f %12.1f %10.1f\n", s.name, static_cast<long>(m),
                  f32, widen, terms, round, streaming);
    }
  }
}

void bench_crossover(ThreadPool& pool, bool quick) {
  // Where the streaming kernel hands over to oneDNN: time both on gate/up with bf16 weights, with
  // the weights L3-resident (32 MiB), so the comparison is of compute, as it is near the crossover.
  std::printf(
      "\n== streaming vs oneDNN crossover, bf16 8192x2048 (us/call; linear() switches above "
      "m=%ld)\n",
      static_cast<long>(linear_streaming_max_rows(DType::kBF16)));
  std::printf("%5s %12s %12s %12s\n", "m", "streaming", "onednn", "onednn round");
  const int64_t n = 8192, k = 2048;
  const auto wf = random_floats(static_cast<size_t>(n * k), 4);
  std::vector<uint16_t> wb(wf.size());
  for (size_t i = 0; i < wf.size(); ++i) wb[i] = float_to_bf16(wf[i]);
  for (int64_t mm : {1, 2, 4, 6, 8, 12, 16, 24, 32, 48, 64}) {
    const auto x = random_floats(static_cast<size_t>(mm * k), 5);
    std::vector<float> y(static_cast<size_t>(mm * n));
    const int reps = quick ? 2 : 4;
    auto time = [&](const std::function<void()>& fn) { return time_best(reps, fn) * 1e6; };
    const double ts = time([&] {
      linear_streaming(x.data(), mm, k, wb.data(), DType::kBF16, n, nullptr, y.data(), pool);
    });
    const double te = time([&] {
      linear_onednn(x.data(), mm, k, wb.data(), DType::kBF16, n, nullptr, y.data(), pool);
    });
    const double tr = time([&] {
      linear_onednn(x.data(), mm, k, wb.data(), DType::kBF16, n, nullptr, y.data(), pool,
                    {.bf16 = Bf16Matmul::kRound});
    });
    std::printf("%5ld %12.1f %12.1f %12.1f\n", static_cast<long>(mm), ts, te, tr);
  }
}

#endif  // PAGODA_HAVE_ONEDNN

// Llama-3.2-1B attention: 32 query heads, 8 kv heads, head_dim 64, block size 16.
void bench_attention(ThreadPool& pool, bool quick) {
  std::printf("\n== paged_attention (32 q heads, 8 kv heads, head_dim 64, block 16)\n");
  const int heads = 32, kv_heads = 8, d = 64, bs = 16;
  auto run = [&](const char* name, int num_seqs, int ctx, int new_tokens) {
    const int blocks_per_seq = (ctx + bs - 1) / bs;
    const int num_blocks = num_seqs * blocks_per_seq;
    PagedKVLayout layout{num_blocks, bs, kv_heads, d};
    const size_t cache = static_cast<size_t>(num_blocks) * bs * kv_heads * d;
    const auto kc = random_floats(cache, 8), vc = random_floats(cache, 9);
    std::vector<int32_t> tables(num_blocks), positions, qsl = {0}, seq_lens;
    std::iota(tables.begin(), tables.end(), 0);
    std::shuffle(tables.begin(), tables.end(), std::mt19937(3));
    for (int s = 0; s < num_seqs; ++s) {
      for (int i = 0; i < new_tokens; ++i) positions.push_back(ctx - new_tokens + i);
      qsl.push_back(qsl.back() + new_tokens);
      seq_lens.push_back(ctx);
    }
    const int64_t tokens = qsl.back();
    const auto q = random_floats(static_cast<size_t>(tokens) * heads * d, 10);
    std::vector<float> out(q.size());
    PagedAttentionParams p;
    p.q = q.data();
    p.positions = positions.data();
    p.query_start_loc = qsl.data();
    p.seq_lens = seq_lens.data();
    p.block_tables = tables.data();
    p.key_cache = kc.data();
    p.value_cache = vc.data();
    p.out = out.data();
    p.num_tokens = tokens;
    p.num_seqs = num_seqs;
    p.num_heads = heads;
    p.max_blocks_per_seq = blocks_per_seq;
    p.scale = 0.125f;
    p.layout = layout;
    const double t = time_best(quick ? 2 : 5, [&] { paged_attention(p, pool); });
    // Causal pairs: each query attends to positions [0, pos].
    double pairs = 0;
    for (int32_t pos : positions) pairs += pos + 1;
    const double flops = pairs * heads * d * 4.0;
    const double kv_bytes = 2.0 * num_seqs * ctx * kv_heads * d * sizeof(float);
    std::printf("%-34s %9.3f ms %8.1f GFLOP/s %8.2f GB/s of KV\n", name, t * 1e3, flops / t / 1e9,
                kv_bytes / t / 1e9);
  };
  run("decode 16 seqs x 1024 ctx", 16, 1024, 1);
  run("prefill 1 seq x 512 tokens", 1, 512, 512);
}

}  // namespace
}  // namespace pagoda::cpu

int main(int argc, char** argv) {
  using namespace pagoda;
  bool quick = false;
  int threads = 0;   // 0: one per core
  std::string only;  // one of bw, decode, prefill, crossover, attention; empty: all
  for (int i = 1; i < argc; ++i) {
    if (std::strcmp(argv[i], "--quick") == 0)
      quick = true;
    else if (std::strncmp(argv[i], "--only=", 7) == 0)
      only = argv[i] + 7;
    else if (std::strncmp(argv[i], "--threads=", 10) == 0)
      threads = std::atoi(argv[i] + 10);
  }
  auto want = [&](const char* section) { return only.empty() || only == section; };
  ThreadPool pool(threads);
  std::printf("threads: %d\n", pool.num_threads());
  double bw = 0.0;
  if (want("bw") || want("decode")) {
    bw = cpu::measure_bandwidth(pool, size_t{1} << 30);
    std::printf("\n== memory read bandwidth (1 GiB, %d threads): %.2f GB/s\n", pool.num_threads(),
                bw);
  }
  if (want("decode")) {
    const cpu::WeightPool weights(size_t{1} << 30);
    cpu::bench_decode_linear(pool, weights, bw, quick);
  }
#ifdef PAGODA_HAVE_ONEDNN
  if (want("prefill")) cpu::bench_prefill_linear(pool, quick);
  if (want("crossover")) cpu::bench_crossover(pool, quick);
#else
  if (want("prefill") || want("crossover"))
    std::printf("\n== prefill and crossover: not built (PAGODA_ONEDNN=OFF)\n");
#endif
  if (want("attention")) cpu::bench_attention(pool, quick);
  return 0;
}
