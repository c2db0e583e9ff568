// The CPU sampler's pipeline, one team of blocks (a thread-block cluster) per row, with no sort
// of the vocabulary.
//
// Why this shape: the CPU sorts the row (value descending, index ascending) and cuts prefixes.
// Every cut is a prefix of that order, so each one is a threshold on a 56-bit key that encodes the
// order exactly (order-preserving float bits << 24 | (2^24 - 1 - index)): a key is unique, and
// "kept" is "key >= threshold". The passes over the row read eight tokens per thread (16-byte
// loads) and are few:
// - the first pass finds the maximum, its first index (greedy's token) and each thread's maximum;
//   for the log-probabilities (and top-p with nothing before it) it also sums every chunk of 256
//   tokens relative to the chunk's maximum (sample_logits_list.cuh's row_stats_chunks), which the
//   root combines into the normaliser (or top-p's first draw) without another pass;
// - top-k (k <= 512) and the top-N log-probabilities need no radix select: the k-th largest of the
//   threads' maxima is a lower bound on the row's k-th value (each is the maximum of its own part
//   of the row), so one pass gathers the tokens at or above it (typically k plus the ties) into
//   the root block's shared memory, where they are sorted; min-p and top-p then cut that sorted
//   list and the draw runs over it, with no further pass. More than kCompact gathered (a long run
//   of equal logits) falls back to a radix select on counts (8-bit digits, up to 7 passes);
// - top-p over many tokens is drawn by rejection, with no cut computed (sample_logits_list.cuh's
//   draw_top_p): one pass sums the members' mass per chunk of 256 tokens, a uniform integer picks
//   a member by inverse CDF, one pass sums the mass above it, which says whether it lies in the
//   prefix; if not, the draw repeats among the tokens above it. About two passes on a flat row.
//   At most kCompact members: they are gathered and sorted as above;
// - the other draws are Gumbel-max over the kept keys with counter-based noise (gumbel.cuh).
//
// Why a team: a 152k-token row is several passes, and one block (one SM) took 0.12-1.6 ms per
// sampled row, a third of a batch-1 decode step. With few rows, the blocks of a cluster (up to
// kMaxTeam) split every pass over the row (block r of n takes the tiles r, r + n, ...) and meet
// through distributed shared memory: each block histograms into its own shared memory, then adds
// its non-empty bins into the root block's (rank 0) totals; the root decides (a digit, a
// threshold, a sort of the candidates) and the others read its decision after a cluster barrier.
// Reductions go through one slot per block, combined in the same fixed order by every block, and
// every sum of probabilities is fixed point (exact): the result is the same bits for any team size
// and any timing, so a row is drawn the same way in any batch. Whether top-k's list or its radix
// select finds the threshold may depend on the team (the lower bound does), but both keep the same
// tokens and the draw that follows depends on those alone.
#include <cooperative_groups.h>
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cfloat>

#include "kernels/cuda/common.cuh"
#include "kernels/cuda/gumbel.cuh"
#include "kernels/cuda/sample_logits.h"
#include "kernels/cuda/sample_logits_list.cuh"
#include "kernels/cuda/sample_logits_select.cuh"

namespace pagoda::cuda {
namespace {

template <int kSize>
__global__ void __launch_bounds__(kThreads, kBlocksPerSm) sample_logits_kernel(SampleLogitsArgs a) {
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
  for (int i = threadIdx.x; i < kMaxChunks; i += kThreads) s.chunk_mass[i] = 0;
  if (threadIdx.x == 0) s.count = 0;
  t.sync();
  Shared& root = *t.root;

  const int vocab = static_cast<int>(a.vocab);
  const int64_t base = row * a.vocab;
  const uint32_t* allowed = p.allowed_row >= 0
                                ? a.allowed + static_cast<int64_t>(p.allowed_row) * a.allowed_words
                                : nullptr;
  const bool processed =
      p.penalty_count > 0 || p.bias_count > 0 || p.mask_count > 0 || allowed != nullptr;
  float* work = a.workspace + base;
  const int elem = a.dtype == DType::kF32 ? 4 : 2;
  RowReader raw_row;
  raw_row.raw = static_cast<const char*>(a.logits) + base * elem;
  raw_row.dtype = a.dtype;
  raw_row.vocab = vocab;
  raw_row.vec = vocab % kVec == 0 && reinterpret_cast<uintptr_t>(a.logits) % 16 == 0 &&
                (!processed || reinterpret_cast<uintptr_t>(a.workspace) % 16 == 0);
  RowReader x_row = raw_row;  // what the processors leave: the workspace copy, or the raw row
  if (processed) x_row.work = work;
  auto raw_at = [&](int v) { return raw_row.at(v); };
  auto x_at = [&](int v) { return x_row.at(v); };

  // The raw row's maximum (and first argmax, and each thread's maximum) when the log-probabilities
  // or an unprocessed row need them: one pass.
  RowStats raw_stats;
  // The normaliser rides along the first pass up to kMaxChunks chunks of 256 tokens (every real
  // vocabulary); the choice depends on the vocabulary alone, so log_z has the same bits for every
  // team size.
  const bool one_pass_lse = p.num_logprobs >= 0 && vocab <= kMaxChunks * 256;
  // Top-p with nothing before it (no processors, top-k or min-p) and no log-probabilities: its
  // first draw's masses ride along the first pass too (draw_top_p's ChunkedStart).
  const bool chunked_top_p = !processed && p.num_logprobs < 0 && p.temperature >= 1e-5f &&
                             p.top_p < 1.0f && (p.top_k <= 0 || p.top_k >= vocab) &&
                             p.min_p <= 0.0f && vocab <= kMaxChunks * 256;
  ChunkedStart start{};
  if (chunked_top_p) start.scale = (1.0f / p.temperature) * kLog2e;
  if (one_pass_lse) {
    raw_stats = row_stats_chunks(raw_row, kLog2e, s, t);
  } else if (chunked_top_p) {
    raw_stats = row_stats_chunks(raw_row, start.scale, s, t, &start.finite);
  } else if (p.num_logprobs >= 0 || !processed) {
    raw_stats = row_stats(raw_row, s, t);
  }

  // Log-probabilities of the raw row: log_softmax as the CPU computes it (fp32 shift, double
  // normaliser), then the top N: the tokens at or above a lower bound on the N-th value are
  // gathered and sorted (a radix select when too many tie there).
  float log_z = 0.0f;
  if (p.num_logprobs >= 0) {
    const float m = raw_stats.max;
    const int n = min(min(p.num_logprobs, kMaxTopLogprobs), vocab);
    // The top N ride along the normaliser's pass: the tokens at or above a lower bound on the
    // N-th raw logit, less a margin of a few ulps of the log-probabilities' magnitude (|x - log_z|
    // <= |x - m| + ln(vocab)), are gathered by raw value; their keys are redone once log_z is
    // known. Exact when the N-th log-probability stays above what any token left out can round
    // to; otherwise (ties at the margin, too many candidates) the passes below decide.
    float gather_at = INFINITY;
    if (one_pass_lse) {
      // row_stats_chunks summed the chunks; the root combines them and gathers the top tokens.
      // A team of one gathers the top tokens in the root's combine (it reads again only the
      // chunks whose maximum reaches the bound); a bigger team gathers them in a pass of its own,
      // as the root alone re-reading chunks would cost it more.
      if (t.is_root()) {
        log_z = root_log_z(raw_row, m, kSize == 1 ? n : 0, s, t, &gather_at);
        if (threadIdx.x == 0)
          s.found_key =
              (static_cast<u64>(__float_as_uint(gather_at)) << 32) | __float_as_uint(log_z);
      }
      t.sync();
      const u64 both = root.found_key;
      log_z = __uint_as_float(static_cast<uint32_t>(both));
      gather_at = __uint_as_float(static_cast<uint32_t>(both >> 32));
      if (kSize > 1 && n > 0) {
        const float bound = kth_bound(raw_stats.mine, n, s, t);
        const float span = fabsf(bound - m) + logf(static_cast<float>(vocab)) + 1.0f;
        gather_at = bound - span * 0x1p-19f;
        for_each_row_tile(raw_row, t, [&](const int c, float(&x)[kVec]) {
          bool any = false;
#pragma unroll
          for (int j = 0; j < kVec; ++j) any |= x[j] >= gather_at;
          if (__any_sync(kFull, any)) {
#pragma unroll
            for (int j = 0; j < kVec; ++j) {
              const bool in = c + j < vocab && x[j] >= gather_at;
              if (__any_sync(kFull, in)) gather(in, sort_key(x[j], c + j), x[j], root);
            }
          }
        });
        t.sync();  // publishes the list
      }
    } else {
      if (n > 0) {
        const float bound = kth_bound(raw_stats.mine, n, s, t);
        const float span = fabsf(bound - m) + logf(static_cast<float>(vocab)) + 1.0f;
        gather_at = bound - span * 0x1p-19f;
      }
      Shared& list = root;
      const float m_log2e = m * kLog2e;
      u64 sum = 0;  // fixed point: exact in any split (each term is at most 8)
      for_each_row_tile(raw_row, t, [&](const int c, float(&x)[kVec]) {
        // The eight tokens' mass summed in token order, one conversion to fixed point per eight
        // (the groups of eight are the same for every team size; past the vocabulary x is -inf,
        // whose exp2 is 0). The hardware exp2 (relative error ~2^-22, and |x - m| log2(e) rounded
        // once: ~1e-6 relative at 30 nats below the top) instead of expf: 2 instructions per token
        // instead of 9, log_z off by ~1e-6 at most.
        float group = 0.0f;
        bool any = false;
#pragma unroll
        for (int j = 0; j < kVec; ++j) {
          group += fast_exp2(fmaf(x[j], kLog2e, -m_log2e));
          any |= x[j] >= gather_at;
        }
        sum += fixed_mass(group, t);
        if (__any_sync(kFull, any)) {
#pragma unroll
          for (int j = 0; j < kVec; ++j) {
            const bool in = c + j < vocab && x[j] >= gather_at;
            if (__any_sync(kFull, in)) gather(in, sort_key(x[j], c + j), x[j], list);
          }
        }
      });
      sum = team_reduce(sum, u64{0}, Plus{}, s.red_u, s.slot_u, t);  // publishes the list too
      log_z = m + static_cast<float>(log(static_cast<double>(sum) / t.mass_scale));
    }
    if (n > 0) {
      int found = root.count;
      t.sync();
      if (t.is_root()) {
        if (threadIdx.x == 0) s.count = 0;
        bool exact = false;
        if (found >= n && found <= kCompact) {
          for (int i = threadIdx.x; i < found; i += kThreads)
            s.keys[i] = sort_key(__fsub_rn(s.probs[i], log_z), key_index(s.keys[i]));
          sort_candidates(found, s);
          exact = key_value(s.keys[n - 1]) > __fsub_rn(gather_at, log_z);
        }
        if (threadIdx.x == 0) s.sel_done = exact ? 1 : 0;
      }
      t.sync();
      if (root.sel_done == 0) {
        const float lp_bound = __fsub_rn(kth_bound(raw_stats.mine, n, s, t), log_z);
        auto near_top = [&](int v, float x, u64& key, float& pr) {
          const float lp = __fsub_rn(x, log_z);
          key = sort_key(lp, v);
          pr = 0.0f;
          return lp >= lp_bound;
        };
        found = gather_list(raw_row, near_top, s, t);
        if (found > kCompact) {
          auto key_of = [&](int v, u64& key) {
            key = sort_key(__fsub_rn(raw_at(v), log_z), v);
            return true;
          };
          const u64 threshold = select_kth(vocab, n, key_of, s, t);
          auto top = [&](int v, float x, u64& key, float& pr) {
            key = sort_key(__fsub_rn(x, log_z), v);
            pr = 0.0f;
            return key >= threshold;
          };
          found = gather_list(raw_row, top, s, t);
        }
      }
      if (t.is_root() && threadIdx.x == 0) {
        const int listed = min(found, n);
        for (int i = 0; i < kMaxTopLogprobs; ++i) {
          const int64_t at = row * kMaxTopLogprobs + i;
          if (i < listed) {
            const int v = key_index(s.keys[i]);
            a.top_tokens[at] = v;
            a.top_logprobs[at] = __fsub_rn(raw_at(v), log_z);
          } else {
            a.top_tokens[at] = -1;
            a.top_logprobs[at] = -INFINITY;
          }
        }
      }
      // The root's list is free again after the next barrier (every later gather starts with one).
    }
  }

  // Processors, in the CPU's order, on an fp32 copy of the row: repetition, then presence and
  // frequency (one thread per distinct token), then bias, then the min_tokens mask. The team
  // copies the row (a structured-output mask applies as it copies); the root block applies the
  // lists; the barriers publish the global writes.
  if (processed) {
    for_each_row_tile(raw_row, t, [&](const int c, float(&x)[kVec]) {
      if (allowed != nullptr) {
#pragma unroll
        for (int j = 0; j < kVec; ++j)
          if (c + j < vocab && ((allowed[(c + j) >> 5] >> ((c + j) & 31)) & 1u) == 0)
            x[j] = -INFINITY;
      }
      if (raw_row.vec && c + kVec <= vocab) {
        *reinterpret_cast<float4*>(work + c) = make_float4(x[0], x[1], x[2], x[3]);
        *reinterpret_cast<float4*>(work + c + 4) = make_float4(x[4], x[5], x[6], x[7]);
      } else {
#pragma unroll
        for (int j = 0; j < kVec; ++j)
          if (c + j < vocab) work[c + j] = x[j];
      }
    });
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
  const RowStats xs = processed ? row_stats(x_row, s, t) : raw_stats;

  int token = -1;  // in the root block
  const bool greedy = p.temperature < 1e-5f;
  if (greedy) {
    token = xs.argmax;  // the first maximum, as torch.argmax and the CPU
  } else if (xs.max == -INFINITY) {
    // Everything masked: nothing to draw (token 0 below).
    if (a.kept != nullptr) FOR_EACH_TOKEN(t, vocab, v) a.kept[base + v] = 0;
  } else {
    const float m = xs.max;
    const float inv_t = 1.0f / p.temperature;
    auto prob = [&](float x) { return prob_of(x, m, inv_t); };
    const uint64_t draw = draw_key(p.seed, p.counter);
    u64 floor = 0;  // kept: key >= floor (the root's, where a list decides)
    // The kept tokens are, when `listed`, a prefix of the root's sorted list (its length known to
    // the root alone); otherwise the members with key >= floor.
    bool listed = false;
    int n_list = 0;
    bool min_p_pending = false;  // min-p still to cut the list
    if (p.top_k > 0 && p.top_k < vocab) {
      if (p.top_k <= kThreads) {
        const float bound = kth_bound(xs.mine, p.top_k, s, t);
        auto near_top = [&](int v, float x, u64& key, float& pr) {
          if (x == -INFINITY || x < bound) return false;
          key = sort_key(x, v);
          pr = prob(x);
          return true;
        };
        const int found = gather_list(x_row, near_top, s, t);
        if (found <= kCompact) {
          listed = true;
          n_list = min(found, p.top_k);
          min_p_pending = p.min_p > 0.0f;
        }
      }
      if (!listed) {
        auto key_of = [&](int v, u64& key) {
          key = sort_key(x_at(v), v);
          return true;
        };
        floor = select_kth(vocab, p.top_k, key_of, s, t);
      }
    }
    if (!listed && p.min_p > 0.0f) {
      // p is monotone in the logit, so "p >= min_p * p_max (= 1)" is a key threshold too.
      u64 smallest = ~u64{0};
      for_each_row_tile(x_row, t, [&](const int c, float(&x)[kVec]) {
#pragma unroll
        for (int j = 0; j < kVec; ++j) {
          const u64 key = sort_key(x[j], c + j);
          if (c + j < vocab && prob(x[j]) >= p.min_p && key < smallest) smallest = key;
        }
      });
      smallest = team_reduce(smallest, ~u64{0}, Min{}, s.red_u, s.slot_u, t);
      floor = max(floor, smallest);
    }
    bool drawn = false;  // the token (every thread's) drawn by draw_top_p
    if (!listed && p.top_p < 1.0f) {
      // Top-p over many tokens: drawn by rejection, with no cut computed (two passes on a flat
      // row). The cut itself only where the draw gave up, and for a.kept.
      token =
          draw_top_p(x_row, floor, p.top_p, m, inv_t, draw, chunked_top_p ? &start : nullptr, s, t);
      drawn = token >= 0;
      if (token == kListThem) {
        token = -1;
        auto member = [&](int v, float x, u64& key, float& pr) {
          if (x == -INFINITY) return false;
          key = sort_key(x, v);
          pr = prob(x);
          return key >= floor;
        };
        n_list = gather_list(x_row, member, s, t);
        listed = true;
      } else if (!drawn || a.kept != nullptr) {
        auto key_prob = [&](int v, float& pr) {
          const float x = x_at(v);
          pr = prob(x);
          return sort_key(x, v);
        };
        floor = max(floor, top_p_threshold(vocab, floor, p.top_p, key_prob, s, t));
      }
    }
    if (listed) {
      // The root cuts its list by min-p (when top-k made it) and top-p, and draws from it.
      if (t.is_root()) {
        int n = n_list;
        if (min_p_pending) n = list_min_p(n, p.min_p, s);
        if (p.top_p < 1.0f && n > 0) {
          const double mass = static_cast<double>(list_mass(n, s, t)) / t.mass_scale;
          n = scan_list(n, 0.0, static_cast<double>(p.top_p) * mass, s) + 1;
        }
        token = draw_list(n, m, inv_t, draw, s);
        floor = n > 0 ? s.keys[n - 1] : ~u64{0};
      }
    } else if (!drawn) {
      auto member = [&](float x, int v) { return sort_key(x, v) >= floor; };
      token = draw_row(x_row, member, m, inv_t, draw, s, t);
    }
    if (a.kept != nullptr) {  // tests: every token the draw could have picked
      if (t.is_root() && threadIdx.x == 0) s.found_key = floor;
      t.sync();
      const u64 kept_by = root.found_key;
      FOR_EACH_TOKEN(t, vocab, v) {
        const float x = x_at(v);
        a.kept[base + v] = x != -INFINITY && sort_key(x, v) >= kept_by && prob(x) > 0.0f;
      }
    }
  }
  if (t.is_root() && threadIdx.x == 0) {
    if (token < 0) token = 0;
    a.tokens[row] = token;
    if (p.num_logprobs >= 0) a.logprobs[row] = __fsub_rn(raw_at(token), log_z);
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
