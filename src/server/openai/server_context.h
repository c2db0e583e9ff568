#pragma once
// What the protocol layer needs to know about the served model; filled once by the server.
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "template/chat_template.h"
#include "tokenizer/tokenizer.h"

namespace pagoda::openai {

class ToolParser;
struct ReasoningFormat;

/// generation_config.json's sampling defaults: they replace SamplingParams' defaults for fields a
/// request leaves unset (vLLM's --generation-config auto).
struct GenerationDefaults {
  std::optional<float> temperature;
  std::optional<float> top_p;
  std::optional<int> top_k;
  std::optional<float> min_p;
  std::optional<float> repetition_penalty;
};

/// The served model as the parsers and builders see it. Pointers are borrowed: the server keeps
/// the tokenizer and the compiled template alive for as long as it parses requests.
struct ServerContext {
  /// Names the API accepts in "model"; the first is reported when a request names none.
  std::vector<std::string> served_model_names;
  int64_t max_model_len = 0;
  /// Token ids in prompts, logit_bias and stop_token_ids must be below this.
  int64_t vocab_size = 0;
  const Tokenizer* tokenizer = nullptr;               // null: text prompts and chat are a 400
  const tmpl::ChatTemplate* chat_template = nullptr;  // null: chat requests are a 400
  GenerationDefaults defaults;
  /// Whether a request may bring its own "chat_template" (vLLM gates it behind a flag too).
  bool allow_request_chat_template = true;
  /// Bounds on one chat template render (output size, loop iterations, call depth): a request's
  /// own template is untrusted code.
  tmpl::RenderLimits render_limits;
  /// --enable-auto-tool-choice with --tool-call-parser: chat requests that offer tools with
  /// tool_choice "auto" get their output parsed for tool calls. Null: output is always content.
  const ToolParser* tool_parser = nullptr;
  /// --reasoning-parser: chat output is split into reasoning_content and content. Null: none.
  const ReasoningFormat* reasoning = nullptr;
  /// The "created" timestamp /v1/models reports (server start).
  int64_t model_created = 0;
  /// Bounds on one request's work: the prompts of a completions request, and its sequences (n x
  /// prompts). Past them the request is a 400 naming the field, before any prompt is tokenized.
  int64_t max_prompts_per_request = 1024;
  int64_t max_sequences_per_request = 1024;
};

}  // namespace pagoda::openai
