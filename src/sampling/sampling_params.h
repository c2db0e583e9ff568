#pragma once
// Per-request sampling parameters, with the names and defaults of vLLM's SamplingParams.
#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

namespace pagoda {

/// vLLM's structured_outputs: the generated text must follow exactly one constraint (the engine
/// compiles it with src/structured; the server fills it from structured_outputs, guided_*,
/// response_format and tool_choice).
struct StructuredOutputsParams {
  std::optional<std::string> json;  // a JSON Schema, as JSON text (key order kept)
  std::optional<std::string> regex;
  std::optional<std::vector<std::string>> choice;
  std::optional<std::string> grammar;  // GBNF
  bool json_object = false;
  std::optional<std::string> structural_tag;      // vLLM's structural tag, as JSON text
  bool disable_any_whitespace = false;            // JSON without whitespace but ", " and ": "
  std::optional<std::string> whitespace_pattern;  // a regex for JSON whitespace
  /// An object schema without additionalProperties allows none (unset or true, xgrammar's
  /// reading) or any (false: JSON Schema's own default).
  std::optional<bool> disable_additional_properties;
  /// Reasoning models: the constraint starts after reasoning_end (e.g. "</think>"), unless the
  /// prompt already closed its last reasoning_start. Empty: from the first token.
  std::string reasoning_start, reasoning_end;

  /// How many of json, regex, choice, grammar, json_object and structural_tag are set.
  [[nodiscard]] int num_constraints() const;
};

/// Beam search's stopping rule, transformers' `early_stopping` (vLLM's field of the same name):
/// kTrue ends the search once beam_width hypotheses are finished; kFalse (the default) once the
/// best running beam, scored at its current length, can no longer beat the worst finished one;
/// kNever scores it at max_tokens when length_penalty > 0 (the canonical beam search).
enum class EarlyStopping : uint8_t { kFalse, kTrue, kNever };

/// How one request's tokens are chosen and when it stops.
struct SamplingParams {
  static constexpr int kMaxLogprobs = 20;

  int n = 1;                        // completions per prompt
  float temperature = 1.0f;         // 0: greedy
  float top_p = 1.0f;               // (0, 1]
  int top_k = 0;                    // 0 or -1: all tokens
  float min_p = 0.0f;               // [0, 1]
  float presence_penalty = 0.0f;    // [-2, 2]
  float frequency_penalty = 0.0f;   // [-2, 2]
  float repetition_penalty = 1.0f;  // > 0; 1: off
  std::map<int32_t, float> logit_bias;
  std::optional<uint64_t> seed;
  std::vector<std::string> stop;
  std::vector<int32_t> stop_token_ids;
  bool ignore_eos = false;
  /// Whether the text leaves out special tokens (vLLM's default). Tool call parsers turn it off
  /// when their marker is a special token ([TOOL_CALLS]).
  bool skip_special_tokens = true;
  int max_tokens = 16;
  int min_tokens = 0;
  std::optional<int> logprobs;         // top-k log-probabilities per generated token, <= 20
  std::optional<int> prompt_logprobs;  // the same for prompt tokens
  /// vLLM's bad_words: words never to generate. The engine tokenizes them into
  /// bad_words_token_ids (each word with and without a leading space, as vLLM does).
  std::vector<std::string> bad_words;
  std::vector<std::vector<int32_t>> bad_words_token_ids;
  /// vLLM's allowed_token_ids: when set, every other token's logit is -inf.
  std::optional<std::vector<int32_t>> allowed_token_ids;
  /// Structured outputs: a grammar the output must follow (nullopt: free text).
  std::optional<StructuredOutputsParams> structured_outputs;
  /// Beam search (vLLM's use_beam_search) with n beams, returning the n best hypotheses: each is
  /// scored sum_logprobs / generated_tokens ** length_penalty (the end token counted), as
  /// transformers' generate(num_beams=n) does. Temperature and seed are ignored (the search is
  /// deterministic); the other sampling fields must keep their defaults (validate()).
  bool use_beam_search = false;
  float length_penalty = 1.0f;
  EarlyStopping early_stopping = EarlyStopping::kFalse;
  /// The tokens of [0, vocab_size) that allowed_token_ids leaves out (empty when it is unset).
  [[nodiscard]] std::vector<int32_t> disallowed_tokens(int64_t vocab_size) const;

  /// Throws InvalidArgument naming the first invalid parameter. vocab_size bounds logit_bias keys.
  void validate(int64_t vocab_size) const;
  /// The beam-search part of validate(): the fields beam search does not honour are at their
  /// defaults.
  void validate_beam_search() const;
  [[nodiscard]] bool greedy() const { return temperature < 1e-5f; }
};

}  // namespace pagoda
