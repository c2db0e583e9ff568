// Beam search: the search's rules on hand-made rows (BeamSearch), and the engine's beam search on
// stories260K against a reference written here from transformers' vectorised _beam_search (the
// tensors of its loop, -1e9 sentinels and all), run by brute force: every beam's whole sequence
// through the CPU model at every step. Tokens must be equal and scores within 1e-4. Then the KV
// cache: blocks shared by the beams (fewer than beams x length), usage back to zero, preemption,
// chunked prefill, abort. To add a case: add a Case to kCases.
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <map>
#include <numeric>
#include <thread>
#include <tuple>

#include "core/status.h"
#include "core/thread_pool.h"
#include "engine/beam_search.h"
#include "engine/engine_core.h"
#include "engine_test_util.h"
#include "model/model.h"
#include "pagoda/llm.h"
#include "sampling/sampler.h"

namespace pagoda {
namespace {

using engine_test::kStories;
using engine_test::small_engine;

// ---- The search alone ----

// The worked example of beam_search.h.
TEST(BeamSearch, WorkedExampleFinishesTheStopTokenAndKeepsTwoBeams) {
  BeamSearch search(BeamSearchOptions{2, 1.0f, EarlyStopping::kFalse, 8, 1});
  // Tokens: 0 = a, 1 = b, 2 = E (stop), 3 = c, 4 = d. First a step to [a] with sum -1.
  std::vector<float> first{-1.0f, -2.0f, -9.0f, -9.0f, -9.0f};
  std::vector<std::span<const float>> rows{first};
  auto c = search.candidates(rows);
  std::vector<std::optional<BeamEnd>> ends(c.size());
  auto next = search.advance(c, ends);
  ASSERT_EQ(next.size(), 2u);
  EXPECT_EQ(search.live()[0].tokens, std::vector<int32_t>{0});
  // Keep only [a] live for the example: one row for each live beam, [a b] ...
  std::vector<float> row_a{-9.0f, -0.1f, -0.2f, -0.5f, -2.0f};
  std::vector<float> row_b{-20.0f, -20.0f, -20.0f, -20.0f, -20.0f};
  rows = {row_a, row_b};
  c = search.candidates(rows);
  ASSERT_EQ(c.size(), 4u);
  EXPECT_EQ(c[1].token, 2);
  ends.assign(c.size(), std::nullopt);
  ends[1] = BeamEnd{FinishReason::kStop, ""};
  next = search.advance(c, ends);
  ASSERT_EQ(next.size(), 2u);
  EXPECT_EQ(search.live()[0].tokens, (std::vector<int32_t>{0, 1}));
  EXPECT_EQ(search.live()[1].tokens, (std::vector<int32_t>{0, 3}));
  ASSERT_EQ(search.finished().size(), 1u);
  EXPECT_FLOAT_EQ(search.finished()[0].score, -1.2f / 2);
  EXPECT_FALSE(search.done());
}

TEST(BeamSearch, EndsAtMaxTokensWithWidthHypothesesBestFirst) {
  BeamSearch search(BeamSearchOptions{3, 1.0f, EarlyStopping::kFalse, 1, 0});
  std::vector<float> row{-3.0f, -1.0f, -2.0f, -0.5f};
  std::vector<std::span<const float>> rows{row};
  const auto c = search.candidates(rows);
  std::vector<std::optional<BeamEnd>> ends(c.size());
  EXPECT_TRUE(search.advance(c, ends).empty());
  EXPECT_TRUE(search.done());
  ASSERT_EQ(search.finished().size(), 3u);
  EXPECT_EQ(search.finished()[0].tokens, std::vector<int32_t>{3});
  EXPECT_EQ(search.finished()[1].tokens, std::vector<int32_t>{1});
  EXPECT_EQ(search.finished()[2].tokens, std::vector<int32_t>{2});
  EXPECT_EQ(search.finished()[0].end.reason, FinishReason::kLength);
}

// ---- The reference: transformers' loop on the CPU model, by brute force ----

/// Next-token log-softmax rows of whole sequences through stories260K, memoised.
class Oracle {
 public:
  Oracle() : pool_(1), model_(load_model(kStories, LoadOptions{}, pool_)) {
    model_->init_kv_cache(kBlocks + 1, kBlockSize);
  }
  const std::vector<float>& row(const std::vector<int32_t>& tokens) {
    auto it = memo_.find(tokens);
    if (it != memo_.end()) return it->second;
    const auto n = static_cast<int32_t>(tokens.size());
    PAGODA_CHECK(n <= kBlocks * kBlockSize, "oracle: {} tokens", n);
    std::vector<int32_t> positions(static_cast<size_t>(n)), table(kBlocks);
    std::vector<int64_t> slots(static_cast<size_t>(n));
    std::iota(positions.begin(), positions.end(), 0);
    std::iota(table.begin(), table.end(), 1);
    for (int32_t i = 0; i < n; ++i) {
      slots[static_cast<size_t>(i)] =
          int64_t{table[static_cast<size_t>(i / kBlockSize)]} * kBlockSize + i % kBlockSize;
    }
    const std::vector<int32_t> qsl{0, n}, lens{n}, rows{n - 1};
    ForwardBatch batch{tokens, positions, qsl, lens, table, kBlocks, slots, rows};
    const std::span<float> logits = model_->forward(batch);
    std::vector<float> lp(logits.size());
    log_softmax(logits, lp);
    return memo_.emplace(tokens, std::move(lp)).first->second;
  }

 private:
  static constexpr int kBlockSize = 16;
  static constexpr int kBlocks = 16;
  ThreadPool pool_;
  std::unique_ptr<Model> model_;
  std::map<std::vector<int32_t>, std::vector<float>> memo_;
};

struct RefHypothesis {
  std::vector<int32_t> tokens;  // generated, the end token included
  float score = 0;
  float sum = 0;
};

struct Case {
  std::vector<int32_t> prompt;
  int width = 2;
  float length_penalty = 1.0f;
  EarlyStopping early_stopping = EarlyStopping::kFalse;
  int max_tokens = 10;
  std::vector<int32_t> stop_token_ids;  // with EOS (2): transformers' eos_token_id list
};

// transformers' _beam_search for one prompt, tensor by tensor: W running slots (slot 0 at score
// 0, the others at -1e9), K = max(2, 1 + n_eos) * W continuations per step, W finished slots at
// -1e9 until filled. Worked example of a step's index: with W = 2 and vocab V, flat candidate
// index 5 + V is slot 1's token 5.
std::vector<RefHypothesis> reference_beam_search(Oracle& oracle, const Case& c) {
  constexpr float kBig = 1.0e9f;
  const int w = c.width;
  std::vector<int32_t> eos = c.stop_token_ids;
  eos.push_back(2);
  std::sort(eos.begin(), eos.end());
  eos.erase(std::unique(eos.begin(), eos.end()), eos.end());
  const int k = std::max(2, 1 + static_cast<int>(eos.size())) * w;
  std::vector<std::vector<int32_t>> running(static_cast<size_t>(w));
  std::vector<float> running_score(static_cast<size_t>(w), -kBig);
  running_score[0] = 0;
  std::vector<std::vector<int32_t>> fin(static_cast<size_t>(w));
  std::vector<float> fin_score(static_cast<size_t>(w), -kBig), fin_sum(static_cast<size_t>(w), 0);
  std::vector<bool> fin_done(static_cast<size_t>(w), false);
  bool unsatisfied = true;
  int gen = 0;
  for (;;) {
    // Accumulated log-probabilities of every (slot, token), flattened.
    std::vector<std::pair<float, int64_t>> acc;
    int64_t vocab = 0;
    for (int b = 0; b < w; ++b) {
      std::vector<int32_t> seq = c.prompt;
      seq.insert(seq.end(), running[static_cast<size_t>(b)].begin(),
                 running[static_cast<size_t>(b)].end());
      const std::vector<float>& row = oracle.row(seq);
      vocab = static_cast<int64_t>(row.size());
      for (int64_t t = 0; t < vocab; ++t) {
        acc.emplace_back(running_score[static_cast<size_t>(b)] + row[static_cast<size_t>(t)],
                         b * vocab + t);
      }
    }
    auto desc = [](const auto& x, const auto& y) {
      return x.first != y.first ? x.first > y.first : x.second < y.second;
    };
    std::partial_sort(acc.begin(), acc.begin() + k, acc.end(), desc);
    acc.resize(static_cast<size_t>(k));
    std::vector<bool> hits(static_cast<size_t>(k));
    std::vector<std::vector<int32_t>> seqs(static_cast<size_t>(k));
    for (int j = 0; j < k; ++j) {
      const auto slot = static_cast<size_t>(acc[static_cast<size_t>(j)].second / vocab);
      const auto token = static_cast<int32_t>(acc[static_cast<size_t>(j)].second % vocab);
      seqs[static_cast<size_t>(j)] = running[slot];
      seqs[static_cast<size_t>(j)].push_back(token);
      hits[static_cast<size_t>(j)] =
          std::binary_search(eos.begin(), eos.end(), token) || gen + 1 >= c.max_tokens;
    }
    // Running slots for the next step: the top W with the ended ones pushed down by 1e9.
    std::vector<std::pair<float, int64_t>> run;
    for (int j = 0; j < k; ++j) {
      run.emplace_back(
          acc[static_cast<size_t>(j)].first - (hits[static_cast<size_t>(j)] ? kBig : 0), j);
    }
    std::stable_sort(run.begin(), run.end(), desc);
    // Finished slots: the new ones (top-W ranks that ended) merged with the old, best W kept.
    const bool all_fin = std::all_of(fin_done.begin(), fin_done.end(), [](bool x) { return x; });
    std::vector<std::tuple<float, bool, std::vector<int32_t>, float>> merged;
    for (int b = 0; b < w; ++b) {
      merged.emplace_back(fin_score[static_cast<size_t>(b)], fin_done[static_cast<size_t>(b)],
                          fin[static_cast<size_t>(b)], fin_sum[static_cast<size_t>(b)]);
    }
    for (int j = 0; j < k; ++j) {
      const bool just = hits[static_cast<size_t>(j)] && j < w;
      float s = acc[static_cast<size_t>(j)].first /
                static_cast<float>(std::pow(static_cast<double>(gen + 1), c.length_penalty));
      if (all_fin && c.early_stopping == EarlyStopping::kTrue) s -= kBig;
      if (!unsatisfied) s -= kBig;
      if (!just) s -= kBig;
      merged.emplace_back(s, just, seqs[static_cast<size_t>(j)], acc[static_cast<size_t>(j)].first);
    }
    std::stable_sort(merged.begin(), merged.end(),
                     [](const auto& x, const auto& y) { return std::get<0>(x) > std::get<0>(y); });
    for (int b = 0; b < w; ++b) {
      const auto& m = merged[static_cast<size_t>(b)];
      fin_score[static_cast<size_t>(b)] = std::get<0>(m);
      fin_done[static_cast<size_t>(b)] = std::get<1>(m);
      fin[static_cast<size_t>(b)] = std::get<2>(m);
      fin_sum[static_cast<size_t>(b)] = std::get<3>(m);
    }
    std::vector<std::vector<int32_t>> next_running;
    for (int b = 0; b < w; ++b) {
      const auto j = static_cast<size_t>(run[static_cast<size_t>(b)].second);
      next_running.push_back(seqs[j]);
      running_score[static_cast<size_t>(b)] = run[static_cast<size_t>(b)].first;
    }
    running = std::move(next_running);
    ++gen;
    // The early-stop heuristic, then the loop's three conditions.
    const int length =
        c.early_stopping == EarlyStopping::kNever && c.length_penalty > 0 ? c.max_tokens : gen;
    const float best = running_score[0] /
                       static_cast<float>(std::pow(static_cast<double>(length), c.length_penalty));
    const float worst = *std::min_element(fin_score.begin(), fin_score.end());
    bool improvable = false;
    for (int b = 0; b < w; ++b)
      improvable |= best > (fin_done[static_cast<size_t>(b)] ? worst : -kBig);
    unsatisfied = unsatisfied && improvable;
    const bool all_done = std::all_of(fin_done.begin(), fin_done.end(), [](bool x) { return x; });
    const bool open = !(all_done && c.early_stopping == EarlyStopping::kTrue);
    const bool valid = !std::all_of(hits.begin(), hits.end(), [](bool x) { return x; });
    if (!(unsatisfied && open && valid)) break;
  }
  std::vector<RefHypothesis> out;
  for (int b = 0; b < w; ++b) {
    out.push_back({fin[static_cast<size_t>(b)], fin_score[static_cast<size_t>(b)],
                   fin_sum[static_cast<size_t>(b)]});
  }
  return out;
}

EngineRequest beam_request(const Case& c) {
  EngineRequest r;
  r.prompt_token_ids = c.prompt;
  r.params.use_beam_search = true;
  r.params.n = c.width;
  r.params.length_penalty = c.length_penalty;
  r.params.early_stopping = c.early_stopping;
  r.params.max_tokens = c.max_tokens;
  r.params.temperature = 0;
  r.params.stop_token_ids = c.stop_token_ids;
  return r;
}

void expect_equal(const std::vector<RefHypothesis>& ref, const GenerateResult& got,
                  const std::string& what) {
  SCOPED_TRACE(what);
  ASSERT_EQ(got.outputs.size(), ref.size());
  for (size_t i = 0; i < ref.size(); ++i) {
    const CompletionOutput& o = got.outputs[i];
    EXPECT_EQ(o.index, static_cast<int>(i));
    EXPECT_EQ(o.token_ids, ref[i].tokens) << "choice " << i;
    ASSERT_TRUE(o.beam_score.has_value() && o.cumulative_logprob.has_value());
    EXPECT_NEAR(*o.beam_score, ref[i].score, 1e-4) << "choice " << i;
    EXPECT_NEAR(*o.cumulative_logprob, ref[i].sum, 1e-4) << "choice " << i;
  }
}

// Stop tokens that stories260K generates often: "." and ",".
const std::vector<int32_t> kStops = {426, 432};

std::vector<Case> cases() {
  const std::vector<int32_t> p1{1, 403, 407, 261, 378};  // "Once upon a time"
  const std::vector<int32_t> p2{1, 365, 480, 261, 400, 310};
  const std::vector<int32_t> p3{1, 320, 412, 292};
  std::vector<Case> out;
  for (int w : {1, 2, 3, 4}) out.push_back({p1, w, 1.0f, EarlyStopping::kFalse, 10, {}});
  for (float lp : {0.5f, 2.0f}) out.push_back({p2, 3, lp, EarlyStopping::kFalse, 12, kStops});
  out.push_back({p1, 4, 1.0f, EarlyStopping::kTrue, 12, kStops});
  out.push_back({p3, 2, 1.0f, EarlyStopping::kTrue, 12, kStops});
  out.push_back({p3, 3, 2.0f, EarlyStopping::kNever, 9, kStops});
  out.push_back({p2, 4, 0.5f, EarlyStopping::kNever, 9, kStops});
  out.push_back({p1, 2, 1.0f, EarlyStopping::kFalse, 1, kStops});
  return out;
}

TEST(EngineBeamSearch, EqualsTransformersRulesNextToSampledRequests) {
  Oracle oracle;
  EngineCore engine(small_engine(/*budget=*/64));
  const std::vector<Case> all = cases();
  std::vector<std::shared_ptr<OutputStream>> streams;
  std::vector<std::shared_ptr<OutputStream>> sampled;
  for (size_t i = 0; i < all.size(); ++i) {
    streams.push_back(engine.submit(beam_request(all[i])));
    EngineRequest r;  // a sampled request between the beam groups
    r.prompt_token_ids = {1, static_cast<int32_t>(300 + i), 261};
    r.params.temperature = 1.0f;
    r.params.max_tokens = 20;
    sampled.push_back(engine.submit(std::move(r)));
  }
  int stopped = 0;
  for (size_t i = 0; i < all.size(); ++i) {
    const GenerateResult got = collect_result(*streams[i]);
    expect_equal(reference_beam_search(oracle, all[i]), got, "case " + std::to_string(i));
    for (const CompletionOutput& o : got.outputs) stopped += o.finish_reason == FinishReason::kStop;
  }
  for (auto& s : sampled) EXPECT_EQ(collect_result(*s).outputs.at(0).token_ids.size(), 20u);
  EXPECT_GT(stopped, 4);  // the stop tokens did end hypotheses
  EXPECT_EQ(engine.stats().kv_cache_usage, 0.0);
}

TEST(EngineBeamSearch, StopStringsEndBeamsAndAreCutFromTheText) {
  EngineCore engine(small_engine());
  Case c{{1, 403, 407, 261, 378}, 3, 1.0f, EarlyStopping::kFalse, 16, {}};
  EngineRequest r = beam_request(c);
  r.params.stop = {" the"};
  const GenerateResult got = collect_result(*engine.submit(r));
  ASSERT_EQ(got.outputs.size(), 3u);
  int by_string = 0;
  for (const CompletionOutput& o : got.outputs) {
    EXPECT_EQ(o.text.find(" the"), std::string::npos) << o.text;
    if (o.finish_reason == FinishReason::kStop) {
      EXPECT_EQ(o.stop_reason, " the");
      ++by_string;
    }
  }
  EXPECT_GT(by_string, 0);
  for (size_t i = 1; i < got.outputs.size(); ++i)
    EXPECT_GE(*got.outputs[i - 1].beam_score, *got.outputs[i].beam_score);
  EXPECT_EQ(engine.stats().kv_cache_usage, 0.0);
}

// Forks share blocks: a long prompt's blocks are held once by all the beams, not once per beam.
TEST(EngineBeamSearch, BeamsShareThePromptBlocksAndFreeThemAll) {
  for (bool prefix_caching : {false, true}) {
    SCOPED_TRACE(prefix_caching ? "prefix caching" : "no prefix caching");
    EngineCore* engine_ptr = nullptr;
    std::atomic<double> peak{0};
    EngineArgs args = small_engine(2048, prefix_caching);
    args.fault_hook = [&](RequestStage stage, const std::string&) {
      if (stage != RequestStage::kSchedule || engine_ptr == nullptr) return;
      const double usage = engine_ptr->stats().kv_cache_usage;
      if (usage > peak.load()) peak.store(usage);
    };
    EngineCore engine(args);
    engine_ptr = &engine;
    std::vector<int32_t> prompt{1};
    for (int i = 0; i < 110; ++i) prompt.push_back(3 + (i * 37) % 500);
    const Case c{prompt, 4, 1.0f, EarlyStopping::kFalse, 12, {}};
    const GenerateResult got = collect_result(*engine.submit(beam_request(c)));
    ASSERT_EQ(got.outputs.size(), 4u);
    const double blocks = peak.load() * static_cast<double>(engine.cache_info().num_blocks - 1);
    // Unshared, 4 beams of 111 + 11 tokens would hold 4 x 8 blocks of 16.
    EXPECT_GT(blocks, 7.5);
    EXPECT_LT(blocks, 4 * 8 - 8);
    EXPECT_EQ(engine.stats().kv_cache_usage, 0.0);
    engine_ptr = nullptr;
  }
}

// A KV pool of a few blocks, chunked prefill, two running slots for groups of four beams: the
// groups preempt and recompute beams, and give what they give alone.
TEST(EngineBeamSearch, PreemptionChunksAndFewSlotsGiveTheSameBeams) {
  const std::vector<Case> all = cases();
  std::vector<GenerateResult> alone;
  {
    EngineCore engine(small_engine());
    for (size_t i = 0; i < 6; ++i)
      alone.push_back(collect_result(*engine.submit(beam_request(all[i]))));
  }
  EngineArgs args = small_engine(/*budget=*/3, /*prefix_caching=*/true, /*kv_bytes=*/14 * 20480);
  args.max_model_len = 64;
  args.max_num_seqs = 3;
  EngineCore engine(args);
  std::vector<std::shared_ptr<OutputStream>> streams;
  for (size_t i = 0; i < 6; ++i) streams.push_back(engine.submit(beam_request(all[i])));
  for (size_t i = 0; i < 6; ++i) {
    const GenerateResult got = collect_result(*streams[i]);
    ASSERT_EQ(got.outputs.size(), alone[i].outputs.size());
    for (size_t j = 0; j < got.outputs.size(); ++j) {
      EXPECT_EQ(got.outputs[j].token_ids, alone[i].outputs[j].token_ids) << i << " " << j;
      EXPECT_NEAR(*got.outputs[j].beam_score, *alone[i].outputs[j].beam_score, 1e-4);
    }
  }
  EXPECT_GT(engine.stats().num_preemptions, 0);
  EXPECT_EQ(engine.stats().kv_cache_usage, 0.0);
}

TEST(EngineBeamSearch, AbortEndsEveryChoiceAndFreesTheBlocks) {
  EngineCore engine(small_engine());
  Case c{{1, 403, 407}, 4, 1.0f, EarlyStopping::kNever, 300, {}};
  EngineRequest r = beam_request(c);
  r.request_id = "beams";
  r.params.ignore_eos = true;
  auto stream = engine.submit(std::move(r));
  // Bounded by progress: the group forks within its first steps.
  for (int i = 0; i < 20000 && engine.stats().num_running < 2; ++i)
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  ASSERT_GE(engine.stats().num_running, 2);
  engine.abort("beams");
  const GenerateResult got = collect_result(*stream);
  ASSERT_EQ(got.outputs.size(), 4u);
  for (const CompletionOutput& o : got.outputs) EXPECT_EQ(o.finish_reason, FinishReason::kAbort);
  EXPECT_EQ(engine.stats().kv_cache_usage, 0.0);
}

// An error inside one group's search step fails that request alone.
TEST(EngineBeamSearch, AFailingGroupFailsAloneNextToAnotherGroup) {
  EngineArgs args = small_engine();
  args.fault_hook = [](RequestStage stage, const std::string& id) {
    if (stage == RequestStage::kSample && id == "bad") throw std::runtime_error("injected");
  };
  EngineCore engine(args);
  EngineRequest bad = beam_request(Case{{1, 403, 407}, 3, 1.0f, EarlyStopping::kFalse, 8, {}});
  bad.request_id = "bad";
  EngineRequest good = beam_request(Case{{1, 403, 407}, 3, 1.0f, EarlyStopping::kFalse, 8, {}});
  auto bad_stream = engine.submit(std::move(bad));
  auto good_stream = engine.submit(std::move(good));
  const GenerateResult failed = collect_result(*bad_stream);
  ASSERT_EQ(failed.outputs.size(), 3u);
  for (const CompletionOutput& o : failed.outputs) {
    EXPECT_EQ(o.finish_reason, FinishReason::kAbort);
    EXPECT_NE(o.error.find("injected"), std::string::npos) << o.error;
  }
  const GenerateResult ok = collect_result(*good_stream);
  ASSERT_EQ(ok.outputs.size(), 3u);
  for (const CompletionOutput& o : ok.outputs) EXPECT_EQ(o.token_ids.size(), 8u);
  EXPECT_EQ(engine.stats().kv_cache_usage, 0.0);
}

TEST(EngineBeamSearch, RefusesWhatBeamSearchDoesNotHonourNamingTheField) {
  EngineCore engine(small_engine());
  auto refused = [&](auto change) -> std::string {
    EngineRequest r = beam_request(Case{{1, 403}, 2, 1.0f, EarlyStopping::kFalse, 4, {}});
    change(r.params);
    try {
      (void)engine.submit(std::move(r));
    } catch (const InvalidArgument& e) {
      return e.what();
    }
    return "accepted";
  };
  EXPECT_EQ(refused([](SamplingParams& p) { p.top_p = 0.5f; }).rfind("top_p", 0), 0u);
  EXPECT_EQ(refused([](SamplingParams& p) { p.logprobs = 2; }).rfind("logprobs", 0), 0u);
  EXPECT_EQ(refused([](SamplingParams& p) { p.presence_penalty = 1; }).rfind("presence_penalty", 0),
            0u);
  EXPECT_EQ(refused([](SamplingParams& p) { p.n = 0; }).rfind("n ", 0), 0u);
  EXPECT_EQ(refused([](SamplingParams& p) { p.length_penalty = NAN; }).rfind("length_penalty", 0),
            0u);
  EXPECT_EQ(refused([](SamplingParams& p) { p.temperature = 0.7f; }), "accepted");  // ignored
}

}  // namespace
}  // namespace pagoda
