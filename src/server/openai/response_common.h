#pragma once
// Pieces shared by the completions and chat response builders: usage, stop_reason, token strings.
#include <cstdint>
#include <string>
#include <vector>

#include "pagoda/request_output.h"
#include "sampling/sampling_params.h"
#include "server/openai/json_body.h"
#include "tokenizer/tokenizer.h"

namespace pagoda::openai {

/// {"prompt_tokens", "completion_tokens", "total_tokens"} plus
/// "prompt_tokens_details": {"cached_tokens"} when the prefix cache served any prompt tokens.
[[nodiscard]] Json usage_json(int64_t prompt_tokens, int64_t completion_tokens,
                              int64_t cached_tokens);

/// vLLM's stop_reason: null for EOS or length, the stop string, or the stop token id as a number.
[[nodiscard]] Json stop_reason_json(const RequestOutput& out, const SamplingParams& params);

/// finish_reason as OpenAI spells it ("stop", "length", "abort"), null while unfinished.
[[nodiscard]] Json finish_reason_json(const RequestOutput& out);

/// With include_stop_str_in_output, the stop string that ended a completion, to append to its
/// final text (the engine cuts it); empty otherwise.
[[nodiscard]] std::string stop_string_suffix(const RequestOutput& out, const SamplingParams& params,
                                             bool include);

/// A token as text for logprobs: its decoded bytes (raw: may be a partial UTF-8 character) and a
/// display string with invalid UTF-8 replaced by U+FFFD (JSON must be valid UTF-8).
struct TokenText {
  std::string bytes;
  std::string text;
};
[[nodiscard]] TokenText token_text(const Tokenizer* tokenizer, int32_t id);
/// With `as_id` (return_tokens_as_token_ids) the token is spelled "token_id:<id>" (vLLM's form,
/// for tokens that are not whole characters), else as token_text() spells it.
[[nodiscard]] TokenText token_text(const Tokenizer* tokenizer, int32_t id, bool as_id);

/// vLLM's prompt_logprobs: one entry per prompt token, null for the first (nothing predicts it),
/// else {"<id>": {"logprob", "rank", "decoded_token"}} for the prompt token and its top
/// alternatives (the prompt token first; ranks of alternatives by their order). Null when the
/// request asked for none (`logprobs` empty).
[[nodiscard]] Json prompt_logprobs_json(const std::vector<std::optional<TokenLogprobs>>& logprobs,
                                        const Tokenizer* tokenizer, bool as_id);

/// A token id list as JSON.
[[nodiscard]] Json token_ids_json(const std::vector<int32_t>& ids);

/// -inf and NaN have no JSON form: clamp as vLLM does (-9999.0).
[[nodiscard]] double json_logprob(float logprob);

/// Number of code points of UTF-8 text (Python's len, for text_offset).
[[nodiscard]] int64_t text_length(const std::string& text);

}  // namespace pagoda::openai
