#pragma once
// POST /v1/completions: the request body -> one EngineRequest per prompt.
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "engine/engine_core.h"
#include "server/openai/server_context.h"

namespace pagoda::openai {

/// A parsed, validated legacy completions request.
struct CompletionRequest {
  std::string id;  // "cmpl-<hex>", the response id; engine requests are "<id>-<prompt index>"
  int64_t created = 0;
  std::string model;  // the served name to report
  bool stream = false;
  bool include_usage = false;     // stream_options.include_usage
  bool continuous_usage = false;  // stream_options.continuous_usage_stats: usage in every chunk
  bool echo = false;
  std::optional<int> logprobs;  // top-k alternatives per token (0..20); set: report logprobs
  bool include_stop_str_in_output = false;
  int n = 1;
  bool return_token_ids = false;  // token_ids (and prompt_token_ids) beside the text
  bool tokens_as_ids = false;     // return_tokens_as_token_ids: logprob tokens as "token_id:<id>"
  /// One per prompt, in order; prompt_token_ids is set (prompts are tokenized here, to check the
  /// context length), prompt is empty.
  std::vector<EngineRequest> engine_requests;
  /// The text of each prompt (decoded for token prompts), for echo.
  std::vector<std::string> prompt_texts;
};

/// Parses and validates a /v1/completions body. Throws ApiException: 400 naming the field for
/// malformed JSON, wrong types, invalid values, unsupported options (suffix, best_of != n), token
/// ids outside the vocabulary or prompt + max_tokens past max_model_len; 404 for an unknown model.
/// Unknown top-level fields are ignored (vLLM's rule); unknown keys inside stream_options are 400.
/// `request_id_header`: the X-Request-Id header ("" when absent), which names the request as the
/// body's request_id does and wins over it (vLLM).
[[nodiscard]] CompletionRequest parse_completion_request(std::string_view body,
                                                         const ServerContext& ctx,
                                                         std::string_view request_id_header = {});

}  // namespace pagoda::openai
