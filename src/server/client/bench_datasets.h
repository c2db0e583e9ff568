#pragma once
// The prompts of `pagoda bench serve`, built as `vllm bench serve` builds its datasets: random
// (with an optional shared prefix), prefix_repetition and ShareGPT from a local JSON file.
#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace pagoda::client {

/// One request before it is sent (vLLM's SampleRequest). Exactly one of the prompts is set.
struct SampleRequest {
  std::vector<int64_t> prompt_token_ids;  // a token-id prompt (synthetic, completions endpoint)
  std::string prompt_text;                // a text prompt (ShareGPT, or synthetic words for chat)
  int64_t prompt_len = 0;                 // tokens (words for a synthetic text prompt)
  int64_t output_len = 0;                 // tokens: the request's max_tokens
};

/// What synthetic prompts are made of: token ids below vocab_size, or, for the chat endpoint
/// (whose messages carry text), English words joined by spaces (one word a "token").
struct SyntheticVocabulary {
  bool words = false;
  int64_t vocab_size = 0;  // token ids (unused for words); must be >= 1 otherwise
};

/// --dataset-name random.
struct RandomDatasetOptions {
  int num_prompts = 1000;
  int input_len = 1024;    // --random-input-len: tokens after the prefix
  int output_len = 128;    // --random-output-len
  double range_ratio = 0;  // --random-range-ratio: lengths in [len*(1-r), len*(1+r)]
  int prefix_len = 0;      // --random-prefix-len: tokens shared by every prompt, before the rest
  uint64_t seed = 0;
};

/// vLLM's random dataset: one prefix of prefix_len random tokens drawn first, then per request an
/// input and an output length from the range, and input_len random tokens after the prefix.
/// prompt_len counts the prefix. Throws InvalidArgument naming the flag on bad values.
[[nodiscard]] std::vector<SampleRequest> sample_random(const RandomDatasetOptions& options,
                                                       const SyntheticVocabulary& vocabulary);

/// --dataset-name prefix_repetition.
struct PrefixRepetitionOptions {
  int num_prompts = 1000;
  int prefix_len = 256;   // --prefix-repetition-prefix-len
  int suffix_len = 256;   // --prefix-repetition-suffix-len
  int num_prefixes = 10;  // --prefix-repetition-num-prefixes
  int output_len = 128;   // --prefix-repetition-output-len
  uint64_t seed = 0;
};

/// vLLM's prefix_repetition dataset: num_prefixes random prefixes, each followed by
/// floor(num_prompts / num_prefixes) different random suffixes (so that many requests share each
/// prefix), shuffled. Throws InvalidArgument naming the flag on bad values (num_prompts must be at
/// least num_prefixes).
[[nodiscard]] std::vector<SampleRequest> sample_prefix_repetition(
    const PrefixRepetitionOptions& options, const SyntheticVocabulary& vocabulary);

/// --dataset-name sharegpt.
struct ShareGptOptions {
  std::string path;  // --dataset-path: a JSON list of {"conversations": [{"from", "value"}, ...]}
  int num_prompts = 1000;
  std::optional<int> output_len;  // --sharegpt-output-len; nullopt: the reply's length
  bool no_oversample = false;     // --no-oversample
  uint64_t seed = 0;
};

/// Counts the tokens of a text as the server will (special tokens included).
using TokenCounter = std::function<int64_t(std::string_view)>;

/// vLLM's ShareGPT dataset: the entries with at least two turns, shuffled; each gives its first
/// turn as the prompt and its second turn's token count as the output length (or --sharegpt-
/// output-len). Pairs are dropped as vLLM drops them: a prompt under 4 tokens or over 1024, a
/// reply under 4 tokens (unless the output length is fixed), or more than 2048 in all. Fewer pairs
/// than num_prompts are repeated (drawn at random) unless no_oversample. Throws InvalidArgument
/// naming the file or the flag.
[[nodiscard]] std::vector<SampleRequest> sample_sharegpt(const ShareGptOptions& options,
                                                         const TokenCounter& count_tokens);

/// vLLM's filter of ShareGPT pairs (benchmarks' is_valid_sequence with its default limits).
[[nodiscard]] bool is_valid_sequence(int64_t prompt_len, int64_t output_len,
                                     bool skip_min_output_len_check);

}  // namespace pagoda::client
