#pragma once
// The small endpoints: GET /v1/models[/{name}], POST /tokenize, POST /detokenize, GET /version,
// POST /v1/kv_transfer/import.
#include <string>
#include <string_view>

#include "engine/engine_core.h"

#include "server/openai/json_body.h"
#include "server/openai/server_context.h"

namespace pagoda::openai {

/// GET /v1/models: {"object": "list", "data": [{"id", "object": "model", "created",
/// "owned_by": "pagoda", "root", "max_model_len"}]}, one entry per served name.
[[nodiscard]] Json models_response(const ServerContext& ctx);
/// GET /v1/models/{name} (OpenAI's "retrieve model"): the entry of models_response for `name`.
[[nodiscard]] Json model_response(const ServerContext& ctx, const std::string& name);
/// `name` as a URL path segment: what clients send for /v1/models/{name} (encodeURIComponent, so
/// "org/model" becomes "org%2Fmodel").
[[nodiscard]] std::string encode_path_segment(const std::string& name);

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

/// POST /v1/kv_transfer/import (pagoda's, bi-directional KV): {"kv_transfer_params": a
/// return_kv answer's hand-off (do_remote_prefill true and every remote_* key), "cache_salt":
/// the conversation's salt (optional, non-empty)}. Unknown keys and wrong types are a 400
/// naming the field.
struct KVImportRequest {
  KVTransferParams params;
  std::string cache_salt;
};
[[nodiscard]] KVImportRequest parse_kv_import_request(std::string_view body);
/// The answer: {"object": "kv_transfer.import", "num_blocks", "imported_blocks",
/// "cached_blocks"}.
[[nodiscard]] Json kv_import_response(const KVImportResult& result);

}  // namespace pagoda::openai
