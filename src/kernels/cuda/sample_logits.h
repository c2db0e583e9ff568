#pragma once
// The whole sampler on the GPU: logits processors (repetition/presence/frequency penalties, logit
// bias, min_tokens masking), temperature, top-k, min-p, top-p, the draw and log-probabilities, with
// the semantics and order of the CPU RequestSampler (src/sampling/sampler.cc). Only token ids and
// the requested log-probabilities go back to the host.
#include <cuda_runtime.h>

#include <cstdint>

#include "core/dtype.h"

namespace pagoda::cuda {

constexpr int kMaxTopLogprobs = 20;

/// One distinct token of a row's history, for the penalties: repetition applies when in_prompt or
/// output_count > 0, presence/frequency when output_count > 0.
struct PenaltyEntry {
  int32_t token = 0;
  int32_t output_count = 0;  // occurrences among the generated tokens
  int32_t in_prompt = 0;     // 1: occurs in the prompt
};

/// logit[token] += bias.
struct BiasEntry {
  int32_t token = 0;
  float bias = 0.0f;
};

/// How one row is processed and drawn. Lists index the shared arrays of SampleLogitsArgs;
/// penalty and bias tokens must be distinct within a row (mask tokens may repeat).
struct SamplingRow {
  float temperature = 0.0f;  // < 1e-5: greedy (first maximum); the truncations are then ignored
  int32_t top_k = 0;         // <= 0 or >= vocab: off
  float top_p = 1.0f;  // < 1: the shortest prefix of the sorted row reaching top_p of the mass
  float min_p = 0.0f;  // > 0: keep p >= min_p * p_max
  float repetition_penalty = 1.0f;
  float presence_penalty = 0.0f;
  float frequency_penalty = 0.0f;
  int32_t num_logprobs = -1;  // -1: none; 0: the chosen token's; N <= 20: and the top N
  int32_t penalty_begin = 0, penalty_count = 0;  // into penalties
  int32_t bias_begin = 0, bias_count = 0;        // into biases
  int32_t mask_begin = 0, mask_count = 0;        // into masked: these logits become -inf
  int32_t allowed_row = -1;  // >= 0: row of SampleLogitsArgs::allowed (a structured-output mask)
  int32_t skip = 0;          // 1: leave this row alone (outputs unwritten)
  uint64_t seed = 0;
  uint64_t counter = 0;  // the request's token index: draws depend on (seed, counter) only
};

/// Device pointers of one sample_logits call.
struct SampleLogitsArgs {
  const void* logits = nullptr;  // [rows, vocab] raw model logits, dtype f32/bf16/f16; read only
  DType dtype = DType::kF32;
  int64_t rows = 0;
  int64_t vocab = 0;                        // <= 2^24
  const SamplingRow* params = nullptr;      // [rows]
  const PenaltyEntry* penalties = nullptr;  // the rows' penalty lists, concatenated
  const BiasEntry* biases = nullptr;        // the rows' bias lists, concatenated
  const int32_t* masked = nullptr;          // the rows' masked token lists, concatenated
  // Structured outputs: [rows with a mask, allowed_words] bitmasks, bit (id % 32) of word
  // (id / 32) set where the token may be drawn; the other logits become -inf (first, before the
  // penalties: -inf stays -inf through them).
  const uint32_t* allowed = nullptr;
  int64_t allowed_words = 0;   // ceil(vocab / 32)
  float* workspace = nullptr;  // [rows, vocab] fp32: the processed logits of rows with processors
  int32_t* tokens = nullptr;   // [rows] the drawn token
  float* logprobs = nullptr;   // [rows] its raw log-probability (rows with num_logprobs >= 0)
  int32_t* top_tokens = nullptr;  // [rows, kMaxTopLogprobs] the top num_logprobs, descending,
  float* top_logprobs = nullptr;  // ties to the lower id; [rows, kMaxTopLogprobs] their logprobs
  // Optional (tests): [rows, vocab] 1 where a sampled row's token may be drawn (kept by the
  // truncations, probability > 0).
  uint8_t* kept = nullptr;
  // Blocks per row: 1, 2, 4 or 8 (one cluster); 0 picks it from the row count and the SMs. The
  // results are the same bits for every team size. Before sm_90 (no clusters) always 1.
  int team = 0;
};

/// Samples every row not marked skip. Log-probabilities are those of the raw model distribution
/// (log_softmax of the unprocessed row), as the CPU sampler and vLLM report them by default. The
/// draw is the Gumbel-max trick over the kept tokens with the counter-based noise of sample_rows,
/// so a seeded request's stream depends on (seed, counter) alone, not on its batch.
cudaError_t sample_logits(const SampleLogitsArgs& args, cudaStream_t stream);

}  // namespace pagoda::cuda
