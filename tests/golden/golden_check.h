#pragma once
// The golden comparison shared by the CPU and GPU golden tests: run a model sequence by sequence
// through its paged KV cache and compare greedy tokens and log-probabilities with the references
// from Hugging Face transformers (golden.json), as vLLM's check_logprobs_close does.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <string>
#include <vector>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "core/mapped_file.h"
#include "model/model.h"
#include "sampling/sampler.h"

namespace pagoda::golden {

using nlohmann::json;

inline const std::string kSource = PAGODA_SOURCE_DIR;

/// The tiny checkpoints of tests/data/tiny (tools/make_golden_fixtures.py); all run on both
/// backends (the *-hd64/-hd128 ones through the GPU's fast attention kernel at block size 16).
inline const char* const kTinyFixtures[] = {"llama-llama3-rope",
                                            "llama-linear-rope-tied",
                                            "llama-bf16",
                                            "mistral-mqa",
                                            "qwen2-bias-sharded",
                                            "qwen3-qknorm-headdim",
                                            "llama-hd64-llama3-rope",
                                            "mistral-hd128-bf16",
                                            "qwen2-hd64-bias",
                                            "qwen3-hd128-qknorm"};

/// The fixtures of the Phi-3 and Gemma-2 families and the YaRN / dynamic NTK scalings (the entries
/// of tools/make_golden_fixtures.py after qwen3-hd128-qknorm), on both backends. Until they are
/// generated on the device machine and committed, their tests skip (GTEST_SKIP) for each fixture
/// directory that does not exist.
inline const char* const kFamilyFixtures[] = {
    "phi3-hd64",         "phi3-longrope-long", "phi3-longrope-short", "gemma2-hd64-softcap",
    "gemma2-hd256-bf16", "qwen2-yarn-hd64",    "llama-yarn-mscale",   "llama-dynamic-hd64"};

/// The load options of a fixture: golden.json's optional "max_model_len", the engine setting its
/// RoPE semantics rely on (LongRoPE's factor lists, dynamic NTK's base; model/rope.h).
inline LoadOptions fixture_load_options(const std::string& dir) {
  LoadOptions options;
  const json golden = json::parse(read_text_file(dir + "/golden.json"));
  if (golden.contains("max_model_len"))
    options.definition.max_model_len = golden.at("max_model_len").get<int64_t>();
  return options;
}

/// Runs one sequence through the model with a paged cache of its own.
class SequenceRunner {
 public:
  SequenceRunner(Model& model, int64_t max_len, int block_size)
      : model_(model), block_size_(block_size) {
    // Physical blocks deliberately out of order, to exercise the block table.
    const int64_t blocks = (max_len + block_size - 1) / block_size + 3;
    model.init_kv_cache(blocks, block_size);
    for (int64_t j = 0; j < blocks; ++j) table_.push_back(static_cast<int32_t>(blocks - 1 - j));
  }

  /// Appends tokens; returns log-probabilities [tokens.size(), vocab] for every appended position.
  std::vector<std::vector<float>> append(const std::vector<int32_t>& tokens) {
    std::vector<int32_t> positions, rows;
    std::vector<int64_t> slots;
    for (size_t i = 0; i < tokens.size(); ++i) {
      const int32_t pos = len_ + static_cast<int32_t>(i);
      positions.push_back(pos);
      slots.push_back(static_cast<int64_t>(table_[static_cast<size_t>(pos / block_size_)]) *
                          block_size_ +
                      pos % block_size_);
      rows.push_back(static_cast<int32_t>(i));
    }
    len_ += static_cast<int32_t>(tokens.size());
    const std::vector<int32_t> qsl{0, static_cast<int32_t>(tokens.size())}, seq_lens{len_};
    ForwardBatch batch{tokens, positions, qsl, seq_lens, table_, static_cast<int>(table_.size()),
                       slots,  rows};
    const auto vocab = static_cast<size_t>(model_.config().vocab_size);
    const std::span<float> logits = model_.forward(batch);
    std::vector<std::vector<float>> out;
    for (size_t i = 0; i < tokens.size(); ++i) {
      std::vector<float> lp(vocab);
      log_softmax(std::span<const float>(logits.data() + i * vocab, vocab), lp);
      out.push_back(std::move(lp));
    }
    return out;
  }

 private:
  Model& model_;
  int block_size_;
  std::vector<int32_t> table_;
  int32_t len_ = 0;
};

inline int32_t argmax(const std::vector<float>& v) {
  return static_cast<int32_t>(std::max_element(v.begin(), v.end()) - v.begin());
}

inline bool in_top(const json& top, int32_t id) {
  for (const auto& x : top.at("ids")) {
    if (x.get<int32_t>() == id) return true;
  }
  return false;
}

/// Max |ours - theirs| over the ids of one reference top-k entry.
inline double max_logprob_error(const std::vector<float>& ours, const json& top) {
  double err = 0;
  for (size_t i = 0; i < top.at("ids").size(); ++i) {
    const auto id = top.at("ids")[i].get<size_t>();
    err = std::max(err,
                   std::abs(static_cast<double>(ours[id]) - top.at("logprobs")[i].get<double>()));
  }
  return err;
}

struct Tolerance {
  double logprob;          // max |ours - reference| over the compared log-probabilities
  bool exact_tokens;       // stories260K: tokens identical; else check_logprobs_close
  bool most_steps = true;  // greedy tokens must agree for at least half the steps
};

/// Compares `model` (loaded from dir) with dir/golden.json.
inline void check_model(Model& model_ref, const std::string& dir, Tolerance tol, int block_size) {
  Model* model = &model_ref;
  const json golden = json::parse(read_text_file(dir + "/golden.json"));
  for (const json& c : golden.at("cases")) {
    SCOPED_TRACE(dir + " prompt of " + std::to_string(c.at("prompt_ids").size()) + " tokens");
    const auto prompt = c.at("prompt_ids").get<std::vector<int32_t>>();
    const auto expected = c.at("greedy_ids").get<std::vector<int32_t>>();
    SequenceRunner runner(*model, static_cast<int64_t>(prompt.size() + expected.size()) + 1,
                          block_size);
    // Prefill: the top-10 at every prompt position.
    auto prefill = runner.append(prompt);
    double prefill_err = 0;
    for (size_t i = 0; i < prompt.size(); ++i)
      prefill_err = std::max(prefill_err, max_logprob_error(prefill[i], c.at("prefill_top10")[i]));
    EXPECT_LE(prefill_err, tol.logprob);
    // Greedy decode, one token at a time through the paged cache.
    std::vector<float> last = prefill.back();
    double step_err = 0;
    size_t matched = 0;
    for (size_t step = 0; step < expected.size(); ++step) {
      const json& top = c.at("step_top5")[step];
      const int32_t ours = argmax(last);
      if (ours != expected[step]) {
        ASSERT_FALSE(tol.exact_tokens)
            << "greedy token " << step << ": " << ours << " != " << expected[step];
        // check_logprobs_close: at the first divergence each side's token is in the other's top-5.
        EXPECT_TRUE(in_top(top, ours))
            << "step " << step << ": our token " << ours << " not in the reference top-5";
        const auto our_top = top_k_entries(last, 5);
        EXPECT_TRUE(std::any_of(our_top.begin(), our_top.end(),
                                [&](const TokenLogprob& t) { return t.token == expected[step]; }))
            << "step " << step << ": reference token " << expected[step] << " not in our top-5";
        break;
      }
      step_err = std::max(step_err, max_logprob_error(last, top));
      last = runner.append({ours})[0];
      ++matched;
    }
    EXPECT_LE(step_err, tol.logprob);
    // A comparison that diverges at once proves little: the fixtures are chosen so that greedy
    // decoding agrees for most of the steps.
    if (tol.most_steps) {
      EXPECT_GE(matched, expected.size() / 2)
          << "greedy tokens diverged after " << matched << " steps";
    }
    std::printf(
        "%s: %zu-token prompt, %zu/%zu greedy steps equal, max |dlogprob| prefill %.2e decode "
        "%.2e\n",
        dir.substr(dir.rfind('/') + 1).c_str(), prompt.size(), matched, expected.size(),
        prefill_err, step_err);
  }
}

/// Max |dlogprob| against the golden case `c` along transformers' greedy tokens: the prompt's
/// prefill (top-10 of every position), then one decode step per greedy token (top-5 of each).
inline double teacher_forced_error(Model& model, const json& c, int block_size) {
  const auto prompt = c.at("prompt_ids").get<std::vector<int32_t>>();
  const auto expected = c.at("greedy_ids").get<std::vector<int32_t>>();
  SequenceRunner runner(model, static_cast<int64_t>(prompt.size() + expected.size()) + 1,
                        block_size);
  const auto prefill = runner.append(prompt);
  double err = 0;
  for (size_t i = 0; i < prompt.size(); ++i)
    err = std::max(err, max_logprob_error(prefill[i], c.at("prefill_top10")[i]));
  std::vector<float> last = prefill.back();
  for (size_t step = 0; step < expected.size(); ++step) {
    err = std::max(err, max_logprob_error(last, c.at("step_top5")[step]));
    last = runner.append({expected[step]})[0];
  }
  return err;
}

}  // namespace pagoda::golden
