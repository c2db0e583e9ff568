// The CPU sampler's pipeline, one block per row, with no sort of the vocabulary.
//
// Why this shape: the CPU sorts the row (value descending, index ascending) and cuts prefixes.
// Every cut is a prefix of that order, so each one is a threshold on a 56-bit key that encodes the
// order exactly (order-preserving float bits << 24 | (2^24 - 1 - index)): a key is unique, and
// "kept" is "key >= threshold". Top-k and the top-N log-probabilities are radix selects on counts
// (8-bit digits, warp-aggregated shared histograms, at most 7 passes over the row, usually 4).
// Min-p is the smallest key with p >= min_p. Top-p needs the prefix's mass: when the candidates
// (or their top kCompact) hold enough of it, they are sorted in shared memory and scanned in
// order as the CPU does; otherwise a bit-by-bit search over the key with one mass reduction per
// bit. The draw is Gumbel-max over the kept keys.
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cfloat>

#include "kernels/cuda/gumbel.cuh"
#include "kernels/cuda/sample_logits.h"

namespace pagoda::cuda {
namespace {

using u64 = unsigned long long;

constexpr int kThreads = 1024;
constexpr int kWarps = kThreads / 32;
constexpr int kCompact = 2048;  // top-p candidates sorted in shared memory
// Top-p's mass histogram (its arrays reuse the sort's: kBins == kCompact): bins of -log p over
// kBinSpan nats below the top token, masses in fixed point (kMassScale units per unit of p).
constexpr int kBins = kCompact;
constexpr float kBinSpan = 28.0f;
constexpr float kMassScale = 1099511627776.0f;  // 2^40: 152k tokens of p <= 1 fit in 64 bits
constexpr unsigned kFull = 0xffffffffu;
constexpr int kIndexBits = 24;
constexpr u64 kIndexMask = (u64{1} << kIndexBits) - 1;

struct Shared {
  int hist[256];
  double hist_mass[256];
  double sel_above;
  double red_d[kWarps];
  u64 red_u[kWarps];
  float red_f[kWarps];
  int red_i[kWarps];
  int red_idx[kWarps];
  int sel_digit, sel_remaining, sel_done;
  int count;
  u64 found_key;
  int found;
  u64 keys[kCompact];
  float probs[kCompact];
};

__device__ __forceinline__ float load_raw(const void* p, DType d, int64_t i) {
  float x;
  switch (d) {
    case DType::kBF16:
      x = __bfloat162float(static_cast<const __nv_bfloat16*>(p)[i]);
      break;
    case DType::kF16:
      x = __half2float(static_cast<const __half*>(p)[i]);
      break;
    default:
      x = static_cast<const float*>(p)[i];
  }
  return x;
}

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

// Block-wide reduction: every thread calls, every thread gets op over the block's values.
// `identity` fills the lanes past the block's warps. The leading barrier lets consecutive calls
// reuse the scratch.
template <typename V, typename Op>
__device__ __forceinline__ V block_reduce(V v, V identity, Op op, V* scratch) {
  for (int o = 16; o > 0; o >>= 1) v = op(v, __shfl_xor_sync(kFull, v, o));
  __syncthreads();
  if ((threadIdx.x & 31) == 0) scratch[threadIdx.x >> 5] = v;
  __syncthreads();
  v = (threadIdx.x & 31) < kWarps ? scratch[threadIdx.x & 31] : identity;
  for (int o = 16; o > 0; o >>= 1) v = op(v, __shfl_xor_sync(kFull, v, o));
  return v;
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

/// The best (score, index) of the block: highest score, ties to the lower index. index == -1:
/// nothing was offered.
__device__ __forceinline__ int block_argmax(float best, int best_i, Shared& s) {
  auto better = [](float v, int i, float bv, int bi) {
    return bi < 0 || (i >= 0 && (v > bv || (v == bv && i < bi)));
  };
  for (int o = 16; o > 0; o >>= 1) {
    const float ov = __shfl_xor_sync(kFull, best, o);
    const int oi = __shfl_xor_sync(kFull, best_i, o);
    if (better(ov, oi, best, best_i)) {
      best = ov;
      best_i = oi;
    }
  }
  __syncthreads();
  if ((threadIdx.x & 31) == 0) {
    s.red_f[threadIdx.x >> 5] = best;
    s.red_idx[threadIdx.x >> 5] = best_i;
  }
  __syncthreads();
  const int lane = threadIdx.x & 31;
  best = lane < kWarps ? s.red_f[lane] : -INFINITY;
  best_i = lane < kWarps ? s.red_idx[lane] : -1;
  for (int o = 16; o > 0; o >>= 1) {
    const float ov = __shfl_xor_sync(kFull, best, o);
    const int oi = __shfl_xor_sync(kFull, best_i, o);
    if (better(ov, oi, best, best_i)) {
      best = ov;
      best_i = oi;
    }
  }
  return best_i;
}

/// Inclusive prefix sum over the 32 lanes of a full warp (lane l gets v_0 + ... + v_l).
template <typename V>
__device__ __forceinline__ V warp_inclusive_sum(V v) {
  const int lane = static_cast<int>(threadIdx.x & 31);
  for (int o = 1; o < 32; o <<= 1) {
    const V n = __shfl_up_sync(kFull, v, o);
    if (lane >= o) v += n;
  }
  return v;
}

/// The k-th largest key among the members (k >= 1, at most the number of members), as a
/// threshold: exactly k members have key >= the result. key_of(v, &key) says whether token v is a
/// member and its key. Radix select from the top digit; each pass histograms the members that
/// match the digits chosen so far, with one shared atomic per group of equal digits in a warp.
template <class KeyOf>
__device__ u64 select_kth(int vocab, int k, KeyOf key_of, Shared& s) {
  u64 prefix = 0;
  int remaining = k;
  for (int shift = 56 - 8; shift >= 0; shift -= 8) {
    for (int i = threadIdx.x; i < 256; i += kThreads) s.hist[i] = 0;
    __syncthreads();
    const u64 high_mask = ~u64{0} << (shift + 8);  // the digits chosen so far
    for (int base = 0; base < vocab; base += kThreads) {
      const int v = base + static_cast<int>(threadIdx.x);
      u64 key = 0;
      const bool in = v < vocab && key_of(v, key) && (key & high_mask) == prefix;
      const int digit = in ? static_cast<int>((key >> shift) & 255) : 256;
      const unsigned peers = __match_any_sync(kFull, digit);
      if (in && static_cast<int>(threadIdx.x & 31) == __ffs(peers) - 1)
        atomicAdd(&s.hist[digit], __popc(peers));
    }
    __syncthreads();
    if (threadIdx.x < 32) {
      // Lane l holds bins 255 - 8l .. 248 - 8l (from the top); a scan over lanes finds the bin
      // where the count from the top reaches `remaining`.
      const int lane = static_cast<int>(threadIdx.x);
      int c[8];
      int sum = 0;
#pragma unroll
      for (int j = 0; j < 8; ++j) {
        c[j] = s.hist[255 - lane * 8 - j];
        sum += c[j];
      }
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
    __syncthreads();
    const int done = s.sel_done;
    if (done == 2) return 0;
    prefix |= static_cast<u64>(s.sel_digit) << shift;
    remaining = s.sel_remaining;
    __syncthreads();  // everyone has read sel_* before the next pass writes them
    if (done) break;
  }
  return prefix;
}

/// The shortest prefix (in key order) of the members with key >= floor whose mass reaches target,
/// given the mass function; returns its last key. Members are sorted in shared memory when there
/// are at most kCompact of them (count); otherwise one mass reduction per key bit.
template <class KeyProb>
__device__ u64 top_p_threshold(int vocab, u64 floor, int count, double target, KeyProb key_prob,
                               Shared& s) {
  if (count <= kCompact) {
    // Gather, sort descending (bitonic, padded with key 0), scan the masses in order.
    if (threadIdx.x == 0) s.count = 0;
    __syncthreads();
    for (int v = threadIdx.x; v < vocab; v += kThreads) {
      float p;
      const u64 key = key_prob(v, p);
      if (key >= floor) {
        const int slot = atomicAdd(&s.count, 1);
        if (slot < kCompact) {
          s.keys[slot] = key;
          s.probs[slot] = p;
        }
      }
    }
    __syncthreads();
    const int n = min(s.count, kCompact);
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
    if (threadIdx.x < 32) {
      const int lane = static_cast<int>(threadIdx.x);
      const int chunk = (n + 31) / 32;
      const int begin = min(n, lane * chunk), end = min(n, begin + chunk);
      double sum = 0;
      for (int i = begin; i < end; ++i) sum += s.probs[i];
      double incl = sum;
      for (int o = 1; o < 32; o <<= 1) {
        const double other = __shfl_up_sync(kFull, incl, o);
        if (lane >= o) incl += other;
      }
      double cum = incl - sum;
      const bool before = cum < target;
      // The first lane whose chunk reaches the target walks it (the CPU's shortest prefix).
      const unsigned reaches = __ballot_sync(kFull, before && incl >= target && end > begin);
      if (reaches != 0 && lane == __ffs(reaches) - 1) {
        int i = begin;
        for (; i < end; ++i) {
          cum += s.probs[i];
          if (cum >= target) break;
        }
        s.found_key = s.keys[min(i, end - 1)];
      } else if (reaches == 0 && lane == 0) {
        s.found_key = s.keys[max(n - 1, 0)];  // rounding left the target out of reach: keep all
      }
    }
    __syncthreads();
    const u64 key = s.found_key;
    __syncthreads();
    return key;
  }
  // Many candidates: a radix search by mass, 8 key bits per pass (7 passes over the row). Each
  // pass histograms the mass of the members under the digits fixed so far by their next digit
  // and fixes the digit at which the mass counted from the top reaches the target; after the
  // last pass the prefix is the key of the token where the prefix ends.
  const int lane = static_cast<int>(threadIdx.x & 31);
  u64 prefix = 0;
  double above = 0;  // mass of the members above the current digit range
  for (int shift = 48; shift >= 0; shift -= 8) {
    for (int i = threadIdx.x; i < 256; i += kThreads) s.hist_mass[i] = 0.0;
    __syncthreads();
    const u64 high_mask = shift + 8 >= 64 ? 0 : ~u64{0} << (shift + 8);
    for (int b = 0; b < vocab; b += kThreads) {
      const int v = b + static_cast<int>(threadIdx.x);
      float p = 0.0f;
      bool in = false;
      u64 key = 0;
      if (v < vocab) {
        key = key_prob(v, p);
        in = key >= floor && (key & high_mask) == prefix;
      }
      const int digit = in ? static_cast<int>((key >> shift) & 255) : 256;
      const float mass = in ? p : 0.0f;
      // The mass of this warp's lanes with the same digit, then one shared atomic per digit.
      float group = 0.0f;
      for (int l = 0; l < 32; ++l) {
        const int d = __shfl_sync(kFull, digit, l);
        const float m = __shfl_sync(kFull, mass, l);
        if (d == digit) group += m;
      }
      const unsigned peers = __match_any_sync(kFull, digit);
      if (in && lane == __ffs(peers) - 1)
        atomicAdd(&s.hist_mass[digit], static_cast<double>(group));
    }
    __syncthreads();
    if (threadIdx.x < 32) {
      // Lane l holds bins 255 - 8l .. 248 - 8l (from the top).
      double c[8];
      double sum = 0;
#pragma unroll
      for (int j = 0; j < 8; ++j) {
        c[j] = s.hist_mass[255 - lane * 8 - j];
        sum += c[j];
      }
      double incl = sum;
      for (int o = 1; o < 32; o <<= 1) {
        const double n = __shfl_up_sync(kFull, incl, o);
        if (lane >= o) incl += n;
      }
      const double excl = incl - sum;
      const unsigned reaches = __ballot_sync(kFull, above + incl >= target);
      if (reaches != 0) {
        if (lane == __ffs(reaches) - 1) {
          double acc = above + excl;
          int j = 0;
          for (; j < 7; ++j) {
            if (acc + c[j] >= target) break;
            acc += c[j];
          }
          s.sel_digit = 255 - lane * 8 - j;
          s.sel_above = acc;
        }
      } else {
        // Rounding left the target out of reach: the lowest digit with members ends the prefix.
        const unsigned nonempty = __ballot_sync(kFull, sum > 0.0);
        if (nonempty == 0) {
          if (lane == 0) s.sel_digit = -1;
        } else if (lane == 31 - __clz(nonempty)) {
          int j = 7;
          while (j > 0 && c[j] == 0.0) --j;
          s.sel_digit = 255 - lane * 8 - j;
          s.sel_above = above + incl - c[j];
        }
      }
    }
    __syncthreads();
    const int digit = s.sel_digit;
    const double new_above = s.sel_above;
    __syncthreads();              // everyone has read sel_* before the next pass writes them
    if (digit < 0) return floor;  // no members (cannot happen: count > kCompact)
    prefix |= static_cast<u64>(digit) << shift;
    above = new_above;
  }
  return prefix;
}

__global__ void __launch_bounds__(kThreads) sample_logits_kernel(SampleLogitsArgs a) {
  __shared__ Shared s;
  const int64_t row = blockIdx.x;
  const SamplingRow p = a.params[row];
  if (p.skip) return;
  const int vocab = static_cast<int>(a.vocab);
  const int64_t base = row * a.vocab;
  const void* raw = a.logits;
  const DType dtype = a.dtype;
  auto raw_at = [&](int v) { return sane(load_raw(raw, dtype, base + v)); };

  // Log-probabilities of the raw row: log_softmax as the CPU computes it (fp32 shift, double
  // normaliser), then the top N by the same radix select on the logprob values.
  float log_z = 0.0f;
  if (p.num_logprobs >= 0) {
    float m = -INFINITY;
    for (int v = threadIdx.x; v < vocab; v += kThreads) m = fmaxf(m, raw_at(v));
    m = block_reduce(m, -INFINITY, Max{}, s.red_f);
    double sum = 0;
    for (int v = threadIdx.x; v < vocab; v += kThreads) sum += expf(raw_at(v) - m);
    sum = block_reduce(sum, 0.0, Plus{}, s.red_d);
    log_z = m + static_cast<float>(log(sum));
    const int n = min(min(p.num_logprobs, kMaxTopLogprobs), vocab);
    if (n > 0) {
      auto key_of = [&](int v, u64& key) {
        key = sort_key(raw_at(v) - log_z, v);
        return true;
      };
      const u64 threshold = select_kth(vocab, n, key_of, s);
      if (threadIdx.x == 0) s.count = 0;
      __syncthreads();
      for (int v = threadIdx.x; v < vocab; v += kThreads) {
        u64 key;
        key_of(v, key);
        if (key >= threshold) {
          const int slot = atomicAdd(&s.count, 1);
          if (slot < kCompact) s.keys[slot] = key;
        }
      }
      __syncthreads();
      if (threadIdx.x == 0) {
        const int found = min(s.count, n);
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
      __syncthreads();
    }
  }

  // Processors, in the CPU's order, on an fp32 copy of the row: repetition, then presence and
  // frequency (one thread per distinct token), then bias, then the min_tokens mask.
  const bool processed = p.penalty_count > 0 || p.bias_count > 0 || p.mask_count > 0;
  float* work = a.workspace + base;
  if (processed) {
    for (int v = threadIdx.x; v < vocab; v += kThreads) work[v] = load_raw(raw, dtype, base + v);
    __syncthreads();
    for (int i = threadIdx.x; i < p.penalty_count; i += kThreads) {
      const PenaltyEntry e = a.penalties[p.penalty_begin + i];
      if (e.token < 0 || e.token >= vocab) continue;
      float x = work[e.token];
      if (p.repetition_penalty != 1.0f && (e.in_prompt != 0 || e.output_count > 0))
        x = x > 0 ? __fdiv_rn(x, p.repetition_penalty) : __fmul_rn(x, p.repetition_penalty);
      if ((p.presence_penalty != 0.0f || p.frequency_penalty != 0.0f) && e.output_count > 0) {
        x = __fsub_rn(x,
                      __fadd_rn(__fmul_rn(static_cast<float>(e.output_count), p.frequency_penalty),
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
      const int t = a.masked[p.mask_begin + i];
      if (t >= 0 && t < vocab) work[t] = -INFINITY;
    }
    __syncthreads();
  }
  auto x_at = [&](int v) { return processed ? sane(work[v]) : raw_at(v); };

  int token = -1;
  const bool greedy = p.temperature < 1e-5f;
  if (greedy) {
    // First maximum, as torch.argmax and the CPU.
    float best = -INFINITY;
    int best_i = -1;
    for (int v = threadIdx.x; v < vocab; v += kThreads) {
      const float x = x_at(v);
      if (best_i < 0 || x > best) {
        best = x;
        best_i = v;
      }
    }
    token = block_argmax(best, best_i, s);
  } else {
    float m = -INFINITY;
    for (int v = threadIdx.x; v < vocab; v += kThreads) m = fmaxf(m, x_at(v));
    m = block_reduce(m, -INFINITY, Max{}, s.red_f);
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
        floor = select_kth(vocab, p.top_k, key_of, s);
      }
      if (p.min_p > 0.0f) {
        // p is monotone in the logit, so "p >= min_p * p_max (= 1)" is a key threshold too.
        u64 smallest = ~u64{0};
        for (int v = threadIdx.x; v < vocab; v += kThreads) {
          const float x = x_at(v);
          const u64 key = sort_key(x, v);
          if (prob(x) >= p.min_p && key < smallest) smallest = key;
        }
        smallest = block_reduce(smallest, ~u64{0}, Min{}, s.red_u);
        floor = max(floor, smallest);
      }
      if (p.top_p < 1.0f) {
        auto key_prob = [&](int v, float& pr) {
          const float x = x_at(v);
          pr = prob(x);
          return sort_key(x, v);
        };
        double mass = 0;
        int count = 0;
        for (int v = threadIdx.x; v < vocab; v += kThreads) {
          float pr;
          if (key_prob(v, pr) >= floor) {
            mass += pr;
            ++count;
          }
        }
        mass = block_reduce(mass, 0.0, Plus{}, s.red_d);
        count = block_reduce(count, 0, Plus{}, s.red_i);
        const double target = static_cast<double>(p.top_p) * mass;
        u64 window = floor;
        int window_count = count;
        if (count > kCompact) {
          // Too many to sort: a histogram of the mass by -log p (kBins bins over kBinSpan nats,
          // fixed-point sums so that the result does not depend on the order of the atomics)
          // finds the first bin where the mass from the top reaches the target. The tokens of
          // that bin and above are a prefix of the key order (the bin is monotone in the logit)
          // holding the target: when few enough, they alone are sorted and scanned.
          u64* bin_mass = s.keys;                            // kBins entries (the sort's space,
          int* bin_count = reinterpret_cast<int*>(s.probs);  // free until the gather below)
          for (int i = threadIdx.x; i < kBins; i += kThreads) {
            bin_mass[i] = 0;
            bin_count[i] = 0;
          }
          __syncthreads();
          auto bin_of = [&](float x) {  // -1: below the span (mass < 2^-40 of the top token)
            const float nats = (m - x) * inv_t;
            return nats < kBinSpan ? min(kBins - 1, static_cast<int>(nats * (kBins / kBinSpan)))
                                   : -1;
          };
          for (int v = threadIdx.x; v < vocab; v += kThreads) {
            const float x = x_at(v);
            if (x == -INFINITY || sort_key(x, v) < floor) continue;
            const int b = bin_of(x);
            if (b < 0) continue;
            atomicAdd(&bin_mass[b], __float2ull_rn(prob(x) * kMassScale));
            atomicAdd(&bin_count[b], 1);
          }
          __syncthreads();
          if (threadIdx.x < 32) {
            // Lane l sums bins [64 l, 64 l + 64); a scan over lanes finds the bin.
            const int lane = static_cast<int>(threadIdx.x);
            constexpr int kPerLane = kBins / 32;
            u64 lane_mass = 0;
            int lane_count = 0;
            for (int j = 0; j < kPerLane; ++j) {
              lane_mass += bin_mass[lane * kPerLane + j];
              lane_count += bin_count[lane * kPerLane + j];
            }
            const u64 incl = warp_inclusive_sum(lane_mass);
            const int incl_count = warp_inclusive_sum(lane_count);
            const u64 total = __shfl_sync(kFull, incl, 31);
            const double target_q = static_cast<double>(p.top_p) * static_cast<double>(total);
            const unsigned reaches = __ballot_sync(kFull, static_cast<double>(incl) >= target_q);
            // Rounding can leave the target out of reach: then every binned token is kept.
            const int owner = reaches != 0 ? __ffs(reaches) - 1 : 31;
            if (lane == owner) {
              u64 cum = incl - lane_mass;
              int cum_count = incl_count - lane_count;
              int b = lane * kPerLane;
              for (; b < lane * kPerLane + kPerLane - 1; ++b) {
                cum += bin_mass[b];
                cum_count += bin_count[b];
                if (static_cast<double>(cum) >= target_q) break;
              }
              if (b == lane * kPerLane + kPerLane - 1) cum_count += bin_count[b];
              s.sel_digit = b;
              s.sel_remaining = cum_count;
            }
          }
          __syncthreads();
          const int last_bin = s.sel_digit, in_window = s.sel_remaining;
          __syncthreads();
          if (in_window <= kCompact) {
            u64 smallest = ~u64{0};
            for (int v = threadIdx.x; v < vocab; v += kThreads) {
              const float x = x_at(v);
              if (x == -INFINITY) continue;
              const int b = bin_of(x);
              const u64 key = sort_key(x, v);
              if (b >= 0 && b <= last_bin && key >= floor && key < smallest) smallest = key;
            }
            smallest = block_reduce(smallest, ~u64{0}, Min{}, s.red_u);
            if (smallest != ~u64{0}) {
              window = smallest;
              window_count = in_window;
            }
          }
        }
        const u64 last = top_p_threshold(vocab, window, window_count, target, key_prob, s);
        floor = max(floor, last);
      }
    }
    // Gumbel-max over the kept tokens: argmax of log p + noise samples p renormalised.
    const uint64_t key = draw_key(p.seed, p.counter);
    float best = -INFINITY;
    int best_i = -1;
    for (int v = threadIdx.x; v < vocab; v += kThreads) {
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
    token = block_argmax(best, best_i, s);
  }
  if (threadIdx.x == 0) {
    if (token < 0) token = 0;
    a.tokens[row] = token;
    if (p.num_logprobs >= 0) a.logprobs[row] = raw_at(token) - log_z;
  }
}

}  // namespace

cudaError_t sample_logits(const SampleLogitsArgs& args, cudaStream_t stream) {
  if (args.rows <= 0) return cudaSuccess;
  if (args.vocab <= 0 || args.vocab >= (int64_t{1} << kIndexBits) || args.rows > INT32_MAX)
    return cudaErrorInvalidValue;
  sample_logits_kernel<<<static_cast<unsigned>(args.rows), kThreads, 0, stream>>>(args);
  return cudaGetLastError();
}

}  // namespace pagoda::cuda
