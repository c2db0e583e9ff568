// How it works: each source's codes are read element by element through the checkpoint's packing
// (GPTQ: along k in [k / 8, n] words; AWQ: along n in AWQ's nibble order) and written row-major
// along k in the GPU's order (int4_repack.h), position i of row j taking input feature perm[i];
// each (row, group)'s scale and zero point become one meta word. Load-time work, O(n k).
#include "kernels/cpu/int4_repack.h"

#include <algorithm>
#include <numeric>

#include "core/half.h"
#include "core/status.h"

namespace pagoda::cpu {
namespace {

constexpr int64_t kTileRows = 64;

/// Sets nibble i % 8 of row j's word i / 8 to q (the word starts zeroed by make_w4_layout).
inline void put_code(W4Layout* out, int64_t j, int64_t i, uint32_t q) {
  out->qweight[static_cast<size_t>(j * (out->k / 8) + i / 8)] |= (q & 0xfu) << (4 * (i % 8));
}

}  // namespace

W4Layout make_w4_layout(int64_t n, int64_t k, int64_t group_size) {
  PAGODA_CHECK(n >= 0 && k > 0 && k % 8 == 0 && group_size > 0 && k % group_size == 0,
               "W4 layout of [{}, {}] with group size {}", n, k, group_size);
  W4Layout w;
  w.n = n;
  w.k = k;
  w.group_size = group_size;
  w.qweight.assign(static_cast<size_t>(n * (k / 8)), 0u);
  w.meta.assign(static_cast<size_t>(n * (k / group_size)), 0u);
  return w;
}

bool w4_permutation(const int32_t* g_idx, int64_t k, int64_t group_size,
                    std::vector<int32_t>* perm) {
  perm->clear();
  bool identity = true;
  for (int64_t l = 0; l < k; ++l) identity = identity && g_idx[l] == l / group_size;
  if (identity) return true;
  std::vector<int32_t> p(static_cast<size_t>(k));
  std::iota(p.begin(), p.end(), 0);
  std::stable_sort(p.begin(), p.end(), [&](int32_t a, int32_t b) { return g_idx[a] < g_idx[b]; });
  // Sorted, position i must be in group i / group_size: every group holds group_size features.
  for (int64_t i = 0; i < k; ++i)
    if (g_idx[p[static_cast<size_t>(i)]] != i / group_size) return false;
  *perm = std::move(p);
  return true;
}

uint32_t w4_meta(float scale, int32_t zero, bool* exact) {
  const uint16_t h = float_to_f16(scale);
  if (f16_to_float(h) != scale) *exact = false;
  PAGODA_CHECK(zero >= 0 && zero <= 255, "zero point {} out of range", zero);
  return static_cast<uint32_t>(h) | (static_cast<uint32_t>(zero) << 16);
}

int64_t repack_w4_meta(const float* scales, const int32_t* zeros, int64_t rows, int64_t row0,
                       W4Layout* out) {
  PAGODA_CHECK(row0 >= 0 && row0 + rows <= out->n, "meta of {} rows at row {} into {}", rows, row0,
               out->n);
  const int64_t groups = out->groups();
  int64_t inexact = 0;
  for (int64_t g = 0; g < groups; ++g) {
    for (int64_t j = 0; j < rows; ++j) {
      bool exact = true;
      out->meta[static_cast<size_t>((row0 + j) * groups + g)] =
          w4_meta(scales[g * rows + j], zeros[g * rows + j], &exact);
      inexact += exact ? 0 : 1;
    }
  }
  return inexact;
}

int64_t repack_w4(const GptqWeight& w, int64_t row0, W4Layout* out) {
  PAGODA_CHECK(w.bits == 4 && w.k == out->k && row0 >= 0 && row0 + w.n <= out->n,
               "GPTQ repack of {} bits, [{}, {}] at row {} into [{}, {}]", w.bits, w.n, w.k, row0,
               out->n, out->k);
  const int64_t n = w.n, k = w.k, G = out->group_size;
  const bool permuted = !out->perm.empty();
  for (int64_t i = 0; i < k; ++i) {
    const int64_t l = permuted ? out->perm[static_cast<size_t>(i)] : i;
    PAGODA_CHECK(w.g_idx[l] == i / G, "g_idx[{}] = {} disagrees with the permutation (group {})", l,
                 w.g_idx[l], i / G);
  }
  // Tiles of kTileRows rows keep the rows' words being filled in cache.
  for (int64_t j0 = 0; j0 < n; j0 += kTileRows) {
    const int64_t j1 = std::min(n, j0 + kTileRows);
    for (int64_t i = 0; i < k; ++i) {
      // Position i holds feature l: e.g. (perm {1, 2, 0, 3}) position 2 reads feature 0, from
      // qweight row 0 / 8 = 0, bits 0..3 of each column's word.
      const int64_t l = permuted ? out->perm[static_cast<size_t>(i)] : i;
      const int32_t* word_row = w.qweight + (l / 8) * n;
      const int shift = static_cast<int>(4 * (l % 8));
      for (int64_t j = j0; j < j1; ++j)
        put_code(out, row0 + j, i, static_cast<uint32_t>(word_row[j]) >> shift);
    }
  }
  return repack_w4_meta(w.scales, w.zeros, n, row0, out);
}

int64_t repack_w4(const AwqWeight& w, int64_t row0, W4Layout* out) {
  PAGODA_CHECK(w.k == out->k && w.group_size == out->group_size && out->perm.empty() && row0 >= 0 &&
                   row0 + w.n <= out->n && w.n % 8 == 0,
               "AWQ repack of [{}, {}] group {} at row {} into [{}, {}] group {}", w.n, w.k,
               w.group_size, row0, out->n, out->k, out->group_size);
  const int64_t n = w.n, k = w.k, words = n / 8;
  for (int64_t j0 = 0; j0 < n; j0 += kTileRows) {
    const int64_t j1 = std::min(n, j0 + kTileRows);
    for (int64_t l = 0; l < k; ++l) {
      // Element (l, j = 10) is column 10 % 8 = 2 of word [l, 1]: nibble kAwqReverseOrder[2] = 1.
      for (int64_t j = j0; j < j1; ++j) {
        const auto word = static_cast<uint32_t>(w.qweight[l * words + j / 8]);
        put_code(out, row0 + j, l, word >> (4 * kAwqReverseOrder[j % 8]));
      }
    }
  }
  return repack_w4_meta(w.scales, w.zeros, n, row0, out);
}

void dequantize_rows(const W4Layout& w, int64_t r0, int64_t r1, float* dst) {
  const int64_t k = w.k, groups = w.groups();
  for (int64_t j = r0; j < r1; ++j) {
    float* row = dst + (j - r0) * k;
    for (int64_t i = 0; i < k; ++i) {
      const uint32_t word = w.qweight[static_cast<size_t>(j * (k / 8) + i / 8)];
      const auto q = static_cast<int32_t>((word >> (4 * (i % 8))) & 0xfu);
      const uint32_t meta = w.meta[static_cast<size_t>(j * groups + i / w.group_size)];
      const float scale = f16_to_float(static_cast<uint16_t>(meta & 0xffffu));
      const auto zero = static_cast<int32_t>(meta >> 16);
      const int64_t l = w.perm.empty() ? i : w.perm[static_cast<size_t>(i)];
      row[l] = scale * static_cast<float>(q - zero);
    }
  }
}

}  // namespace pagoda::cpu
