#pragma once
// Random 4-bit GPTQ and AWQ weights as the checkpoints pack them (quant_dequant.h), for the repack
// test here and the GPU kernels' tests (tests/kernel/cuda/linear_w4_test.cc): codes uniform in
// 0..15, fp16-exact scales, zero points 8 (symmetric) or random, act-order g_idx from a random
// permutation of the input features as AutoGPTQ writes it (g_idx[perm[i]] = i / G).
#include <algorithm>
#include <cstdint>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include "core/half.h"
#include "kernels/cpu/int4_repack.h"
#include "kernels/cpu/quant_dequant.h"

namespace pagoda::cpu::testing {

struct W4Case {
  bool awq = false;
  int64_t n = 64, k = 128;
  int64_t group = 128;  // -1: per channel (group = k)
  bool symmetric = true;
  bool act_order = false;  // GPTQ only

  [[nodiscard]] int64_t group_size() const { return group < 0 ? k : group; }
  [[nodiscard]] std::string name() const {
    return std::string(awq ? "awq" : "gptq") + " n=" + std::to_string(n) +
           " k=" + std::to_string(k) + " group=" + std::to_string(group) +
           (symmetric ? " sym" : " asym") + (act_order ? " act-order" : "");
  }
};

/// One source weight W [n, k] in its checkpoint packing, with the unpacked scales / zero points a
/// LinearMethod hands the dequantizers.
struct RandomW4 {
  W4Case c;
  std::vector<int32_t> qweight;  // GPTQ [k / 8, n]; AWQ [k, n / 8]
  std::vector<float> scales;     // [groups, n], each an fp16 value
  std::vector<int32_t> zeros;    // [groups, n] effective zero points
  std::vector<int32_t> g_idx;    // [k] (GPTQ)

  [[nodiscard]] GptqWeight gptq() const {
    GptqWeight w;
    w.qweight = qweight.data();
    w.bits = 4;
    w.n = c.n;
    w.k = c.k;
    w.g_idx = g_idx.data();
    w.scales = scales.data();
    w.zeros = zeros.data();
    return w;
  }
  [[nodiscard]] AwqWeight awq() const {
    AwqWeight w;
    w.qweight = qweight.data();
    w.n = c.n;
    w.k = c.k;
    w.group_size = c.group_size();
    w.scales = scales.data();
    w.zeros = zeros.data();
    return w;
  }
  /// W [n, k] in fp32 by the checkpoint format's own dequantizer (the reference).
  [[nodiscard]] std::vector<float> dense() const {
    std::vector<float> w(static_cast<size_t>(c.n * c.k));
    if (c.awq) {
      dequantize_rows(awq(), 0, c.n, w.data());
    } else {
      dequantize_rows(gptq(), 0, c.n, w.data());
    }
    return w;
  }
  /// The GPU layout of this one source (its own permutation).
  [[nodiscard]] W4Layout layout() const {
    W4Layout l = make_w4_layout(c.n, c.k, c.group_size());
    if (c.awq) {
      (void)repack_w4(awq(), 0, &l);
    } else {
      (void)w4_permutation(g_idx.data(), c.k, c.group_size(), &l.perm);
      (void)repack_w4(gptq(), 0, &l);
    }
    return l;
  }
};

/// A random weight of case c; `g_idx_seed` draws the act-order permutation (sources of one fused
/// projection share it, as real checkpoints' q, k, v do).
inline RandomW4 random_w4(const W4Case& c, uint32_t seed, uint32_t g_idx_seed = 7) {
  std::mt19937 gen(seed);
  RandomW4 r;
  r.c = c;
  const int64_t G = c.group_size(), groups = c.k / G;
  r.qweight.resize(static_cast<size_t>(c.k * c.n / 8));
  for (int32_t& v : r.qweight) v = static_cast<int32_t>(gen());
  std::uniform_real_distribution<float> scale(0.002f, 0.03f);
  std::uniform_int_distribution<int32_t> zero(c.awq ? 0 : 1, c.awq ? 15 : 16);  // GPTQ v1: 1..16
  r.scales.resize(static_cast<size_t>(groups * c.n));
  r.zeros.resize(r.scales.size());
  for (size_t i = 0; i < r.scales.size(); ++i) {
    r.scales[i] = f16_to_float(float_to_f16(scale(gen)));
    r.zeros[i] = c.symmetric ? 8 : zero(gen);
  }
  r.g_idx.resize(static_cast<size_t>(c.k));
  if (c.act_order) {
    std::vector<int32_t> perm(static_cast<size_t>(c.k));
    std::iota(perm.begin(), perm.end(), 0);
    std::mt19937 pg(g_idx_seed);
    std::shuffle(perm.begin(), perm.end(), pg);
    for (int64_t i = 0; i < c.k; ++i)
      r.g_idx[static_cast<size_t>(perm[static_cast<size_t>(i)])] = static_cast<int32_t>(i / G);
  } else {
    for (int64_t l = 0; l < c.k; ++l) r.g_idx[static_cast<size_t>(l)] = static_cast<int32_t>(l / G);
  }
  return r;
}

}  // namespace pagoda::cpu::testing
