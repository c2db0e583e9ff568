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

// Loops over this block's share of the row in whole kWideTile-token tiles (block r of n takes tiles
// r, r + n, ...); thread i owns tokens c .. c + 7 of the tile, c = tile + 8 i. Every warp runs the
// same number of iterations (the warp collectives inside need all 32 lanes).
#define FOR_EACH_WIDE_TILE(t, vocab, c)                                                  \
  for (int tile_ = (t).rank * kWideTile; tile_ < (vocab); tile_ += (t).size * kWideTile) \
    if (const int c = tile_ + static_cast<int>(threadIdx.x) * kVec; true)

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
  FOR_EACH_WIDE_TILE(t, r.vocab, c) {
    float x[kVec];
    r.load8(c, x);
#pragma unroll
    for (int j = 0; j < kVec; ++j) {
      if (c + j < r.vocab && (best_i < 0 || x[j] > best)) {  // in token order: the first maximum
        best = x[j];
        best_i = c + j;
      }
    }
  }
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
template <class Team>
__device__ float kth_bound(float mine, int k, Shared& s, Team& t) {
  if (k > kThreads) return -INFINITY;
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
  return team_reduce(s.bound[k - 1], -INFINITY, Max{}, s.red_f, s.slot_f, t);
}

/// Gathers the tokens for which member(v, x, key&, p&) holds into the root's list and, when they
/// fit (at most kCompact), sorts it by key, descending. Returns how many there are (more than
/// kCompact: the list is incomplete, the caller falls back to the radix searches). The leading
/// barrier keeps the gather off a list someone may still read; the count is zero again after.
template <class Member, class Team>
__device__ int gather_list(const RowReader& r, Member member, Shared& s, Team& t) {
  Shared& root = *t.root;
  t.sync();
  FOR_EACH_WIDE_TILE(t, r.vocab, c) {
    float x[kVec];
    r.load8(c, x);
#pragma unroll
    for (int j = 0; j < kVec; ++j) {
      u64 key = 0;
      float p = 0.0f;
      const bool in = c + j < r.vocab && member(c + j, x[j], key, p);
      if (__any_sync(kFull, in)) gather(in, key, p, root);
    }
  }
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

/// Top-p's window: the mass histogram by -log p (kBins bins over kBinSpan nats below the top
/// token, bin 0 the most probable; tokens further below are in no bin), fixed point, in the root's
/// bin_mass_total, finds the first bin where the mass from the top reaches top_p of the members'
/// whole mass. The tokens of that bin and above are a prefix of the key order (the bin is monotone
/// in the logit) holding the target, and top-p's prefix ends inside that bin. The same pass counts
/// the members (finite logit, key >= floor) and sums their mass. The totals stay in the root for
/// the draw (one histogram per launch: they are zero at the start).
struct BinWindow {
  int last_bin;  // the bin where the prefix ends; -1: it lies past the binned span
  u64 above;     // fixed-point mass of the members in the bins above it
  int count;     // members
  u64 mass;      // their fixed-point mass
};

template <class BinOf, class Team>
__device__ BinWindow mass_window(const RowReader& r, u64 floor, float top_p, float m, float inv_t,
                                 BinOf bin_of, Shared& s, Team& t) {
  Shared& root = *t.root;
  int count = 0;
  u64 mass = 0;
  FOR_EACH_WIDE_TILE(t, r.vocab, c) {
    float x[kVec];
    r.load8(c, x);
#pragma unroll
    for (int j = 0; j < kVec; ++j) {
      const bool member = c + j < r.vocab && x[j] != -INFINITY && sort_key(x[j], c + j) >= floor;
      const u64 q = member ? fixed_mass(prob_of(x[j], m, inv_t), t) : 0;
      count += member ? 1 : 0;
      mass += q;
      const int b = member ? bin_of(x[j]) : -1;
      if (b >= 0) {
        // 64-bit shared atomics are compare-and-swap loops: two 32-bit adds, with the low word's
        // wrap-around (seen in the old value it returns) carried into the high word.
        const uint32_t lo = static_cast<uint32_t>(q);
        const uint32_t old = atomicAdd(&s.bin_lo[b], lo);
        const uint32_t carry = old + lo < old ? 1u : 0u;
        const uint32_t hi = static_cast<uint32_t>(q >> 32) + carry;
        if (hi != 0) atomicAdd(&s.bin_hi[b], hi);
      }
    }
  }
  __syncthreads();
  for (int i = threadIdx.x; i < kBins; i += kThreads) {
    const u64 q = (static_cast<u64>(s.bin_hi[i]) << 32) + s.bin_lo[i];
    if (q != 0) {
      atomicAdd(&root.bin_mass_total[i], q);
      s.bin_lo[i] = s.bin_hi[i] = 0;
    }
  }
  mass = team_reduce(mass, u64{0}, Plus{}, s.red_u, s.slot_u, t);
  count = team_reduce(count, 0, Plus{}, s.red_i, s.slot_i, t);  // its barrier publishes the bins
  if (t.is_root() && threadIdx.x < 32) {
    // Lane l sums bins [64 l, 64 l + 64); a scan over lanes finds the bin.
    const int lane = lane_id();
    constexpr int kPerLane = kBins / 32;
    u64 lane_mass = 0;
    for (int j = 0; j < kPerLane; ++j) lane_mass += s.bin_mass_total[lane * kPerLane + j];
    const u64 incl = warp_inclusive_sum(lane_mass);
    const double target_q = static_cast<double>(top_p) * static_cast<double>(mass);
    const unsigned reaches = __ballot_sync(kFull, static_cast<double>(incl) >= target_q);
    if (reaches == 0) {
      // The prefix ends among the tokens below the span.
      if (lane == 0) {
        s.sel_digit = -1;
        s.sel_above = 0;
      }
    } else if (lane == __ffs(reaches) - 1) {
      u64 cum = incl - lane_mass;  // mass above bin b
      for (int b = lane * kPerLane;; ++b) {
        const u64 next = cum + s.bin_mass_total[b];
        if (static_cast<double>(next) >= target_q || b == lane * kPerLane + kPerLane - 1) {
          s.sel_digit = b;
          s.sel_above = cum;
          break;
        }
        cum = next;
      }
    }
  }
  t.sync();
  return BinWindow{root.sel_digit, root.sel_above, count, mass};
}

/// The Gumbel-max draw over the tokens for which member(x, v) holds, in the whole row.
template <class Member, class Team>
__device__ int draw_row(const RowReader& r, Member member, float m, float inv_t, uint64_t key,
                        Shared& s, Team& t) {
  float best = -INFINITY;
  int best_i = -1;
  FOR_EACH_WIDE_TILE(t, r.vocab, c) {
    float x[kVec];
    r.load8(c, x);
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
  }
  return team_argmax(best, best_i, s, t);
}

/// Root block, after a sort: the first entry of the list at which the fixed-point mass from the
/// top exceeds offset (n - 1 when rounding leaves it short). Every thread of the root gets it.
template <class Team>
__device__ int walk_list(int n, u64 offset, Shared& s, const Team& t) {
  if (threadIdx.x < 32) {
    const int lane = lane_id();
    const int chunk = (n + 31) / 32;
    const int begin = min(n, lane * chunk), end = min(n, begin + chunk);
    u64 sum = 0;
    for (int i = begin; i < end; ++i) sum += fixed_mass(s.probs[i], t);
    const u64 incl = warp_inclusive_sum(sum);
    const unsigned past = __ballot_sync(kFull, incl > offset && end > begin);
    if (past != 0 && lane == __ffs(past) - 1) {
      u64 cum = incl - sum;
      int i = begin;
      for (; i < end - 1; ++i) {
        cum += fixed_mass(s.probs[i], t);
        if (cum > offset) break;
      }
      s.sel_index = i;
    } else if (past == 0 && lane == 0) {
      s.sel_index = max(n - 1, 0);
    }
  }
  __syncthreads();
  return s.sel_index;
}

/// Top-p's draw by inverse CDF over mass_window's histogram, when the members are too many for the
/// list (the Gumbel-max draw of a 152k-token row costs ~70 instructions per token; this costs one
/// gather pass). The kept tokens are the bins above last_bin and a prefix of last_bin. Order the
/// members of those bins and of the whole of last_bin by bin, then by key: a uniform integer below
/// their mass picks a bin from the root's totals and the offset inside it; one pass gathers that
/// bin, the root sorts it and walks its masses to the offset. A token of last_bin past the cut is
/// rejected and drawn again with the next number (exact rejection sampling; rare: last_bin holds a
/// small part of the mass). A bin above last_bin with more than kCompact members is drawn by
/// Gumbel-max among its members instead (the bin was picked by its mass: still exact). Every
/// decision reads exact fixed-point sums, so the draw is the same for every team size. Returns
/// false (every thread) when last_bin itself is too big to cut in shared memory: nothing drawn.
/// Else the root block holds the token in *token and, when the draw sorted last_bin, the key of
/// the last kept token in *cut_key (else it is left alone).
template <class BinOf, class Team>
__device__ bool draw_by_bins(const RowReader& r, u64 floor, const BinWindow& w, double target,
                             float m, float inv_t, uint64_t key, BinOf bin_of, Shared& s, Team& t,
                             int* token, u64* cut_key) {
  Shared& root = *t.root;
  constexpr int kMaxRounds = 64;
  for (int round = 0; round < kMaxRounds; ++round) {
    if (t.is_root() && threadIdx.x < 32) {
      const int lane = lane_id();
      const u64 h = mix(key ^ mix(0x5bd1e995ull + static_cast<u64>(round)));
      // Uniform in [0, above + last_bin's mass) (h / 2^64 of it; the unevenness is < 2^-64 / q).
      const u64 u = __umul64hi(h, w.above + s.bin_mass_total[w.last_bin]);
      if (u >= w.above) {
        if (lane == 0) {
          s.sel_digit = w.last_bin;
          s.sel_above = u - w.above;
        }
      } else {
        constexpr int kPerLane = kBins / 32;
        u64 lane_mass = 0;
        for (int j = 0; j < kPerLane; ++j)
          lane_mass += lane * kPerLane + j < w.last_bin ? s.bin_mass_total[lane * kPerLane + j] : 0;
        const u64 incl = warp_inclusive_sum(lane_mass);
        const unsigned past = __ballot_sync(kFull, incl > u);
        if (lane == __ffs(past) - 1) {
          u64 cum = incl - lane_mass;
          int b = lane * kPerLane;
          for (; b < lane * kPerLane + kPerLane - 1; ++b) {
            if (cum + s.bin_mass_total[b] > u) break;
            cum += s.bin_mass_total[b];
          }
          s.sel_digit = b;
          s.sel_above = u - cum;
        }
      }
    }
    t.sync();
    const int bin = root.sel_digit;
    const u64 offset = root.sel_above;
    auto in_bin = [&](int v, float x, u64& k, float& pr) {
      if (x == -INFINITY || bin_of(x) != bin) return false;
      k = sort_key(x, v);
      pr = prob_of(x, m, inv_t);
      return k >= floor;
    };
    const int n = gather_list(r, in_bin, s, t);
    if (n > kCompact) {
      if (bin == w.last_bin) return false;
      auto member = [&](float x, int v) { return sort_key(x, v) >= floor && bin_of(x) == bin; };
      *token = draw_row(r, member, m, inv_t, key, s, t);
      return true;
    }
    if (t.is_root()) {
      const int i = walk_list(n, offset, s, t);
      bool kept = true;
      if (bin == w.last_bin) {
        const int last = scan_list(n, static_cast<double>(w.above) / t.mass_scale, target, s);
        *cut_key = s.keys[last];
        kept = i <= last;
      }
      if (kept) *token = key_index(s.keys[i]);
      if (threadIdx.x == 0) s.sel_done = kept ? 1 : 0;
    }
    t.sync();
    if (root.sel_done) return true;
  }
  // kMaxRounds rejections in a row (probability (rejected mass / drawn mass)^64): the most
  // probable token of last_bin, the first of the root's sorted list, which is always kept.
  if (t.is_root()) *token = key_index(s.keys[0]);
  return true;
}

}  // namespace
}  // namespace pagoda::cuda
