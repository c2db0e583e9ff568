// The CUDA kernels against the H200's limits (docs/performance.md: 4.19 TB/s HBM, 786 TFLOP/s
// bf16): GEMV bandwidth (ours vs cuBLASLt; the W4A16 and INT8 GEMVs) on the Llama-3.1-8B
// projections, paged decode attention bandwidth, prefill attention FLOP rate, the GPU sampler's
// time per step.
//
// Protocol: random data; every measured input set is rotated among copies whose total exceeds the
// L2 several times; warm-up, then the median of 15 batches of launches timed with CUDA
// events. Prints one table; exits 1 on any CUDA error or when the GEMV and cuBLASLt disagree.
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <numeric>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "bench_cuda.h"
#include "core/half.h"
#include "kernels/cuda/linear.h"
#include "kernels/cuda/linear_int8.h"
#include "kernels/cuda/linear_w4.h"
#include "kernels/cuda/paged_attention.h"
#include "kernels/cuda/sample_logits.h"
#include "kernels/cuda/tensor_ops.h"
#include "read_probe.h"

namespace pagoda::cuda {
namespace {

constexpr double kHbmTBs = 4.19;
constexpr double kBf16Tflops = 786.0;
constexpr size_t kRotateBytes = size_t{512} << 20;  // > 10x the 50 MB L2

// Random bf16 in [-1, 1) generated on the host once and replicated, never zeros.
void* alloc_random_bf16(size_t count, uint32_t seed) {
  std::vector<uint16_t> host(std::min<size_t>(count, size_t{1} << 24));
  std::mt19937 gen(seed);
  std::uniform_real_distribution<float> dist(-1.0f, 1.0f);
  for (auto& h : host) h = float_to_bf16(dist(gen) + 1e-3f);
  void* p = nullptr;
  CHECK_CUDA(cudaMalloc(&p, count * 2));
  for (size_t off = 0; off < count; off += host.size()) {
    const size_t n = std::min(host.size(), count - off);
    CHECK_CUDA(
        cudaMemcpy(static_cast<uint16_t*>(p) + off, host.data(), n * 2, cudaMemcpyHostToDevice));
  }
  return p;
}

using bench::time_ms;

double hbm_copy_tbs() {
  const size_t bytes = size_t{2} << 30;
  void *a = nullptr, *b = nullptr;
  CHECK_CUDA(cudaMalloc(&a, bytes));
  CHECK_CUDA(cudaMalloc(&b, bytes));
  CHECK_CUDA(cudaMemset(a, 1, bytes));
  const double ms =
      time_ms([&](int) { CHECK_CUDA(cudaMemcpyAsync(b, a, bytes, cudaMemcpyDeviceToDevice)); }, 3);
  cudaFree(a);
  cudaFree(b);
  return 2.0 * bytes / (ms * 1e-3) / 1e12;
}

double probe_ms(const std::vector<void*>& buffers, size_t bytes, int sms) {
  const int copies = static_cast<int>(buffers.size());
  return time_ms([&](int i) { CHECK_CUDA(launch_read_probe(buffers[i % copies], bytes, sms)); },
                 std::max(copies, 20));
}

bool bench_gemv(const BlasContext& ctx) {
  bool ok = true;
  std::printf("\n## GEMV y[m,n] = x[m,k] w[n,k]^T, bf16 (bandwidth = weight+x+y bytes / time)\n");
  std::printf("%-8s %6s %6s %3s %-9s | %9s %7s %6s | %9s %7s %6s | %5s\n", "shape", "n", "k", "m",
              "kernel", "ours us", "TB/s", "%HBM", "cublas us", "TB/s", "%HBM", "err");
  for (const bench::ProjectionShape& s : bench::kLlama8bProjections) {
    const size_t w_elems = static_cast<size_t>(s.n) * s.k;
    const int copies = static_cast<int>(std::max<size_t>(1, kRotateBytes / (w_elems * 2)));
    std::vector<void*> w(copies);
    for (int i = 0; i < copies; ++i) w[i] = alloc_random_bf16(w_elems, 7 + i);
    void* x = alloc_random_bf16(16 * s.k, 3);
    void *y = nullptr, *y2 = nullptr;
    CHECK_CUDA(cudaMalloc(&y, 16 * s.n * 2));
    CHECK_CUDA(cudaMalloc(&y2, 16 * s.n * 2));
    {  // The read-only reference for this matrix size.
      int sms = 0;
      CHECK_CUDA(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0));
      const double ms = probe_ms(w, w_elems * 2, sms);
      const double tb = 2.0 * w_elems / (ms * 1e-3) / 1e12;
      std::printf("%-8s %6lld %6lld read-only probe: %9.1f us %7.2f TB/s %5.0f%%\n", s.name,
                  static_cast<long long>(s.n), static_cast<long long>(s.k), ms * 1e3, tb,
                  100 * tb / kHbmTBs);
    }
    // Ours at each m: the CUDA-core GEMV (what linear() runs at m = 1; up to m = 4 for
    // comparison) and the tensor-core GEMV (m = 2-8 in linear()) under each of its work splits
    // (16-row groups per block x k steps per round of a warp; 2 x 2 is the default).
    struct Variant {
      const char* name;
      GemvMmaTuning tuning;  // row_groups 0: the CUDA-core GEMV
    };
    const Variant variants[] = {{"gemv", {0, 0}},
                                {"mma 2x2", {2, 2}},
                                {"mma 1x4", {1, 4}},
                                {"mma 2x1", {2, 1}},
                                {"mma 4x1", {4, 1}}};
    for (int64_t m : {1, 2, 4, 8, 16}) {
      const double bytes = 2.0 * (w_elems + m * s.k + m * s.n);
      const int per_batch = std::max(copies, 20);
      const double lt = time_ms(
          [&](int i) {
            CHECK_CUDA(linear_cublaslt(ctx, x, m, s.k, w[i % copies], s.n, nullptr, y2,
                                       DType::kBF16, nullptr));
          },
          per_batch);
      const double tb_lt = bytes / (lt * 1e-3) / 1e12;
      for (const Variant& v : variants) {
        const GemvMmaTuning& tuning = v.tuning;
        if ((tuning.row_groups == 0 && m > 4) || (tuning.row_groups > 0 && m == 1)) continue;
        auto ours_fn = [&](const void* wp, void* out) {
          return tuning.row_groups == 0
                     ? linear_gemv(x, m, s.k, wp, s.n, nullptr, out, DType::kBF16, nullptr)
                     : linear_gemv_mma(x, m, s.k, wp, s.n, nullptr, out, DType::kBF16, nullptr,
                                       tuning);
        };
        // Agreement first: ours against cuBLASLt on the same inputs.
        CHECK_CUDA(ours_fn(w[0], y));
        CHECK_CUDA(linear_cublaslt(ctx, x, m, s.k, w[0], s.n, nullptr, y2, DType::kBF16, nullptr));
        std::vector<uint16_t> a(m * s.n), b(m * s.n);
        CHECK_CUDA(cudaMemcpy(a.data(), y, a.size() * 2, cudaMemcpyDeviceToHost));
        CHECK_CUDA(cudaMemcpy(b.data(), y2, b.size() * 2, cudaMemcpyDeviceToHost));
        double diff = 0.0, mag = 0.0;
        for (size_t i = 0; i < a.size(); ++i) {
          const double fa = bf16_to_float(a[i]), fb = bf16_to_float(b[i]);
          diff = std::isnan(fa) ? INFINITY : std::max(diff, std::abs(fa - fb));
          mag = std::max(mag, std::abs(fb));
        }
        const double err = mag > 0 ? diff / mag : diff;
        if (!(err <= 1e-2)) ok = false;
        const double ours =
            time_ms([&](int i) { CHECK_CUDA(ours_fn(w[i % copies], y)); }, per_batch);
        const double tb_ours = bytes / (ours * 1e-3) / 1e12;
        std::printf(
            "%-8s %6lld %6lld %3lld %-9s | %9.1f %7.2f %5.0f%% | %9.1f %7.2f %5.0f%% | %5.0e%s\n",
            s.name, static_cast<long long>(s.n), static_cast<long long>(s.k),
            static_cast<long long>(m), v.name, ours * 1e3, tb_ours, 100 * tb_ours / kHbmTBs,
            lt * 1e3, tb_lt, 100 * tb_lt / kHbmTBs, err, err <= 1e-2 ? "" : " MISMATCH");
      }
    }
    for (void* p : w) cudaFree(p);
    cudaFree(x);
    cudaFree(y);
    cudaFree(y2);
  }
  return ok;
}

// The W4A16 GEMV (GPTQ / AWQ 4-bit, group 128, kernels/cuda/linear_w4.h) on the batch-1 Llama-8B
// projections: bytes = codes (n k / 2) + meta words (n k / 128 x 4) + x + y; against the HBM
// spec (4.8 TB/s) and the measured limit. "act" adds the act-order gather of x (its own kernel).
// Checked against dequantize_w4 + cuBLASLt on the same weights first.
bool bench_w4(const BlasContext& ctx) {
  constexpr double kHbmSpecTBs = 4.8;
  constexpr int64_t kGroup = 128;
  bool ok = true;
  std::printf("\n## W4A16 GEMV (4-bit codes, group %lld, fp16 scales + zeros), bf16 x / y\n",
              static_cast<long long>(kGroup));
  std::printf("%-8s %6s %6s %3s %-6s | %9s %7s %9s %9s | %5s\n", "shape", "n", "k", "m", "perm",
              "us", "TB/s", "%4.8TB/s", "%measured", "err");
  for (const bench::ProjectionShape& s : bench::kLlama8bProjections) {
    if (std::strcmp(s.name, "lm_head") == 0) continue;  // dense in GPTQ / AWQ checkpoints
    const int64_t words = s.n * s.k / 8, groups = s.k / kGroup;
    const double w_bytes = 4.0 * words + 4.0 * s.n * groups;
    const int copies = static_cast<int>(std::max<double>(1, kRotateBytes / w_bytes));
    std::vector<uint32_t*> codes(copies);
    for (int i = 0; i < copies; ++i) {
      CHECK_CUDA(cudaMalloc(&codes[i], words * 4));
      CHECK_CUDA(fill_random_words(codes[i], words, 11 + i, nullptr));
    }
    // Every group: scale 2^-9 (an fp16 value), zero 8.
    const std::vector<uint32_t> meta_host(static_cast<size_t>(s.n * groups),
                                          uint32_t{float_to_f16(1.0f / 512)} | (8u << 16));
    uint32_t* meta = nullptr;
    CHECK_CUDA(cudaMalloc(&meta, meta_host.size() * 4));
    CHECK_CUDA(cudaMemcpy(meta, meta_host.data(), meta_host.size() * 4, cudaMemcpyHostToDevice));
    std::vector<int32_t> perm_host(static_cast<size_t>(s.k));
    std::iota(perm_host.begin(), perm_host.end(), 0);
    std::shuffle(perm_host.begin(), perm_host.end(), std::mt19937(5));
    int32_t* perm = nullptr;
    CHECK_CUDA(cudaMalloc(&perm, s.k * 4));
    CHECK_CUDA(cudaMemcpy(perm, perm_host.data(), s.k * 4, cudaMemcpyHostToDevice));
    void* x = alloc_random_bf16(kW4GemvMaxM * s.k, 3);
    void *y = nullptr, *y2 = nullptr, *scratch = nullptr, *dense = nullptr;
    CHECK_CUDA(cudaMalloc(&y, kW4GemvMaxM * s.n * 2));
    CHECK_CUDA(cudaMalloc(&y2, kW4GemvMaxM * s.n * 2));
    CHECK_CUDA(cudaMalloc(&scratch, kW4GemvMaxM * s.k * 2));
    CHECK_CUDA(cudaMalloc(&dense, s.n * s.k * 2));
    for (const bool act : {false, true}) {
      for (int64_t m : {1, 2, 4, 8}) {
        if (act && m != 1) continue;
        auto view = [&](int i) {
          W4WeightView v;
          v.qweight = codes[i % copies];
          v.meta = meta;
          v.perm = act ? perm : nullptr;
          v.n = s.n;
          v.k = s.k;
          v.group_size = kGroup;
          return v;
        };
        CHECK_CUDA(linear_w4_gemv(x, m, view(0), y, GemvFusion{}, scratch, DType::kBF16, nullptr));
        CHECK_CUDA(dequantize_w4(view(0), dense, DType::kBF16, nullptr));
        CHECK_CUDA(linear_cublaslt(ctx, x, m, s.k, dense, s.n, nullptr, y2, DType::kBF16, nullptr));
        std::vector<uint16_t> a(m * s.n), b(m * s.n);
        CHECK_CUDA(cudaMemcpy(a.data(), y, a.size() * 2, cudaMemcpyDeviceToHost));
        CHECK_CUDA(cudaMemcpy(b.data(), y2, b.size() * 2, cudaMemcpyDeviceToHost));
        double diff = 0.0, mag = 0.0;
        for (size_t i = 0; i < a.size(); ++i) {
          const double fa = bf16_to_float(a[i]), fb = bf16_to_float(b[i]);
          diff = std::isnan(fa) ? INFINITY : std::max(diff, std::abs(fa - fb));
          mag = std::max(mag, std::abs(fb));
        }
        const double err = mag > 0 ? diff / mag : diff;
        if (!(err <= 1e-2)) ok = false;
        const double ms = time_ms(
            [&](int i) {
              CHECK_CUDA(
                  linear_w4_gemv(x, m, view(i), y, GemvFusion{}, scratch, DType::kBF16, nullptr));
            },
            std::max(copies, 20));
        const double bytes = w_bytes + 2.0 * (m * s.k + m * s.n);
        const double tb = bytes / (ms * 1e-3) / 1e12;
        std::printf("%-8s %6lld %6lld %3lld %-6s | %9.1f %7.2f %8.0f%% %8.0f%% | %5.0e%s\n", s.name,
                    static_cast<long long>(s.n), static_cast<long long>(s.k),
                    static_cast<long long>(m), act ? "act" : "-", ms * 1e3, tb,
                    100 * tb / kHbmSpecTBs, 100 * tb / kHbmTBs, err,
                    err <= 1e-2 ? "" : " MISMATCH");
      }
    }
    for (uint32_t* p : codes) cudaFree(p);
    for (void* p : {static_cast<void*>(meta), static_cast<void*>(perm), x, y, y2, scratch, dense})
      cudaFree(p);
  }
  return ok;
}

// The INT8 W8A8 GEMV (kernels/cuda/linear_int8.h) on the batch-1..8 Llama-8B projections: bytes =
// codes (n k) + row scales (4 n) + xq (m k) + y (2 m n); "+q" times the per-token quantization of
// the bf16 x before it (what a projection costs in the model). Checked against
// linear_int8_fallback on the same inputs first (the same exact int32 sums: equal up to rounding).
bool bench_int8() {
  constexpr double kHbmSpecTBs = 4.8;
  bool ok = true;
  std::printf("\n## INT8 W8A8 GEMV (dp4a, int8 x and W, per-row scales), bf16 y\n");
  std::printf("%-8s %6s %6s %3s %-3s | %9s %7s %9s %9s | %5s\n", "shape", "n", "k", "m", "q", "us",
              "TB/s", "%4.8TB/s", "%measured", "err");
  for (const bench::ProjectionShape& s : bench::kLlama8bProjections) {
    if (std::strcmp(s.name, "lm_head") == 0) continue;  // dense in W8A8 checkpoints
    const double w_bytes = static_cast<double>(s.n * s.k) + 4.0 * s.n;
    const int copies = static_cast<int>(std::max<double>(1, kRotateBytes / w_bytes));
    std::vector<int8_t*> codes(copies);
    for (int i = 0; i < copies; ++i) {
      CHECK_CUDA(cudaMalloc(&codes[i], s.n * s.k));
      CHECK_CUDA(fill_uniform(codes[i], DType::kI8, s.n * s.k, 21 + i, 0.0f, 127.0f, nullptr));
    }
    const std::vector<float> scale_host(static_cast<size_t>(s.n), 1.0f / 4096);
    float *scale = nullptr, *x_scale = nullptr;
    CHECK_CUDA(cudaMalloc(&scale, s.n * 4));
    CHECK_CUDA(cudaMemcpy(scale, scale_host.data(), s.n * 4, cudaMemcpyHostToDevice));
    CHECK_CUDA(cudaMalloc(&x_scale, kInt8GemvMaxM * 4));
    void* x = alloc_random_bf16(kInt8GemvMaxM * s.k, 3);
    int8_t* xq = nullptr;
    void *y = nullptr, *y2 = nullptr;
    CHECK_CUDA(cudaMalloc(&xq, kInt8GemvMaxM * s.k));
    CHECK_CUDA(cudaMalloc(&y, kInt8GemvMaxM * s.n * 2));
    CHECK_CUDA(cudaMalloc(&y2, kInt8GemvMaxM * s.n * 2));
    for (const bool with_quant : {false, true}) {
      for (int64_t m : {1, 2, 4, 8}) {
        auto view = [&](int i) {
          Int8WeightView v;
          v.w = codes[i % copies];
          v.scale = scale;
          v.n = s.n;
          v.k = s.k;
          return v;
        };
        Int8QuantizeParams qp;
        qp.x = x;
        qp.m = m;
        qp.k = s.k;
        qp.q = xq;
        qp.x_scale = x_scale;
        CHECK_CUDA(quantize_int8_rows(qp, nullptr));
        CHECK_CUDA(
            linear_int8_gemv(xq, x_scale, m, view(0), y, GemvFusion{}, DType::kBF16, nullptr));
        CHECK_CUDA(linear_int8_fallback(xq, x_scale, m, view(0), y2, DType::kBF16, nullptr));
        std::vector<uint16_t> a(m * s.n), b(m * s.n);
        CHECK_CUDA(cudaMemcpy(a.data(), y, a.size() * 2, cudaMemcpyDeviceToHost));
        CHECK_CUDA(cudaMemcpy(b.data(), y2, b.size() * 2, cudaMemcpyDeviceToHost));
        double diff = 0.0, mag = 0.0;
        for (size_t i = 0; i < a.size(); ++i) {
          const double fa = bf16_to_float(a[i]), fb = bf16_to_float(b[i]);
          diff = std::isnan(fa) ? INFINITY : std::max(diff, std::abs(fa - fb));
          mag = std::max(mag, std::abs(fb));
        }
        const double err = mag > 0 ? diff / mag : diff;
        if (!(err <= 1e-2)) ok = false;
        const double ms = time_ms(
            [&](int i) {
              if (with_quant) CHECK_CUDA(quantize_int8_rows(qp, nullptr));
              CHECK_CUDA(linear_int8_gemv(xq, x_scale, m, view(i), y, GemvFusion{}, DType::kBF16,
                                          nullptr));
            },
            std::max(copies, 20));
        const double bytes = w_bytes + 1.0 * m * s.k + 2.0 * m * s.n;
        const double tb = bytes / (ms * 1e-3) / 1e12;
        std::printf("%-8s %6lld %6lld %3lld %-3s | %9.1f %7.2f %8.0f%% %8.0f%% | %5.0e%s\n", s.name,
                    static_cast<long long>(s.n), static_cast<long long>(s.k),
                    static_cast<long long>(m), with_quant ? "+q" : "-", ms * 1e3, tb,
                    100 * tb / kHbmSpecTBs, 100 * tb / kHbmTBs, err,
                    err <= 1e-2 ? "" : " MISMATCH");
      }
    }
    for (int8_t* p : codes) cudaFree(p);
    for (void* p :
         {static_cast<void*>(scale), static_cast<void*>(x_scale), x, static_cast<void*>(xq), y, y2})
      cudaFree(p);
  }
  return ok;
}

// One attention workload: `num_seqs` sequences of `ctx` cached tokens, `q_len` new tokens each;
// with a sliding window of `window` keys (0: none).
struct AttnCase {
  const char* name;
  int num_seqs, ctx, q_len;
  bool decode;
  int min_split_keys = kDefaultMinSplitKeys;
  int window = 0;
  int block_size = 16;  // of the KV cache (the engine's default)
};

// hopper: whether 128-row prefill items may run the Hopper kernel (PagedAttentionParams::hopper).
void bench_attention(const AttnCase& c, int num_sms, bool hopper = true) {
  const int heads = 32, kvh = 8, d = 128, bs = c.block_size;
  const int blocks_per_seq = (c.ctx + bs - 1) / bs;
  const int seen = c.window > 0 ? std::min(c.ctx, c.window + c.q_len - 1) : c.ctx;  // keys read
  const size_t kv_bytes_one = static_cast<size_t>(c.num_seqs) * seen * kvh * d * 2 * 2;
  const int rotations =
      c.decode ? static_cast<int>(std::max<size_t>(1, kRotateBytes / kv_bytes_one)) : 1;
  const int64_t num_blocks = static_cast<int64_t>(rotations) * c.num_seqs * blocks_per_seq;
  const size_t cache_elems = static_cast<size_t>(num_blocks) * kvh * bs * d;
  void* kc = alloc_random_bf16(cache_elems, 11);
  void* vc = alloc_random_bf16(cache_elems, 12);
  // Rotation r maps every sequence onto its own shuffled physical blocks.
  std::vector<int32_t> physical(num_blocks);
  std::iota(physical.begin(), physical.end(), 0);
  std::shuffle(physical.begin(), physical.end(), std::mt19937(5));
  std::vector<int32_t*> tables(rotations);
  for (int r = 0; r < rotations; ++r) {
    std::vector<int32_t> t(static_cast<size_t>(c.num_seqs) * blocks_per_seq);
    for (size_t i = 0; i < t.size(); ++i) t[i] = physical[r * t.size() + i];
    CHECK_CUDA(cudaMalloc(&tables[r], t.size() * 4));
    CHECK_CUDA(cudaMemcpy(tables[r], t.data(), t.size() * 4, cudaMemcpyHostToDevice));
  }
  std::vector<int32_t> qsl = {0}, lens, positions;
  double flops = 0.0;
  for (int s = 0; s < c.num_seqs; ++s) {
    qsl.push_back(qsl.back() + c.q_len);
    lens.push_back(c.ctx);
    for (int i = 0; i < c.q_len; ++i) {
      positions.push_back(c.ctx - c.q_len + i);
      const int keys = c.ctx - c.q_len + i + 1;                                     // causal keys
      flops += 4.0 * heads * d * (c.window > 0 ? std::min(keys, c.window) : keys);  // QK^T, PV
    }
  }
  const int64_t tokens = qsl.back();
  int32_t *dqsl, *dlens, *dpos;
  CHECK_CUDA(cudaMalloc(&dqsl, qsl.size() * 4));
  CHECK_CUDA(cudaMalloc(&dlens, lens.size() * 4));
  CHECK_CUDA(cudaMalloc(&dpos, positions.size() * 4));
  CHECK_CUDA(cudaMemcpy(dqsl, qsl.data(), qsl.size() * 4, cudaMemcpyHostToDevice));
  CHECK_CUDA(cudaMemcpy(dlens, lens.data(), lens.size() * 4, cudaMemcpyHostToDevice));
  CHECK_CUDA(cudaMemcpy(dpos, positions.data(), positions.size() * 4, cudaMemcpyHostToDevice));
  void* q = alloc_random_bf16(tokens * heads * d, 13);
  void* out = nullptr;
  CHECK_CUDA(cudaMalloc(&out, tokens * heads * d * 2));

  AttentionLimits limits{tokens, 1 << 20, 8192, d};
  AttentionPlanInput in{qsl.data(), lens.data(), c.num_seqs, heads, kvh, num_sms, c.min_split_keys};
  in.sliding_window = c.window;
  in.hopper_prefill =
      hopper && hopper_prefill_available({num_blocks, bs, kvh, d}, DType::kBF16, DType::kBF16, 0);
  AttentionPlan plan;
  CHECK_CUDA(plan_paged_attention(in, limits, &plan));
  void* ws = nullptr;
  CHECK_CUDA(cudaMalloc(&ws, attention_workspace_bytes(limits)));
  CHECK_CUDA(upload_attention_plan(plan, limits, ws, nullptr));
  PagedAttentionParams p;
  p.q = q;
  p.q_stride = heads * d;
  p.positions = dpos;
  p.query_start_loc = dqsl;
  p.seq_lens = dlens;
  p.key_cache = kc;
  p.value_cache = vc;
  p.out = out;
  p.num_tokens = tokens;
  p.num_seqs = c.num_seqs;
  p.num_heads = heads;
  p.max_blocks_per_seq = blocks_per_seq;
  p.scale = 1.0f / std::sqrt(static_cast<float>(d));
  p.sliding_window = c.window;
  p.layout = {num_blocks, bs, kvh, d};
  p.hopper = hopper;
  const double ms = time_ms(
      [&](int i) {
        p.block_tables = tables[i % rotations];
        CHECK_CUDA(paged_attention(p, plan, limits, ws, nullptr));
      },
      std::max(rotations, 10));
  const double tbs = kv_bytes_one / (ms * 1e-3) / 1e12;
  const double tflops = flops / (ms * 1e-3) / 1e12;
  const std::string name = std::string(c.name) + (hopper ? "" : " (fa2)");
  std::printf("%-26s %8.1f %8.2f %5.0f%% %9.1f %5.0f%%   items %d+%d (%d rows), slots %d\n",
              name.c_str(), ms * 1e3, tbs, 100 * tbs / kHbmTBs, tflops, 100 * tflops / kBf16Tflops,
              plan.num_decode_items, plan.num_prefill_items, plan.prefill_rows,
              plan.num_partial_slots);
  for (auto* t : tables) cudaFree(t);
  cudaFree(kc);
  cudaFree(vc);
  cudaFree(q);
  cudaFree(out);
  cudaFree(ws);
  cudaFree(dqsl);
  cudaFree(dlens);
  cudaFree(dpos);
}

// The GPU sampler over a [rows, 151936] bf16 logits batch (Qwen2's vocabulary) in the step's
// configurations: uniform logits in [-1, 1) are flat at T = 1 (top-p then takes the bit-search
// path) and peaked at T = 0.05.
void bench_sampling(const char* only) {
  constexpr int64_t kVocab = 151936;
  struct Config {
    const char* name;
    float temperature;
    int top_k;
    float top_p, min_p;
    int num_logprobs;
    bool penalties;
  };
  const Config configs[] = {
      {"greedy", 0.0f, 0, 1.0f, 0.0f, -1, false},
      {"greedy + logprobs 20", 0.0f, 0, 1.0f, 0.0f, 20, false},
      {"greedy + penalties", 0.0f, 0, 1.0f, 0.0f, -1, true},
      {"T=1", 1.0f, 0, 1.0f, 0.0f, -1, false},
      {"T=1 top_k 50 top_p 0.9", 1.0f, 50, 0.9f, 0.0f, -1, false},
      {"T=0.05 top_p 0.9 (peaked)", 0.05f, 0, 0.9f, 0.0f, -1, false},
      {"T=1 top_p 0.95 (flat)", 1.0f, 0, 0.95f, 0.0f, -1, false},
      {"T=1 min_p 0.1", 1.0f, 0, 1.0f, 0.1f, -1, false},
  };
  std::printf("\n## Sampling (sample_logits), vocab %lld, bf16 logits\n",
              static_cast<long long>(kVocab));
  // Microseconds per call; "1 block" is one block per row (the kernel's choice from 67 rows on
  // an H200), the other columns let the kernel pick the team (8 blocks per row up to 16 rows).
  std::printf("%-28s %10s %10s %10s %10s %10s\n", "config (us)", "1, 1 block", "1 row", "16 rows",
              "64 rows", "256 rows");
  constexpr int64_t kMaxRows = 256;
  void* logits = alloc_random_bf16(static_cast<size_t>(kMaxRows * kVocab), 77);
  float* work = nullptr;
  CHECK_CUDA(cudaMalloc(&work, static_cast<size_t>(kMaxRows * kVocab) * sizeof(float)));
  SamplingRow* params = nullptr;
  PenaltyEntry* penalties = nullptr;
  int32_t* outputs = nullptr;
  constexpr int kPenalties = 2000;  // distinct tokens of a ~4k-token history
  CHECK_CUDA(cudaMalloc(&params, kMaxRows * sizeof(SamplingRow)));
  CHECK_CUDA(cudaMalloc(&penalties, kPenalties * sizeof(PenaltyEntry)));
  CHECK_CUDA(cudaMalloc(&outputs, kMaxRows * (2 + 2 * kMaxTopLogprobs) * sizeof(int32_t)));
  std::vector<PenaltyEntry> host_penalties(kPenalties);
  for (int i = 0; i < kPenalties; ++i) host_penalties[static_cast<size_t>(i)] = {i * 61, i % 5, 1};
  CHECK_CUDA(cudaMemcpy(penalties, host_penalties.data(), kPenalties * sizeof(PenaltyEntry),
                        cudaMemcpyHostToDevice));
  for (const Config& c : configs) {
    if (std::strstr(c.name, only) == nullptr) continue;
    std::printf("%-28s", c.name);
    const std::pair<int64_t, int> runs[] = {{1, 1}, {1, 0}, {16, 0}, {64, 0}, {kMaxRows, 0}};
    for (const auto& [rows, team] : runs) {
      std::vector<SamplingRow> host(static_cast<size_t>(rows));
      for (int64_t r = 0; r < rows; ++r) {
        SamplingRow& p = host[static_cast<size_t>(r)];
        p.temperature = c.temperature;
        p.top_k = c.top_k;
        p.top_p = c.top_p;
        p.min_p = c.min_p;
        p.num_logprobs = c.num_logprobs;
        p.seed = 5;
        p.counter = static_cast<uint64_t>(r);
        if (c.penalties) {
          p.repetition_penalty = 1.1f;
          p.presence_penalty = 0.5f;
          p.penalty_count = kPenalties;
        }
      }
      CHECK_CUDA(cudaMemcpy(params, host.data(), host.size() * sizeof(SamplingRow),
                            cudaMemcpyHostToDevice));
      SampleLogitsArgs a;
      a.logits = logits;
      a.dtype = pagoda::DType::kBF16;
      a.rows = rows;
      a.vocab = kVocab;
      a.params = params;
      a.penalties = penalties;
      a.workspace = work;
      a.tokens = outputs;
      a.logprobs = reinterpret_cast<float*>(outputs + kMaxRows);
      a.top_tokens = outputs + 2 * kMaxRows;
      a.top_logprobs =
          reinterpret_cast<float*>(outputs + 2 * kMaxRows + kMaxRows * kMaxTopLogprobs);
      a.team = team;
      const double ms = time_ms([&](int) { CHECK_CUDA(sample_logits(a, nullptr)); }, 5);
      std::printf(" %10.1f", ms * 1e3);
    }
    std::printf("\n");
  }
  cudaFree(logits);
  cudaFree(work);
  cudaFree(params);
  cudaFree(penalties);
  cudaFree(outputs);
}

}  // namespace
}  // namespace pagoda::cuda

int main(int argc, char** argv) {
  using namespace pagoda::cuda;  // NOLINT
  // `bench_kernels_cuda sampling [NAME]` runs the sampler's section alone (the configurations whose
  // name contains NAME: one to profile with ncu), `bench_kernels_cuda gemv` the
  // projections' section alone, `bench_kernels_cuda w4` the W4A16 GEMV's alone,
  // `bench_kernels_cuda int8` the INT8 W8A8 GEMV's alone,
  // `bench_kernels_cuda attention [NAME]` the attention cases alone
  // (those whose name contains NAME: one case to profile with ncu).
  const bool sampling_only = argc > 1 && std::strcmp(argv[1], "sampling") == 0;
  const bool gemv_only = argc > 1 && std::strcmp(argv[1], "gemv") == 0;
  const bool w4_only = argc > 1 && std::strcmp(argv[1], "w4") == 0;
  const bool int8_only = argc > 1 && std::strcmp(argv[1], "int8") == 0;
  const bool attention_only = argc > 1 && std::strcmp(argv[1], "attention") == 0;
  const char* attention_case = attention_only && argc > 2 ? argv[2] : "";
  // Kernels are timed back to back; programmatic dependent launch (off by default in the engine)
  // hides the launch gap between them, so that the figures are the kernels' own. PAGODA_PDL=0 in
  // the environment times them with the gaps.
  setenv("PAGODA_PDL", "1", /*overwrite=*/0);
  cudaDeviceProp prop{};
  CHECK_CUDA(cudaGetDeviceProperties(&prop, 0));
  std::printf("# bench_kernels_cuda on %s (%d SMs, L2 %d MB)\n", prop.name,
              prop.multiProcessorCount, prop.l2CacheSize >> 20);
  if (sampling_only) {
    bench_sampling(argc > 2 ? argv[2] : "");
    return 0;
  }
  std::printf("device-to-device copy: %.2f TB/s (docs/performance.md limit: %.2f)\n",
              hbm_copy_tbs(), kHbmTBs);
  bool gemv_ok = true;
  if (!attention_only) {
    BlasContext ctx;
    CHECK_CUDA(blas_context_create(&ctx));
    if (!w4_only && !int8_only) gemv_ok = bench_gemv(ctx);
    if (!gemv_only && !int8_only) gemv_ok = bench_w4(ctx) && gemv_ok;
    if (!gemv_only && !w4_only) gemv_ok = bench_int8() && gemv_ok;
    blas_context_destroy(&ctx);
  }
  if (gemv_only || w4_only || int8_only) return gemv_ok ? 0 : 1;

  std::printf(
      "\n## Paged attention, GQA 32/8, head 128, block 16, bf16 "
      "(TB/s = KV bytes / time; targets: decode >= 90%% HBM at 16+ seqs, >= 2 TB/s B1x8192)\n");
  std::printf("%-26s %8s %8s %6s %9s %6s\n", "case", "us", "TB/s", "%HBM", "TFLOP/s", "%peak");
  const AttnCase cases[] = {
      {"decode B1 x 512", 1, 512, 1, true},
      {"  splits >= 128 keys", 1, 512, 1, true, 128},
      {"  splits >= 64 keys", 1, 512, 1, true, 64},
      {"decode B1 x 8192", 1, 8192, 1, true},
      {"  splits >= 128 keys", 1, 8192, 1, true, 128},
      {"  splits >= 64 keys", 1, 8192, 1, true, 64},
      {"decode B1 x 2048", 1, 2048, 1, true},
      {"decode B4 x 2048", 4, 2048, 1, true},
      {"decode B4 x 8192", 4, 8192, 1, true},
      {"decode B32 x 1024", 32, 1024, 1, true},
      {"decode B16 x 512", 16, 512, 1, true},
      {"decode B64 x 512", 64, 512, 1, true},
      {"decode B16 x 2048", 16, 2048, 1, true},
      {"  splits >= 64 keys", 16, 2048, 1, true, 64},
      {"decode B64 x 4096", 64, 4096, 1, true},
      {"  splits >= 64 keys", 64, 4096, 1, true, 64},
      {"prefill B32 x L512", 32, 512, 512, false},
      {"prefill B8 x L2048", 8, 2048, 2048, false},
      {"prefill B2 x L8192", 2, 8192, 8192, false},  // the FA2-class target's shape
      {"prefill B1 x L32768", 1, 32768, 32768, false},
      // The Hopper kernel copies K and V by TMA one page at a time: 128-token pages make 8x fewer
      // copies of 8x the bytes (is the copy count a limit?).
      {"prefill B2 x L8192, block 128", 2, 8192, 8192, false, kDefaultMinSplitKeys, 0, 128},
      {"prefill B1 x L512", 1, 512, 512, false},         // the batch-1 prefill benchmark's
      {"prefill B1 x 64 after 8k", 1, 8256, 64, false},  // a chunk after a cached prefix
      // Mistral-v0.1-style window: only the window's keys are read (TB/s of those)
      {"decode B1 x 32k, window 4k", 1, 32768, 1, true, kDefaultMinSplitKeys, 4096},
  };
  for (const AttnCase& c : cases)
    if (std::strstr(c.name, attention_case) != nullptr) {
      bench_attention(c, prop.multiProcessorCount);
      // Prefill: the FlashAttention-2 kernel too, where the plan's items are of 128 rows.
      if (!c.decode) bench_attention(c, prop.multiProcessorCount, false);
    }
  std::printf(
      "\nprefill reference (torch SDPA flash, same card): L512 167 TFLOP/s, L2048 282, L8192 "
      "335\n");
  if (attention_only) return 0;
  bench_sampling("");
  if (!gemv_ok) {
    std::printf("FAIL: a GEMV and cuBLASLt disagree (see the err columns)\n");
    return 1;
  }
  return 0;
}
