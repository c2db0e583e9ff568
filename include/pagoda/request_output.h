#pragma once
// What the engine streams back for a request.
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace pagoda {

/// Why a completion ended.
enum class FinishReason : uint8_t {
  kStop,    // an end-of-sequence token, a stop token or a stop string
  kLength,  // max_tokens (or the model length)
  kAbort,   // aborted by the caller, or failed (error is set)
};

[[nodiscard]] constexpr const char* to_string(FinishReason r) {
  return r == FinishReason::kStop ? "stop" : r == FinishReason::kLength ? "length" : "abort";
}

/// A token's log-probability with the top alternatives (descending), as OpenAI's logprobs report.
struct TokenLogprobs {
  int32_t token = 0;
  float logprob = 0;
  std::vector<std::pair<int32_t, float>> top;
  /// The token's rank in its row's distribution (1 + the tokens strictly likelier), as vLLM's
  /// Logprob.rank; 0 where it was not computed (prompt log-probabilities compute it).
  int32_t rank = 0;
};

/// One streamed update of one completion of a request: the tokens and text that are new since the
/// previous update of the same completion. The last update of a completion has finish_reason set.
/// Prefill/decode disaggregation's hand-off, vLLM's kv_transfer_params (NixlConnector's keys):
/// what a producer returns and a consumer pulls with.
struct KVTransferParams {
  std::string remote_engine_id;  // the producer's engine_id
  std::string remote_host;       // its transfer address
  int remote_port = 0;           // its transfer port
  /// The producer's device blocks the exported KV came from, one per full prompt block sent: the
  /// consumer accepts at most this many blocks.
  std::vector<int32_t> remote_block_ids;
  std::string remote_request_id;  // the id the blocks are kept under
};

struct RequestOutput {
  std::string request_id;
  int index = 0;                        // which of the request's n completions
  std::vector<int32_t> token_ids;       // new tokens
  std::string text;                     // new text (stop strings excluded, partial matches held)
  std::vector<TokenLogprobs> logprobs;  // per new token, when SamplingParams::logprobs is set
  std::optional<FinishReason> finish_reason;
  std::string stop_reason;  // the stop string or token id that ended it, if any
  std::string error;        // why an abort happened inside the engine, if it did
  int num_prompt_tokens = 0;
  int num_cached_tokens = 0;  // prompt tokens served by the prefix cache
  /// On a completion's first update: seconds from submit() until the request was first scheduled
  /// (queue time) and from then until this first token (prefill time), for the latency metrics.
  std::optional<double> queue_seconds;
  std::optional<double> prefill_seconds;
  /// With prompt_logprobs, on the first update of completion 0: one entry per prompt token (the
  /// first is empty: nothing predicts it).
  std::vector<std::optional<TokenLogprobs>> prompt_logprobs;
  /// Beam search (one update per choice, at the end, best first): the sum of the hypothesis'
  /// log-probabilities (vLLM's cumulative_logprob) and its score, that sum divided by its length
  /// ** length_penalty (transformers' sequences_scores).
  std::optional<float> cumulative_logprob;
  std::optional<float> beam_score;
  /// A producer's finished `do_remote_decode` request: where its prompt KV waits for a consumer.
  std::optional<KVTransferParams> kv_transfer_params;
};

}  // namespace pagoda
