// Golden tests against Hugging Face transformers: greedy tokens and top-k log-probabilities.
//
// stories260K (a trained model, fp32): greedy ids identical, top-5 per step and top-10 per prompt
// position within 1e-4. The tiny random-weight checkpoints of tests/data/tiny (one per
// architecture, written by tools/make_golden_fixtures.py) are compared as vLLM's
// check_logprobs_close does: tokens equal until the first divergence, where each side's token must
// be in the other's top-5, and log-probabilities within 1e-3 up to there. To add a case: add a
// fixture to tools/make_golden_fixtures.py, regenerate on the device machine
// (bench/device/make_fixtures.sh) and list its directory in kTinyFixtures.
#include <cmath>
#include <filesystem>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "core/mapped_file.h"
#include "model/model.h"
#include "pagoda/llm.h"
#include "sampling/sampler.h"

namespace pagoda {
namespace {

using nlohmann::json;

const std::string kSource = PAGODA_SOURCE_DIR;

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
    std::vector<float> logits(tokens.size() * vocab);
    model_.forward(batch, logits.data());
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

int32_t argmax(const std::vector<float>& v) {
  return static_cast<int32_t>(std::max_element(v.begin(), v.end()) - v.begin());
}

bool in_top(const json& top, int32_t id) {
  for (const auto& x : top.at("ids")) {
    if (x.get<int32_t>() == id) return true;
  }
  return false;
}

/// Max |ours - theirs| over the ids of one reference top-k entry.
double max_logprob_error(const std::vector<float>& ours, const json& top) {
  double err = 0;
  for (size_t i = 0; i < top.at("ids").size(); ++i) {
    const auto id = top.at("ids")[i].get<size_t>();
    err = std::max(err,
                   std::abs(static_cast<double>(ours[id]) - top.at("logprobs")[i].get<double>()));
  }
  return err;
}

struct Tolerance {
  double logprob;
  bool exact_tokens;  // stories260K: tokens identical; tiny fixtures: check_logprobs_close
};

void check_model(const std::string& dir, Tolerance tol, int block_size) {
  ThreadPool pool(2);
  auto model = load_model(dir, LoadOptions{}, pool);
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
    EXPECT_GE(matched, expected.size() / 2)
        << "greedy tokens diverged after " << matched << " steps";
    std::printf(
        "%s: %zu-token prompt, %zu/%zu greedy steps equal, max |dlogprob| prefill %.2e decode "
        "%.2e\n",
        dir.substr(dir.rfind('/') + 1).c_str(), prompt.size(), matched, expected.size(),
        prefill_err, step_err);
  }
}

TEST(Golden, Stories260K) {
  for (int block_size : {16, 1, 5})
    check_model(kSource + "/models/stories260K", {1e-4, true}, block_size);
}

const char* const kTinyFixtures[] = {"llama-llama3-rope",  "llama-linear-rope-tied",
                                     "llama-bf16",         "mistral-mqa",
                                     "qwen2-bias-sharded", "qwen3-qknorm-headdim"};

TEST(Golden, TinyArchitectures) {
  for (const char* name : kTinyFixtures)
    check_model(kSource + "/tests/data/tiny/" + name, {1e-3, false}, 16);
}

TEST(Golden, Stories260KThroughTheEngineInOneBatch) {
  // All golden prompts submitted at once to the engine (continuous batching, chunked prefill with
  // a small budget) give the reference tokens and top-5 log-probabilities.
  EngineArgs args;
  args.model = kSource + "/models/stories260K";
  args.num_threads = 2;
  args.max_num_batched_tokens = 8;
  args.block_size = 4;
  LLM llm(args);
  const json golden = json::parse(read_text_file(args.model + "/golden.json"));
  std::vector<PromptInput> prompts;
  std::vector<SamplingParams> params;
  for (const json& c : golden.at("cases")) {
    prompts.push_back({std::nullopt, c.at("prompt_ids").get<std::vector<int32_t>>()});
    SamplingParams p;
    p.temperature = 0;
    p.ignore_eos = true;
    p.logprobs = 5;
    p.max_tokens = static_cast<int>(c.at("greedy_ids").size());
    params.push_back(p);
  }
  const auto results = llm.generate(prompts, params);
  for (size_t i = 0; i < results.size(); ++i) {
    const json& c = golden.at("cases")[i];
    const CompletionOutput& out = results[i].outputs.at(0);
    EXPECT_EQ(out.token_ids, c.at("greedy_ids").get<std::vector<int32_t>>()) << i;
    EXPECT_EQ(out.finish_reason, FinishReason::kLength);
    for (size_t step = 0; step < out.logprobs.size(); ++step) {
      const json& top = c.at("step_top5")[step];
      ASSERT_EQ(out.logprobs[step].top.size(), 5u);
      for (size_t k = 0; k < 5; ++k) {
        EXPECT_EQ(out.logprobs[step].top[k].first, top.at("ids")[k].get<int32_t>());
        EXPECT_NEAR(out.logprobs[step].top[k].second, top.at("logprobs")[k].get<double>(), 1e-4);
      }
    }
  }
}

}  // namespace
}  // namespace pagoda
