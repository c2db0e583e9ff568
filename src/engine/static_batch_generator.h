#pragma once
// A minimal generation loop: all prompts are prefilled in one flat batch, then decoded in lockstep,
// each sequence in its own run of KV blocks. It has no scheduler, no preemption and no prefix
// sharing; it is the reference path that the EngineCore (continuous batching) is checked against.
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "core/thread_pool.h"
#include "model/model.h"
#include "sampling/sampler.h"

namespace pagoda {

/// One prompt to complete.
struct GenerationRequest {
  std::vector<int32_t> prompt_ids;
  SamplingParams params;
};

/// The completion of one request.
struct GenerationResult {
  std::vector<int32_t> token_ids;
  std::vector<SampledToken> sampled;  // per generated token, with logprobs when requested
  std::string finish_reason;          // "stop" or "length"
};

/// Runs a fixed set of requests to completion on one model.
class StaticBatchGenerator {
 public:
  explicit StaticBatchGenerator(Model& model, int block_size = 16);

  /// Called after each generated token: (request index, sampled token).
  using TokenCallback = std::function<void(size_t, const SampledToken&)>;

  /// Validates every request (throwing InvalidArgument before any work), then generates.
  [[nodiscard]] std::vector<GenerationResult> generate(
      const std::vector<GenerationRequest>& requests, const TokenCallback& on_token = {});

 private:
  Model& model_;
  int block_size_;
};

}  // namespace pagoda
