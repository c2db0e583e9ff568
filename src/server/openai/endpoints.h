#pragma once
// The small endpoints: GET /v1/models, POST /tokenize, POST /detokenize, GET /version.
#include <string_view>

#include "server/openai/json_body.h"
#include "server/openai/server_context.h"

namespace pagoda::openai {

/// GET /v1/models: {"object": "list", "data": [{"id", "object": "model", "created",
/// "owned_by": "pagoda", "root", "max_model_len"}]}, one entry per served name.
[[nodiscard]] Json models_response(const ServerContext& ctx);

/// POST /tokenize (vLLM): {"prompt": str, "add_special_tokens": true} or {"messages": [...],
/// "add_generation_prompt", "continue_final_message", "tools", "chat_template", ...,
/// "add_special_tokens": false} -> {"count", "max_model_len", "tokens", "token_strs"}
/// ("return_token_strs": true fills token_strs). Throws ApiException (400/404).
[[nodiscard]] Json tokenize_response(std::string_view body, const ServerContext& ctx);

/// POST /detokenize (vLLM): {"tokens": [ids]} -> {"prompt": text}. 400 for ids outside the
/// vocabulary.
[[nodiscard]] Json detokenize_response(std::string_view body, const ServerContext& ctx);

/// GET /version: {"version": "<pagoda version>"}.
[[nodiscard]] Json version_response();

}  // namespace pagoda::openai
