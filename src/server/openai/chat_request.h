#pragma once
// POST /v1/chat/completions: the request body -> a rendered, tokenized EngineRequest.
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>

#include "engine/engine_core.h"
#include "server/openai/server_context.h"
#include "server/openai/tool_parser.h"

namespace pagoda::openai {

/// A parsed, validated chat completions request.
struct ChatRequest {
  std::string id;  // "chatcmpl-<hex>", also the engine request id
  int64_t created = 0;
  std::string model;
  bool stream = false;
  bool include_usage = false;
  bool continuous_usage = false;  // stream_options.continuous_usage_stats: usage in every chunk
  bool logprobs = false;          // report logprobs.content
  int top_logprobs = 0;           // alternatives per token when logprobs
  bool include_stop_str_in_output = false;
  int n = 1;
  std::string tool_choice;  // "none", "auto", "required" or the forced function's name
  /// Set when the output is parsed for tool calls: the server has a parser (ctx.tool_parser),
  /// the request offers tools and tool_choice is "auto". "none", "required" and a named function
  /// leave the output as content.
  const ToolParser* tool_parser = nullptr;
  /// tool_choice "required" or a named function: the output is constrained to the calls' JSON and
  /// this parser (tool_parser points to it) turns it into message.tool_calls.
  std::shared_ptr<const ToolParser> forced_tool_parser;
  /// The server's reasoning format (ctx.reasoning), or null.
  const ReasoningFormat* reasoning = nullptr;
  /// parallel_tool_calls false: at most the first parsed tool call is returned (vLLM).
  bool parallel_tool_calls = true;
  bool return_token_ids = false;  // token_ids per choice, prompt_token_ids once
  bool tokens_as_ids = false;     // return_tokens_as_token_ids: logprob tokens as "token_id:<id>"
  /// The role of the answer (vLLM's): "assistant", or the last message's role when the request
  /// asks for no generation prompt (the model continues that message).
  std::string role = "assistant";
  /// echo: the last message's content when its role is the answer's, which the answer repeats
  /// before the generated text (vLLM's echo on chat); empty otherwise.
  std::string echo_text;
  std::string prompt_text;  // the rendered conversation (never log it at info level)
  /// prompt_token_ids set (rendered text tokenized with add_special_tokens=false unless the
  /// request asks otherwise: the template writes BOS itself).
  EngineRequest engine_request;
};

/// Parses, validates and renders a /v1/chat/completions body. Throws ApiException: 400 naming
/// the field (malformed JSON, wrong types, empty messages, unsupported content parts, template
/// errors with the template's message, prompt + max_tokens past max_model_len, ...), 404 for an
/// unknown model. max_completion_tokens wins over max_tokens; with neither, the completion may
/// fill the rest of the context (vLLM). Unknown top-level fields are ignored; unknown keys inside
/// messages, content parts, tools, tool_choice and stream_options are a 400.
/// `request_id_header`: the X-Request-Id header ("" when absent), as parse_completion_request.
[[nodiscard]] ChatRequest parse_chat_request(std::string_view body, const ServerContext& ctx,
                                             std::string_view request_id_header = {});

}  // namespace pagoda::openai
