#pragma once
// Engine updates -> /v1/chat/completions "chat.completion" bodies and "chat.completion.chunk"s.
#include <optional>
#include <vector>

#include "pagoda/request_output.h"
#include "server/openai/chat_request.h"
#include "server/openai/json_body.h"
#include "server/openai/reasoning_parser.h"
#include "server/openai/tool_call_stream.h"

namespace pagoda::openai {

/// Turns the engine updates of one chat request into OpenAI's responses; choice index =
/// RequestOutput::index. With request.tool_parser, a finished choice's text is parsed for tool
/// calls: message.tool_calls, content = the text before them (null if none), finish_reason
/// "tool_calls"; streamed, the calls come as delta.tool_calls chunks when the choice finishes.
/// With request.reasoning, the text is first split into reasoning (message.reasoning_content,
/// streamed as delta.reasoning_content) and content; only the content is parsed for tool calls.
class ChatResponseBuilder {
 public:
  ChatResponseBuilder(const ChatRequest& request, const Tokenizer* tokenizer);

  /// Streaming, right after submit: one chunk per choice with delta {"role": "assistant",
  /// "content": ""} (vLLM sends these before the first token). Optional: stream_chunks sends a
  /// choice's role chunk itself if this was not called.
  [[nodiscard]] std::vector<Json> start_chunks();
  /// Streaming: the chunks for this update: the role chunk if not sent yet, a delta.content
  /// chunk when there is new text (or tokens, with logprobs), and on the last update a chunk
  /// with an empty delta and finish_reason/stop_reason. Parsing tool calls, text that may be a
  /// call is held back; the last update releases the rest and sends one delta.tool_calls chunk
  /// per call ({index, id, type, function: {name, arguments}}) before the finish chunk.
  [[nodiscard]] std::vector<Json> stream_chunks(const RequestOutput& out);
  /// Streaming with include_usage, after the last update: {"choices": [], "usage": {...}}.
  [[nodiscard]] Json usage_chunk() const;

  /// Non-streaming: records an update; response() when the stream has closed.
  void add(const RequestOutput& out);
  [[nodiscard]] Json response() const;

 private:
  struct Choice {
    bool role_sent = false;
    std::string content;
    std::optional<ReasoningSplitter> splitter;  // with a reasoning format
    std::string reasoning;                      // non-streaming: the split reasoning
    std::optional<ToolCallStream> tool_stream;  // streaming with a tool parser
    std::vector<ToolCall> tool_calls;           // non-streaming, parsed at the finish
    bool content_null = false;                  // the calls left no content
    Json logprobs = Json::array();              // logprobs.content entries
    Json finish_reason;
    Json stop_reason;
    std::vector<int32_t> token_ids;  // non-streaming, with return_token_ids
  };

  Choice& choice(const RequestOutput& out);
  [[nodiscard]] std::vector<Json> tool_call_chunks(Choice& c, const RequestOutput& out,
                                                   Json& finish_reason) const;
  [[nodiscard]] Json logprob_entries(const RequestOutput& out) const;
  [[nodiscard]] Json chunk(int index, Json delta, Json logprobs, Json finish_reason,
                           Json stop_reason) const;
  /// The role chunk of choice `index` (with prompt_token_ids when asked), then its echo chunk.
  void start_choice(int index, std::vector<Json>& chunks);
  [[nodiscard]] Json envelope(const char* object) const;

  std::string id_;
  int64_t created_;
  std::string model_;
  bool logprobs_;
  int top_logprobs_;
  bool include_stop_str_;
  SamplingParams params_;
  const Tokenizer* tokenizer_;
  const ToolParser* tool_parser_;
  std::shared_ptr<const ToolParser> forced_tool_parser_;  // keeps a request's own parser alive
  const ReasoningFormat* reasoning_;
  bool continuous_usage_;  // usage in every chunk (stream_options.continuous_usage_stats)
  bool parallel_tool_calls_;
  bool return_token_ids_;
  bool tokens_as_ids_;
  std::string role_;
  std::string echo_text_;
  std::vector<int32_t> prompt_token_ids_;
  std::vector<std::optional<TokenLogprobs>> prompt_logprobs_;
  std::vector<Choice> choices_;
  int64_t prompt_tokens_ = 0;
  int64_t cached_tokens_ = 0;
  std::optional<KVTransferParams> kv_transfer_params_;  // a producer's hand-off
  int64_t completion_tokens_ = 0;
};

}  // namespace pagoda::openai
