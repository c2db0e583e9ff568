#pragma once
// The offline C++ API: build an engine, generate completions for a batch of prompts, as vLLM's
// `LLM(model=...).generate(prompts, sampling_params)`.
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "pagoda/engine_args.h"
#include "pagoda/request_output.h"
#include "sampling/sampling_params.h"

namespace pagoda {

class EngineCore;

/// A prompt: text (tokenized with the model's tokenizer, BOS included) or token ids.
struct PromptInput {
  std::optional<std::string> text;
  std::vector<int32_t> token_ids;
};

/// One finished completion of a prompt.
struct CompletionOutput {
  int index = 0;
  std::vector<int32_t> token_ids;
  std::string text;
  std::vector<TokenLogprobs> logprobs;  // per token, when requested
  FinishReason finish_reason = FinishReason::kLength;
  std::string stop_reason;
  std::string error;
  std::optional<float> cumulative_logprob;  // beam search: RequestOutput's fields
  std::optional<float> beam_score;
};

/// Everything generated for one prompt.
struct GenerateResult {
  std::string request_id;
  int num_prompt_tokens = 0;
  int num_cached_tokens = 0;
  std::vector<std::optional<TokenLogprobs>> prompt_logprobs;
  std::vector<CompletionOutput> outputs;  // n of them, by index
};

/// An engine for offline batch generation.
class LLM {
 public:
  explicit LLM(const EngineArgs& args);
  ~LLM();

  /// Runs all prompts through the engine at once (continuous batching) and returns their results
  /// in prompt order. One params for all, or one per prompt. InvalidArgument for an invalid
  /// prompt or params, before anything runs.
  [[nodiscard]] std::vector<GenerateResult> generate(const std::vector<PromptInput>& prompts,
                                                     const SamplingParams& params);
  [[nodiscard]] std::vector<GenerateResult> generate(const std::vector<PromptInput>& prompts,
                                                     const std::vector<SamplingParams>& params);

  [[nodiscard]] EngineCore& engine() { return *engine_; }

 private:
  std::unique_ptr<EngineCore> engine_;
};

/// Drains a request's stream into its completions (used by LLM and the CLI).
[[nodiscard]] GenerateResult collect_result(class OutputStream& stream);

}  // namespace pagoda
