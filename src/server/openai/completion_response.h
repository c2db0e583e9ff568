#pragma once
// Engine updates -> /v1/completions "text_completion" bodies and stream chunks.
#include <cstddef>
#include <optional>
#include <string>
#include <vector>

#include "pagoda/request_output.h"
#include "server/openai/completion_request.h"
#include "server/openai/json_body.h"

namespace pagoda::openai {

/// Turns the engine updates of one completions request into OpenAI's responses. Choice index =
/// prompt_index * n + RequestOutput::index. Feed it every update of every prompt's stream.
class CompletionResponseBuilder {
 public:
  /// Keeps what it needs of the request; tokenizer (may be null) spells logprob tokens.
  CompletionResponseBuilder(const CompletionRequest& request, const Tokenizer* tokenizer);

  /// Streaming: the chunk to send for this update (empty when it carries nothing to send).
  [[nodiscard]] std::vector<Json> stream_chunks(size_t prompt_index, const RequestOutput& out);
  /// Streaming with include_usage, after the last update: {"choices": [], "usage": {...}}.
  [[nodiscard]] Json usage_chunk() const;

  /// Non-streaming: records an update; call response() when every stream has closed.
  void add(size_t prompt_index, const RequestOutput& out);
  [[nodiscard]] Json response() const;

 private:
  struct Choice {
    std::string text;
    bool started = false;    // echo and prompt logprobs go out with the first update
    int64_t text_chars = 0;  // code points sent so far (logprobs text_offset)
    Json tokens = Json::array();
    Json token_logprobs = Json::array();
    Json top_logprobs = Json::array();
    Json text_offset = Json::array();
    Json finish_reason;
    Json stop_reason;
    std::vector<int32_t> token_ids;  // with return_token_ids
    bool with_prompt_ids = false;    // streamed: the choice's first chunk carries prompt_token_ids
  };
  struct PromptInfo {
    std::vector<int32_t> ids;
    std::string text;
    int64_t num_tokens = 0;
    int64_t num_cached = 0;
    std::vector<std::optional<TokenLogprobs>> prompt_logprobs;  // from the engine, for echo
  };

  Choice& choice(size_t prompt_index, const RequestOutput& out);
  // Appends this update's text and logprobs to `delta` (a fresh Choice for streaming, the
  // accumulated one otherwise), advancing `state`'s offsets.
  void apply(size_t prompt_index, const RequestOutput& out, Choice& state, Choice& delta);
  void append_logprob(Choice& delta, int64_t& offset, int32_t id,
                      const std::optional<TokenLogprobs>& lp) const;
  /// `whole`: the non-streamed choice, which also carries prompt_logprobs.
  [[nodiscard]] Json choice_json(size_t index, const Choice& c, bool whole) const;
  [[nodiscard]] Json envelope() const;

  std::string id_;
  int64_t created_;
  std::string model_;
  bool echo_;
  std::optional<int> logprobs_;
  bool include_stop_str_;
  bool continuous_usage_;  // usage in every chunk (stream_options.continuous_usage_stats)
  bool return_token_ids_;
  bool tokens_as_ids_;
  int n_;
  SamplingParams params_;
  const Tokenizer* tokenizer_;
  std::vector<PromptInfo> prompts_;
  std::vector<Choice> choices_;
  int64_t completion_tokens_ = 0;
  std::optional<KVTransferParams> kv_transfer_params_;  // a producer's hand-off
};

}  // namespace pagoda::openai
