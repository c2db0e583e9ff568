// Paged attention on the CPU: one flash-attention style pass per work item.
//
// A work item is (sequence, kv head, tile of query tokens). Its rows are every (token, query head)
// pair of the tile whose query head reads that kv head, so each key and value vector is loaded
// once for the whole GQA group and the whole tile, which is what makes decode memory-bound rather
// than G times the traffic. Keys are walked in chunks of kKeyChunk positions (crossing block
// boundaries freely through the block table); each chunk does scores -> online softmax update ->
// P*V. Items are handed out dynamically because causal tiles and sequences differ in cost.
//
// A quantized (or 16-bit) cache takes one more step per chunk: its keys and values for the item's
// kv head are dequantized into the item's scratch ([kKeyChunk, head_dim] fp32 each), and the
// chunk then runs the fp32 code on those rows. So its result is the fp32 cache's for the
// dequantized values, bit for bit; the fp32 cache keeps pointing into the cache itself.
#include "kernels/cpu/paged_attention.h"

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstring>
#include <limits>
#include <vector>

#include "core/dtype.h"
#include "kernels/cpu/kv_cache_codes.h"
#include "kernels/cpu/simd.h"

namespace pagoda::cpu {
namespace {

constexpr int kKeyChunk = 32;     // key positions per softmax update
constexpr int kMaxTileRows = 64;  // (token, head) rows per work item: bounds L1/L2 footprint

// dot(a, b) over n floats.
inline float dot(const float* a, const float* b, int n) {
#if defined(__AVX512F__)
  __m512 acc0 = _mm512_setzero_ps(), acc1 = _mm512_setzero_ps();
  int i = 0;
  for (; i + 32 <= n; i += 32) {
    acc0 = _mm512_fmadd_ps(_mm512_loadu_ps(a + i), _mm512_loadu_ps(b + i), acc0);
    acc1 = _mm512_fmadd_ps(_mm512_loadu_ps(a + i + 16), _mm512_loadu_ps(b + i + 16), acc1);
  }
  for (; i < n; i += 16) {
    const __mmask16 mask = simd::tail_mask(n - i);
    acc0 = _mm512_fmadd_ps(_mm512_maskz_loadu_ps(mask, a + i), _mm512_maskz_loadu_ps(mask, b + i),
                           acc0);
  }
  return _mm512_reduce_add_ps(_mm512_add_ps(acc0, acc1));
#else
  float acc = 0.0f;
  for (int i = 0; i < n; ++i) acc += a[i] * b[i];
  return acc;
#endif
}

// s[j] = exp(s[j] - max) for j in [0, n); returns the sum.
inline float exp_shifted(float* s, int n, float max) {
  float sum = 0.0f;
  int j = 0;
#if defined(__AVX512F__)
  const __m512 vmax = _mm512_set1_ps(max);
  __m512 vsum = _mm512_setzero_ps();
  for (; j < n; j += 16) {
    const __mmask16 mask = simd::tail_mask(n - j);
    const __m512 e = simd::exp512(_mm512_sub_ps(_mm512_maskz_loadu_ps(mask, s + j), vmax));
    _mm512_mask_storeu_ps(s + j, mask, e);
    vsum = _mm512_mask_add_ps(vsum, mask, vsum, e);
  }
  sum = _mm512_reduce_add_ps(vsum);
#endif
  for (; j < n; ++j) {
    s[j] = std::exp(s[j] - max);
    sum += s[j];
  }
  return sum;
}

// acc[0, d) += sum_j p[j] * v[j][0, d), j in [0, n). The accumulator stays in registers over the
// keys, two chains per vector to hide FMA latency.
inline void accumulate_pv(const float* p, const float* const* v, int n, float* acc, int d) {
#if defined(__AVX512F__)
  for (int i = 0; i < d; i += 32) {
    const __mmask16 m0 = simd::tail_mask(d - i);
    const __mmask16 m1 = simd::tail_mask(std::max(0, d - i - 16));
    __m512 a0 = _mm512_maskz_loadu_ps(m0, acc + i), a1 = _mm512_maskz_loadu_ps(m1, acc + i + 16);
    __m512 b0 = _mm512_setzero_ps(), b1 = _mm512_setzero_ps();
    int j = 0;
    for (; j + 2 <= n; j += 2) {
      const __m512 p0 = _mm512_set1_ps(p[j]), p1 = _mm512_set1_ps(p[j + 1]);
      a0 = _mm512_fmadd_ps(p0, _mm512_maskz_loadu_ps(m0, v[j] + i), a0);
      a1 = _mm512_fmadd_ps(p0, _mm512_maskz_loadu_ps(m1, v[j] + i + 16), a1);
      b0 = _mm512_fmadd_ps(p1, _mm512_maskz_loadu_ps(m0, v[j + 1] + i), b0);
      b1 = _mm512_fmadd_ps(p1, _mm512_maskz_loadu_ps(m1, v[j + 1] + i + 16), b1);
    }
    if (j < n) {
      const __m512 p0 = _mm512_set1_ps(p[j]);
      a0 = _mm512_fmadd_ps(p0, _mm512_maskz_loadu_ps(m0, v[j] + i), a0);
      a1 = _mm512_fmadd_ps(p0, _mm512_maskz_loadu_ps(m1, v[j] + i + 16), a1);
    }
    _mm512_mask_storeu_ps(acc + i, m0, _mm512_add_ps(a0, b0));
    _mm512_mask_storeu_ps(acc + i + 16, m1, _mm512_add_ps(a1, b1));
  }
#else
  for (int j = 0; j < n; ++j)
    for (int i = 0; i < d; ++i) acc[i] += p[j] * v[j][i];
#endif
}

struct WorkItem {
  int seq;
  int kv_head;
  int32_t token_begin;  // absolute rows of q
  int32_t token_end;
};

// Per-thread buffers, sized once per call for the largest tile.
struct Scratch {
  std::vector<float> q;       // [rows, head_dim], pre-scaled
  std::vector<float> acc;     // [rows, head_dim], unnormalised output
  std::vector<float> scores;  // [rows, kKeyChunk]
  std::vector<float> row_max, row_sum;
  std::vector<int32_t> lo, hi;          // per row: inclusive key position range
  std::vector<float> k_chunk, v_chunk;  // [kKeyChunk, head_dim]: a quantized cache's chunk
};

void run_item(const PagedAttentionParams& p, const WorkItem& item, Scratch& s) {
  const PagedKVLayout& L = p.layout;
  const int d = L.head_dim;
  const int group = p.num_heads / L.num_kv_heads;
  const int num_rows = (item.token_end - item.token_begin) * group;
  const int64_t token_stride = static_cast<int64_t>(L.num_kv_heads) * d;
  const int32_t seq_len = p.seq_lens[item.seq];
  const int32_t* table = p.block_tables + static_cast<int64_t>(item.seq) * p.max_blocks_per_seq;

  // lo and hi are local indices (positions with one rank; see PagedAttentionParams::cp_size):
  // the rank's positions in [first, last] are cp_rank + i * cp_size for i in [ceil((first -
  // cp_rank) / cp_size), floor((last - cp_rank) / cp_size)]. Example (cp_size 2, cp_rank 1,
  // positions [0, 6]): local [0, 2], positions 1, 3, 5; hi < lo when the rank has none of them.
  const int D = p.cp_size, j0 = p.cp_rank;
  int32_t lo_all = std::numeric_limits<int32_t>::max(), hi_all = -1;
  for (int r = 0; r < num_rows; ++r) {
    const int64_t t = item.token_begin + r / group;
    const int h = item.kv_head * group + r % group;
    const int32_t pos = p.positions[t];
    const int32_t last = std::min(pos, seq_len - 1);
    const int32_t first = p.sliding_window > 0 ? std::max(0, pos - p.sliding_window + 1) : 0;
    s.hi[r] = last >= j0 ? (last - j0) / D : -1;
    s.lo[r] = first <= j0 ? 0 : (first - j0 + D - 1) / D;
    lo_all = std::min(lo_all, s.lo[r]);
    hi_all = std::max(hi_all, s.hi[r]);
    const float* q = p.q + (t * p.num_heads + h) * d;
    for (int i = 0; i < d; ++i) s.q[r * d + i] = q[i] * p.scale;
    std::fill_n(&s.acc[r * d], d, 0.0f);
    s.row_max[r] = -std::numeric_limits<float>::infinity();
    s.row_sum[r] = 0.0f;
  }

  const bool dequantize = L.dtype != DType::kF32;
  const auto element_bytes = static_cast<int64_t>(dtype_size(L.dtype));
  const auto* key_bytes = static_cast<const char*>(p.key_cache);
  const auto* value_bytes = static_cast<const char*>(p.value_cache);
  const float* kptr[kKeyChunk];
  const float* vptr[kKeyChunk];
  // Chunks start at multiples of kKeyChunk, not at the tile's first key: a row's chunks (and so
  // the order of its online softmax) then depend on its own key range only, not on which other
  // tokens share the tile (with a sliding window, lo_all is the tile's earliest window start).
  for (int32_t c0 = lo_all - lo_all % kKeyChunk; c0 <= hi_all; c0 += kKeyChunk) {
    const int count = std::min<int32_t>(kKeyChunk, hi_all - c0 + 1);
    for (int j = 0; j < count; ++j) {
      const int32_t pos = c0 + j;
      const int64_t slot =
          static_cast<int64_t>(table[pos / L.block_size]) * L.block_size + pos % L.block_size;
      const int64_t offset = slot * token_stride + static_cast<int64_t>(item.kv_head) * d;
      if (dequantize) {
        float* kd = &s.k_chunk[static_cast<size_t>(j) * d];
        float* vd = &s.v_chunk[static_cast<size_t>(j) * d];
        dequantize_kv_row(key_bytes + offset * element_bytes, d, L.dtype, p.scales.k, kd);
        dequantize_kv_row(value_bytes + offset * element_bytes, d, L.dtype, p.scales.v, vd);
        kptr[j] = kd;
        vptr[j] = vd;
      } else {
        kptr[j] = static_cast<const float*>(p.key_cache) + offset;
        vptr[j] = static_cast<const float*>(p.value_cache) + offset;
      }
    }
    for (int r = 0; r < num_rows; ++r) {
      const int ja = std::max(0, s.lo[r] - c0);
      const int jb = std::min(count, s.hi[r] - c0 + 1);
      if (ja >= jb) continue;
      float* sc = &s.scores[r * kKeyChunk];
      const float* q = &s.q[r * d];
      float chunk_max = -std::numeric_limits<float>::infinity();
      for (int j = ja; j < jb; ++j) {
        sc[j] = dot(q, kptr[j], d);
        if (p.softcap > 0) sc[j] = p.softcap * std::tanh(sc[j] / p.softcap);
        chunk_max = std::max(chunk_max, sc[j]);
      }
      // Online softmax: rescale what was accumulated under the old maximum.
      const float new_max = std::max(s.row_max[r], chunk_max);
      float* acc = &s.acc[r * d];
      if (new_max > s.row_max[r] && s.row_sum[r] > 0.0f) {
        const float correction = std::exp(s.row_max[r] - new_max);
        s.row_sum[r] *= correction;
        for (int i = 0; i < d; ++i) acc[i] *= correction;
      }
      s.row_max[r] = new_max;
      s.row_sum[r] += exp_shifted(sc + ja, jb - ja, new_max);
      accumulate_pv(sc + ja, vptr + ja, jb - ja, acc, d);
    }
  }

  for (int r = 0; r < num_rows; ++r) {
    const int64_t t = item.token_begin + r / group;
    const int h = item.kv_head * group + r % group;
    float* out = p.out + (t * p.num_heads + h) * d;
    const float inv = s.row_sum[r] > 0.0f ? 1.0f / s.row_sum[r] : 0.0f;
    for (int i = 0; i < d; ++i) out[i] = s.acc[r * d + i] * inv;
    if (p.lse != nullptr) {
      p.lse[t * p.num_heads + h] = s.row_sum[r] > 0.0f ? s.row_max[r] + std::log(s.row_sum[r])
                                                       : -std::numeric_limits<float>::infinity();
    }
  }
}

}  // namespace

void reshape_and_cache(const KVCacheWrite& w, ThreadPool& pool) {
  const PagedKVLayout& layout = w.layout;
  const int64_t row = static_cast<int64_t>(layout.num_kv_heads) * layout.head_dim;
  if (w.num_tokens <= 0 || row <= 0) return;
  // Token t's row [num_kv_heads, head_dim] goes to elements [slot * row, (slot + 1) * row).
  const auto row_bytes = row * static_cast<int64_t>(dtype_size(layout.dtype));
  auto* key_cache = static_cast<char*>(w.key_cache);
  auto* value_cache = static_cast<char*>(w.value_cache);
  pool.parallel_for(w.num_tokens, std::max<int64_t>(1, 32768 / row), [&](int64_t t0, int64_t t1) {
    for (int64_t t = t0; t < t1; ++t) {
      const int64_t slot = w.slot_mapping[t];
      if (slot < 0) continue;
      if (layout.dtype == DType::kF32) {
        std::memcpy(key_cache + slot * row_bytes, w.k + t * row, static_cast<size_t>(row_bytes));
        std::memcpy(value_cache + slot * row_bytes, w.v + t * row, static_cast<size_t>(row_bytes));
      } else {
        quantize_kv_row(w.k + t * row, row, layout.dtype, w.scales.k, key_cache + slot * row_bytes);
        quantize_kv_row(w.v + t * row, row, layout.dtype, w.scales.v,
                        value_cache + slot * row_bytes);
      }
    }
  });
}

void reshape_and_cache(const float* k, const float* v, const int64_t* slot_mapping,
                       int64_t num_tokens, float* key_cache, float* value_cache,
                       const PagedKVLayout& layout, ThreadPool& pool) {
  KVCacheWrite w{k, v, slot_mapping, num_tokens, key_cache, value_cache, layout, {}};
  w.layout.dtype = DType::kF32;
  reshape_and_cache(w, pool);
}

void paged_attention(const PagedAttentionParams& p, ThreadPool& pool) {
  if (p.num_tokens <= 0 || p.num_seqs <= 0) return;
  const int group = p.num_heads / p.layout.num_kv_heads;
  const int tile_tokens = std::max(1, kMaxTileRows / group);
  std::vector<WorkItem> items;
  int64_t total_cost = 0;  // sum over items of rows * keys, to decide whether threads pay off
  for (int s = 0; s < p.num_seqs; ++s) {
    const int32_t begin = p.query_start_loc[s], end = p.query_start_loc[s + 1];
    for (int kv = 0; kv < p.layout.num_kv_heads; ++kv) {
      for (int32_t t = begin; t < end; t += tile_tokens) {
        items.push_back({s, kv, t, std::min(end, t + tile_tokens)});
      }
    }
    total_cost += static_cast<int64_t>(end - begin) * p.seq_lens[s] * p.num_heads;
  }
  if (items.empty()) return;
  const int max_rows = tile_tokens * group;
  const int d = p.layout.head_dim;
  std::atomic<size_t> next{0};
  auto worker = [&](int, int) {
    Scratch s;
    s.q.resize(static_cast<size_t>(max_rows) * d);
    s.acc.resize(static_cast<size_t>(max_rows) * d);
    s.scores.resize(static_cast<size_t>(max_rows) * kKeyChunk);
    s.row_max.resize(max_rows);
    s.row_sum.resize(max_rows);
    s.lo.resize(max_rows);
    s.hi.resize(max_rows);
    if (p.layout.dtype != DType::kF32) {
      s.k_chunk.resize(static_cast<size_t>(kKeyChunk) * d);
      s.v_chunk.resize(static_cast<size_t>(kKeyChunk) * d);
    }
    for (size_t i = next.fetch_add(1); i < items.size(); i = next.fetch_add(1)) {
      run_item(p, items[i], s);
    }
  };
  // Tiny problems (a handful of short decodes) are cheaper on one thread than waking the pool.
  if (total_cost * d < (int64_t{1} << 16) || items.size() == 1) {
    worker(0, 1);
  } else {
    pool.run_on_all(worker);
  }
}

}  // namespace pagoda::cpu
