#pragma once
// The sampling kernel's building blocks (sample_logits.cu, whose opening note says how it works):
// the team of blocks of a row and its reductions, the 56-bit order keys, the radix select of the
// k-th key, the shared-memory sort of the candidates and the radix top-p threshold search (the
// fallbacks of sample_logits_list.cuh's fast paths).
// Included by sample_logits.cu only (everything here is internal to that file).
#include <cooperative_groups.h>

#include <cfloat>

#include "kernels/cuda/common.cuh"
#include "kernels/cuda/sample_logits.h"

namespace pagoda::cuda {
namespace {

namespace cg = cooperative_groups;
using u64 = unsigned long long;

constexpr int kThreads = 512;
constexpr int kBlocksPerSm = 2;  // two rows (or team members) share an SM, hiding each other's
                                 // barriers and reductions
constexpr int kWarps = kThreads / 32;
constexpr int kMaxTeam = 8;     // blocks per row: one cluster (8 is the portable cluster size)
constexpr int kCompact = 2048;  // top-p candidates sorted in shared memory
// Top-p's rejection draw (sample_logits_list.cuh's draw_top_p) keeps the members' mass per chunk of
// 256 << chunk_shift consecutive tokens, at most kMaxChunks chunks (a 152k vocabulary: 594 of 256).
constexpr int kMaxChunks = 1024;
constexpr unsigned kFull = 0xffffffffu;
constexpr int kIndexBits = 24;
constexpr u64 kIndexMask = (u64{1} << kIndexBits) - 1;

struct Shared {
  // This block's histograms, zero between uses (each pass clears what it pushed).
  int hist[256];
  u64 hist_mass[256];
  // Block reductions' scratch, and this block's share of a team reduction by parity.
  u64 red_u[kWarps];
  float red_f[kWarps];
  int red_i[kWarps];
  int red_idx[kWarps];
  u64 slot_u[2];
  float slot_f[2];
  int slot_i[2];
  int slot_idx[2];
  // Used in the root block only: the team's totals (zero between uses) and its decisions.
  int hist_total[256];
  u64 hist_mass_total[256];
  // Per chunk of the row, in order, zero between uses: draw_top_p's fixed-point member mass, or
  // row_stats_lse's ChunkLse (maximum, exp2 sum).
  u64 chunk_mass[kMaxChunks];
  int sel_digit, sel_remaining, sel_done;
  u64 sel_above;
  int count;  // gathered candidates (zero between uses)
  u64 found_key;
  int sel_index;
  u64 keys[kCompact];
  float probs[kCompact];
  float bound[kThreads];  // kth_bound's sort of this block's threads' maxima
};

/// The kSize blocks of one row (a compile-time size, so that the loops over the row keep a
/// constant stride and unroll, with several loads in flight per thread). Every thread of the team
/// runs the same sequence of team operations (their control flow depends on team-wide values
/// only), which is what the barriers require.
template <int kSize>
struct Team {
  static constexpr int size = kSize;
  int rank;          // this block's rank in the cluster; rank 0 is the root
  int first;         // this block's first kThreads-token tile starts here
  int epoch;         // reductions done so far (the parity picks the slot)
  float mass_scale;  // fixed-point units per unit of probability: 2^48 at most, and a row's sum
                     // fits in 63 bits
  Shared* root;      // the root block's shared memory

  __device__ bool is_root() const { return rank == 0; }
  // A team of one is a plain block: a block barrier, its own shared memory.
  // Clusters are sm_90: an sm_80 build has teams of one only (sample_logits picks them there).
  __device__ void sync() const {
    if constexpr (kSize == 1) {
      __syncthreads();
    } else {
#if __CUDA_ARCH__ >= 900
      cg::this_cluster().sync();
#else
      __trap();
#endif
    }
  }
  template <typename V>
  __device__ V* at(V* local, int r) const {
    if constexpr (kSize == 1) {
      return local;
    } else {
#if __CUDA_ARCH__ >= 900
      return cg::this_cluster().map_shared_rank(local, static_cast<unsigned>(r));
#else
      __trap();
      return local;
#endif
    }
  }
  __device__ static int block_rank() {
#if __CUDA_ARCH__ >= 900
    if constexpr (kSize > 1) return static_cast<int>(cg::this_cluster().block_rank());
#endif
    return 0;
  }
};

// Loops over this block's share of the row in whole 1024-token tiles, so that every warp runs the
// same number of iterations (the warp collectives inside need all 32 lanes).
#define FOR_EACH_TILE(t, vocab, base) \
  for (int base = (t).first; (base) < (vocab); (base) += (t).size * kThreads)
#define FOR_EACH_TOKEN(t, vocab, v) \
  for (int v = (t).first + static_cast<int>(threadIdx.x); (v) < (vocab); (v) += (t).size * kThreads)

/// NaN never wins anything: it reads as -inf.
__device__ __forceinline__ float sane(float x) { return x != x ? -INFINITY : x; }

/// Order-preserving float -> u32 (+0 and -0 equal, as the CPU's comparisons see them).
__device__ __forceinline__ uint32_t ordered(float x) {
  if (x == 0.0f) x = 0.0f;
  const uint32_t b = __float_as_uint(x);
  return (b & 0x80000000u) != 0 ? ~b : (b | 0x80000000u);
}

/// The CPU's sort order (value descending, index ascending) as one unique key: larger = earlier.
__device__ __forceinline__ u64 sort_key(float x, int v) {
  return (static_cast<u64>(ordered(x)) << kIndexBits) | (kIndexMask - static_cast<u64>(v));
}

__device__ __forceinline__ int key_index(u64 key) {
  return static_cast<int>(kIndexMask - (key & kIndexMask));
}

/// A probability (or any value in [0, 1]) in fixed point: sums of these are exact, so they do not
/// depend on the order of the atomics or on how the row is split between blocks.
template <class Team>
__device__ __forceinline__ u64 fixed_mass(float p, const Team& t) {
  return __float2ull_rn(p * t.mass_scale);
}

__device__ __forceinline__ int lane_id() { return static_cast<int>(threadIdx.x & 31); }

// Block-wide reduction: every thread calls, every thread gets op over the block's values.
// `identity` fills the lanes past the block's warps. The leading barrier lets consecutive calls
// reuse the scratch.
template <typename V, typename Op>
__device__ __forceinline__ V block_reduce(V v, V identity, Op op, V* scratch) {
  for (int o = 16; o > 0; o >>= 1) v = op(v, __shfl_xor_sync(kFull, v, o));
  __syncthreads();
  if (lane_id() == 0) scratch[threadIdx.x >> 5] = v;
  __syncthreads();
  v = lane_id() < kWarps ? scratch[lane_id()] : identity;
  for (int o = 16; o > 0; o >>= 1) v = op(v, __shfl_xor_sync(kFull, v, o));
  return v;
}

/// Team-wide reduction: the block's value goes to its slot; after the barrier, lane r of every
/// warp reads block r's slot and a butterfly combines them, the same way in every warp of every
/// block (so every thread of the team gets the same bits). Slots alternate by parity: a block
/// writes slot e again two reductions later, after a barrier that every reader of the old value
/// has passed.
template <typename V, typename Op, class Team>
__device__ V team_reduce(V v, V identity, Op op, V* scratch, V* slots, Team& t) {
  v = block_reduce(v, identity, op, scratch);
  const int e = t.epoch++ & 1;
  if (threadIdx.x == 0) slots[e] = v;
  t.sync();
  V r = lane_id() < t.size ? *t.at(&slots[e], lane_id()) : identity;
  for (int o = 16; o > 0; o >>= 1) r = op(r, __shfl_xor_sync(kFull, r, o));
  return r;
}

struct Plus {
  template <typename V>
  __device__ V operator()(V a, V b) const {
    return a + b;
  }
};
struct Max {
  __device__ float operator()(float a, float b) const { return fmaxf(a, b); }
};
struct Min {
  template <typename V>
  __device__ V operator()(V a, V b) const {
    return b < a ? b : a;
  }
};

/// Whether (v, i) beats (bv, bi): higher score, ties to the lower index; index -1 is "none".
__device__ __forceinline__ bool better(float v, int i, float bv, int bi) {
  return bi < 0 || (i >= 0 && (v > bv || (v == bv && i < bi)));
}

__device__ __forceinline__ void warp_argmax(float& best, int& best_i) {
  for (int o = 16; o > 0; o >>= 1) {
    const float ov = __shfl_xor_sync(kFull, best, o);
    const int oi = __shfl_xor_sync(kFull, best_i, o);
    if (better(ov, oi, best, best_i)) {
      best = ov;
      best_i = oi;
    }
  }
}

/// The best (score, index) of the team: highest score, ties to the lower index. index == -1:
/// nothing was offered.
template <class Team>
__device__ int team_argmax(float best, int best_i, Shared& s, Team& t) {
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
  const int e = t.epoch++ & 1;
  if (threadIdx.x == 0) {
    s.slot_f[e] = best;
    s.slot_idx[e] = best_i;
  }
  t.sync();
  best = lane_id() < t.size ? *t.at(&s.slot_f[e], lane_id()) : -INFINITY;
  best_i = lane_id() < t.size ? *t.at(&s.slot_idx[e], lane_id()) : -1;
  warp_argmax(best, best_i);
  return best_i;
}

/// Inclusive prefix sum over the 32 lanes of a full warp (lane l gets v_0 + ... + v_l).
template <typename V>
__device__ __forceinline__ V warp_inclusive_sum(V v) {
  for (int o = 1; o < 32; o <<= 1) {
    const V n = __shfl_up_sync(kFull, v, o);
    if (lane_id() >= o) v += n;
  }
  return v;
}

/// Adds this block's histogram into the root's totals (the non-empty bins) and clears it.
template <typename V>
__device__ void push_histogram(V* local, V* root_total, int bins) {
  __syncthreads();
  for (int i = threadIdx.x; i < bins; i += kThreads) {
    const V c = local[i];
    if (c != 0) {
      atomicAdd(&root_total[i], c);
      local[i] = 0;
    }
  }
}

/// The root's warp 0 reads a 256-bin total from the top: lane l takes bins 255 - 8l .. 248 - 8l
/// into c (c[0] the highest) and clears them, so the totals are zero for the next pass. Returns
/// the lane's sum.
template <typename V>
__device__ __forceinline__ V take_lane_bins(V* total, V (&c)[8]) {
  V sum = 0;
#pragma unroll
  for (int j = 0; j < 8; ++j) {
    V& bin = total[255 - lane_id() * 8 - j];
    c[j] = bin;
    bin = 0;
    sum += c[j];
  }
  return sum;
}

/// Adds fixed-point mass q (at most 2^48) of the `in` lanes to bin `bin` of a block histogram (and
/// one per lane to `counts`, when given): the lanes of a warp with the same bin are summed first
/// (two 32-bit hardware reductions of the mass's high and low bits), then one shared atomic each.
__device__ __forceinline__ void add_to_bins(bool in, int bin, u64 q, u64* mass, int* counts) {
  constexpr int kLowBits = 22;  // 32 lanes x 2^22 and 32 x 2^(48 - 22) both fit in 32 bits
  const unsigned peers = __match_any_sync(kFull, in ? bin : -1);
  const unsigned hi = __reduce_add_sync(peers, static_cast<unsigned>(q >> kLowBits));
  const unsigned lo = __reduce_add_sync(peers, static_cast<unsigned>(q & ((1u << kLowBits) - 1)));
  if (in && lane_id() == __ffs(peers) - 1) {
    const u64 sum = (static_cast<u64>(hi) << kLowBits) + lo;
    if (sum != 0) atomicAdd(&mass[bin], sum);
    if (counts != nullptr) atomicAdd(&counts[bin], __popc(peers));
  }
}

/// Appends `in` members to the root's candidate list (keys, probs; count advances): one remote
/// atomic per warp.
__device__ __forceinline__ void gather(bool in, u64 key, float p, Shared& root) {
  const unsigned members = __ballot_sync(kFull, in);
  int base = 0;
  if (lane_id() == 0 && members != 0) base = atomicAdd(&root.count, __popc(members));
  base = __shfl_sync(kFull, base, 0);
  if (in) {
    const int slot = base + __popc(members & ((1u << lane_id()) - 1));
    if (slot < kCompact) {
      root.keys[slot] = key;
      root.probs[slot] = p;
    }
  }
}

/// The k-th largest key among the members (k >= 1, at most the number of members), as a
/// threshold: exactly k members have key >= the result. key_of(v, &key) says whether token v is a
/// member and its key. Radix select from the top digit; each pass histograms the members that
/// match the digits chosen so far, with one shared atomic per group of equal digits in a warp.
template <class KeyOf, class Team>
__device__ __noinline__ u64 select_kth(int vocab, int k, KeyOf key_of, Shared& s, Team& t) {
  Shared& root = *t.root;
  u64 prefix = 0;
  int remaining = k;
  for (int shift = 56 - 8; shift >= 0; shift -= 8) {
    const u64 high_mask = ~u64{0} << (shift + 8);  // the digits chosen so far
    FOR_EACH_TILE(t, vocab, base) {
      const int v = base + static_cast<int>(threadIdx.x);
      u64 key = 0;
      const bool in = v < vocab && key_of(v, key) && (key & high_mask) == prefix;
      const int digit = in ? static_cast<int>((key >> shift) & 255) : 256;
      const unsigned peers = __match_any_sync(kFull, digit);
      if (in && lane_id() == __ffs(peers) - 1) atomicAdd(&s.hist[digit], __popc(peers));
    }
    push_histogram(s.hist, root.hist_total, 256);
    t.sync();
    if (t.is_root() && threadIdx.x < 32) {
      // A scan over lanes finds the bin where the count from the top reaches `remaining`.
      const int lane = lane_id();
      int c[8];
      const int sum = take_lane_bins(s.hist_total, c);
      const int incl = warp_inclusive_sum(sum);
      const int excl = incl - sum;
      if (excl < remaining && remaining <= incl) {
        int acc = excl;
#pragma unroll
        for (int j = 0; j < 8; ++j) {
          if (acc < remaining && acc + c[j] >= remaining) {
            s.sel_digit = 255 - lane * 8 - j;
            s.sel_remaining = remaining - acc;
            s.sel_done = c[j] == remaining - acc;
          }
          acc += c[j];
        }
      }
      if (lane == 31 && incl < remaining) {  // fewer members than k: keep them all
        s.sel_digit = 0;
        s.sel_remaining = 0;
        s.sel_done = 2;
      }
    }
    t.sync();
    const int done = root.sel_done;
    if (done == 2) return 0;
    prefix |= static_cast<u64>(root.sel_digit) << shift;
    remaining = root.sel_remaining;
    if (done) break;
  }
  return prefix;
}

/// Sorts the root's n gathered candidates by key, descending (bitonic, padded with key 0); the
/// root block only.
__device__ void sort_candidates(int n, Shared& s) {
  int padded = 2;
  while (padded < n) padded <<= 1;
  for (int i = n + static_cast<int>(threadIdx.x); i < padded; i += kThreads) {
    s.keys[i] = 0;
    s.probs[i] = 0.0f;
  }
  __syncthreads();
  for (int k = 2; k <= padded; k <<= 1) {
    for (int j = k >> 1; j > 0; j >>= 1) {
      for (int i = threadIdx.x; i < padded; i += kThreads) {
        const int ixj = i ^ j;
        if (ixj > i) {
          const bool descending = (i & k) == 0;
          const u64 a = s.keys[i], b = s.keys[ixj];
          if ((a < b) == descending) {
            s.keys[i] = b;
            s.keys[ixj] = a;
            const float pa = s.probs[i];
            s.probs[i] = s.probs[ixj];
            s.probs[ixj] = pa;
          }
        }
      }
      __syncthreads();
    }
  }
}

/// The shortest prefix (in key order) of the members with key >= floor whose mass reaches
/// top_p of theirs, given the mass function; returns its last key. The fallback for rows whose
/// prefix ends in a bin of -log p holding more than kCompact tokens (sample_logits_list.cuh's
/// window): a radix search by fixed-point mass, 8 key bits per pass (7 passes over the row).
template <class KeyProb, class Team>
__device__ __noinline__ u64 top_p_threshold(int vocab, u64 floor, float top_p, KeyProb key_prob,
                                            Shared& s, Team& t) {
  Shared& root = *t.root;
  // Many candidates: a radix search by mass, 8 key bits per pass (7 passes over the row). Each
  // pass histograms the mass of the members under the digits fixed so far by their next digit
  // and fixes the digit at which the mass counted from the top reaches the target; after the
  // last pass the prefix is the key of the token where the prefix ends. The target is top_p of
  // the members' fixed-point mass, which the first pass's histogram totals.
  u64 prefix = 0;
  u64 above = 0;  // mass of the members above the current digit range (root's warp 0)
  double target_q = 0;
  for (int shift = 48; shift >= 0; shift -= 8) {
    const u64 high_mask = ~u64{0} << (shift + 8);
    FOR_EACH_TILE(t, vocab, base) {
      const int v = base + static_cast<int>(threadIdx.x);
      float p = 0.0f;
      bool in = false;
      u64 key = 0;
      if (v < vocab) {
        key = key_prob(v, p);
        in = key >= floor && (key & high_mask) == prefix;
      }
      const int digit = static_cast<int>((key >> shift) & 255);
      add_to_bins(in, digit, in ? fixed_mass(p, t) : 0, s.hist_mass, nullptr);
    }
    push_histogram(s.hist_mass, root.hist_mass_total, 256);
    t.sync();
    if (t.is_root() && threadIdx.x < 32) {
      const int lane = lane_id();
      u64 c[8];
      const u64 sum = take_lane_bins(s.hist_mass_total, c);
      const u64 incl = warp_inclusive_sum(sum);
      const u64 excl = incl - sum;
      if (shift == 48) {
        target_q = static_cast<double>(top_p) * static_cast<double>(__shfl_sync(kFull, incl, 31));
        above = 0;
      } else {
        above = s.sel_above;
      }
      const unsigned reaches =
          __ballot_sync(kFull, static_cast<double>(above + incl) >= target_q && sum != 0);
      if (reaches != 0) {
        if (lane == __ffs(reaches) - 1) {
          u64 acc = above + excl;
          int j = 0;
          for (; j < 7; ++j) {
            if (static_cast<double>(acc + c[j]) >= target_q && c[j] != 0) break;
            acc += c[j];
          }
          s.sel_digit = 255 - lane * 8 - j;
          s.sel_above = acc;
        }
      } else {
        // Rounding left the target out of reach: the lowest digit with mass ends the prefix.
        const unsigned nonempty = __ballot_sync(kFull, sum != 0);
        if (nonempty == 0) {
          if (lane == 0) s.sel_digit = -1;
        } else if (lane == 31 - __clz(nonempty)) {
          int j = 7;
          while (j > 0 && c[j] == 0) --j;
          s.sel_digit = 255 - lane * 8 - j;
          s.sel_above = above + incl - c[j];
        }
      }
    }
    t.sync();
    const int digit = root.sel_digit;
    if (digit < 0) return floor;  // no mass under the prefix (cannot happen: the top token's is 1)
    prefix |= static_cast<u64>(digit) << shift;
  }
  return prefix;
}

}  // namespace
}  // namespace pagoda::cuda
