// The CPU sampler's pipeline, one team of blocks (a thread-block cluster) per row, with no sort
// of the vocabulary.
//
// Why this shape: the CPU sorts the row (value descending, index ascending) and cuts prefixes.
// Every cut is a prefix of that order, so each one is a threshold on a 56-bit key that encodes the
// order exactly (order-preserving float bits << 24 | (2^24 - 1 - index)): a key is unique, and
// "kept" is "key >= threshold". Top-k and the top-N log-probabilities are radix selects on counts
// (8-bit digits, warp-aggregated shared histograms, at most 7 passes over the row, usually 4).
// Min-p is the smallest key with p >= min_p. Top-p needs the prefix's mass: when the candidates
// (or their top kCompact) hold enough of it, they are sorted in shared memory and scanned in order
// as the CPU does; otherwise a radix search over the key with one mass histogram per 8 key bits.
// The draw is Gumbel-max over the kept keys.
//
// Why a team: a 152k-token row is up to a dozen passes, and one block (one SM) took 0.12-1.6 ms
// per sampled row, a third of a batch-1 decode step. With few rows, the blocks of a cluster (up to
// kMaxTeam) split every pass over the row (block r of n takes the 1024-token tiles r, r + n, ...)
// and meet through distributed shared memory: each block histograms into its own shared memory,
// then adds its non-empty bins into the root block's (rank 0) totals; the root decides (a digit, a
// threshold, a sort of the candidates) and the others read its decision after a cluster barrier.
// Reductions go through one slot per block, combined in the same fixed order by every block, and
// every sum of probabilities is fixed point (exact): the result is the same bits for any team size
// and any timing, so a row is drawn the same way in any batch.
#include <cooperative_groups.h>
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cfloat>

#include "kernels/cuda/common.cuh"
#include "kernels/cuda/gumbel.cuh"
#include "kernels/cuda/sample_logits.h"

namespace pagoda::cuda {
namespace {

namespace cg = cooperative_groups;
using u64 = unsigned long long;

constexpr int kThreads = 1024;
constexpr int kWarps = kThreads / 32;
constexpr int kMaxTeam = 8;     // blocks per row: one cluster (8 is the portable cluster size)
constexpr int kCompact = 2048;  // top-p candidates sorted in shared memory
// Top-p's mass histogram: bins of -log p over kBinSpan nats below the top token.
constexpr int kBins = 2048;
constexpr float kBinSpan = 28.0f;
constexpr unsigned kFull = 0xffffffffu;
constexpr int kIndexBits = 24;
constexpr u64 kIndexMask = (u64{1} << kIndexBits) - 1;

struct Shared {
  // This block's histograms, zero between uses (each pass clears what it pushed).
  int hist[256];
  u64 hist_mass[256];
  u64 bin_mass[kBins];
  int bin_count[kBins];
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
  u64 bin_mass_total[kBins];
  int bin_count_total[kBins];
  int sel_digit, sel_remaining, sel_done;
  u64 sel_above;
  int count;  // gathered candidates (zero between uses)
  u64 found_key;
  u64 keys[kCompact];
  float probs[kCompact];
};

/// The kSize blocks of one row (a compile-time size, so that the loops over the row keep a
/// constant stride and unroll, with several loads in flight per thread). Every thread of the team
/// runs the same sequence of team operations (their control flow depends on team-wide values
/// only), which is what the barriers require.
template <int kSize>
struct Team {
  static constexpr int size = kSize;
  int rank;          // this block's rank in the cluster; rank 0 is the root
  int first;         // this block's first 1024-token tile starts here
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
__device__ u64 select_kth(int vocab, int k, KeyOf key_of, Shared& s, Team& t) {
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

/// Gathers the members (member(v, &key, &p); at most kCompact of them) into the root, which sorts
/// them by key and returns the key of the first one at which `start` plus their cumulative mass
/// reaches target: the CPU's shortest prefix, where `start` is the mass of the tokens above the
/// members. Keeps them all when rounding leaves the target out of reach.
template <class Member, class Team>
__device__ u64 scan_sorted(int vocab, Member member, double start, double target, Shared& s,
                           Team& t) {
  Shared& root = *t.root;
  FOR_EACH_TILE(t, vocab, tile) {
    const int v = tile + static_cast<int>(threadIdx.x);
    float p = 0.0f;
    u64 key = 0;
    const bool in = v < vocab && member(v, key, p);
    gather(in, key, p, root);
  }
  t.sync();
  if (t.is_root()) {
    const int n = min(s.count, kCompact);
    sort_candidates(n, s);
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
        s.found_key = s.keys[min(i, end - 1)];
      } else if (reaches == 0 && lane == 0) {
        // Reached before the first member (start >= target, by rounding): the first one alone.
        // Out of reach: all of them.
        s.found_key = s.keys[start >= target ? 0 : max(n - 1, 0)];
      }
      if (lane == 0) s.count = 0;
    }
  }
  t.sync();
  return root.found_key;
}

/// The shortest prefix (in key order) of the members with key >= floor whose mass reaches
/// top_p of theirs (target, in units of p), given the mass function; returns its last key.
/// Members are sorted in shared memory when there are at most kCompact of them (count);
/// otherwise a radix search by fixed-point mass, 8 key bits per pass.
template <class KeyProb, class Team>
__device__ u64 top_p_threshold(int vocab, u64 floor, int count, float top_p, double target,
                               KeyProb key_prob, Shared& s, Team& t) {
  Shared& root = *t.root;
  if (count <= kCompact) {
    auto member = [&](int v, u64& key, float& p) {
      key = key_prob(v, p);
      return key >= floor;
    };
    return scan_sorted(vocab, member, 0.0, target, s, t);
  }
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

/// Where top-p's prefix ends, to the resolution of a bin of -log p.
struct BinWindow {
  int last_bin;  // the first bin where the mass from the top reaches top_p of it
  int in_last;   // candidates in that bin
  u64 above;     // fixed-point mass of the candidates above that bin
};

/// Top-p's window: the team's histogram of the candidates' mass by -log p (kBins bins over
/// kBinSpan nats below the top, fixed point) finds the first bin where the mass from the top
/// reaches top_p of it. The tokens of that bin and above are a prefix of the key order (the bin is
/// monotone in the logit) holding the target, and the prefix ends inside that bin.
template <class XAt, class BinOf, class Prob, class Team>
__device__ BinWindow top_p_window(int vocab, u64 floor, float top_p, XAt x_at, BinOf bin_of,
                                  Prob prob, Shared& s, Team& t) {
  Shared& root = *t.root;
  FOR_EACH_TILE(t, vocab, tile) {
    const int v = tile + static_cast<int>(threadIdx.x);
    const float x = v < vocab ? x_at(v) : -INFINITY;
    const int b = x == -INFINITY ? -1 : bin_of(x);
    const bool in = b >= 0 && sort_key(x, v) >= floor;
    add_to_bins(in, b, in ? fixed_mass(prob(x), t) : 0, s.bin_mass, s.bin_count);
  }
  push_histogram(s.bin_mass, root.bin_mass_total, kBins);
  push_histogram(s.bin_count, root.bin_count_total, kBins);
  t.sync();
  if (t.is_root() && threadIdx.x < 32) {
    // Lane l sums bins [64 l, 64 l + 64); a scan over lanes finds the bin.
    const int lane = lane_id();
    constexpr int kPerLane = kBins / 32;
    u64 lane_mass = 0;
    for (int j = 0; j < kPerLane; ++j) lane_mass += s.bin_mass_total[lane * kPerLane + j];
    const u64 incl = warp_inclusive_sum(lane_mass);
    const u64 total = __shfl_sync(kFull, incl, 31);
    const double target_q = static_cast<double>(top_p) * static_cast<double>(total);
    const unsigned reaches = __ballot_sync(kFull, static_cast<double>(incl) >= target_q);
    // Rounding can leave the target out of reach: then every binned token is kept.
    const int owner = reaches != 0 ? __ffs(reaches) - 1 : 31;
    if (lane == owner) {
      u64 cum = incl - lane_mass;  // mass above bin b
      for (int b = lane * kPerLane;; ++b) {
        const u64 next = cum + s.bin_mass_total[b];
        if (static_cast<double>(next) >= target_q || b == lane * kPerLane + kPerLane - 1) {
          s.sel_digit = b;
          s.sel_done = s.bin_count_total[b];
          s.sel_above = cum;
          break;
        }
        cum = next;
      }
    }
    __syncwarp();
    for (int j = 0; j < kPerLane; ++j) {
      s.bin_mass_total[lane * kPerLane + j] = 0;
      s.bin_count_total[lane * kPerLane + j] = 0;
    }
  }
  t.sync();
  return BinWindow{root.sel_digit, root.sel_done, root.sel_above};
}

template <int kSize>
__global__ void __launch_bounds__(kThreads) sample_logits_kernel(SampleLogitsArgs a) {
  extern __shared__ __align__(16) unsigned char smem_raw[];
  Shared& s = *reinterpret_cast<Shared*>(smem_raw);
  Team<kSize> t;
  t.rank = Team<kSize>::block_rank();
  const int64_t row = blockIdx.x / kSize;
  const SamplingRow p = a.params[row];
  if (p.skip) return;  // the whole team skips: no barrier is left waiting
  t.first = t.rank * kThreads;
  t.epoch = 0;
  t.root = t.at(&s, 0);
  t.mass_scale = exp2f(static_cast<float>(min(48, 63 - (32 - __clz(static_cast<int>(a.vocab))))));
  // The histograms start empty; the barrier also makes sure every block of the team runs before
  // any touches another's shared memory.
  for (int i = threadIdx.x; i < 256; i += kThreads) {
    s.hist[i] = s.hist_total[i] = 0;
    s.hist_mass[i] = s.hist_mass_total[i] = 0;
  }
  for (int i = threadIdx.x; i < kBins; i += kThreads) {
    s.bin_mass[i] = s.bin_mass_total[i] = 0;
    s.bin_count[i] = s.bin_count_total[i] = 0;
  }
  if (threadIdx.x == 0) s.count = 0;
  t.sync();
  Shared& root = *t.root;

  const int vocab = static_cast<int>(a.vocab);
  const int64_t base = row * a.vocab;
  const void* raw = a.logits;
  const DType dtype = a.dtype;
  auto raw_at = [&](int v) { return sane(load_as_float(raw, dtype, base + v)); };

  // Log-probabilities of the raw row: log_softmax as the CPU computes it (fp32 shift, double
  // normaliser), then the top N by the same radix select on the logprob values.
  float log_z = 0.0f;
  if (p.num_logprobs >= 0) {
    float m = -INFINITY;
    FOR_EACH_TOKEN(t, vocab, v) m = fmaxf(m, raw_at(v));
    m = team_reduce(m, -INFINITY, Max{}, s.red_f, s.slot_f, t);
    u64 sum = 0;  // fixed point: exact in any split (each term is at most 1)
    FOR_EACH_TOKEN(t, vocab, v) sum += fixed_mass(expf(raw_at(v) - m), t);
    sum = team_reduce(sum, u64{0}, Plus{}, s.red_u, s.slot_u, t);
    log_z = m + static_cast<float>(log(static_cast<double>(sum) / t.mass_scale));
    const int n = min(min(p.num_logprobs, kMaxTopLogprobs), vocab);
    if (n > 0) {
      auto key_of = [&](int v, u64& key) {
        key = sort_key(raw_at(v) - log_z, v);
        return true;
      };
      const u64 threshold = select_kth(vocab, n, key_of, s, t);
      FOR_EACH_TILE(t, vocab, tile) {
        const int v = tile + static_cast<int>(threadIdx.x);
        u64 key = 0;
        if (v < vocab) key_of(v, key);
        gather(v < vocab && key >= threshold, key, 0.0f, root);
      }
      t.sync();
      if (t.is_root() && threadIdx.x == 0) {
        const int found = min(s.count, n);
        s.count = 0;
        for (int i = 1; i < found; ++i) {  // insertion sort, descending
          const u64 key = s.keys[i];
          int j = i;
          for (; j > 0 && s.keys[j - 1] < key; --j) s.keys[j] = s.keys[j - 1];
          s.keys[j] = key;
        }
        for (int i = 0; i < kMaxTopLogprobs; ++i) {
          const int64_t at = row * kMaxTopLogprobs + i;
          if (i < found) {
            const int v = key_index(s.keys[i]);
            a.top_tokens[at] = v;
            a.top_logprobs[at] = raw_at(v) - log_z;
          } else {
            a.top_tokens[at] = -1;
            a.top_logprobs[at] = -INFINITY;
          }
        }
      }
      // The root's list is free again after the next barrier (every later gather follows one).
    }
  }

  // Processors, in the CPU's order, on an fp32 copy of the row: repetition, then presence and
  // frequency (one thread per distinct token), then bias, then the min_tokens mask. The team
  // copies the row (a structured-output mask applies as it copies); the root block applies the
  // lists; the barriers publish the global writes.
  const uint32_t* allowed = p.allowed_row >= 0
                                ? a.allowed + static_cast<int64_t>(p.allowed_row) * a.allowed_words
                                : nullptr;
  const bool processed =
      p.penalty_count > 0 || p.bias_count > 0 || p.mask_count > 0 || allowed != nullptr;
  float* work = a.workspace + base;
  if (processed) {
    FOR_EACH_TOKEN(t, vocab, v) {
      const bool ok = allowed == nullptr || ((allowed[v >> 5] >> (v & 31)) & 1u) != 0;
      work[v] = ok ? load_as_float(raw, dtype, base + v) : -INFINITY;
    }
    t.sync();
    if (t.is_root()) {
      for (int i = threadIdx.x; i < p.penalty_count; i += kThreads) {
        const PenaltyEntry e = a.penalties[p.penalty_begin + i];
        if (e.token < 0 || e.token >= vocab) continue;
        float x = work[e.token];
        if (p.repetition_penalty != 1.0f && (e.in_prompt != 0 || e.output_count > 0))
          x = x > 0 ? __fdiv_rn(x, p.repetition_penalty) : __fmul_rn(x, p.repetition_penalty);
        if ((p.presence_penalty != 0.0f || p.frequency_penalty != 0.0f) && e.output_count > 0) {
          x = __fsub_rn(
              x, __fadd_rn(__fmul_rn(static_cast<float>(e.output_count), p.frequency_penalty),
                           p.presence_penalty));
        }
        work[e.token] = x;
      }
      __syncthreads();
      for (int i = threadIdx.x; i < p.bias_count; i += kThreads) {
        const BiasEntry e = a.biases[p.bias_begin + i];
        if (e.token >= 0 && e.token < vocab) work[e.token] = __fadd_rn(work[e.token], e.bias);
      }
      __syncthreads();
      for (int i = threadIdx.x; i < p.mask_count; i += kThreads) {
        const int m = a.masked[p.mask_begin + i];
        if (m >= 0 && m < vocab) work[m] = -INFINITY;
      }
    }
    t.sync();
  }
  auto x_at = [&](int v) { return processed ? sane(work[v]) : raw_at(v); };

  int token = -1;
  const bool greedy = p.temperature < 1e-5f;
  if (greedy) {
    // First maximum, as torch.argmax and the CPU.
    float best = -INFINITY;
    int best_i = -1;
    FOR_EACH_TOKEN(t, vocab, v) {
      const float x = x_at(v);
      if (best_i < 0 || x > best) {
        best = x;
        best_i = v;
      }
    }
    token = team_argmax(best, best_i, s, t);
  } else {
    float m = -INFINITY;
    FOR_EACH_TOKEN(t, vocab, v) m = fmaxf(m, x_at(v));
    m = team_reduce(m, -INFINITY, Max{}, s.red_f, s.slot_f, t);
    const float inv_t = 1.0f / p.temperature;
    auto prob = [&](float x) { return x == -INFINITY ? 0.0f : expf((x - m) * inv_t); };
    u64 floor = 0;  // kept: key >= floor
    if (m == -INFINITY) {
      floor = ~u64{0};  // everything masked: nothing to draw (token 0 below)
    } else {
      if (p.top_k > 0 && p.top_k < vocab) {
        auto key_of = [&](int v, u64& key) {
          key = sort_key(x_at(v), v);
          return true;
        };
        floor = select_kth(vocab, p.top_k, key_of, s, t);
      }
      if (p.min_p > 0.0f) {
        // p is monotone in the logit, so "p >= min_p * p_max (= 1)" is a key threshold too.
        u64 smallest = ~u64{0};
        FOR_EACH_TOKEN(t, vocab, v) {
          const float x = x_at(v);
          const u64 key = sort_key(x, v);
          if (prob(x) >= p.min_p && key < smallest) smallest = key;
        }
        smallest = team_reduce(smallest, ~u64{0}, Min{}, s.red_u, s.slot_u, t);
        floor = max(floor, smallest);
      }
      if (p.top_p < 1.0f) {
        auto key_prob = [&](int v, float& pr) {
          const float x = x_at(v);
          pr = prob(x);
          return sort_key(x, v);
        };
        u64 mass = 0;  // fixed point: exact in any split
        int count = 0;
        FOR_EACH_TOKEN(t, vocab, v) {
          float pr;
          if (key_prob(v, pr) >= floor) {
            mass += fixed_mass(pr, t);
            ++count;
          }
        }
        mass = team_reduce(mass, u64{0}, Plus{}, s.red_u, s.slot_u, t);
        count = team_reduce(count, 0, Plus{}, s.red_i, s.slot_i, t);
        const double target =
            static_cast<double>(p.top_p) * (static_cast<double>(mass) / t.mass_scale);
        u64 last = 0;
        bool found = false;
        if (count > kCompact) {
          // Too many to sort: the mass histogram by -log p finds the bin where the prefix ends;
          // when that bin is small enough, it alone is sorted and scanned after the mass above.
          auto bin_of = [&](float x) {  // -1: below the span (mass < 2^-40 of the top token)
            const float nats = (m - x) * inv_t;
            return nats < kBinSpan ? min(kBins - 1, static_cast<int>(nats * (kBins / kBinSpan)))
                                   : -1;
          };
          const BinWindow w = top_p_window(vocab, floor, p.top_p, x_at, bin_of, prob, s, t);
          if (w.in_last <= kCompact) {
            auto in_last_bin = [&](int v, u64& key, float& pr) {
              const float x = x_at(v);
              if (x == -INFINITY) return false;
              key = sort_key(x, v);
              pr = prob(x);
              return key >= floor && bin_of(x) == w.last_bin;
            };
            const double above = static_cast<double>(w.above) / t.mass_scale;
            last = scan_sorted(vocab, in_last_bin, above, target, s, t);
            found = true;
          }
        }
        if (!found) last = top_p_threshold(vocab, floor, count, p.top_p, target, key_prob, s, t);
        floor = max(floor, last);
      }
    }
    // Gumbel-max over the kept tokens: argmax of log p + noise samples p renormalised.
    const uint64_t key = draw_key(p.seed, p.counter);
    float best = -INFINITY;
    int best_i = -1;
    FOR_EACH_TOKEN(t, vocab, v) {
      const float x = x_at(v);
      if (a.kept != nullptr)
        a.kept[base + v] = x != -INFINITY && sort_key(x, v) >= floor && prob(x) > 0.0f;
      if (x == -INFINITY || sort_key(x, v) < floor) continue;
      const float score = (x - m) * inv_t + gumbel(key, v);
      if (best_i < 0 || score > best) {
        best = score;
        best_i = v;
      }
    }
    token = team_argmax(best, best_i, s, t);
  }
  if (t.is_root() && threadIdx.x == 0) {
    if (token < 0) token = 0;
    a.tokens[row] = token;
    if (p.num_logprobs >= 0) a.logprobs[row] = raw_at(token) - log_z;
  }
  t.sync();  // no block leaves while another may still read its slots
}

#undef FOR_EACH_TILE
#undef FOR_EACH_TOKEN

template <int kSize>
cudaError_t launch_team(const SampleLogitsArgs& args, cudaStream_t stream) {
  auto* kernel = sample_logits_kernel<kSize>;
  if (cudaError_t e = cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                           static_cast<int>(sizeof(Shared)));
      e != cudaSuccess)
    return e;
  cudaLaunchAttribute attribute[1];
  attribute[0].id = cudaLaunchAttributeClusterDimension;
  attribute[0].val.clusterDim.x = kSize;
  attribute[0].val.clusterDim.y = 1;
  attribute[0].val.clusterDim.z = 1;
  cudaLaunchConfig_t config{};
  config.gridDim = dim3(static_cast<unsigned>(args.rows * kSize));
  config.blockDim = dim3(kThreads);
  config.dynamicSmemBytes = sizeof(Shared);
  config.stream = stream;
  config.attrs = attribute;
  config.numAttrs = kSize > 1 ? 1 : 0;  // a team of one is a plain block (no cluster: sm_80 too)
  return cudaLaunchKernelEx(&config, kernel, args);
}

}  // namespace

cudaError_t sample_logits(const SampleLogitsArgs& args, cudaStream_t stream) {
  if (args.rows <= 0) return cudaSuccess;
  if (args.vocab <= 0 || args.vocab >= (int64_t{1} << kIndexBits) ||
      args.rows > INT32_MAX / kMaxTeam || args.team < 0 || args.team > kMaxTeam ||
      (args.team & (args.team - 1)) != 0)
    return cudaErrorInvalidValue;
  int team = args.team;
  int device = 0, major = 0;
  if (cudaError_t e = cudaGetDevice(&device); e != cudaSuccess) return e;
  if (cudaError_t e = cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, device);
      e != cudaSuccess)
    return e;
  if (major < 9) {
    team = 1;              // thread-block clusters start with sm_90
  } else if (team == 0) {  // as many blocks per row as keep one wave of the SMs busy
    int sms = 0;
    if (cudaError_t e = cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device);
        e != cudaSuccess)
      return e;
    team = kMaxTeam;
    while (team > 1 && args.rows * team > sms) team >>= 1;
  }
  switch (team) {
    case 1:
      return launch_team<1>(args, stream);
    case 2:
      return launch_team<2>(args, stream);
    case 4:
      return launch_team<4>(args, stream);
    default:
      return launch_team<8>(args, stream);
  }
}

}  // namespace pagoda::cuda
