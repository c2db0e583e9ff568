#pragma once
// The GPU's layout of a 4-bit GPTQ / AWQ weight (the W4A16 kernels of kernels/cuda/linear_w4.h),
// built on the host at load from the checkpoint's packing (quant_dequant.h's GptqWeight /
// AwqWeight, scales and zero points already unpacked by the format's LinearMethod).
//
// W4Layout of W [n, k] (n output rows, k input features, G = group_size, groups = k / G):
//   qweight  uint32 [n, k / 8]      row j's 4-bit codes along k: element (j, i) is nibble i % 8
//                                   (bits [4 (i % 8), 4 (i % 8) + 4)) of word j * (k / 8) + i / 8,
//                                   so a 16-byte load reads 32 consecutive codes of one row
//   meta     uint32 [n, groups]     bits 0..15: the fp16 scale of (j, g); bits 16..23: the zero
//                                   point z (0..16; GPTQ v1's +1 applied); w = scale * (q - z)
//   perm     int32  [k] or empty    act-order: position i holds input feature perm[i] (features
//                                   sorted by group, Marlin's order), so position i is in group
//                                   i / G; the kernels read x[perm[i]] there. Empty: identity.
// Worked example (k = 256, G = 128, no act-order): W[5, 200] is nibble 0 of qweight word
// 5 * 32 + 25 = 185, in group 1, scaled by meta[5 * 2 + 1] = meta[11].
// Act-order example (k = 4, G = 2, g_idx = {1, 0, 0, 1}): perm = {1, 2, 0, 3}; position 0 holds
// feature 1 (group 0), position 2 holds feature 0 (group 1).
//
// Scales are stored in fp16 (the real checkpoints' dtype, so exact for them); a bf16 / fp32 scale
// that fp16 does not hold exactly is rounded, and counted (W4Repack::inexact_scales).
#include <cstdint>
#include <vector>

#include "kernels/cpu/quant_dequant.h"

namespace pagoda::cpu {

struct W4Layout {
  int64_t n = 0, k = 0, group_size = 0;
  std::vector<uint32_t> qweight;  // [n, k / 8]
  std::vector<uint32_t> meta;     // [n, k / group_size]
  std::vector<int32_t> perm;      // [k] or empty

  [[nodiscard]] int64_t groups() const { return k / group_size; }
};

/// An empty layout of W [n, k]: codes and metadata zero, no permutation. Needs k % 8 == 0 and
/// k % group_size == 0.
[[nodiscard]] W4Layout make_w4_layout(int64_t n, int64_t k, int64_t group_size);

/// The act-order permutation of g_idx [k] (the group of each input feature): input features
/// sorted by group, stably (perm[i] = the feature at position i). Empty when g_idx is the
/// identity grouping (g_idx[l] == l / group_size for every l). Returns false when some group does
/// not hold exactly group_size features (the GPU's groups are runs of group_size positions).
[[nodiscard]] bool w4_permutation(const int32_t* g_idx, int64_t k, int64_t group_size,
                                  std::vector<int32_t>* perm);

/// One fp16 scale and zero point as a meta word; *exact is cleared when fp16 rounds the scale.
[[nodiscard]] uint32_t w4_meta(float scale, int32_t zero, bool* exact);

/// Writes the meta words of rows [row0, row0 + rows) of `out` from scales / zeros [groups, rows]
/// (a source's, unpacked); returns how many scales fp16 rounded. (The repacks below call it; the
/// GPU's dummy weights, whose codes are drawn on the device, call it alone.)
int64_t repack_w4_meta(const float* scales, const int32_t* zeros, int64_t rows, int64_t row0,
                       W4Layout* out);

/// Writes a 4-bit GPTQ weight (w.bits == 4, w.n rows) to rows [row0, row0 + w.n) of `out`
/// (out->k == w.k), in the order of out->perm (set it first; every source of a fused projection
/// shares it). Its g_idx must agree with out->perm's grouping (w4_permutation of the same g_idx).
/// Returns how many scales fp16 rounded.
int64_t repack_w4(const GptqWeight& w, int64_t row0, W4Layout* out);

/// The same for an AWQ weight (no permutation: out->perm must be empty).
int64_t repack_w4(const AwqWeight& w, int64_t row0, W4Layout* out);

/// Rows [r0, r1) of W in fp32, in the input features' original order (dst [r1 - r0, k]): what
/// the GPU kernels compute with. Equals the source's dequantize_rows where its scales are fp16.
void dequantize_rows(const W4Layout& w, int64_t r0, int64_t r1, float* dst);

}  // namespace pagoda::cpu
