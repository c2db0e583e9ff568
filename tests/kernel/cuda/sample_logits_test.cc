// The GPU sampler (sample_logits) against the CPU RequestSampler: greedy tokens, processed logits
// (penalties, bias, min_tokens masking), the truncation sets of top-k/top-p/min-p, raw
// log-probabilities and their top N, the distribution of draws by chi-square, and reproducibility
// per (seed, counter).
// To add a case: describe the row as a Case (SamplingParams + history), run it through run_gpu and
// compare with what the CPU sampler (sampling/sampler.h) computes for the same row.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <future>
#include <iterator>
#include <map>
#include <random>
#include <set>
#include <thread>
#include <vector>

#include <gtest/gtest.h>

#include "cuda_test_util.h"
#include "kernels/cuda/sample_logits.h"
#include "sampling/sampler.h"

namespace pagoda::cuda {
namespace {

using testing::DeviceBuffer;
using testing::to_device;
using testing::to_host;

const int64_t kVocabs[] = {7, 512, 32000, 128256, 151936};
const std::vector<int32_t> kEos = {2, 5};

/// One row: its parameters and the history the penalties read.
struct Case {
  SamplingParams params;
  std::vector<int32_t> prompt, output;
  uint64_t seed = 7, counter = 0;
  std::vector<uint32_t> allowed;  // a structured-output bitmask [ceil(vocab / 32)], or empty
};

struct GpuResult {
  std::vector<int32_t> tokens, top_tokens;
  std::vector<float> logprobs, top_logprobs, workspace;
  std::vector<uint8_t> kept;
};

/// The kernel's inputs for a case, as the engine builds them.
void append_row(const Case& c, int64_t vocab, std::vector<SamplingRow>& rows,
                std::vector<PenaltyEntry>& penalties, std::vector<BiasEntry>& biases,
                std::vector<int32_t>& masked) {
  const SamplingParams& p = c.params;
  SamplingRow r;
  r.temperature = p.greedy() ? 0.0f : p.temperature;
  r.top_k = p.top_k;
  r.top_p = p.top_p;
  r.min_p = p.min_p;
  r.repetition_penalty = p.repetition_penalty;
  r.presence_penalty = p.presence_penalty;
  r.frequency_penalty = p.frequency_penalty;
  r.num_logprobs = p.logprobs.value_or(-1);
  r.seed = c.seed;
  r.counter = c.counter;
  r.penalty_begin = static_cast<int32_t>(penalties.size());
  const bool repetition = p.repetition_penalty != 1.0f;
  const bool counted = p.presence_penalty != 0.0f || p.frequency_penalty != 0.0f;
  if (repetition || counted) {
    std::map<int32_t, PenaltyEntry> entries;
    if (repetition) {
      for (int32_t t : c.prompt) entries[t] = {t, 0, 1};
    }
    for (int32_t t : c.output) {
      auto& e = entries[t];
      e.token = t;
      ++e.output_count;
    }
    for (const auto& [t, e] : entries) penalties.push_back(e);
  }
  r.penalty_count = static_cast<int32_t>(penalties.size()) - r.penalty_begin;
  r.bias_begin = static_cast<int32_t>(biases.size());
  for (const auto& [t, b] : p.logit_bias) biases.push_back({t, b});
  r.bias_count = static_cast<int32_t>(biases.size()) - r.bias_begin;
  r.mask_begin = static_cast<int32_t>(masked.size());
  if (static_cast<int>(c.output.size()) < p.min_tokens) {
    if (!p.ignore_eos) masked.insert(masked.end(), kEos.begin(), kEos.end());
    masked.insert(masked.end(), p.stop_token_ids.begin(), p.stop_token_ids.end());
  }
  r.mask_count = static_cast<int32_t>(masked.size()) - r.mask_begin;
  (void)vocab;
  rows.push_back(r);
}

/// Runs the cases, row r on logits[r * vocab, (r + 1) * vocab) in dtype dt (values already
/// representable in dt), with `team` blocks per row (0: the kernel's choice).
GpuResult run_gpu(const std::vector<float>& logits, DType dt, int64_t vocab,
                  const std::vector<Case>& cases, int team = 0) {
  const auto rows = static_cast<int64_t>(cases.size());
  std::vector<SamplingRow> params;
  std::vector<PenaltyEntry> penalties;
  std::vector<BiasEntry> biases;
  std::vector<int32_t> masked;
  for (const Case& c : cases) append_row(c, vocab, params, penalties, biases, masked);
  std::vector<uint32_t> allowed;  // the rows' bitmasks, concatenated
  for (size_t r = 0; r < cases.size(); ++r) {
    if (cases[r].allowed.empty()) continue;
    params[r].allowed_row =
        static_cast<int32_t>(allowed.size() / static_cast<size_t>((vocab + 31) / 32));
    allowed.insert(allowed.end(), cases[r].allowed.begin(), cases[r].allowed.end());
  }
  allowed.push_back(0);  // never empty
  DeviceBuffer d_allowed = to_device(allowed);
  DeviceBuffer d_logits;
  if (dt == DType::kF32) {
    d_logits = to_device(logits);
  } else {
    std::vector<uint16_t> bits(logits.size());
    for (size_t i = 0; i < bits.size(); ++i) bits[i] = testing::float_to_half(logits[i], dt);
    d_logits = to_device(bits);
  }
  DeviceBuffer d_params = to_device(params), d_pen = to_device(penalties),
               d_bias = to_device(biases), d_mask = to_device(masked);
  const auto n = static_cast<size_t>(rows), nv = static_cast<size_t>(rows * vocab);
  const size_t ntop = n * kMaxTopLogprobs;
  DeviceBuffer work(nv * sizeof(float)), tokens(n * 4), lps(n * 4), top_t(ntop * 4),
      top_l(ntop * 4), kept(nv);
  cudaMemset(work.get(), 0, work.bytes());
  cudaMemset(kept.get(), 0, kept.bytes());
  SampleLogitsArgs a;
  a.logits = d_logits.get();
  a.dtype = dt;
  a.rows = rows;
  a.vocab = vocab;
  a.params = d_params.as<SamplingRow>();
  a.penalties = d_pen.as<PenaltyEntry>();
  a.biases = d_bias.as<BiasEntry>();
  a.masked = d_mask.as<int32_t>();
  a.allowed = d_allowed.as<uint32_t>();
  a.allowed_words = (vocab + 31) / 32;
  a.workspace = work.as<float>();
  a.tokens = tokens.as<int32_t>();
  a.logprobs = lps.as<float>();
  a.top_tokens = top_t.as<int32_t>();
  a.top_logprobs = top_l.as<float>();
  a.kept = kept.as<uint8_t>();
  a.team = team;
  GpuResult out;
  EXPECT_EQ(sample_logits(a, nullptr), cudaSuccess);
  EXPECT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  out.tokens = to_host<int32_t>(tokens, n);
  out.logprobs = to_host<float>(lps, n);
  out.top_tokens = to_host<int32_t>(top_t, ntop);
  out.top_logprobs = to_host<float>(top_l, ntop);
  out.workspace = to_host<float>(work, nv);
  out.kept = to_host<uint8_t>(kept, nv);
  return out;
}

/// The same cases with one block per row and with the largest team (8 blocks, one cluster) give the
/// same bits: the team only splits the passes over the row, every sum is exact, and the choice
/// between the two depends on the batch size.
GpuResult run_gpu_every_team(const std::vector<float>& logits, DType dt, int64_t vocab,
                             const std::vector<Case>& cases) {
  const GpuResult one = run_gpu(logits, dt, vocab, cases, 1);
  const GpuResult eight = run_gpu(logits, dt, vocab, cases, 8);
  auto same_bits = [](const auto& a, const auto& b) {
    return a.size() == b.size() &&
           (a.empty() || std::memcmp(a.data(), b.data(), a.size() * sizeof(a[0])) == 0);
  };
  EXPECT_TRUE(same_bits(one.tokens, eight.tokens)) << "tokens, vocab " << vocab;
  EXPECT_TRUE(same_bits(one.logprobs, eight.logprobs)) << "logprobs, vocab " << vocab;
  EXPECT_TRUE(same_bits(one.top_tokens, eight.top_tokens)) << "top tokens, vocab " << vocab;
  EXPECT_TRUE(same_bits(one.top_logprobs, eight.top_logprobs)) << "top logprobs, vocab " << vocab;
  EXPECT_TRUE(same_bits(one.workspace, eight.workspace)) << "processed rows, vocab " << vocab;
  EXPECT_TRUE(same_bits(one.kept, eight.kept)) << "kept sets, vocab " << vocab;
  return eight;
}

/// Random logits exactly representable in dt; spread sets how peaked the distribution is.
std::vector<float> random_logits(int64_t rows, int64_t vocab, DType dt, uint32_t seed,
                                 float spread = 3.0f) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> d(0.0f, spread);
  std::vector<float> v(static_cast<size_t>(rows * vocab));
  for (auto& x : v) {
    x = d(rng);
    if (dt != DType::kF32) x = testing::half_to_float(testing::float_to_half(x, dt), dt);
  }
  return v;
}

std::vector<float> row_of(const std::vector<float>& all, int64_t vocab, int64_t r) {
  return {all.begin() + r * vocab, all.begin() + (r + 1) * vocab};
}

/// The CPU's processed row (its processors run in place before the draw).
std::vector<float> cpu_processed(std::vector<float> row, const Case& c) {
  SamplingParams greedy = c.params;
  greedy.temperature = 0.0f;
  greedy.logprobs.reset();
  RequestSampler sampler(greedy, kEos, 0);
  (void)sampler.sample(row, c.prompt, c.output, c.allowed);
  return row;
}

/// A history with repeats, inside the vocabulary.
Case with_history(SamplingParams p, int64_t vocab, std::mt19937& rng) {
  Case c;
  c.params = std::move(p);
  std::uniform_int_distribution<int32_t> tok(0, static_cast<int32_t>(vocab - 1));
  for (int i = 0; i < 40; ++i) c.prompt.push_back(tok(rng));
  for (int i = 0; i < 25; ++i) c.output.push_back(i % 3 == 0 ? c.prompt[i] : tok(rng));
  c.output.push_back(c.output[0]);
  return c;
}

std::vector<SamplingParams> processor_params(int64_t vocab) {
  std::vector<SamplingParams> out;
  SamplingParams p;
  p.temperature = 0.0f;
  out.push_back(p);  // none
  SamplingParams rep = p;
  rep.repetition_penalty = 1.3f;
  out.push_back(rep);
  SamplingParams rep_low = p;
  rep_low.repetition_penalty = 0.7f;
  out.push_back(rep_low);
  SamplingParams presence = p;
  presence.presence_penalty = 1.5f;
  out.push_back(presence);
  SamplingParams frequency = p;
  frequency.frequency_penalty = -0.8f;
  out.push_back(frequency);
  SamplingParams bias = p;
  bias.logit_bias = {{0, 5.0f}, {static_cast<int32_t>(vocab - 1), -3.5f}, {3, 100.0f}};
  out.push_back(bias);
  SamplingParams mask = p;
  mask.min_tokens = 100;
  mask.stop_token_ids = {1, static_cast<int32_t>(vocab / 2)};
  out.push_back(mask);
  SamplingParams mask_ignore = mask;
  mask_ignore.ignore_eos = true;
  out.push_back(mask_ignore);
  SamplingParams all = p;
  all.repetition_penalty = 1.2f;
  all.presence_penalty = 0.4f;
  all.frequency_penalty = 0.3f;
  all.logit_bias = {{4, -2.0f}, {1, 1.0f}};
  all.min_tokens = 30;
  all.stop_token_ids = {6};
  out.push_back(all);
  return out;
}

TEST(SampleLogits, ProcessorsAndGreedyMatchTheCpu) {
  REQUIRE_GPU();
  std::mt19937 rng(11);
  for (int64_t vocab : kVocabs) {
    for (DType dt : {DType::kF32, DType::kBF16}) {
      std::vector<Case> cases;
      for (const SamplingParams& p : processor_params(vocab))
        cases.push_back(with_history(p, vocab, rng));
      // Plant a tie at the top of the first row: the lower index wins.
      std::vector<float> logits = random_logits(static_cast<int64_t>(cases.size()), vocab, dt, 5);
      logits[static_cast<size_t>(vocab - 1)] = 40.0f;
      logits[static_cast<size_t>(vocab / 3)] = 40.0f;
      const GpuResult g = run_gpu_every_team(logits, dt, vocab, cases);
      for (size_t r = 0; r < cases.size(); ++r) {
        const std::vector<float> raw = row_of(logits, vocab, static_cast<int64_t>(r));
        const std::vector<float> want = cpu_processed(raw, cases[r]);
        const auto cpu_token =
            static_cast<int32_t>(std::max_element(want.begin(), want.end()) - want.begin());
        EXPECT_EQ(g.tokens[r], cpu_token) << "vocab " << vocab << " row " << r;
        const SamplingParams& p = cases[r].params;
        const bool processed = p.repetition_penalty != 1 || p.presence_penalty != 0 ||
                               p.frequency_penalty != 0 || !p.logit_bias.empty() ||
                               p.min_tokens > 0;
        if (!processed) continue;
        int bad = 0;
        for (int64_t v = 0; v < vocab && bad < 5; ++v) {
          const float got = g.workspace[static_cast<size_t>(static_cast<int64_t>(r) * vocab + v)];
          const float w = want[static_cast<size_t>(v)];
          const bool ok = std::isinf(w) ? got == w : std::fabs(got - w) <= 1e-5f;
          if (!ok) {
            ADD_FAILURE() << "vocab " << vocab << " row " << r << " token " << v << ": " << got
                          << " vs " << w;
            ++bad;
          }
        }
      }
    }
  }
}

TEST(SampleLogits, StructuredOutputBitmasksMatchTheCpu) {
  REQUIRE_GPU();
  std::mt19937 rng(23);
  for (int64_t vocab : kVocabs) {
    for (DType dt : {DType::kF32, DType::kBF16}) {
      const auto words = static_cast<size_t>((vocab + 31) / 32);
      std::vector<Case> cases;
      for (int k = 0; k < 6; ++k) {
        Case c;
        c.params.temperature = k % 2 == 0 ? 0.0f : 1.0f;
        c.params.top_p = k == 3 ? 0.9f : 1.0f;
        c.params.top_k = k == 5 ? 5 : 0;
        if (k == 4) c.params.repetition_penalty = 1.3f, c.prompt = {1, 2, 3};
        c.seed = static_cast<uint64_t>(k);
        c.allowed.assign(words, 0);
        // One allowed token (k = 0), or about a tenth of the vocabulary.
        const int64_t n = k == 0 ? 1 : std::max<int64_t>(1, vocab / 10);
        for (int64_t i = 0; i < n; ++i) {
          const auto id = static_cast<int64_t>(rng() % static_cast<uint32_t>(vocab));
          c.allowed[static_cast<size_t>(id) >> 5] |= 1u << (id & 31);
        }
        cases.push_back(std::move(c));
      }
      const std::vector<float> logits =
          random_logits(static_cast<int64_t>(cases.size()), vocab, dt, 9);
      const GpuResult g = run_gpu_every_team(logits, dt, vocab, cases);
      for (size_t r = 0; r < cases.size(); ++r) {
        const Case& c = cases[r];
        const int32_t t = g.tokens[r];
        ASSERT_GE(t, 0);
        EXPECT_TRUE((c.allowed[static_cast<size_t>(t) >> 5] >> (t & 31)) & 1u)
            << "vocab " << vocab << " row " << r << " drew " << t;
        const std::vector<float> want =
            cpu_processed(row_of(logits, vocab, static_cast<int64_t>(r)), c);
        if (c.params.greedy()) {
          EXPECT_EQ(
              t, static_cast<int32_t>(std::max_element(want.begin(), want.end()) - want.begin()));
        }
        for (int64_t v = 0; v < vocab; ++v) {
          if (g.kept[static_cast<size_t>(static_cast<int64_t>(r) * vocab + v)]) {
            ASSERT_TRUE((c.allowed[static_cast<size_t>(v) >> 5] >> (v & 31)) & 1u) << v;
          }
        }
      }
    }
  }
}

/// The CPU's truncation set (candidates with nonzero probability), and the tokens just inside and
/// just outside it when its top-p or min-p boundary is within rounding (the GPU computes p with
/// expf and sums in another order, so such a token may fall on the other side).
struct CpuSet {
  std::set<int32_t> kept;
  std::set<int32_t> at_boundary;
};

CpuSet cpu_kept(const std::vector<float>& processed, const SamplingParams& p) {
  std::vector<int32_t> order;
  std::vector<float> probs;
  const int32_t count = truncate_candidates(processed, p, order, probs);
  CpuSet out;
  for (int32_t i = 0; i < count; ++i) {
    if (probs[static_cast<size_t>(i)] > 0) out.kept.insert(order[static_cast<size_t>(i)]);
  }
  // The candidates before top-p, for its boundary.
  SamplingParams no_top_p = p;
  no_top_p.top_p = 1.0f;
  std::vector<int32_t> all_order;
  std::vector<float> all_probs;
  const int32_t before = truncate_candidates(processed, no_top_p, all_order, all_probs);
  bool near = false;
  if (p.min_p > 0) {
    // all_probs covers the candidates after top-k; the first one min-p dropped is at `before`.
    for (int32_t i : {before - 1, before}) {
      if (i >= 0 && i < static_cast<int32_t>(all_probs.size()) &&
          std::fabs(all_probs[static_cast<size_t>(i)] - p.min_p) <= 1e-6f * p.min_p)
        near = true;
    }
  }
  if (p.top_p < 1.0f) {
    double remaining = 0;
    for (int32_t i = 0; i < before; ++i) remaining += all_probs[static_cast<size_t>(i)];
    const double target = p.top_p * remaining;
    double cum = 0;
    for (int32_t i = 0; i < before && i <= count; ++i) {
      cum += all_probs[static_cast<size_t>(i)];
      if (i >= count - 2 && std::fabs(cum - target) <= 1e-6 * remaining) near = true;
    }
  }
  if (near) {
    for (int32_t i : {count - 1, count, before - 1, before}) {
      if (i >= 0 && i < static_cast<int32_t>(all_order.size()))
        out.at_boundary.insert(all_order[static_cast<size_t>(i)]);
    }
  }
  return out;
}

/// The tokens row r may draw on the GPU, ascending.
std::vector<int32_t> kept_tokens(const GpuResult& g, size_t r, int64_t vocab) {
  std::vector<int32_t> got;
  for (int64_t v = 0; v < vocab; ++v) {
    if (g.kept[r * static_cast<size_t>(vocab) + static_cast<size_t>(v)])
      got.push_back(static_cast<int32_t>(v));
  }
  return got;
}

/// The GPU's kept set is the CPU's, except for one token at a boundary that sits within rounding.
::testing::AssertionResult same_kept_set(const std::vector<int32_t>& got, const CpuSet& want) {
  std::vector<int32_t> differ;
  std::set_symmetric_difference(got.begin(), got.end(), want.kept.begin(), want.kept.end(),
                                std::back_inserter(differ));
  if (differ.empty() || (differ.size() == 1 && want.at_boundary.count(differ[0]) == 1))
    return ::testing::AssertionSuccess();
  return ::testing::AssertionFailure() << got.size() << " kept vs the CPU's " << want.kept.size()
                                       << " (" << differ.size() << " differ)";
}

std::vector<SamplingParams> truncation_params() {
  std::vector<SamplingParams> out;
  for (float t : {0.5f, 1.0f, 1.7f}) {
    for (int k : {0, 1, 5, 64, 3000}) {
      for (float top_p : {1.0f, 0.5f, 0.9f, 0.995f}) {
        for (float min_p : {0.0f, 0.05f}) {
          SamplingParams p;
          p.temperature = t;
          p.top_k = k;
          p.top_p = top_p;
          p.min_p = min_p;
          out.push_back(p);
        }
      }
    }
  }
  return out;
}

TEST(SampleLogits, TruncationSetsMatchTheCpu) {
  REQUIRE_GPU();
  std::mt19937 rng(12);
  for (int64_t vocab : kVocabs) {
    // Peaked rows (small top-p sets), flat rows (top-p sets beyond the shared-memory window, the
    // bit-search path), and bf16 rows (many ties: the index digits of the key decide).
    for (const auto& [dt, spread] : {std::pair{DType::kF32, 3.0f}, std::pair{DType::kF32, 0.3f},
                                     std::pair{DType::kBF16, 2.0f}}) {
      std::vector<Case> cases;
      for (const SamplingParams& p : truncation_params()) {
        Case c = with_history(p, vocab, rng);
        if (cases.size() % 4 == 1) c.params.repetition_penalty = 1.1f;  // processed rows too
        c.counter = cases.size();
        cases.push_back(c);
      }
      const std::vector<float> logits =
          random_logits(static_cast<int64_t>(cases.size()), vocab, dt, 9, spread);
      const GpuResult g = run_gpu_every_team(logits, dt, vocab, cases);
      // The CPU references (a full sort per row) on every core: the whole test binary has one
      // ctest timeout.
      std::vector<CpuSet> wants(cases.size());
      std::vector<std::future<void>> tasks;
      const size_t workers = std::max(1u, std::thread::hardware_concurrency());
      for (size_t w = 0; w < workers; ++w) {
        tasks.push_back(std::async(std::launch::async, [&, w] {
          for (size_t r = w; r < cases.size(); r += workers) {
            wants[r] =
                cpu_kept(cpu_processed(row_of(logits, vocab, static_cast<int64_t>(r)), cases[r]),
                         cases[r].params);
          }
        }));
      }
      for (auto& t : tasks) t.get();
      for (size_t r = 0; r < cases.size(); ++r) {
        const SamplingParams& p = cases[r].params;
        const CpuSet& want = wants[r];
        const std::vector<int32_t> got = kept_tokens(g, r, vocab);
        EXPECT_TRUE(same_kept_set(got, want))
            << "vocab " << vocab << " row " << r << " T " << p.temperature << " k " << p.top_k
            << " p " << p.top_p << " min_p " << p.min_p << " spread " << spread;
        EXPECT_TRUE(std::binary_search(got.begin(), got.end(), g.tokens[r]))
            << "drew a token outside the set, row " << r;
      }
    }
  }
}

// Top-p cut inside a run of equal logits: the order between them is the token id. With more than
// 2048 tokens in the bin of -log p where the prefix ends, the kernel falls back to its radix
// search by mass; with fewer, it sorts that bin alone.
TEST(SampleLogits, TopPCutsInsideTiedTokensAsTheCpu) {
  REQUIRE_GPU();
  const int64_t vocab = 151936;
  struct Row {
    int tied;  // tokens sharing the top logit (spread over the row); the rest is lower
    float top_p;
  };
  const Row shapes[] = {{151936, 0.5f}, {151936, 0.9f}, {5000, 0.3f},
                        {5000, 0.95f},  {1500, 0.7f},   {40000, 0.61f}};
  std::vector<Case> cases;
  std::vector<float> logits;
  std::mt19937 rng(17);
  std::normal_distribution<float> low(-6.0f, 1.0f);
  for (const Row& shape : shapes) {
    Case c;
    c.params.temperature = 1.0f;
    c.params.top_p = shape.top_p;
    c.counter = cases.size();
    cases.push_back(c);
    const int64_t step = vocab / shape.tied;
    for (int64_t v = 0; v < vocab; ++v)
      logits.push_back(v % step == 0 && v / step < shape.tied ? 2.0f : low(rng));
  }
  const GpuResult g = run_gpu_every_team(logits, DType::kF32, vocab, cases);
  for (size_t r = 0; r < cases.size(); ++r) {
    const CpuSet want = cpu_kept(
        cpu_processed(row_of(logits, vocab, static_cast<int64_t>(r)), cases[r]), cases[r].params);
    EXPECT_TRUE(same_kept_set(kept_tokens(g, r, vocab), want)) << "row " << r;
  }
}

// Top-k and the top-N logprobs inside long runs of equal logits. The kernel gathers the tokens at
// or above a lower bound on the k-th value and sorts them in shared memory; when more than 2,048
// tie there (a row of equal logits) it falls back to its radix select. Both give the CPU's set:
// the order among equal logits is the token id.
TEST(SampleLogits, TopKAndTopLogprobsAmongTiedTokensAsTheCpu) {
  REQUIRE_GPU();
  const int64_t vocab = 151936;
  struct Row {
    int tied;  // tokens sharing the top logit (spread over the row); the rest is lower
    int top_k;
    float top_p;
  };
  const Row shapes[] = {{151936, 50, 1.0f},  {151936, 50, 0.9f}, {3000, 50, 0.5f},
                        {3000, 1024, 1.0f},  {1500, 1025, 0.9f}, {40, 50, 1.0f},
                        {151936, 5000, 1.0f}};
  std::vector<Case> cases;
  std::vector<float> logits;
  std::mt19937 rng(23);
  std::normal_distribution<float> low(-6.0f, 1.0f);
  for (const Row& shape : shapes) {
    Case c;
    c.params.temperature = 1.0f;
    c.params.top_k = shape.top_k;
    c.params.top_p = shape.top_p;
    c.params.logprobs = 20;
    c.counter = cases.size();
    cases.push_back(c);
    const int64_t step = vocab / shape.tied;
    for (int64_t v = 0; v < vocab; ++v)
      logits.push_back(v % step == 0 && v / step < shape.tied ? 2.0f : low(rng));
  }
  const GpuResult g = run_gpu_every_team(logits, DType::kF32, vocab, cases);
  for (size_t r = 0; r < cases.size(); ++r) {
    const std::vector<float> raw = row_of(logits, vocab, static_cast<int64_t>(r));
    const CpuSet want = cpu_kept(cpu_processed(raw, cases[r]), cases[r].params);
    const std::vector<int32_t> got = kept_tokens(g, r, vocab);
    EXPECT_TRUE(same_kept_set(got, want)) << "row " << r;
    EXPECT_TRUE(std::binary_search(got.begin(), got.end(), g.tokens[r])) << "row " << r;
    std::vector<float> lp(raw.size());
    log_softmax(raw, lp);
    const std::vector<TokenLogprob> top = top_k_entries(lp, 20);
    for (size_t i = 0; i < top.size(); ++i)
      EXPECT_EQ(g.top_tokens[r * kMaxTopLogprobs + i], top[i].token) << "row " << r << " #" << i;
  }
}

TEST(SampleLogits, LogprobsMatchTheCpu) {
  REQUIRE_GPU();
  std::mt19937 rng(13);
  // Up to 262,144 tokens the normaliser rides along the first pass (by chunks of 256); past it a
  // second pass sums it.
  std::vector<int64_t> vocabs(std::begin(kVocabs), std::end(kVocabs));
  vocabs.push_back(262400);
  for (int64_t vocab : vocabs) {
    for (DType dt : {DType::kF32, DType::kBF16}) {
      std::vector<Case> cases;
      for (int n : {0, 1, 5, 20}) {
        for (float t : {0.0f, 1.0f}) {
          SamplingParams p;
          p.temperature = t;
          p.logprobs = n;
          p.top_k = 40;
          p.repetition_penalty = 1.5f;  // processors do not change the reported logprobs
          cases.push_back(with_history(p, vocab, rng));
        }
      }
      const std::vector<float> logits =
          random_logits(static_cast<int64_t>(cases.size()), vocab, dt, 21);
      const GpuResult g = run_gpu_every_team(logits, dt, vocab, cases);
      for (size_t r = 0; r < cases.size(); ++r) {
        const std::vector<float> raw = row_of(logits, vocab, static_cast<int64_t>(r));
        std::vector<float> lp(raw.size());
        log_softmax(raw, lp);
        const int32_t token = g.tokens[r];
        ASSERT_GE(token, 0);
        ASSERT_LT(token, vocab);
        EXPECT_NEAR(g.logprobs[r], lp[static_cast<size_t>(token)], 1e-4) << "row " << r;
        const int n = *cases[r].params.logprobs;
        const std::vector<TokenLogprob> want = top_k_entries(lp, n);
        for (size_t i = 0; i < want.size(); ++i) {
          const size_t at = r * kMaxTopLogprobs + i;
          EXPECT_NEAR(g.top_logprobs[at], want[i].logprob, 1e-4) << "row " << r << " #" << i;
          const int32_t t = g.top_tokens[at];
          ASSERT_GE(t, 0);
          ASSERT_LT(t, vocab);
          // The same entry (ties within rounding may swap which of two equal values comes first).
          EXPECT_NEAR(lp[static_cast<size_t>(t)], want[i].logprob, 1e-4) << "row " << r;
          if (dt == DType::kF32) {
            EXPECT_EQ(t, want[i].token) << "row " << r << " #" << i;
          }
        }
        // With n = 0 the list is not written (the caller reads num_logprobs entries).
        if (n > 0 && want.size() < static_cast<size_t>(kMaxTopLogprobs)) {
          EXPECT_EQ(g.top_tokens[r * kMaxTopLogprobs + want.size()], -1);
        }
      }
    }
  }
}

/// Pearson's statistic of observed counts against the probabilities `expected` (cells with zero
/// expectation count as a failure when observed).
double chi_square(const std::vector<int>& counts, const std::vector<double>& expected,
                  int64_t draws) {
  double chi2 = 0;
  for (size_t i = 0; i < counts.size(); ++i) {
    const double e = expected[i] * static_cast<double>(draws);
    if (e == 0) {
      if (counts[i] > 0) return INFINITY;
      continue;
    }
    chi2 += (counts[i] - e) * (counts[i] - e) / e;
  }
  return chi2;
}

/// Wilson-Hilferty: the chi-square quantile at p = 1e-4 for df degrees of freedom.
double chi_square_limit(int df) {
  const double z = 3.719;  // the normal quantile at 1 - 1e-4
  const double a = 2.0 / (9.0 * df);
  return df * std::pow(1 - a + z * std::sqrt(a), 3);
}

/// The tokens the GPU draws from `draws` copies of one row with the same parameters and seed,
/// counters 0, 1, ...: independent draws of one distribution.
std::vector<int32_t> draw_many(const std::vector<float>& row, const SamplingParams& p,
                               int64_t draws, uint64_t seed) {
  std::vector<Case> cases;
  std::vector<float> logits;
  logits.reserve(row.size() * static_cast<size_t>(draws));
  for (int64_t i = 0; i < draws; ++i) {
    Case c;
    c.params = p;
    c.seed = seed;
    c.counter = static_cast<uint64_t>(i);
    cases.push_back(c);
    logits.insert(logits.end(), row.begin(), row.end());
  }
  return run_gpu(logits, DType::kF32, static_cast<int64_t>(row.size()), cases).tokens;
}

/// The CPU's distribution of a row: its candidates' probabilities, renormalised, by token.
std::vector<double> cpu_distribution(const std::vector<float>& row, const SamplingParams& p) {
  std::vector<int32_t> order;
  std::vector<float> probs;
  const int32_t count = truncate_candidates(row, p, order, probs);
  std::vector<double> out(row.size(), 0.0);
  double mass = 0;
  for (int32_t i = 0; i < count; ++i) mass += probs[static_cast<size_t>(i)];
  for (int32_t i = 0; i < count; ++i)
    out[static_cast<size_t>(order[static_cast<size_t>(i)])] = probs[static_cast<size_t>(i)] / mass;
  return out;
}

TEST(SampleLogits, DrawsFollowTheTruncatedDistributionByChiSquare) {
  REQUIRE_GPU();
  const int64_t vocab = 48, draws = 60000;
  std::mt19937 rng(14);
  std::vector<float> row(static_cast<size_t>(vocab));
  std::normal_distribution<float> d(0.0f, 1.5f);
  for (auto& x : row) x = d(rng);
  struct Combo {
    float t;
    int k;
    float p, min_p;
  };
  for (const Combo& combo :
       {Combo{1.0f, 0, 1.0f, 0.0f}, Combo{0.7f, 10, 0.9f, 0.02f}, Combo{1.3f, 0, 0.8f, 0.0f},
        Combo{1.0f, 20, 1.0f, 0.1f}, Combo{2.0f, 30, 0.95f, 0.05f}, Combo{0.5f, 0, 1.0f, 0.01f}}) {
    SamplingParams p;
    p.temperature = combo.t;
    p.top_k = combo.k;
    p.top_p = combo.p;
    p.min_p = combo.min_p;
    std::vector<int> counts(static_cast<size_t>(vocab), 0);
    for (int32_t t : draw_many(row, p, draws, 99)) {
      ASSERT_GE(t, 0);
      ASSERT_LT(t, vocab);
      ++counts[static_cast<size_t>(t)];
    }
    const std::vector<double> expected = cpu_distribution(row, p);
    const int df = static_cast<int>(std::count_if(expected.begin(), expected.end(),
                                                  [](double e) { return e > 0; })) -
                   1;
    if (df < 1) continue;
    const double chi2 = chi_square(counts, expected, draws);
    EXPECT_LT(chi2, chi_square_limit(df))
        << "T " << combo.t << " k " << combo.k << " p " << combo.p << " min_p " << combo.min_p;
    // The test has power: the untruncated softmax at a somewhat different temperature fails it.
    std::vector<double> wrong(static_cast<size_t>(vocab));
    double z = 0;
    for (size_t i = 0; i < row.size(); ++i) z += wrong[i] = std::exp(row[i] / (combo.t * 1.25));
    for (auto& w : wrong) w /= z;
    EXPECT_GT(chi_square(counts, wrong, draws), chi_square_limit(static_cast<int>(vocab) - 1));
  }
}

// Rows with more kept tokens than the shared-memory list holds are drawn by rejection
// (sample_logits_list.cuh's draw_top_p: inverse CDF over the chunks' masses, accepted when the
// mass above the token is below the cut). 6,000 low tokens spread over two nats and a few distinct
// ones on top; the cells are the top tokens and the low ones together. The second vocabulary has
// more than 1024 chunks of 256 tokens, so that chunks of 512 are used.
TEST(SampleLogits, ManyKeptTokensDrawByTheirMassByChiSquare) {
  REQUIRE_GPU();
  struct Shape {
    int64_t vocab, draws;
    int top;
  };
  for (const Shape& shape : {Shape{8192, 20000, 30}, Shape{262400, 3000, 10}}) {
    const int64_t vocab = shape.vocab;
    const int top_n = shape.top, low_n = 6000;
    std::mt19937 rng(41);
    std::vector<float> row(static_cast<size_t>(vocab), -INFINITY);
    std::normal_distribution<float> top(0.0f, 1.0f);
    std::uniform_real_distribution<float> low(-7.0f, -5.0f);
    std::vector<int> cell(static_cast<size_t>(vocab), -1);  // token -> cell (top_n: the low ones)
    for (int i = 0; i < top_n + low_n; ++i) {
      const int64_t v = (static_cast<int64_t>(i) * 4099) % vocab;  // spread over the row
      row[static_cast<size_t>(v)] = i < top_n ? top(rng) : low(rng);
      cell[static_cast<size_t>(v)] = std::min(i, top_n);
    }
    struct Combo {
      float t, p;
    };
    for (const Combo& combo :
         {Combo{1.0f, 1.0f}, Combo{1.0f, 0.9f}, Combo{1.3f, 0.95f}, Combo{1.0f, 0.3f}}) {
      SamplingParams p;
      p.temperature = combo.t;
      p.top_p = combo.p;
      std::vector<int> counts(static_cast<size_t>(top_n) + 1, 0);
      for (int32_t tok : draw_many(row, p, shape.draws, 3)) {
        ASSERT_GE(tok, 0);
        ASSERT_LT(tok, vocab);
        ASSERT_GE(cell[static_cast<size_t>(tok)], 0) << "drew a masked token";
        ++counts[static_cast<size_t>(cell[static_cast<size_t>(tok)])];
      }
      std::vector<double> expected(static_cast<size_t>(top_n) + 1, 0.0);
      const std::vector<double> by_token = cpu_distribution(row, p);
      for (size_t v = 0; v < by_token.size(); ++v)
        if (by_token[v] > 0) expected[static_cast<size_t>(cell[v])] += by_token[v];
      if (combo.p >= 0.9f) EXPECT_GT(expected[static_cast<size_t>(top_n)], 0.05) << "low tokens";
      const int df = static_cast<int>(std::count_if(expected.begin(), expected.end(),
                                                    [](double e) { return e > 0; })) -
                     1;
      if (df < 1) continue;
      const double chi2 = chi_square(counts, expected, shape.draws);
      EXPECT_LT(chi2, chi_square_limit(df))
          << "vocab " << vocab << " T " << combo.t << " p " << combo.p;
    }
  }
}

TEST(SampleLogits, DrawsDependOnSeedAndCounterOnly) {
  REQUIRE_GPU();
  const int64_t vocab = 32000;
  const std::vector<float> row = random_logits(1, vocab, DType::kF32, 31, 1.0f);
  SamplingParams p;
  p.temperature = 1.0f;
  p.top_k = 500;
  p.top_p = 0.95f;
  // Batch A: (seed, counter) pairs in one order; batch B: the same pairs reversed, among others.
  std::vector<Case> a, b;
  for (int i = 0; i < 16; ++i) {
    Case c;
    c.params = p;
    c.seed = 1000 + static_cast<uint64_t>(i % 4);
    c.counter = static_cast<uint64_t>(i);
    a.push_back(c);
  }
  for (int i = 15; i >= 0; --i) {
    Case filler;
    filler.params = p;
    filler.seed = 5;
    filler.counter = static_cast<uint64_t>(100 + i);
    b.push_back(filler);
    b.push_back(a[static_cast<size_t>(i)]);
  }
  std::vector<float> la, lb;
  for (size_t i = 0; i < a.size(); ++i) la.insert(la.end(), row.begin(), row.end());
  for (size_t i = 0; i < b.size(); ++i) lb.insert(lb.end(), row.begin(), row.end());
  const GpuResult ga = run_gpu(la, DType::kF32, vocab, a);
  const GpuResult gb = run_gpu(lb, DType::kF32, vocab, b);
  std::set<int32_t> distinct;
  for (int i = 0; i < 16; ++i) {
    EXPECT_EQ(ga.tokens[static_cast<size_t>(i)], gb.tokens[static_cast<size_t>(2 * (15 - i) + 1)])
        << i;
    distinct.insert(ga.tokens[static_cast<size_t>(i)]);
  }
  EXPECT_GT(distinct.size(), 4u) << "different counters should draw different tokens";
}

TEST(SampleLogits, SkippedRowsAreLeftAlone) {
  REQUIRE_GPU();
  const int64_t vocab = 512;
  const std::vector<float> logits = random_logits(1, vocab, DType::kF32, 3);
  SamplingRow row;
  row.skip = 1;
  DeviceBuffer d_logits = to_device(logits), d_params = to_device(std::vector<SamplingRow>{row});
  DeviceBuffer work(static_cast<size_t>(vocab) * 4), tokens(4);
  cudaMemset(tokens.get(), 0xff, 4);
  SampleLogitsArgs a;
  a.logits = d_logits.get();
  a.rows = 1;
  a.vocab = vocab;
  a.params = d_params.as<SamplingRow>();
  a.workspace = work.as<float>();
  a.tokens = tokens.as<int32_t>();
  CUDA_OK(sample_logits(a, nullptr));
  CUDA_OK(cudaDeviceSynchronize());
  EXPECT_EQ(to_host<int32_t>(tokens, 1)[0], -1);
}

TEST(SampleLogits, RejectsATeamSizeItCannotRun) {
  REQUIRE_GPU();
  SampleLogitsArgs a;
  a.rows = 1;
  a.vocab = 512;
  for (int team : {-1, 3, 16}) {
    a.team = team;
    EXPECT_EQ(sample_logits(a, nullptr), cudaErrorInvalidValue) << team;
  }
}

}  // namespace
}  // namespace pagoda::cuda
