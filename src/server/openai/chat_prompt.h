#pragma once
// The conversation half of a chat request (messages, tools, template options) and its rendering
// into a prompt, shared by /v1/chat/completions and /tokenize.
#include <optional>
#include <string>

#include "server/openai/json_body.h"
#include "server/openai/server_context.h"

namespace pagoda::openai {

/// A validated conversation, ready to render.
struct ChatConversation {
  /// Messages as the template sees them: roles checked, text content parts joined with "\n" into
  /// a string (vLLM's "string" content format), tool call arguments parsed into objects (as vLLM
  /// does, so that templates can `tojson` them).
  Json messages = Json::array();
  std::optional<Json> tools;      // as the client sent them, after validation
  std::optional<Json> documents;  // likewise
  /// "none", "auto", "required" or the forced function's name. Accepted and validated, but
  /// decoding is not constrained: the template decides how tools are offered.
  std::string tool_choice = "auto";
  bool tool_choice_is_function = false;  // tool_choice named a function (maybe one called "auto")
  bool add_generation_prompt = true;
  bool continue_final_message = false;
  std::optional<std::string> chat_template;  // a per-request template source
  Json chat_template_kwargs = Json::object();
};

/// Reads messages, tools, tool_choice, documents, add_generation_prompt, continue_final_message,
/// chat_template and chat_template_kwargs from a body; 400 naming the field on any problem.
[[nodiscard]] ChatConversation read_chat_conversation(const Json& body, const ServerContext& ctx);

/// Renders the conversation with the request's template or the model's. Template errors become a
/// 400 (raise_exception: the template's own message); continue_final_message cuts the render
/// right after the final message's text, as transformers' apply_chat_template does.
[[nodiscard]] std::string render_chat_prompt(const ChatConversation& conversation,
                                             const ServerContext& ctx);

}  // namespace pagoda::openai
