#include "server/openai/chat_request.h"

#include <algorithm>

#include <fmt/format.h>

#include "server/openai/api_error.h"
#include "server/openai/chat_prompt.h"
#include "server/openai/json_body.h"
#include "server/openai/reasoning_parser.h"
#include "server/openai/request_common.h"
#include "server/openai/structured_request.h"

namespace pagoda::openai {
namespace {

bool has_strict_tool(const Json& tools) {
  for (const Json& tool : tools) {
    const Json& fn = tool.at("function");
    if (fn.contains("strict") && fn["strict"] == Json(true)) return true;
  }
  return false;
}

// Whether a trigger of the tag is a special token of the model's tokenizer.
bool trigger_is_special(const std::string& tag, const ServerContext& ctx) {
  if (!ctx.tokenizer) return true;
  for (const Json& trigger : Json::parse(tag).at("triggers")) {
    const auto id = ctx.tokenizer->token_to_id(trigger.get<std::string>());
    if (id && ctx.tokenizer->is_special(*id)) return true;
  }
  return false;
}

// vLLM's reasoning_effort values; the chat template decides what each means.
constexpr std::string_view kReasoningEfforts[] = {"none", "minimal", "low", "medium",
                                                  "high", "xhigh",   "max"};

// reasoning_effort reaches the template as a variable of that name (vLLM passes it with the
// chat_template_kwargs), and turns thinking on or off for templates that read enable_thinking
// unless the request's chat_template_kwargs set that.
void apply_reasoning_effort(const Json& body, Json& kwargs) {
  const std::optional<std::string> effort =
      get_string(body, "reasoning_effort", "reasoning_effort");
  if (!effort) return;
  if (std::find(std::begin(kReasoningEfforts), std::end(kReasoningEfforts), *effort) ==
      std::end(kReasoningEfforts)) {
    throw bad_request(fmt::format("'reasoning_effort' must be one of none, minimal, low, medium, "
                                  "high, xhigh or max, got '{}'",
                                  *effort),
                      "reasoning_effort");
  }
  kwargs["reasoning_effort"] = *effort;
  if (!kwargs.contains("enable_thinking")) kwargs["enable_thinking"] = *effort != "none";
}

}  // namespace

ChatRequest parse_chat_request(std::string_view body_text, const ServerContext& ctx,
                               std::string_view request_id_header) {
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
                       "kv_transfer_params",
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
                       "truncate_prompt_tokens",
                       "structured_outputs",
                       "guided_json",
                       "guided_regex",
                       "guided_choice",
                       "guided_grammar",
                       "guided_decoding_backend",
                       "guided_whitespace_pattern",
                       "logits_processors",
                       "use_beam_search",
                       "request_id",
                       "return_token_ids",
                       "return_tokens_as_token_ids",
                       "echo",
                       "reasoning_effort"},
                      "/v1/chat/completions");
  ChatRequest r;
  const RequestIds ids = read_request_ids(body, request_id_header, "chatcmpl-");
  r.id = ids.response_id;
  r.created = unix_time_now();
  EngineRequest& e = r.engine_request;
  e.request_id = ids.engine_id;

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
  r.parallel_tool_calls =
      get_bool(body, "parallel_tool_calls", "parallel_tool_calls").value_or(true);
  const OutputOptions output = read_output_options(body, ctx);
  r.return_token_ids = output.return_token_ids;
  r.tokens_as_ids = output.tokens_as_ids;
  const bool echo = get_bool(body, "echo", "echo").value_or(false);
  const bool add_special_tokens =
      get_bool(body, "add_special_tokens", "add_special_tokens").value_or(false);
  std::optional<StructuredField> structured = read_structured_outputs(body);
  reject_unsupported_vllm_fields(body);
  const std::optional<int64_t> truncate = read_truncate_prompt_tokens(body, ctx);
  read_request_extensions(body, ctx, e);
  check_prompt_logprobs_stream(e.params, r.stream);
  // vLLM: echo asks for the prompt's log-probabilities too (top_logprobs of them). They are
  // returned only whole, so a stream does not compute them.
  if (echo && !r.stream && !e.params.prompt_logprobs) e.params.prompt_logprobs = r.top_logprobs;
  // Range checks before the (costlier) render; max_tokens is settled after it when defaulted.
  if (max_tokens_given) validate_sampling(e.params, ctx);
  if (e.params.n > ctx.max_sequences_per_request) {
    throw bad_request(fmt::format("n = {} sequences; a request may ask for at most {}", e.params.n,
                                  ctx.max_sequences_per_request),
                      "n");
  }

  ChatConversation conversation = read_chat_conversation(body, ctx);
  apply_reasoning_effort(body, conversation.chat_template_kwargs);
  r.tool_choice = conversation.tool_choice;
  if (conversation.tools && conversation.tool_choice == "auto" &&
      !conversation.tool_choice_is_function && !ctx.tool_parser) {
    throw bad_request(
        "\"auto\" tool choice requires --enable-auto-tool-choice and --tool-call-parser to be set",
        "tool_choice");
  }
  const Json& last = conversation.messages.back();
  if (!conversation.add_generation_prompt) r.role = last["role"].get<std::string>();
  if (echo && last["role"] == r.role && last["content"].is_string()) {
    r.echo_text = last["content"].get<std::string>();
  }
  if (ctx.tool_parser && conversation.tools && conversation.tool_choice == "auto" &&
      !conversation.tool_choice_is_function) {
    r.tool_parser = ctx.tool_parser;
    // vLLM's adjust_request: a marker that is a special token must survive detokenization.
    if (r.tool_parser->needs_special_tokens()) e.params.skip_special_tokens = false;
  }
  // tool_choice "required" or a named function: the output is the calls' JSON (vLLM's way),
  // parsed into tool_calls whatever the server's tool parser.
  const bool required =
      conversation.tool_choice == "required" && !conversation.tool_choice_is_function;
  if (conversation.tools && (required || conversation.tool_choice_is_function)) {
    std::optional<StructuredOutputsParams> options;
    if (structured && structured->params.num_constraints() == 0) {
      options = std::move(structured->params);  // options for the calls' JSON
      structured.reset();
    }
    if (structured) {
      throw bad_request(fmt::format("'{}' cannot be combined with tool_choice \"required\" or a "
                                    "named function, which constrain the output already",
                                    structured->param),
                        structured->param);
    }
    StructuredOutputsParams so;
    Json schema = forced_tool_schema(*conversation.tools, required, conversation.tool_choice);
    if (required && !r.parallel_tool_calls) schema["maxItems"] = 1;
    so.json = schema.dump();
    if (options) apply_options(*options, so);
    check_structured_outputs(so, "tools");
    structured = StructuredField{std::move(so), "tool_choice"};
    r.forced_tool_parser = make_forced_tool_parser(
        required ? std::nullopt : std::optional<std::string>(conversation.tool_choice));
    r.tool_parser = r.forced_tool_parser.get();
  }
  // tool_choice "auto" with strict tools: a structural tag in the parser's format makes every
  // call follow its tool's parameters while the rest of the text stays free. Not where another
  // constraint is set, nor where the call marker is a special token (a grammar cannot write it).
  if (r.tool_parser && !r.forced_tool_parser && !structured && conversation.tools &&
      has_strict_tool(*conversation.tools)) {
    if (std::optional<std::string> tag =
            r.tool_parser->strict_calls_tag(conversation.tools->dump());
        tag && !trigger_is_special(*tag, ctx)) {
      StructuredOutputsParams so;
      so.structural_tag = std::move(*tag);
      check_structured_outputs(so, "tools");
      structured = StructuredField{std::move(so), "tools"};
    }
  }
  if (structured) {
    if (structured->params.num_constraints() == 0) {  // options alone: a 400
      check_structured_outputs(structured->params, structured->param);
    }
    // With a reasoning parser the constraint starts after the reasoning (vLLM's).
    if (ctx.reasoning) {
      structured->params.reasoning_start = ctx.reasoning->start_tag;
      structured->params.reasoning_end = ctx.reasoning->end_tag;
    }
    e.params.structured_outputs = std::move(structured->params);
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
