#pragma once
// Exact dequantization of the packed weight formats, a tile of output rows at a time (the
// DequantizeRows of cpu::dequant_matmul). Each struct describes one weight W [n, k] (n output
// rows, k input features) as the checkpoint stores it; scales and zero points arrive unpacked to
// fp32 / int32 by the format's LinearMethod (they are small), the large packed tensor is read in
// place. Worked examples of each packing are in quant_dequant.cc.
#include <cstdint>

namespace pagoda::cpu {

/// float8_e4m3fn W [n, k] (bytes). Scale of element (j, l): row_scale[j] when block_scale is
/// null (per tensor, expanded per row, or per channel), else
/// block_scale[(j / block_out) * blocks_per_row + l / block_in], blocks_per_row = ceil(k /
/// block_in). dst = e4m3(W[j, l]) * scale.
struct Fp8Weight {
  const uint8_t* w = nullptr;
  int64_t n = 0, k = 0;
  const float* row_scale = nullptr;    // [n]
  const float* block_scale = nullptr;  // [ceil(n / block_out), ceil(k / block_in)]
  int64_t block_out = 0, block_in = 0;
};
void dequantize_rows(const Fp8Weight& w, int64_t r0, int64_t r1, float* dst);

/// GPTQ W^T packed along k: qweight [k / pack, n] int32 with pack = 32 / bits values per word,
/// value t of a word in bits [t * bits, (t + 1) * bits) is element (l = word_row * pack + t, j).
/// dst = scales[g, j] * (q - zeros[g, j]) with g = g_idx[l]; zeros already effective (the v1
/// format's +1 applied).
struct GptqWeight {
  const int32_t* qweight = nullptr;
  int bits = 4;
  int64_t n = 0, k = 0;
  const int32_t* g_idx = nullptr;  // [k]
  const float* scales = nullptr;   // [groups, n]
  const int32_t* zeros = nullptr;  // [groups, n]
};
void dequantize_rows(const GptqWeight& w, int64_t r0, int64_t r1, float* dst);

/// AWQ (GEMM) W^T packed along n: qweight [k, n / 8] int32; nibble p of word c holds column
/// 8 c + kAwqOrder[p] with kAwqOrder = {0, 2, 4, 6, 1, 3, 5, 7}. dst = (q - zeros[g, j]) *
/// scales[g, j], g = l / group_size.
struct AwqWeight {
  const int32_t* qweight = nullptr;
  int64_t n = 0, k = 0, group_size = 0;
  const float* scales = nullptr;   // [k / group_size, n]
  const int32_t* zeros = nullptr;  // [k / group_size, n]
};
void dequantize_rows(const AwqWeight& w, int64_t r0, int64_t r1, float* dst);

/// Nibble p of an AWQ word holds column kAwqOrder[p] of its 8; column c sits in nibble
/// kAwqReverseOrder[c].
inline constexpr int kAwqOrder[8] = {0, 2, 4, 6, 1, 3, 5, 7};
inline constexpr int kAwqReverseOrder[8] = {0, 4, 1, 5, 2, 6, 3, 7};

/// FP4 (float4_e2m1) W [n, k] in pairs: byte [j, l / 2], element l in the low nibble when l is
/// even, the high one when odd. dst = e2m1(code) * scales[j, l / block] (the block scale decoded
/// and, for NVFP4, already multiplied by the global scale).
struct Fp4Weight {
  const uint8_t* packed = nullptr;  // [n, k / 2]
  int64_t n = 0, k = 0, block = 0;
  const float* scales = nullptr;  // [n, k / block]
};
void dequantize_rows(const Fp4Weight& w, int64_t r0, int64_t r1, float* dst);

}  // namespace pagoda::cpu
