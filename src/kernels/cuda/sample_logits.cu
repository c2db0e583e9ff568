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
#include "kernels/cuda/sample_logits_select.cuh"

namespace pagoda::cuda {
namespace {

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
