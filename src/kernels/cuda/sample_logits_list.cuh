#pragma once
// The sampling kernel's fast paths (sample_logits.cu, whose opening note says how it works): the
// row read eight tokens per thread with 16-byte loads, the lower bound on a k-th largest value from
// the threads' maxima, and the candidate list in the root block's shared memory (gathered, sorted,
// cut by top-k / min-p / top-p and drawn from there, without more passes over the row).
// Included by sample_logits.cu only, after sample_logits_select.cuh.
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <climits>

#include "kernels/cuda/gumbel.cuh"
#include "kernels/cuda/sample_logits_select.cuh"

namespace pagoda::cuda {
namespace {

constexpr int kVec = 8;                     // tokens per thread per tile
constexpr int kWideTile = kThreads * kVec;  // tokens per block per tile

/// The logits a row's passes read: the raw row (bf16, f16 or fp32) or, for rows with processors,
/// its fp32 copy in the workspace; NaN reads as -inf.
struct RowReader {
  const void* raw = nullptr;  // the row's first raw logit
  DType dtype = DType::kF32;
  const float* work = nullptr;  // the row's processed copy, or nullptr: read raw
  int vocab = 0;
  bool vec = false;  // 16-byte loads: vocab % 8 == 0 and both bases 16-byte aligned

  __device__ float at(int v) const {
    return sane(work != nullptr ? work[v] : load_as_float(raw, dtype, v));
  }
  /// Tokens c .. c + 7 (c a multiple of 8); past the vocabulary -inf.
  __device__ void load8(int c, float (&x)[kVec]) const {
    if (vec && c + kVec <= vocab) {
      if (work != nullptr || dtype == DType::kF32) {
        const float* p = (work != nullptr ? work : static_cast<const float*>(raw)) + c;
        const float4 a = *reinterpret_cast<const float4*>(p);
        const float4 b = *reinterpret_cast<const float4*>(p + 4);
        x[0] = a.x, x[1] = a.y, x[2] = a.z, x[3] = a.w;
        x[4] = b.x, x[5] = b.y, x[6] = b.z, x[7] = b.w;
      } else {
        const uint4 q = *reinterpret_cast<const uint4*>(static_cast<const uint16_t*>(raw) + c);
        const uint32_t w[4] = {q.x, q.y, q.z, q.w};
#pragma unroll
        for (int i = 0; i < 4; ++i) {
          if (dtype == DType::kBF16) {
            x[2 * i] = __uint_as_float(w[i] << 16);
            x[2 * i + 1] = __uint_as_float(w[i] & 0xffff0000u);
          } else {
            x[2 * i] = __half2float(__ushort_as_half(static_cast<unsigned short>(w[i] & 0xffffu)));
            x[2 * i + 1] = __half2float(__ushort_as_half(static_cast<unsigned short>(w[i] >> 16)));
          }
        }
      }
#pragma unroll
      for (int j = 0; j < kVec; ++j) x[j] = sane(x[j]);
    } else {
#pragma unroll
      for (int j = 0; j < kVec; ++j) x[j] = c + j < vocab ? at(c + j) : -INFINITY;
    }
  }
};

/// Calls f(c, x) on this block's share of the row in whole kWideTile-token tiles, in order (block
/// r of n takes tiles r, r + n, ...; thread i gets tokens c .. c + 7 in x, c = tile + 8 i, -inf
/// past the vocabulary). Every warp runs the same number of iterations (the warp collectives inside
/// f need all 32 lanes). Issuing the next tile's loads before f runs on this one measured slower
/// (flat top-p 176 -> 199 us at 256 rows). Example, a team of 2, vocab 20,000: block 0 takes the
/// tiles at 0, 8,192 and 16,384 (the last one partial), block 1 those at 4,096 and 12,288.
template <class Team, class F>
__device__ __forceinline__ void for_each_row_tile(const RowReader& r, const Team& t, F&& f) {
  const int lane_first = static_cast<int>(threadIdx.x) * kVec;
  for (int tile = t.rank * kWideTile; tile < r.vocab; tile += Team::size * kWideTile) {
    float x[kVec];
    r.load8(tile + lane_first, x);
    f(tile + lane_first, x);
  }
}

/// The float a sort key was made of (ordered() inverted; -0 comes back as +0).
__device__ __forceinline__ float key_value(u64 key) {
  const uint32_t u = static_cast<uint32_t>(key >> kIndexBits);
  return __uint_as_float((u & 0x80000000u) != 0 ? (u & 0x7fffffffu) : ~u);
}

/// exp((x - m) / T) as every path computes it (the same rounding everywhere: a token's
/// probability does not depend on the path that looked at it).
__device__ __forceinline__ float prob_of(float x, float m, float inv_t) {
  return x == -INFINITY ? 0.0f : expf(__fmul_rn(__fsub_rn(x, m), inv_t));
}

constexpr float kLog2e = 1.4426950408889634f;

/// 2^x by the hardware's approximation (ex2.approx.ftz: relative error ~2^-22; 2^-inf = 0).
__device__ __forceinline__ float fast_exp2(float x) {
  float y;
  asm("ex2.approx.ftz.f32 %0, %1;" : "=f"(y) : "f"(x));
  return y;
}

/// The Gumbel-max score of token v: (x - m) / T + noise, one rounding order on every path.
__device__ __forceinline__ float score_of(float x, float m, float inv_t, uint64_t key, int v) {
  return __fmaf_rn(__fsub_rn(x, m), inv_t, gumbel(key, v));
}

/// The block's best (score, index): highest score, ties to the lower index (-1: none). Every
/// thread of the block gets it.
__device__ int block_argmax(float best, int best_i, Shared& s) {
  warp_argmax(best, best_i);
  __syncthreads();
  if (lane_id() == 0) {
    s.red_f[threadIdx.x >> 5] = best;
    s.red_idx[threadIdx.x >> 5] = best_i;
  }
  __syncthreads();
  best = lane_id() < kWarps ? s.red_f[lane_id()] : -INFINITY;
  best_i = lane_id() < kWarps ? s.red_idx[lane_id()] : -1;
  warp_argmax(best, best_i);
  return best_i;
}

/// Tokens c .. c + 7's maximum, which replaces (best, best_i) when it beats it: the eight's first
/// index of it is looked up only then (tiles come in token order, so a strict > keeps the first
/// maximum of the row).
__device__ __forceinline__ float track_first_max(const float (&x)[kVec], int c, int vocab,
                                                 float& best, int& best_i) {
  float top = x[0];
#pragma unroll
  for (int j = 1; j < kVec; ++j) top = fmaxf(top, x[j]);
  if (c < vocab && (best_i < 0 || top > best)) {
    int first = kVec - 1;
#pragma unroll
    for (int j = kVec - 2; j >= 0; --j) first = x[j] == top ? j : first;
    best = top;
    best_i = c + first;
  }
  return top;
}

/// Everything the row's first pass learns: the maximum, its first index, and this thread's own
/// maximum (kth_bound's input).
struct RowStats {
  float max = -INFINITY;
  int argmax = -1;
  float mine = -INFINITY;
};

template <class Team>
__device__ RowStats row_stats(const RowReader& r, Shared& s, Team& t) {
  float best = -INFINITY;
  int best_i = -1;
  for_each_row_tile(r, t, [&](const int c, float(&x)[kVec]) {
    (void)track_first_max(x, c, r.vocab, best, best_i);
  });
  RowStats out;
  out.mine = best;
  out.argmax = team_argmax(best, best_i, s, t);
  out.max = out.argmax >= 0 ? r.at(out.argmax) : -INFINITY;
  return out;
}

/// A lower bound on the k-th largest value of the row (1 <= k): each block sorts its threads'
/// maxima (maxima of disjoint parts of the row) and takes its k-th, so at least k tokens are >= it;
/// the team keeps the largest of its blocks' bounds. -inf (no bound) when k > kThreads. The bound
/// only narrows what is gathered: the result never depends on it.
/// The k-th largest of the block's values (1 <= k <= kThreads), every thread gets it: a bitonic
/// sort of s.bound.
__device__ float block_kth_largest(float mine, int k, Shared& s) {
  __syncthreads();
  s.bound[threadIdx.x] = mine;
  __syncthreads();
  for (int size = 2; size <= kThreads; size <<= 1) {
    for (int j = size >> 1; j > 0; j >>= 1) {
      const int i = static_cast<int>(threadIdx.x), ixj = i ^ j;
      if (ixj > i) {
        const bool descending = (i & size) == 0;
        const float a = s.bound[i], b = s.bound[ixj];
        if ((a < b) == descending) {
          s.bound[i] = b;
          s.bound[ixj] = a;
        }
      }
      __syncthreads();
    }
  }
  return s.bound[k - 1];
}

template <class Team>
__device__ float kth_bound(float mine, int k, Shared& s, Team& t) {
  if (k > kThreads) return -INFINITY;
  return team_reduce(block_kth_largest(mine, k, s), -INFINITY, Max{}, s.red_f, s.slot_f, t);
}

/// The maximum over the warp (every lane gets it; exact, so the same in every lane).
__device__ __forceinline__ float warp_max(float v) {
  for (int o = 16; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(kFull, v, o));
  return v;
}

/// The warp's sum by a fixed butterfly: lane 0's result depends on the 32 values alone.
__device__ __forceinline__ float warp_sum_in_order(float v) {
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(kFull, v, o);
  return v;
}

/// The sum of 2^((x_j - ref) scale) over a lane's eight tokens in token order (ref = -inf: 0).
__device__ __forceinline__ float lane_exp2_sum(const float (&x)[kVec], float ref, float scale) {
  const float shift = ref == -INFINITY ? 0.0f : ref * scale;
  float sum = 0.0f;
#pragma unroll
  for (int j = 0; j < kVec; ++j) sum += fast_exp2(fmaf(x[j], scale, -shift));
  return sum;
}

/// A chunk's entry in the root's table (chunk_mass reused): its maximum and the sum of
/// 2^((x - max) log2 e) over its tokens, an fp32 sum in a fixed order.
struct ChunkLse {
  float max, sum;
};
static_assert(sizeof(ChunkLse) == sizeof(u64));

/// row_stats and, in the same pass, the row's sum of exp((x - max) / T) by chunks of 256 tokens
/// (vocab <= kMaxChunks * 256), for the log-probabilities' normaliser (scale = log2 e) and for
/// top-p's first draw (scale = log2 e / T): warp w's share of a tile is one chunk; the warp finds
/// its maximum, each lane sums its eight tokens' 2^((x - chunk max) scale) in token order
/// (hardware exp2), the warp adds the lanes in a fixed butterfly, and lane 0 writes the chunk's
/// entry into the root's table. The chunks are the same for every team size and so are their
/// entries. This replaces a second pass over the row that needed the maximum first. *finite (when
/// given) counts the tokens with a finite logit.
template <class Team>
__device__ RowStats row_stats_chunks(const RowReader& r, float scale, Shared& s, Team& t,
                                     int* finite = nullptr) {
  ChunkLse* table = reinterpret_cast<ChunkLse*>(t.root->chunk_mass);
  float best = -INFINITY;
  int best_i = -1;
  int count = 0;
  for_each_row_tile(r, t, [&](const int c, float(&x)[kVec]) {
    const float top = track_first_max(x, c, r.vocab, best, best_i);
    const float chunk_max = warp_max(top);
    const float sum = warp_sum_in_order(lane_exp2_sum(x, chunk_max, scale));
    if (lane_id() == 0) table[c >> 8] = ChunkLse{chunk_max, sum};
    if (finite != nullptr) {
#pragma unroll
      for (int j = 0; j < kVec; ++j) count += x[j] != -INFINITY;
    }
  });
  if (finite != nullptr) *finite = team_reduce(count, 0, Plus{}, s.red_i, s.slot_i, t);
  RowStats out;
  out.mine = best;
  out.argmax = team_argmax(best, best_i, s, t);  // its barrier publishes the table
  out.max = out.argmax >= 0 ? r.at(out.argmax) : -INFINITY;
  return out;
}

/// Root block only, after row_stats_chunks(scale log2 e): log_z (the log of the fixed-point sum of
/// the chunks' sums scaled to the row's maximum m, in chunk order: exact, the same for every team)
/// and, when n > 0, the tokens at or above *gather_at gathered into the root's list: gather_at is a
/// lower bound on the n-th largest logit (the n-th largest of the maxima of pairs of chunks) less
/// the margin of the two-pass path; only the chunks whose maximum reaches it are read again. Clears
/// the table. Every thread of the root gets log_z and *gather_at.
template <class Team>
__device__ float root_log_z(const RowReader& r, float m, int n, Shared& s, const Team& t,
                            float* gather_at) {
  ChunkLse* table = reinterpret_cast<ChunkLse*>(s.chunk_mass);
  const int chunks = (r.vocab + 255) / 256;
  const int c0 = 2 * static_cast<int>(threadIdx.x);
  u64 sum = 0;
  float pair_max = -INFINITY;
  for (int c = c0; c < c0 + 2 && c < chunks; ++c) {
    const ChunkLse e = table[c];
    if (e.max != -INFINITY) sum += fixed_mass(e.sum * fast_exp2((e.max - m) * kLog2e), t);
    pair_max = fmaxf(pair_max, e.max);
  }
  sum = block_reduce(sum, u64{0}, Plus{}, s.red_u);
  const float log_z = m + static_cast<float>(log(static_cast<double>(sum) / t.mass_scale));
  *gather_at = INFINITY;
  if (n > 0) {
    const float bound = block_kth_largest(pair_max, n, s);
    const float span = fabsf(bound - m) + logf(static_cast<float>(r.vocab)) + 1.0f;
    const float at = bound - span * 0x1p-19f;
    *gather_at = at;
    for (int c = static_cast<int>(threadIdx.x >> 5); c < chunks; c += kWarps) {
      if (table[c].max < at) continue;  // the same for the whole warp
      float x[kVec];
      const int v = c * 256 + lane_id() * kVec;
      r.load8(v, x);
#pragma unroll
      for (int j = 0; j < kVec; ++j) {
        const bool in = v + j < r.vocab && x[j] >= at;
        if (__any_sync(kFull, in)) gather(in, sort_key(x[j], v + j), x[j], s);
      }
    }
  }
  __syncthreads();
  for (int c = static_cast<int>(threadIdx.x); c < kMaxChunks; c += kThreads) s.chunk_mass[c] = 0;
  return log_z;
}

/// Gathers the tokens for which member(v, x, key&, p&) holds into the root's list and, when they
/// fit (at most kCompact), sorts it by key, descending. Returns how many there are (more than
/// kCompact: the list is incomplete, the caller falls back to the radix searches). The leading
/// barrier keeps the gather off a list someone may still read; the count is zero again after.
template <class Member, class Team>
__device__ int gather_list(const RowReader& r, Member member, Shared& s, Team& t) {
  Shared& root = *t.root;
  t.sync();
  for_each_row_tile(r, t, [&](const int c, float(&x)[kVec]) {
#pragma unroll
    for (int j = 0; j < kVec; ++j) {
      u64 key = 0;
      float p = 0.0f;
      const bool in = c + j < r.vocab && member(c + j, x[j], key, p);
      if (__any_sync(kFull, in)) gather(in, key, p, root);
    }
  });
  t.sync();
  const int n = root.count;
  t.sync();
  if (t.is_root()) {
    if (threadIdx.x == 0) s.count = 0;
    if (n <= kCompact) sort_candidates(n, s);
  }
  return n;
}

/// Root block only, after a sort: the first i in [0, n) at which start plus the cumulative mass
/// of probs[0 .. i] reaches target (the CPU's shortest prefix); 0 when start reaches it already,
/// n - 1 when rounding leaves it out of reach. Every thread of the root gets it.
__device__ int scan_list(int n, double start, double target, Shared& s) {
  if (threadIdx.x < 32) {
    const int lane = lane_id();
    const int chunk = (n + 31) / 32;
    const int begin = min(n, lane * chunk), end = min(n, begin + chunk);
    double sum = 0;
    for (int i = begin; i < end; ++i) sum += s.probs[i];
    const double incl = start + warp_inclusive_sum(sum);
    double cum = incl - sum;
    const bool before = cum < target;
    // The first lane whose chunk reaches the target walks it.
    const unsigned reaches = __ballot_sync(kFull, before && incl >= target && end > begin);
    if (reaches != 0 && lane == __ffs(reaches) - 1) {
      int i = begin;
      for (; i < end; ++i) {
        cum += s.probs[i];
        if (cum >= target) break;
      }
      s.sel_index = min(i, end - 1);
    } else if (reaches == 0 && lane == 0) {
      s.sel_index = start >= target ? 0 : max(n - 1, 0);
    }
  }
  __syncthreads();
  return s.sel_index;
}

/// Root block only: the fixed-point mass of probs[0 .. n) (exact: any order gives the same sum).
template <class Team>
__device__ u64 list_mass(int n, Shared& s, const Team& t) {
  u64 sum = 0;
  for (int i = threadIdx.x; i < n; i += kThreads) sum += fixed_mass(s.probs[i], t);
  return block_reduce(sum, u64{0}, Plus{}, s.red_u);
}

/// Root block only: how many of the first n entries have probability >= min_p (a prefix: the
/// list is sorted by logit, descending).
__device__ int list_min_p(int n, float min_p, Shared& s) {
  int c = 0;
  for (int i = threadIdx.x; i < n; i += kThreads) c += s.probs[i] >= min_p ? 1 : 0;
  return block_reduce(c, 0, Plus{}, s.red_i);
}

/// Root block only: the Gumbel-max draw over the first n entries (-1 when none can be drawn).
__device__ int draw_list(int n, float m, float inv_t, uint64_t key, Shared& s) {
  float best = -INFINITY;
  int best_i = -1;
  for (int i = threadIdx.x; i < n; i += kThreads) {
    const float x = key_value(s.keys[i]);
    const int v = key_index(s.keys[i]);
    if (x == -INFINITY) continue;
    const float score = score_of(x, m, inv_t, key, v);
    if (better(score, v, best, best_i)) {
      best = score;
      best_i = v;
    }
  }
  return block_argmax(best, best_i, s);
}

/// The Gumbel-max draw over the tokens for which member(x, v) holds, in the whole row.
template <class Member, class Team>
__device__ int draw_row(const RowReader& r, Member member, float m, float inv_t, uint64_t key,
                        Shared& s, Team& t) {
  float best = -INFINITY;
  int best_i = -1;
  for_each_row_tile(r, t, [&](const int c, float(&x)[kVec]) {
#pragma unroll
    for (int j = 0; j < kVec; ++j) {
      const int v = c + j;
      if (v >= r.vocab || x[j] == -INFINITY || !member(x[j], v)) continue;
      const float score = score_of(x[j], m, inv_t, key, v);
      if (better(score, v, best, best_i)) {
        best = score;
        best_i = v;
      }
    }
  });
  return team_argmax(best, best_i, s, t);
}

/// Inclusive prefix sum over the block: thread i gets v_0 + ... + v_i, every thread the block's
/// *total. The leading barrier lets consecutive calls reuse the scratch.
__device__ u64 block_inclusive_sum(u64 v, Shared& s, u64* total) {
  const u64 in_warp = warp_inclusive_sum(v);
  __syncthreads();
  if (lane_id() == 31) s.red_u[threadIdx.x >> 5] = in_warp;
  __syncthreads();
  u64 before = 0, all = 0;
  const int warp = static_cast<int>(threadIdx.x >> 5);
#pragma unroll
  for (int w = 0; w < kWarps; ++w) {
    const u64 x = s.red_u[w];
    before += w < warp ? x : 0;
    all += x;
  }
  *total = all;
  return before + in_warp;
}

/// Which tokens draw_top_p's passes count (key >= thr) and the probability each one counts with.
/// key >= thr is tested without building keys: value above thr's, or equal and index at most
/// thr's (thr = a key + 1 may carry into the value bits: then the index is kIndexMask, every index
/// of the next value). Branch-free (bitwise on the conditions, the exp always computed): a branch
/// per token costs its convergence barriers, which doubled the pass. mass_from and token_at_mass
/// must count with this one rule: the chunk masses of one are walked by the other.
struct MassRule {
  bool everyone;  // thr == 0
  float thr_x;
  int thr_v;
  float m, inv_t_log2e;

  __device__ MassRule(u64 thr, float m_, float inv_t)
      : everyone(thr == 0),
        thr_x(key_value(thr)),
        thr_v(key_index(thr)),
        m(m_),
        inv_t_log2e(inv_t * kLog2e) {}
  __device__ bool member(float x, int v) const {
    return everyone | (x > thr_x) | ((x == thr_x) & (v <= thr_v));
  }
  /// exp((x - m) / T) for a member, else 0, by the hardware exp2 (3 instructions instead of expf's
  /// 10; ~1e-6 relative from prob_of, which the radix top_p_threshold and the lists use).
  __device__ float prob(float x, int v) const {
    const float p = fast_exp2(__fmul_rn(__fsub_rn(x, m), inv_t_log2e));  // 0 for x = -inf
    return member(x, v) ? p : 0.0f;
  }
  /// The fixed-point mass of tokens c .. c + 7: their probabilities summed in token order in fp32,
  /// then converted once (the groups of eight are the same for every team size).
  template <class Team>
  __device__ u64 group_mass(const float (&x)[kVec], int c, const Team& t) const {
    float g = 0.0f;
#pragma unroll
    for (int j = 0; j < kVec; ++j) g += prob(x[j], c + j);
    return fixed_mass(g, t);
  }
};

/// One pass of draw_top_p: the fixed-point mass of the tokens with key >= thr, added per chunk
/// (256 << shift consecutive tokens) into the root's chunk_mass (zero before) and in total (every
/// thread gets the total). Example, a 152k vocabulary, shift 0: warp w of a block at wide tile c0
/// owns tokens c0 + 256 w .. c0 + 256 w + 255, which is chunk (c0 + 256 w) >> 8; its lane 0 adds
/// the warp's sum there.
/// kCount: also counts the members (finite, key >= thr) into *members.
template <bool kCount, class Team>
__device__ u64 mass_from(const RowReader& r, u64 thr, float m, float inv_t, int shift, Shared& s,
                         Team& t, int* members = nullptr) {
  Shared& root = *t.root;
  u64 total = 0;
  int count = 0;
  const MassRule rule(thr, m, inv_t);
  for_each_row_tile(r, t, [&](const int c, float(&x)[kVec]) {
    const u64 q = rule.group_mass(x, c, t);  // past the vocabulary x is -inf: no mass
    if constexpr (kCount) {
#pragma unroll
      for (int j = 0; j < kVec; ++j) count += rule.member(x[j], c + j) & (x[j] != -INFINITY);
    }
    u64 w = q;
    for (int o = 16; o > 0; o >>= 1) w += __shfl_xor_sync(kFull, w, o);
    if (lane_id() == 0 && w != 0) atomicAdd(&root.chunk_mass[(c >> 8) >> shift], w);
    total += q;
  });
  if constexpr (kCount) *members = team_reduce(count, 0, Plus{}, s.red_i, s.slot_i, t);
  return team_reduce(total, u64{0}, Plus{}, s.red_u, s.slot_u, t);  // publishes the chunks too
}

/// Root block only: the chunk whose running fixed-point mass (chunk_mass, in chunk order) passes
/// u (below their total), and u's offset inside it; thread i scans chunks 2i and 2i + 1. Clears
/// the chunk masses. Every thread of the root gets it (-1 if none: the masses were short of u).
__device__ int chunk_at_mass(int chunks, u64 u, Shared& s, u64* offset) {
  const int c0 = 2 * static_cast<int>(threadIdx.x);
  const u64 first = c0 < chunks ? s.chunk_mass[c0] : 0;
  const u64 second = c0 + 1 < chunks ? s.chunk_mass[c0 + 1] : 0;
  if (threadIdx.x == 0) s.sel_index = -1;
  u64 total = 0;
  const u64 incl = block_inclusive_sum(first + second, s, &total);  // its barrier orders sel_index
  const u64 before = incl - first - second;
  if (before <= u && u < incl) {
    const bool in_first = u < before + first;
    s.sel_index = in_first ? c0 : c0 + 1;
    s.sel_above = u - (in_first ? before : before + first);
  }
  if (c0 < chunks) s.chunk_mass[c0] = 0;
  if (c0 + 1 < chunks) s.chunk_mass[c0 + 1] = 0;
  __syncthreads();
  const int chunk = s.sel_index;
  *offset = s.sel_above;
  __syncthreads();  // sel_index and sel_above are free again
  return chunk;
}

/// Root block only, after row_stats_chunks(scale) and chunk_masses_from_table: the token at
/// fixed-point offset u of the row laid end to end in token order, each chunk as long as its mass
/// fixed(sum 2^((chunk max - m) scale)). Warp 0 reads the chunk again and redoes the pass's lane
/// sums; the lanes' masses in fixed point pick the lane, then its running sum the token. Rounding
/// can leave the lanes a unit or two short of the chunk's mass: an offset past them takes the
/// last lane (token) with mass. Every thread of the root gets the token (-1: none).
template <class Team>
__device__ int token_at_chunk_mass(const RowReader& r, u64 u, float m, float scale, Shared& s,
                                   const Team& t) {
  u64 offset = 0;
  const int chunk = chunk_at_mass((r.vocab + 255) / 256, u, s, &offset);
  if (chunk < 0) return -1;
  if (threadIdx.x < 32) {
    const int c = chunk * 256 + lane_id() * kVec;
    float x[kVec];
    r.load8(c, x);
    float top = x[0];
#pragma unroll
    for (int j = 1; j < kVec; ++j) top = fmaxf(top, x[j]);
    const float chunk_max = warp_max(top);
    const float f = chunk_max == -INFINITY ? 0.0f : fast_exp2((chunk_max - m) * scale);
    const u64 mine = fixed_mass(lane_exp2_sum(x, chunk_max, scale) * f, t);
    const u64 incl = warp_inclusive_sum(mine);
    const unsigned with_mass = __ballot_sync(kFull, mine != 0);
    const unsigned past = __ballot_sync(kFull, incl > offset && mine != 0);
    const int lane = past != 0 ? __ffs(past) - 1 : (with_mass != 0 ? 31 - __clz(with_mass) : -1);
    if (lane < 0 && lane_id() == 0) s.sel_index = chunk * 256;  // no lane rounds to any mass
    if (lane_id() == lane) {
      const u64 off = min(offset - (incl - mine), mine - 1);
      const float shift = chunk_max == -INFINITY ? 0.0f : chunk_max * scale;
      float sum = 0.0f;
      int pick = -1;
#pragma unroll
      for (int j = 0; j < kVec; ++j) {
        const float term = fast_exp2(fmaf(x[j], scale, -shift));
        sum += term;
        if (pick < 0 && term > 0.0f && fixed_mass(sum * f, t) > off) pick = j;
      }
      if (pick < 0) {  // rounding: the last token with a term
        for (int j = kVec - 1; j >= 0 && pick < 0; --j)
          if (fast_exp2(fmaf(x[j], scale, -shift)) > 0.0f) pick = j;
      }
      s.sel_index = c + max(pick, 0);
    }
  }
  __syncthreads();
  return s.sel_index;
}

/// Root block only, after row_stats_chunks(scale): the table's entries replaced by the chunks'
/// fixed-point masses (fixed(sum 2^((chunk max - m) scale))); returns their total.
template <class Team>
__device__ u64 chunk_masses_from_table(int vocab, float m, float scale, Shared& s, const Team& t) {
  const int chunks = (vocab + 255) / 256;
  u64 sum = 0;
  for (int c = 2 * static_cast<int>(threadIdx.x); c < 2 * static_cast<int>(threadIdx.x) + 2; ++c) {
    if (c >= chunks) break;
    const ChunkLse e = reinterpret_cast<const ChunkLse*>(s.chunk_mass)[c];
    const u64 q = e.max == -INFINITY ? 0 : fixed_mass(e.sum * fast_exp2((e.max - m) * scale), t);
    s.chunk_mass[c] = q;
    sum += q;
  }
  return block_reduce(sum, u64{0}, Plus{}, s.red_u);
}

/// Root block only, after mass_from(thr): the token at fixed-point offset u (below the pass's
/// total) when the members (key >= thr) are laid end to end in token order, each as long as its
/// mass. Thread i scans chunks 2i and 2i + 1 to find the chunk, then the block walks that chunk's
/// tokens, eight per thread, kWideTile at a time. Clears the chunk masses. Every thread of the
/// root gets the token (-1 if the sums disagreed, which exact sums exclude).
template <class Team>
__device__ int token_at_mass(const RowReader& r, u64 thr, u64 u, float m, float inv_t, int shift,
                             Shared& s, const Team& t) {
  const MassRule rule(thr, m, inv_t);
  const int chunk_tokens = 256 << shift;
  u64 offset = 0;
  const int chunk = chunk_at_mass((r.vocab + chunk_tokens - 1) / chunk_tokens, u, s, &offset);
  if (chunk < 0) return -1;
  const int begin = chunk * chunk_tokens, end = min(r.vocab, begin + chunk_tokens);
  for (int tile = begin; tile < end; tile += kWideTile) {
    const int c = tile + static_cast<int>(threadIdx.x) * kVec;
    float x[kVec] = {-INFINITY, -INFINITY, -INFINITY, -INFINITY,
                     -INFINITY, -INFINITY, -INFINITY, -INFINITY};
    if (c < end) r.load8(c, x);
    u64 mine = c < end ? rule.group_mass(x, c, t) : 0;
    u64 tile_total = 0;
    const u64 mine_incl = block_inclusive_sum(mine, s, &tile_total);
    if (offset < tile_total) {  // the same for every thread
      __syncthreads();
      if (threadIdx.x == 0) s.sel_index = -1;
      __syncthreads();
      const u64 before = mine_incl - mine;
      if (before <= offset && offset < mine_incl) {
        // The group's running sums, as group_mass adds them: token j ends at fixed(g_0..j).
        float g = 0.0f;
        int j = 0;
        for (; j < kVec - 1; ++j) {
          g += rule.prob(x[j], c + j);
          if (offset < before + fixed_mass(g, t)) break;
        }
        s.sel_index = c + j;
      }
      __syncthreads();
      return s.sel_index;
    }
    offset -= tile_total;
  }
  return -1;
}

/// Top-p over many members, drawn by rejection (FlashInfer's sorting-free idea; no histogram, no
/// sort). A member j is drawn by inverse CDF over the members' fixed-point masses (the pass that
/// sums them keeps the mass per chunk; the root finds the chunk, then the token in it); one pass
/// sums the mass of the tokens above j (key order). j is in top-p's prefix iff that mass is below
/// top_p of the members' whole mass (the prefix is the shortest one reaching it): accept j.
/// Otherwise no token at or below j is in the prefix either, and the draw repeats among the
/// tokens above j, whose masses per chunk that same pass has just counted. The prefix lies inside
/// every set drawn from, so an accepted draw is distributed as the members' masses restricted to
/// the prefix: exact. A draw is rejected with probability (mass outside the prefix) / (mass drawn
/// from): a flat row at top-p 0.95 takes about two passes after the first. The sums are fixed
/// point, the uniforms hash (key, round): the same bits for every team size. The accepted test is
/// top_p_threshold's definition of the cut in the same integers, so a.kept (which that search
/// computes) holds every draw. Returns the token (every thread), or -1 after kMaxRounds
/// rejections in a row, when the caller cuts with top_p_threshold and draws by Gumbel-max (still
/// exact: that draw does not depend on the rejected rounds), or kListThem (before any draw) when
/// the members are at most kCompact: the caller gathers and draws them as a list, as top-k's rows,
/// so that which draw a row gets depends on its members alone, never on the team size.
constexpr int kListThem = -2;

/// Where row_stats_chunks has summed the row for top-p's first draw (no truncation before top-p,
/// an unprocessed row): its scale (log2 e / T) and the count of finite logits.
struct ChunkedStart {
  float scale;
  int finite;
};

template <class Team>
__device__ int draw_top_p(const RowReader& r, u64 floor, float top_p, float m, float inv_t,
                          uint64_t key, const ChunkedStart* start, Shared& s, Team& t) {
  Shared& root = *t.root;
  int shift = 0;  // chunks of 256 << shift tokens, at most kMaxChunks of them
  while (((r.vocab - 1) >> (8 + shift)) + 1 > kMaxChunks) ++shift;
  u64 thr = floor;  // drawing among the tokens with key >= thr
  int members = 0;
  u64 mass = 0;
  if (start != nullptr) {  // the first pass's table (floor is 0: every token)
    if (t.is_root()) {
      const u64 total = chunk_masses_from_table(r.vocab, m, start->scale, s, t);
      if (threadIdx.x == 0) s.found_key = total;
    }
    t.sync();
    mass = root.found_key;
    members = start->finite;
  } else {
    mass = mass_from<true>(r, thr, m, inv_t, shift, s, t, &members);
  }
  if (members <= kCompact) {
    if (t.is_root())
      for (int i = threadIdx.x; i < kMaxChunks; i += kThreads) s.chunk_mass[i] = 0;
    return kListThem;
  }
  const double target_q = static_cast<double>(top_p) * static_cast<double>(mass);
  constexpr int kMaxRounds = 32;
  for (int round = 0; round < kMaxRounds; ++round) {
    if (t.is_root()) {
      const u64 h = mix(key ^ mix(0x2545f4914f6cdd1dull + static_cast<u64>(round)));
      const u64 u = __umul64hi(h, mass);
      const int v = round == 0 && start != nullptr
                        ? token_at_chunk_mass(r, u, m, start->scale, s, t)
                        : token_at_mass(r, thr, u, m, inv_t, shift, s, t);
      if (threadIdx.x == 0) s.found_key = v >= 0 ? sort_key(r.at(v), v) : 0;
    }
    t.sync();
    const u64 drawn = root.found_key;  // no token has key 0
    if (drawn == 0) return -1;
    thr = drawn + 1;
    const u64 above =
        mass_from<false>(r, thr, m, inv_t, shift, s, t);  // its barrier: found_key is free
    if (above == 0 || static_cast<double>(above) < target_q) return key_index(drawn);
    mass = above;
  }
  return -1;
}

}  // namespace
}  // namespace pagoda::cuda
