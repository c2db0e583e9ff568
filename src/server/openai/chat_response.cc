#include "server/openai/chat_response.h"

#include <algorithm>

#include "core/status.h"
#include "server/openai/request_common.h"
#include "server/openai/response_common.h"

namespace pagoda::openai {
namespace {

Json bytes_json(const std::string& bytes) {
  Json list = Json::array();
  for (unsigned char c : bytes) list.push_back(static_cast<int>(c));
  return list;
}

// message.tool_calls[i]; streamed, the delta adds "index".
Json tool_call_json(const ToolCall& call) {
  return {{"id", call.id},
          {"type", "function"},
          {"function", {{"name", call.name}, {"arguments", call.arguments}}}};
}

}  // namespace

ChatResponseBuilder::ChatResponseBuilder(const ChatRequest& request, const Tokenizer* tokenizer)
    : id_(request.id),
      created_(request.created),
      model_(request.model),
      logprobs_(request.logprobs),
      top_logprobs_(request.top_logprobs),
      include_stop_str_(request.include_stop_str_in_output),
      params_(request.engine_request.params),
      tokenizer_(tokenizer),
      tool_parser_(request.tool_parser),
      forced_tool_parser_(request.forced_tool_parser),
      reasoning_(request.reasoning),
      continuous_usage_(request.continuous_usage),
      parallel_tool_calls_(request.parallel_tool_calls),
      return_token_ids_(request.return_token_ids),
      tokens_as_ids_(request.tokens_as_ids),
      role_(request.role),
      echo_text_(request.echo_text),
      prompt_token_ids_(request.engine_request.prompt_token_ids),
      choices_(static_cast<size_t>(std::max(1, request.n))),
      prompt_tokens_(static_cast<int64_t>(request.engine_request.prompt_token_ids.size())) {
  if (tool_parser_ && request.stream) {
    for (Choice& c : choices_) c.tool_stream.emplace(*tool_parser_);
  }
  if (reasoning_) {
    for (Choice& c : choices_) c.splitter.emplace(*reasoning_);
  }
}

ChatResponseBuilder::Choice& ChatResponseBuilder::choice(const RequestOutput& out) {
  PAGODA_CHECK(out.index >= 0 && static_cast<size_t>(out.index) < choices_.size(),
               "update for completion {} of a chat request with n={}", out.index, choices_.size());
  if (out.num_prompt_tokens > 0) prompt_tokens_ = out.num_prompt_tokens;
  if (!out.prompt_logprobs.empty()) prompt_logprobs_ = out.prompt_logprobs;
  cached_tokens_ = std::max<int64_t>(cached_tokens_, out.num_cached_tokens);
  completion_tokens_ += static_cast<int64_t>(out.token_ids.size());
  if (out.kv_transfer_params) kv_transfer_params_ = out.kv_transfer_params;
  return choices_[out.index];
}

Json ChatResponseBuilder::logprob_entries(const RequestOutput& out) const {
  Json entries = Json::array();
  for (size_t k = 0; k < out.token_ids.size(); ++k) {
    const TokenText t = token_text(tokenizer_, out.token_ids[k], tokens_as_ids_);
    Json entry = Json::object();
    entry["token"] = t.text;
    entry["logprob"] = k < out.logprobs.size() ? json_logprob(out.logprobs[k].logprob) : -9999.0;
    entry["bytes"] = bytes_json(t.bytes);
    Json top = Json::array();
    if (k < out.logprobs.size()) {
      const auto& alternatives = out.logprobs[k].top;
      const size_t n = std::min<size_t>(alternatives.size(), static_cast<size_t>(top_logprobs_));
      for (size_t i = 0; i < n; ++i) {
        const TokenText alt = token_text(tokenizer_, alternatives[i].first, tokens_as_ids_);
        top.push_back({{"token", alt.text},
                       {"logprob", json_logprob(alternatives[i].second)},
                       {"bytes", bytes_json(alt.bytes)}});
      }
    }
    entry["top_logprobs"] = std::move(top);
    entries.push_back(std::move(entry));
  }
  return entries;
}

Json ChatResponseBuilder::envelope(const char* object) const {
  Json j = Json::object();
  j["id"] = id_;
  j["object"] = object;
  j["created"] = created_;
  j["model"] = model_;
  return j;
}

Json ChatResponseBuilder::chunk(int index, Json delta, Json logprobs, Json finish_reason,
                                Json stop_reason) const {
  Json c = Json::object();
  c["index"] = index;
  c["delta"] = std::move(delta);
  c["logprobs"] = std::move(logprobs);
  c["finish_reason"] = std::move(finish_reason);
  if (!stop_reason.is_null()) c["stop_reason"] = std::move(stop_reason);
  Json j = envelope("chat.completion.chunk");
  j["choices"] = Json::array({std::move(c)});
  if (continuous_usage_)
    j["usage"] = usage_json(prompt_tokens_, completion_tokens_, cached_tokens_);
  return j;
}

void ChatResponseBuilder::start_choice(int index, std::vector<Json>& chunks) {
  Choice& c = choices_[static_cast<size_t>(index)];
  if (c.role_sent) return;
  c.role_sent = true;
  Json role = chunk(index, {{"role", role_}, {"content", ""}}, nullptr, nullptr, nullptr);
  if (return_token_ids_) role["prompt_token_ids"] = token_ids_json(prompt_token_ids_);
  chunks.push_back(std::move(role));
  // vLLM's echo: the repeated last message follows the role chunk.
  if (!echo_text_.empty()) {
    chunks.push_back(chunk(index, {{"content", echo_text_}}, nullptr, nullptr, nullptr));
  }
}

std::vector<Json> ChatResponseBuilder::start_chunks() {
  std::vector<Json> chunks;
  for (size_t i = 0; i < choices_.size(); ++i) start_choice(static_cast<int>(i), chunks);
  return chunks;
}

std::vector<Json> ChatResponseBuilder::stream_chunks(const RequestOutput& out) {
  Choice& c = choice(out);
  std::vector<Json> chunks;
  start_choice(out.index, chunks);
  const size_t first_of_update = chunks.size();
  std::string text = out.text + stop_string_suffix(out, params_, include_stop_str_);
  std::string reasoning;
  if (c.splitter) {
    ReasoningSplitter::Delta d = c.splitter->add(text);
    if (out.finish_reason) {
      ReasoningSplitter::Delta tail = c.splitter->finish();
      d.reasoning += tail.reasoning;
      d.content += tail.content;
    }
    reasoning = std::move(d.reasoning);
    text = std::move(d.content);
  }
  if (c.tool_stream) text = c.tool_stream->add(text);
  Json logprobs =
      logprobs_ && !out.token_ids.empty() ? Json{{"content", logprob_entries(out)}} : Json();
  if (!reasoning.empty()) {
    // The update's logprobs ride on its first chunk. vLLM's current name is "reasoning";
    // "reasoning_content" is its older one, which clients still read.
    chunks.push_back(chunk(out.index, {{"reasoning", reasoning}, {"reasoning_content", reasoning}},
                           std::move(logprobs), nullptr, nullptr));
    logprobs = Json();
  }
  if (!text.empty() || !logprobs.is_null()) {
    chunks.push_back(chunk(out.index, {{"content", text}}, std::move(logprobs), nullptr, nullptr));
  }
  if (out.finish_reason) {
    Json finish_reason = finish_reason_json(out);
    for (Json& tail : tool_call_chunks(c, out, finish_reason)) chunks.push_back(std::move(tail));
    chunks.push_back(chunk(out.index, Json::object(), nullptr, std::move(finish_reason),
                           stop_reason_json(out, params_)));
    // Bi-directional KV: the finished turn's hand-off rides on the chunk that ends it.
    if (out.kv_transfer_params)
      chunks.back()["kv_transfer_params"] = kv_transfer_params_json(*out.kv_transfer_params);
  }
  if (return_token_ids_ && !out.token_ids.empty()) {
    // The update's tokens ride on its first chunk; text held back (a possible tool call) still
    // sends its tokens, in a chunk with an empty delta, so that the chunks' token_ids add up.
    if (chunks.size() == first_of_update) {
      chunks.push_back(chunk(out.index, Json::object(), nullptr, nullptr, nullptr));
    }
    chunks[first_of_update]["choices"][0]["token_ids"] = token_ids_json(out.token_ids);
  }
  return chunks;
}

std::vector<Json> ChatResponseBuilder::tool_call_chunks(Choice& c, const RequestOutput& out,
                                                        Json& finish_reason) const {
  std::vector<Json> chunks;
  if (!c.tool_stream) return chunks;
  const ExtractedToolCalls tail = c.tool_stream->finish();
  if (tail.content && !tail.content->empty()) {
    chunks.push_back(chunk(out.index, {{"content", *tail.content}}, nullptr, nullptr, nullptr));
  }
  // parallel_tool_calls false: the first call only (vLLM keeps the deltas of index 0).
  const size_t num_calls =
      parallel_tool_calls_ ? tail.calls.size() : std::min<size_t>(1, tail.calls.size());
  for (size_t i = 0; i < num_calls; ++i) {
    Json call = {{"index", i}};
    call.update(tool_call_json(tail.calls[i]));
    chunks.push_back(chunk(out.index, {{"tool_calls", Json::array({std::move(call)})}}, nullptr,
                           nullptr, nullptr));
  }
  if (!tail.calls.empty() && tool_parser_->finish_with_tool_calls()) finish_reason = "tool_calls";
  return chunks;
}

Json ChatResponseBuilder::usage_chunk() const {
  Json j = envelope("chat.completion.chunk");
  j["choices"] = Json::array();
  j["usage"] = usage_json(prompt_tokens_, completion_tokens_, cached_tokens_);
  return j;
}

void ChatResponseBuilder::add(const RequestOutput& out) {
  Choice& c = choice(out);
  c.content += out.text;
  c.content += stop_string_suffix(out, params_, include_stop_str_);
  if (return_token_ids_) {
    c.token_ids.insert(c.token_ids.end(), out.token_ids.begin(), out.token_ids.end());
  }
  if (logprobs_) {
    for (Json& entry : logprob_entries(out)) c.logprobs.push_back(std::move(entry));
  }
  if (out.finish_reason) {
    c.finish_reason = finish_reason_json(out);
    c.stop_reason = stop_reason_json(out, params_);
    if (c.splitter) {
      ReasoningSplitter::Delta d = c.splitter->add(c.content);
      ReasoningSplitter::Delta tail = c.splitter->finish();
      c.reasoning = d.reasoning + tail.reasoning;
      c.content = d.content + tail.content;
      // vLLM: content after the reasoning is null when nothing follows it.
      c.content_null = c.splitter->saw_reasoning() && c.content.empty();
    }
    if (tool_parser_) {
      ExtractedToolCalls parsed = tool_parser_->extract(c.content);
      if (!parsed.calls.empty()) {
        c.tool_calls = std::move(parsed.calls);
        if (!parallel_tool_calls_) c.tool_calls.resize(1);
        c.content_null = !parsed.content;
        c.content = parsed.content.value_or("");
        // vLLM's, even when max_tokens cut the output
        if (tool_parser_->finish_with_tool_calls()) c.finish_reason = "tool_calls";
      }
    }
  }
}

Json ChatResponseBuilder::response() const {
  Json body = envelope("chat.completion");
  body["choices"] = Json::array();
  for (size_t i = 0; i < choices_.size(); ++i) {
    const Choice& c = choices_[i];
    Json choice = Json::object();
    choice["index"] = i;
    // vLLM's echo repeats the last message (of the answer's role) before the answer.
    Json content = c.content_null && echo_text_.empty() ? Json() : Json(echo_text_ + c.content);
    choice["message"] = {{"role", role_}, {"content", std::move(content)}};
    if (c.splitter) {
      const Json reasoning = c.splitter->saw_reasoning() ? Json(c.reasoning) : Json();
      choice["message"]["reasoning"] = reasoning;
      choice["message"]["reasoning_content"] = reasoning;
    }
    if (!c.tool_calls.empty()) {
      Json calls = Json::array();
      for (const ToolCall& call : c.tool_calls) calls.push_back(tool_call_json(call));
      choice["message"]["tool_calls"] = std::move(calls);
    }
    choice["logprobs"] = logprobs_ ? Json{{"content", c.logprobs}} : Json();
    choice["finish_reason"] = c.finish_reason;
    choice["stop_reason"] = c.stop_reason;
    if (return_token_ids_) choice["token_ids"] = token_ids_json(c.token_ids);
    body["choices"].push_back(std::move(choice));
  }
  body["prompt_logprobs"] = prompt_logprobs_json(prompt_logprobs_, tokenizer_, tokens_as_ids_);
  if (return_token_ids_) body["prompt_token_ids"] = token_ids_json(prompt_token_ids_);
  body["usage"] = usage_json(prompt_tokens_, completion_tokens_, cached_tokens_);
  if (kv_transfer_params_)
    body["kv_transfer_params"] = kv_transfer_params_json(*kv_transfer_params_);
  return body;
}

}  // namespace pagoda::openai
