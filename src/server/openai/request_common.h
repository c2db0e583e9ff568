#pragma once
// Field handling shared by the completions and chat parsers: model resolution, sampling fields,
// vLLM's extensions (priority, cache_salt, user), stream_options, prompt truncation, the
// context-length check.
#include <cstdint>
#include <initializer_list>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "engine/engine_core.h"
#include "server/openai/json_body.h"
#include "server/openai/server_context.h"

namespace pagoda::openai {

/// The served name the request's "model" names (absent: the first served name); 404 naming
/// "model" when it is none of them.
[[nodiscard]] std::string resolve_model(const Json& body, const ServerContext& ctx);

/// Reads the sampling fields of body (sampling_json_fields() minus `skip`) onto params after the
/// generation defaults (but for beam search, which takes none of them); a wrong type is a 400
/// naming the field.
void read_sampling_fields(const Json& body, const ServerContext& ctx, SamplingParams& params,
                          std::initializer_list<std::string_view> skip);

/// SamplingParams::validate as a 400 whose param is the parameter validate() names.
void validate_sampling(const SamplingParams& params, const ServerContext& ctx);

/// 400 when prompt_tokens + max_tokens exceeds max_model_len, with vLLM's message (both numbers);
/// param is `prompt_param` when the prompt alone fills the context, else "max_tokens".
void check_context_length(int64_t prompt_tokens, int64_t max_tokens, const ServerContext& ctx,
                          const char* prompt_param);

/// vLLM's truncate_prompt_tokens: absent, -1 (max_model_len) or k in [1, max_model_len], the
/// number of prompt tokens to keep; anything else is a 400 naming the field.
[[nodiscard]] std::optional<int64_t> read_truncate_prompt_tokens(const Json& body,
                                                                 const ServerContext& ctx);
/// Keeps the last `keep` ids of a longer prompt (vLLM truncates on the left); true when it cut.
bool truncate_prompt(std::vector<int32_t>& ids, std::optional<int64_t> keep);

/// vLLM request fields that change what is generated and that pagoda does not implement
/// (logits_processors): a 400 naming the field when one is set, rather than
/// an answer that silently ignores it. Null, false and empty values are accepted (some clients
/// send every field). Structured outputs are read by structured_request.h.
void reject_unsupported_vllm_fields(const Json& body);

/// 400 naming `param` for an id outside [0, vocab_size).
void check_token_ids(std::span<const int32_t> ids, const ServerContext& ctx,
                     const std::string& param);

/// stream_options is a 400 unless stream is true, and unknown keys in it are a 400.
/// stream_options: include_usage, and vLLM's continuous_usage_stats (usage in every chunk; only
/// with include_usage).
struct StreamOptions {
  bool include_usage = false;
  bool continuous_usage = false;
};
[[nodiscard]] StreamOptions read_stream_options(const Json& body, bool stream);

/// user (string, only type-checked), priority and cache_salt (non-empty string) onto request. A
/// non-zero priority on a server without priority scheduling is a 400 (vLLM's rule).
void read_request_extensions(const Json& body, const ServerContext& ctx, EngineRequest& request);

/// vLLM's kv_transfer_params (NixlConnector's keys; part of read_request_extensions):
/// do_remote_decode (a producer's prefill; stream must be false), or do_remote_prefill with
/// remote_engine_id, remote_host, remote_port, remote_block_ids and remote_request_id (a
/// consumer's request); pagoda's return_kv (bi-directional KV: keep the finished turn's KV for
/// a pull, its hand-off in the answer). Unknown keys and wrong types are a 400 naming the field.
void read_kv_transfer_params(const Json& body, EngineRequest& request);
/// A producer's (or a return_kv turn's) hand-off as the response's kv_transfer_params: what the
/// consumer's request (or an import) sends back (do_remote_prefill true).
[[nodiscard]] Json kv_transfer_params_json(const KVTransferParams& params);

/// vLLM's output extras of both endpoints: return_token_ids (the prompt's and each choice's token
/// ids beside the text) and return_tokens_as_token_ids (logprob tokens spelled "token_id:<id>";
/// the server's --return-tokens-as-token-ids is the default).
struct OutputOptions {
  bool return_token_ids = false;
  bool tokens_as_ids = false;
};
[[nodiscard]] OutputOptions read_output_options(const Json& body, const ServerContext& ctx);

/// The request's id as vLLM picks it: the X-Request-Id header (`header`, empty when absent), else
/// the body's request_id, else one of 32 random hex digits; the response id is `prefix` + it.
struct RequestIds {
  std::string response_id;  // e.g. "chatcmpl-<id>"
  /// The engine's id: the response id, with a random suffix when the client chose the id (two
  /// requests in flight may share a client's id; the engine's ids must differ).
  std::string engine_id;
};
[[nodiscard]] RequestIds read_request_ids(const Json& body, std::string_view header,
                                          std::string_view prefix);

/// vLLM's prompt_logprobs: with stream, a value other than 0 is a 400 (they are not streamed).
void check_prompt_logprobs_stream(const SamplingParams& params, bool stream);

/// A fresh response id: prefix followed by 32 random hex digits ("cmpl-", "chatcmpl-").
[[nodiscard]] std::string make_response_id(std::string_view prefix);
/// Seconds since the Unix epoch, for "created".
[[nodiscard]] int64_t unix_time_now();

/// Logs (at debug level, names only, never values) top-level fields no parser reads: vLLM ignores
/// unknown top-level fields with a warning, and so do we.
void note_ignored_fields(const Json& body, std::initializer_list<std::string_view> known,
                         const char* endpoint);

}  // namespace pagoda::openai
