#include "pagoda/llm.h"

#include "core/status.h"
#include "engine/engine_core.h"

namespace pagoda {

LLM::LLM(const EngineArgs& args) : engine_(std::make_unique<EngineCore>(args)) {}

LLM::~LLM() = default;

std::vector<GenerateResult> LLM::generate(const std::vector<PromptInput>& prompts,
                                          const SamplingParams& params) {
  return generate(prompts, std::vector<SamplingParams>(prompts.size(), params));
}

std::vector<GenerateResult> LLM::generate(const std::vector<PromptInput>& prompts,
                                          const std::vector<SamplingParams>& params) {
  if (params.size() != prompts.size()) {
    throw InvalidArgument(
        fmt::format("{} sampling params for {} prompts", params.size(), prompts.size()));
  }
  std::vector<std::shared_ptr<OutputStream>> streams;
  streams.reserve(prompts.size());
  try {
    for (size_t i = 0; i < prompts.size(); ++i) {
      EngineRequest r;
      r.prompt = prompts[i].text;
      r.prompt_token_ids = prompts[i].token_ids;
      r.params = params[i];
      streams.push_back(engine_->submit(std::move(r)));
    }
  } catch (...) {
    // An invalid prompt fails the whole call: the ones already queued are withdrawn.
    for (auto& s : streams) {
      while (auto out = s->try_next()) engine_->abort(out->request_id);
    }
    throw;
  }
  std::vector<GenerateResult> results;
  results.reserve(streams.size());
  for (auto& s : streams) results.push_back(collect_result(*s));
  return results;
}

GenerateResult collect_result(OutputStream& stream) {
  GenerateResult result;
  while (std::optional<RequestOutput> out = stream.next()) {
    result.request_id = out->request_id;
    result.num_prompt_tokens = out->num_prompt_tokens;
    result.num_cached_tokens = std::max(result.num_cached_tokens, out->num_cached_tokens);
    if (!out->prompt_logprobs.empty()) result.prompt_logprobs = std::move(out->prompt_logprobs);
    if (static_cast<int>(result.outputs.size()) <= out->index)
      result.outputs.resize(static_cast<size_t>(out->index) + 1);
    CompletionOutput& c = result.outputs[static_cast<size_t>(out->index)];
    c.index = out->index;
    c.token_ids.insert(c.token_ids.end(), out->token_ids.begin(), out->token_ids.end());
    c.text += out->text;
    for (auto& lp : out->logprobs) c.logprobs.push_back(std::move(lp));
    if (out->finish_reason) {
      c.finish_reason = *out->finish_reason;
      c.stop_reason = out->stop_reason;
      c.error = out->error;
      c.cumulative_logprob = out->cumulative_logprob;
      c.beam_score = out->beam_score;
    }
  }
  return result;
}

}  // namespace pagoda
