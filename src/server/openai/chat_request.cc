#include "server/openai/chat_request.h"

#include <algorithm>

#include <fmt/format.h>

#include "server/openai/api_error.h"
#include "server/openai/chat_prompt.h"
#include "server/openai/json_body.h"
#include "server/openai/request_common.h"

namespace pagoda::openai {
ChatRequest parse_chat_request(std::string_view body_text, const ServerContext& ctx) {
  const Json body = parse_json_body(body_text);
  note_ignored_fields(body,
                      {"model",
                       "messages",
                       "stream",
                       "stream_options",
                       "top_logprobs",
                       "max_completion_tokens",
                       "user",
                       "priority",
                       "cache_salt",
                       "tools",
                       "tool_choice",
                       "parallel_tool_calls",
                       "add_generation_prompt",
                       "continue_final_message",
                       "chat_template",
                       "chat_template_kwargs",
                       "documents",
                       "response_format",
                       "add_special_tokens",
                       "include_stop_str_in_output",
                       "truncate_prompt_tokens"},
                      "/v1/chat/completions");
  ChatRequest r;
  r.id = make_response_id("chatcmpl-");
  r.created = unix_time_now();
  EngineRequest& e = r.engine_request;
  e.request_id = r.id;

  // logprobs is a boolean here (an int in the legacy API): read it apart from the sampling fields.
  read_sampling_fields(body, ctx, e.params, {"logprobs"});
  r.stream = get_bool(body, "stream", "stream").value_or(false);
  const StreamOptions stream_options = read_stream_options(body, r.stream);
  r.include_usage = stream_options.include_usage;
  r.continuous_usage = stream_options.continuous_usage;
  r.logprobs = get_bool(body, "logprobs", "logprobs").value_or(false);
  const std::optional<int64_t> top_logprobs =
      get_int(body, "top_logprobs", "top_logprobs", 0, SamplingParams::kMaxLogprobs);
  if (top_logprobs && !r.logprobs) {
    throw bad_request("When using `top_logprobs`, `logprobs` must be set to true.", "top_logprobs");
  }
  r.top_logprobs = static_cast<int>(top_logprobs.value_or(0));
  if (r.logprobs) e.params.logprobs = r.top_logprobs;
  const std::optional<int64_t> max_completion_tokens =
      get_int(body, "max_completion_tokens", "max_completion_tokens", INT32_MIN, INT32_MAX);
  const bool max_tokens_given = find_field(body, "max_tokens") || max_completion_tokens;
  if (max_completion_tokens) e.params.max_tokens = static_cast<int>(*max_completion_tokens);
  if (max_completion_tokens && *max_completion_tokens < 1) {
    throw bad_request(
        fmt::format("max_completion_tokens must be >= 1, got {}", *max_completion_tokens),
        "max_completion_tokens");
  }
  r.include_stop_str_in_output =
      get_bool(body, "include_stop_str_in_output", "include_stop_str_in_output").value_or(false);
  (void)get_bool(body, "parallel_tool_calls", "parallel_tool_calls");
  const bool add_special_tokens =
      get_bool(body, "add_special_tokens", "add_special_tokens").value_or(false);
  check_response_format(body);
  reject_unsupported_vllm_fields(body);
  const std::optional<int64_t> truncate = read_truncate_prompt_tokens(body, ctx);
  read_request_extensions(body, e);
  // Range checks before the (costlier) render; max_tokens is settled after it when defaulted.
  if (max_tokens_given) validate_sampling(e.params, ctx);
  if (e.params.n > ctx.max_sequences_per_request) {
    throw bad_request(fmt::format("n = {} sequences; a request may ask for at most {}", e.params.n,
                                  ctx.max_sequences_per_request),
                      "n");
  }

  const ChatConversation conversation = read_chat_conversation(body, ctx);
  r.tool_choice = conversation.tool_choice;
  if (ctx.tool_parser && conversation.tools && conversation.tool_choice == "auto" &&
      !conversation.tool_choice_is_function) {
    r.tool_parser = ctx.tool_parser;
    // vLLM's adjust_request: a marker that is a special token must survive detokenization.
    if (r.tool_parser->needs_special_tokens()) e.params.skip_special_tokens = false;
  }
  r.model = resolve_model(body, ctx);
  r.reasoning = ctx.reasoning;
  if (!ctx.tokenizer) throw bad_request("This model has no tokenizer", "messages");
  r.prompt_text = render_chat_prompt(conversation, ctx);
  e.prompt_token_ids = ctx.tokenizer->encode(r.prompt_text, add_special_tokens);
  e.add_special_tokens = add_special_tokens;
  truncate_prompt(e.prompt_token_ids, truncate);
  if (e.prompt_token_ids.empty()) {
    throw bad_request("The rendered conversation has no tokens", "messages");
  }
  const auto prompt_len = static_cast<int64_t>(e.prompt_token_ids.size());
  if (!max_tokens_given) {
    // vLLM: without a limit, the completion may use whatever the prompt leaves of the context.
    const int64_t room = std::max<int64_t>(1, ctx.max_model_len - prompt_len);
    e.params.max_tokens = static_cast<int>(std::min<int64_t>(room, INT32_MAX));
    validate_sampling(e.params, ctx);
  }
  check_context_length(prompt_len, e.params.max_tokens, ctx, "messages");
  r.n = e.params.n;
  return r;
}

}  // namespace pagoda::openai
