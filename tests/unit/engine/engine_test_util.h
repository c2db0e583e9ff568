#pragma once
// Helpers shared by the engine tests on the CPU (engine_test.cc) and the GPU (engine_gpu_test.cc):
// small engines on stories260K, greedy requests, a random workload and its run in waves.
#include <chrono>
#include <cstdio>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include <gtest/gtest.h>

#include "engine/engine_core.h"
#include "pagoda/llm.h"

namespace pagoda::engine_test {

inline const std::string kStories = std::string(PAGODA_SOURCE_DIR) + "/models/stories260K";

/// An engine on stories260K (or `model`) with a small KV cache. The CPU tests pin device "cpu" so
/// that their exact expectations hold on the device machine too.
inline EngineArgs small_engine(int budget = 2048, bool prefix_caching = true,
                               int64_t kv_bytes = 64 << 20, const std::string& device = "cpu",
                               const std::string& model = kStories) {
  EngineArgs args;
  args.model = model;
  args.device = device;
  args.num_threads = 2;
  args.max_num_batched_tokens = budget;
  args.enable_prefix_caching = prefix_caching;
  args.kv_cache_memory_bytes = kv_bytes;
  return args;
}

inline SamplingParams greedy(int max_tokens, int logprobs = 0) {
  SamplingParams p;
  p.temperature = 0;
  p.max_tokens = max_tokens;
  p.ignore_eos = true;
  if (logprobs > 0) p.logprobs = logprobs;
  return p;
}

struct Workload {
  std::vector<std::vector<int32_t>> prompts;
  std::vector<int> max_tokens;
};

/// 64 requests of random lengths; some share long prefixes so that prefix caching has work.
inline Workload make_workload(uint32_t seed) {
  std::mt19937 rng(seed);
  Workload w;
  std::vector<int32_t> shared;
  for (int i = 0; i < 40; ++i) shared.push_back(3 + static_cast<int32_t>(rng() % 500));
  for (int i = 0; i < 64; ++i) {
    std::vector<int32_t> p{1};
    if (i % 4 == 0)
      p.insert(p.end(), shared.begin(), shared.begin() + 20 + static_cast<int>(rng() % 20));
    const int len = 1 + static_cast<int>(rng() % 60);
    for (int j = 0; j < len; ++j) p.push_back(3 + static_cast<int32_t>(rng() % 500));
    w.prompts.push_back(std::move(p));
    w.max_tokens.push_back(1 + static_cast<int>(rng() % 40));
  }
  return w;
}

/// Runs the workload with requests arriving in random waves while the engine is stepping; returns
/// each request's completion (with `logprobs` top entries per token when > 0).
inline std::vector<CompletionOutput> run_batched_outputs(EngineCore& engine, const Workload& w,
                                                         uint32_t seed, int logprobs = 0) {
  std::mt19937 rng(seed);
  std::vector<std::shared_ptr<OutputStream>> streams;
  for (size_t i = 0; i < w.prompts.size(); ++i) {
    EngineRequest r;
    r.prompt_token_ids = w.prompts[i];
    r.params = greedy(w.max_tokens[i], logprobs);
    streams.push_back(engine.submit(std::move(r)));
    if (rng() % 8 == 0) std::this_thread::sleep_for(std::chrono::microseconds(200 + rng() % 2000));
  }
  std::vector<CompletionOutput> out;
  for (auto& s : streams) {
    const GenerateResult r = collect_result(*s);
    EXPECT_EQ(r.outputs.size(), 1u);
    EXPECT_EQ(r.outputs[0].finish_reason, FinishReason::kLength);
    out.push_back(r.outputs.at(0));
  }
  return out;
}

/// Each request of the workload alone, one after the other (the batch-invariance reference).
inline std::vector<CompletionOutput> run_alone(EngineCore& engine, const Workload& w,
                                               int logprobs = 0) {
  std::vector<CompletionOutput> out;
  for (size_t i = 0; i < w.prompts.size(); ++i) {
    EngineRequest r;
    r.prompt_token_ids = w.prompts[i];
    r.params = greedy(w.max_tokens[i], logprobs);
    out.push_back(collect_result(*engine.submit(std::move(r))).outputs.at(0));
  }
  return out;
}

// vLLM's check_logprobs_close rule for GPU runs (bf16 roundings differ between kernel paths): the
// tokens are equal until the first divergence, where each side's token is in the other's top-k;
// the log-probabilities of equal tokens are within `tolerance`.
inline bool in_top(const TokenLogprobs& t, int32_t id) {
  for (const auto& [token, lp] : t.top)
    if (token == id) return true;
  return false;
}

/// check_logprobs_close on two completions of one request; returns whether they diverged.
inline bool expect_close(const CompletionOutput& ref, const CompletionOutput& got, double tolerance,
                         const std::string& what) {
  SCOPED_TRACE(what);
  EXPECT_EQ(got.token_ids.size(), ref.token_ids.size());
  EXPECT_EQ(ref.logprobs.size(), ref.token_ids.size());
  EXPECT_EQ(got.logprobs.size(), got.token_ids.size());
  const size_t n = std::min(
      {ref.token_ids.size(), got.token_ids.size(), ref.logprobs.size(), got.logprobs.size()});
  for (size_t step = 0; step < n; ++step) {
    const int32_t a = ref.token_ids[step], b = got.token_ids[step];
    if (a == b) {
      EXPECT_NEAR(got.logprobs[step].logprob, ref.logprobs[step].logprob, tolerance)
          << "step " << step << " token " << a;
      continue;
    }
    EXPECT_TRUE(in_top(ref.logprobs[step], b))
        << "step " << step << ": token " << b << " not in the reference top-k";
    EXPECT_TRUE(in_top(got.logprobs[step], a))
        << "step " << step << ": reference token " << a << " not in the top-k";
    return true;
  }
  return false;
}

/// Compares a whole workload; prints how many requests diverged (allowed by the rule).
inline void expect_workload_close(const std::vector<CompletionOutput>& ref,
                                  const std::vector<CompletionOutput>& got, double tolerance,
                                  const std::string& what) {
  ASSERT_EQ(got.size(), ref.size());
  int diverged = 0;
  for (size_t i = 0; i < ref.size(); ++i)
    diverged += expect_close(ref[i], got[i], tolerance, what + " request " + std::to_string(i));
  std::printf("%s: %d of %zu requests diverged at a near-tie (check_logprobs_close)\n",
              what.c_str(), diverged, ref.size());
}

/// Each request alone (so that every step has the same rows in both runs), then their outputs.
inline std::vector<CompletionOutput> run_alone(EngineCore& engine,
                                               const std::vector<EngineRequest>& rs) {
  std::vector<CompletionOutput> out;
  for (const EngineRequest& r : rs) out.push_back(collect_result(*engine.submit(r)).outputs.at(0));
  return out;
}

inline void expect_identical(const std::vector<CompletionOutput>& a,
                             const std::vector<CompletionOutput>& b) {
  ASSERT_EQ(a.size(), b.size());
  for (size_t i = 0; i < a.size(); ++i) {
    ASSERT_EQ(a[i].token_ids, b[i].token_ids) << "request " << i;
    ASSERT_EQ(a[i].logprobs.size(), b[i].logprobs.size());
    for (size_t t = 0; t < a[i].logprobs.size(); ++t) {
      EXPECT_EQ(a[i].logprobs[t].logprob, b[i].logprobs[t].logprob) << i << " token " << t;
      EXPECT_EQ(a[i].logprobs[t].top, b[i].logprobs[t].top) << i << " token " << t;
    }
  }
}

/// The requests run alone on an in-process engine and on one with a worker process (the
/// speculating args given): their outputs are identical, and both engines drafted.
inline void expect_speculation_same_in_process_and_worker(EngineArgs args,
                                                          const std::vector<EngineRequest>& rs) {
  std::vector<CompletionOutput> out[2];
  for (int mp = 0; mp < 2; ++mp) {
    args.distributed_executor_backend = mp == 1 ? "mp" : "uni";
    EngineCore engine(args);
    out[mp] = run_alone(engine, rs);
    EXPECT_GT(engine.stats().spec_decode_num_drafts, 0);
  }
  expect_identical(out[0], out[1]);
}

/// One line of a speculative run's counters against plain decoding's steps.
inline void print_speculation(const char* what, const EngineStats& s, int64_t plain_steps) {
  std::printf(
      "%s: %lld verifications, %lld of %lld drafts accepted (%.1f%%), mean acceptance length "
      "%.2f, %lld steps (plain decoding: %lld)\n",
      what, static_cast<long long>(s.spec_decode_num_drafts),
      static_cast<long long>(s.spec_decode_num_accepted_tokens),
      static_cast<long long>(s.spec_decode_num_draft_tokens),
      s.spec_decode_num_draft_tokens > 0
          ? 100.0 * static_cast<double>(s.spec_decode_num_accepted_tokens) /
                static_cast<double>(s.spec_decode_num_draft_tokens)
          : 0.0,
      s.spec_decode_num_drafts > 0 ? 1.0 + static_cast<double>(s.spec_decode_num_accepted_tokens) /
                                               static_cast<double>(s.spec_decode_num_drafts)
                                   : 1.0,
      static_cast<long long>(s.num_steps), static_cast<long long>(plain_steps));
}

/// A prompt of n ids from the small test vocabulary: 1, then a seeded walk over 3..502 (the KV
/// transfer and host-tier tests: distinct seeds give prompts that share only the first token).
inline std::vector<int32_t> prompt_of(int n, int32_t seed) {
  std::vector<int32_t> p{1};
  for (int i = 1; i < n; ++i) p.push_back(3 + (seed * 131 + i * 17) % 500);
  return p;
}

/// A KV transport by name, with the UCX transports to use when it is "ucx": the parameter of the
/// P/D suites, which run over each of kv_transports().
struct KVTransport {
  const char* name;
  const char* ucx_tls;
};
inline auto kv_transports() {
  return ::testing::Values(KVTransport{"tcp", ""}, KVTransport{"ucx", "tcp"});
}
inline std::string kv_transport_name(const ::testing::TestParamInfo<KVTransport>& info) {
  return info.param.name;
}

}  // namespace pagoda::engine_test
