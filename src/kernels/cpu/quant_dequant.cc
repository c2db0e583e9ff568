// How it works: each routine writes rows [r0, r1) of W [n, k] as fp32, decoding the checkpoint's
// codes with the scale (and zero point) of their group. The products are exact in fp32 wherever
// the checkpoint's scales are 16-bit (an fp16 scale has 11 significant bits, a 4-bit (q - z) at
// most 5, an 8-bit one 9): what a GPU dequantizing in registers gets, and what the golden
// references compute with torch on the same weights.
//
// Worked examples of the packings (W [n, k] indexed (j, l): output row j, input feature l):
//  - GPTQ 4-bit, n = 3: qweight [k / 8, 3]. Element (l = 13, j = 2) is in word qweight[13 / 8 = 1,
//    2], value t = 13 % 8 = 5: bits 20..23 of that word.
//  - AWQ 4-bit, n = 16: qweight [k, 2]. Element (l, j = 10) is in word qweight[l, 10 / 8 = 1],
//    column 10 % 8 = 2 of that word, which AWQ's order {0, 2, 4, 6, 1, 3, 5, 7} puts in nibble 1:
//    bits 4..7. (Column 1 is in nibble 4, bits 16..19.)
//  - FP4, k = 32, block 16: element (j, l = 19) is the high nibble of byte [j, 9], its scale
//    scales[j, 19 / 16 = 1].
#include "kernels/cpu/quant_dequant.h"

#include <array>

#include "core/fp8.h"

namespace pagoda::cpu {
namespace {

const std::array<float, 256>& e4m3_table() {
  static const std::array<float, 256> table = [] {
    std::array<float, 256> t{};
    for (int b = 0; b < 256; ++b)
      t[static_cast<size_t>(b)] = e4m3_to_float(static_cast<uint8_t>(b));
    return t;
  }();
  return table;
}

}  // namespace

void dequantize_rows(const Fp8Weight& w, int64_t r0, int64_t r1, float* dst) {
  const auto& table = e4m3_table();
  const int64_t blocks_per_row = w.block_scale ? (w.k + w.block_in - 1) / w.block_in : 0;
  for (int64_t j = r0; j < r1; ++j) {
    const uint8_t* src = w.w + j * w.k;
    float* out = dst + (j - r0) * w.k;
    if (w.block_scale == nullptr) {
      const float s = w.row_scale[j];
      for (int64_t l = 0; l < w.k; ++l) out[l] = table[src[l]] * s;
    } else {
      const float* scales = w.block_scale + (j / w.block_out) * blocks_per_row;
      for (int64_t l = 0; l < w.k; ++l) out[l] = table[src[l]] * scales[l / w.block_in];
    }
  }
}

void dequantize_rows(const GptqWeight& w, int64_t r0, int64_t r1, float* dst) {
  const int pack = 32 / w.bits;
  const uint32_t mask = (1u << w.bits) - 1;
  for (int64_t word_row = 0; word_row < w.k / pack; ++word_row) {
    const int32_t* words = w.qweight + word_row * w.n;
    for (int64_t j = r0; j < r1; ++j) {
      const auto word = static_cast<uint32_t>(words[j]);
      float* out = dst + (j - r0) * w.k + word_row * pack;
      for (int t = 0; t < pack; ++t) {
        const int64_t g = w.g_idx[word_row * pack + t];
        const auto q = static_cast<int32_t>((word >> (t * w.bits)) & mask);
        out[t] = w.scales[g * w.n + j] * static_cast<float>(q - w.zeros[g * w.n + j]);
      }
    }
  }
}

void dequantize_rows(const AwqWeight& w, int64_t r0, int64_t r1, float* dst) {
  const int64_t words_per_row = w.n / 8;
  for (int64_t l = 0; l < w.k; ++l) {
    const int32_t* words = w.qweight + l * words_per_row;
    const int64_t g = l / w.group_size;
    for (int64_t j = r0; j < r1; ++j) {
      const auto word = static_cast<uint32_t>(words[j / 8]);
      const auto q = static_cast<int32_t>((word >> (4 * kAwqReverseOrder[j % 8])) & 0xfu);
      dst[(j - r0) * w.k + l] =
          static_cast<float>(q - w.zeros[g * w.n + j]) * w.scales[g * w.n + j];
    }
  }
}

void dequantize_rows(const Fp4Weight& w, int64_t r0, int64_t r1, float* dst) {
  const int64_t blocks = w.k / w.block;
  for (int64_t j = r0; j < r1; ++j) {
    const uint8_t* src = w.packed + j * (w.k / 2);
    const float* scales = w.scales + j * blocks;
    float* out = dst + (j - r0) * w.k;
    for (int64_t l = 0; l < w.k; l += 2) {
      const uint8_t byte = src[l / 2];
      const float s = scales[l / w.block];
      out[l] = e2m1_to_float(byte & 0xf) * s;
      out[l + 1] = e2m1_to_float(byte >> 4) * s;
    }
  }
}

}  // namespace pagoda::cpu
