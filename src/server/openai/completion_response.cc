#include "server/openai/completion_response.h"

#include <algorithm>

#include "core/status.h"
#include "server/openai/request_common.h"
#include "server/openai/response_common.h"

namespace pagoda::openai {

CompletionResponseBuilder::CompletionResponseBuilder(const CompletionRequest& request,
                                                     const Tokenizer* tokenizer)
    : id_(request.id),
      created_(request.created),
      model_(request.model),
      echo_(request.echo),
      logprobs_(request.logprobs),
      include_stop_str_(request.include_stop_str_in_output),
      continuous_usage_(request.continuous_usage),
      return_token_ids_(request.return_token_ids),
      tokens_as_ids_(request.tokens_as_ids),
      n_(std::max(1, request.n)),
      tokenizer_(tokenizer) {
  if (!request.engine_requests.empty()) params_ = request.engine_requests.front().params;
  for (size_t i = 0; i < request.engine_requests.size(); ++i) {
    PromptInfo info;
    info.ids = request.engine_requests[i].prompt_token_ids;
    info.text = i < request.prompt_texts.size() ? request.prompt_texts[i] : std::string();
    info.num_tokens = static_cast<int64_t>(info.ids.size());
    prompts_.push_back(std::move(info));
  }
  choices_.resize(prompts_.size() * n_);
}

CompletionResponseBuilder::Choice& CompletionResponseBuilder::choice(size_t prompt_index,
                                                                     const RequestOutput& out) {
  PAGODA_CHECK(prompt_index < prompts_.size() && out.index >= 0 && out.index < n_,
               "update for prompt {} completion {} of a request with {} prompts and n={}",
               prompt_index, out.index, prompts_.size(), n_);
  return choices_[prompt_index * n_ + out.index];
}

void CompletionResponseBuilder::append_logprob(Choice& delta, int64_t& offset, int32_t id,
                                               const std::optional<TokenLogprobs>& lp) const {
  const TokenText t = token_text(tokenizer_, id, tokens_as_ids_);
  delta.tokens.push_back(t.text);
  delta.text_offset.push_back(offset);
  offset += text_length(t.text);
  if (!lp) {
    delta.token_logprobs.push_back(nullptr);
    delta.top_logprobs.push_back(nullptr);
    return;
  }
  delta.token_logprobs.push_back(json_logprob(lp->logprob));
  // The top alternatives and the chosen token, as a {token: logprob} map (OpenAI's shape).
  Json top = Json::object();
  const size_t k = std::min<size_t>(lp->top.size(), static_cast<size_t>(logprobs_.value_or(0)));
  for (size_t i = 0; i < k; ++i) {
    const std::string key = token_text(tokenizer_, lp->top[i].first, tokens_as_ids_).text;
    if (!top.contains(key)) top[key] = json_logprob(lp->top[i].second);
  }
  if (!top.contains(t.text)) top[t.text] = json_logprob(lp->logprob);
  delta.top_logprobs.push_back(std::move(top));
}

void CompletionResponseBuilder::apply(size_t prompt_index, const RequestOutput& out, Choice& state,
                                      Choice& delta) {
  PromptInfo& info = prompts_[prompt_index];
  if (!out.prompt_logprobs.empty()) info.prompt_logprobs = out.prompt_logprobs;
  if (out.num_prompt_tokens > 0) info.num_tokens = out.num_prompt_tokens;
  info.num_cached = std::max<int64_t>(info.num_cached, out.num_cached_tokens);
  completion_tokens_ += static_cast<int64_t>(out.token_ids.size());
  if (out.kv_transfer_params) kv_transfer_params_ = out.kv_transfer_params;
  if (!state.started) {
    state.started = true;
    delta.with_prompt_ids = true;
    if (echo_) {
      delta.text += info.text;
      // Prompt logprobs come with completion 0's first update; other completions that start
      // earlier report the prompt tokens without them.
      for (size_t j = 0; logprobs_ && j < info.ids.size(); ++j) {
        append_logprob(delta, state.text_chars, info.ids[j],
                       j < info.prompt_logprobs.size() ? info.prompt_logprobs[j] : std::nullopt);
      }
    }
  }
  delta.text += out.text;
  delta.text += stop_string_suffix(out, params_, include_stop_str_);
  if (return_token_ids_) {
    delta.token_ids.insert(delta.token_ids.end(), out.token_ids.begin(), out.token_ids.end());
  }
  for (size_t k = 0; logprobs_ && k < out.token_ids.size(); ++k) {
    append_logprob(
        delta, state.text_chars, out.token_ids[k],
        k < out.logprobs.size() ? std::optional<TokenLogprobs>(out.logprobs[k]) : std::nullopt);
  }
  if (out.finish_reason) {
    delta.finish_reason = finish_reason_json(out);
    delta.stop_reason = stop_reason_json(out, params_);
  }
}

std::vector<Json> CompletionResponseBuilder::stream_chunks(size_t prompt_index,
                                                           const RequestOutput& out) {
  Choice& state = choice(prompt_index, out);
  Choice delta;
  apply(prompt_index, out, state, delta);
  if (delta.text.empty() && delta.tokens.empty() && out.token_ids.empty() && !out.finish_reason) {
    return {};
  }
  Json chunk = envelope();
  chunk["choices"] =
      Json::array({choice_json(prompt_index * n_ + out.index, delta, /*whole=*/false)});
  if (continuous_usage_) chunk["usage"] = usage_chunk()["usage"];
  // Bi-directional KV: the finished turn's hand-off rides on the chunk that ends it.
  if (out.finish_reason && out.kv_transfer_params)
    chunk["kv_transfer_params"] = kv_transfer_params_json(*out.kv_transfer_params);
  return {std::move(chunk)};
}

void CompletionResponseBuilder::add(size_t prompt_index, const RequestOutput& out) {
  Choice& state = choice(prompt_index, out);
  apply(prompt_index, out, state, state);
}

Json CompletionResponseBuilder::choice_json(size_t index, const Choice& c, bool whole) const {
  Json j = Json::object();
  j["index"] = index;
  j["text"] = c.text;
  if (logprobs_) {
    j["logprobs"] = {{"tokens", c.tokens},
                     {"token_logprobs", c.token_logprobs},
                     {"top_logprobs", c.top_logprobs},
                     {"text_offset", c.text_offset}};
  } else {
    j["logprobs"] = nullptr;
  }
  j["finish_reason"] = c.finish_reason;
  j["stop_reason"] = c.stop_reason;
  const PromptInfo& prompt = prompts_[index / static_cast<size_t>(n_)];
  if (whole) {
    j["prompt_logprobs"] = prompt_logprobs_json(prompt.prompt_logprobs, tokenizer_, tokens_as_ids_);
  }
  if (return_token_ids_) {
    j["token_ids"] = token_ids_json(c.token_ids);
    if (whole || c.with_prompt_ids) j["prompt_token_ids"] = token_ids_json(prompt.ids);
  }
  return j;
}

Json CompletionResponseBuilder::envelope() const {
  Json j = Json::object();
  j["id"] = id_;
  j["object"] = "text_completion";
  j["created"] = created_;
  j["model"] = model_;
  return j;
}

Json CompletionResponseBuilder::usage_chunk() const {
  Json chunk = envelope();
  chunk["choices"] = Json::array();
  int64_t prompt_tokens = 0;
  int64_t cached = 0;
  for (const PromptInfo& p : prompts_) {
    prompt_tokens += p.num_tokens;
    cached += p.num_cached;
  }
  chunk["usage"] = usage_json(prompt_tokens, completion_tokens_, cached);
  return chunk;
}

Json CompletionResponseBuilder::response() const {
  Json body = envelope();
  body["choices"] = Json::array();
  for (size_t i = 0; i < choices_.size(); ++i)
    body["choices"].push_back(choice_json(i, choices_[i], /*whole=*/true));
  body["usage"] = usage_chunk()["usage"];
  if (kv_transfer_params_)
    body["kv_transfer_params"] = kv_transfer_params_json(*kv_transfer_params_);
  return body;
}

}  // namespace pagoda::openai
