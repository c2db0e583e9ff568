#include "server/openai/completion_request.h"

#include <fmt/format.h>

#include "server/openai/api_error.h"
#include "server/openai/json_body.h"
#include "server/openai/request_common.h"
#include "server/openai/structured_request.h"

namespace pagoda::openai {
namespace {

struct Prompt {
  std::vector<int32_t> ids;
  std::string text;
  bool is_text = false;
};

bool is_token_list(const Json& v) { return v.is_array() && !v.empty() && v.front().is_number(); }

std::vector<int32_t> read_ids(const Json& list, const std::string& param,
                              const ServerContext& ctx) {
  std::vector<int32_t> ids;
  ids.reserve(list.size());
  for (const Json& x : list) ids.push_back(static_cast<int32_t>(as_int(x, param, 0, INT32_MAX)));
  check_token_ids(ids, ctx, param);
  return ids;
}

Prompt text_prompt(const Json& v, bool add_special_tokens, const ServerContext& ctx) {
  if (!ctx.tokenizer) throw bad_request("This model has no tokenizer: send token ids", "prompt");
  Prompt p;
  p.text = v.get<std::string>();
  p.is_text = true;
  p.ids = ctx.tokenizer->encode(p.text, add_special_tokens);
  return p;
}

Prompt token_prompt(const Json& v, const ServerContext& ctx) {
  Prompt p;
  p.ids = read_ids(v, "prompt", ctx);
  if (ctx.tokenizer) p.text = ctx.tokenizer->decode(p.ids, /*skip_special_tokens=*/false);
  return p;
}

// prompt: "text", ["a", "b"], [1, 2, 3] or [[1, 2], [3]]; each element is one prompt.
std::vector<Prompt> read_prompts(const Json& body, bool add_special_tokens,
                                 const ServerContext& ctx) {
  const Json* prompt = find_field(body, "prompt");
  if (!prompt) throw bad_request("Field 'prompt' is required", "prompt");
  std::vector<Prompt> prompts;
  if (prompt->is_string()) {
    prompts.push_back(text_prompt(*prompt, add_special_tokens, ctx));
  } else if (is_token_list(*prompt)) {
    prompts.push_back(token_prompt(*prompt, ctx));
  } else if (prompt->is_array()) {
    for (const Json& item : *prompt) {
      if (item.is_string()) {
        prompts.push_back(text_prompt(item, add_special_tokens, ctx));
      } else if (item.is_array()) {
        prompts.push_back(token_prompt(item, ctx));
      } else {
        throw bad_request(
            "'prompt' must be a string, a list of strings, a list of token ids or a list of lists "
            "of token ids",
            "prompt");
      }
    }
  } else {
    throw bad_request(
        "'prompt' must be a string, a list of strings, a list of token ids or a list of lists of "
        "token ids",
        "prompt");
  }
  if (prompts.empty()) throw bad_request("'prompt' must not be empty", "prompt");
  for (const Prompt& p : prompts) {
    // An empty string is rejected even where the tokenizer would add BOS: the answer must not
    // depend on the model's tokenizer.
    if (p.ids.empty() || (p.is_text && p.text.empty())) {
      throw bad_request("The prompt must contain at least one token", "prompt");
    }
  }
  return prompts;
}

// Prompts and sequences (n x prompts) per request are bounded, and checked before any prompt is
// tokenized: 100,000 prompts in one request would hold the engine for seconds and a gigabyte.
void check_request_size(const Json& body, int n, const ServerContext& ctx) {
  const Json* prompt = find_field(body, "prompt");
  if (prompt == nullptr || !prompt->is_array() || is_token_list(*prompt)) return;  // one prompt
  const auto num_prompts = static_cast<int64_t>(prompt->size());
  if (num_prompts > ctx.max_prompts_per_request) {
    throw bad_request(fmt::format("'prompt' holds {} prompts; a request may hold at most {}",
                                  num_prompts, ctx.max_prompts_per_request),
                      "prompt");
  }
  if (num_prompts * n > ctx.max_sequences_per_request) {
    throw bad_request(
        fmt::format("n = {} for each of {} prompts asks for {} sequences; a request may ask for "
                    "at most {}",
                    n, num_prompts, num_prompts * n, ctx.max_sequences_per_request),
        "n");
  }
}

}  // namespace

CompletionRequest parse_completion_request(std::string_view body_text, const ServerContext& ctx,
                                           std::string_view request_id_header) {
  const Json body = parse_json_body(body_text);
  note_ignored_fields(body,
                      {"model",
                       "prompt",
                       "stream",
                       "stream_options",
                       "echo",
                       "best_of",
                       "suffix",
                       "user",
                       "priority",
                       "cache_salt",
                       "kv_transfer_params",
                       "add_special_tokens",
                       "include_stop_str_in_output",
                       "response_format",
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
                       "prompt_embeds"},
                      "/v1/completions");
  CompletionRequest r;
  const RequestIds ids = read_request_ids(body, request_id_header, "cmpl-");
  r.id = ids.response_id;
  r.created = unix_time_now();
  // Embeddings in place of tokens: vLLM takes them only with --enable-prompt-embeds, and pagoda
  // has no such input.
  if (const Json* embeds = find_field(body, "prompt_embeds");
      embeds && !(embeds->is_array() && embeds->empty())) {
    throw bad_request(
        "'prompt_embeds' is not supported: send the prompt as text or token ids (vLLM needs "
        "--enable-prompt-embeds for it, which pagoda does not have)",
        "prompt_embeds");
  }

  EngineRequest base;
  read_sampling_fields(body, ctx, base.params, {});
  r.stream = get_bool(body, "stream", "stream").value_or(false);
  const StreamOptions stream_options = read_stream_options(body, r.stream);
  r.include_usage = stream_options.include_usage;
  r.continuous_usage = stream_options.continuous_usage;
  r.echo = get_bool(body, "echo", "echo").value_or(false);
  r.include_stop_str_in_output =
      get_bool(body, "include_stop_str_in_output", "include_stop_str_in_output").value_or(false);
  const bool add_special_tokens =
      get_bool(body, "add_special_tokens", "add_special_tokens").value_or(true);
  if (get_string(body, "suffix", "suffix")) {
    throw bad_request("'suffix' is not supported", "suffix");
  }
  if (std::optional<StructuredField> so = read_structured_outputs(body)) {
    if (so->params.num_constraints() == 0) check_structured_outputs(so->params, so->param);
    base.params.structured_outputs = std::move(so->params);
  }
  reject_unsupported_vllm_fields(body);
  const std::optional<int64_t> truncate = read_truncate_prompt_tokens(body, ctx);
  read_request_extensions(body, ctx, base);
  check_prompt_logprobs_stream(base.params, r.stream);
  const OutputOptions output = read_output_options(body, ctx);
  r.return_token_ids = output.return_token_ids;
  r.tokens_as_ids = output.tokens_as_ids;
  validate_sampling(base.params, ctx);
  if (auto best_of = get_int(body, "best_of", "best_of", INT32_MIN, INT32_MAX);
      best_of && *best_of != base.params.n) {
    throw bad_request(
        fmt::format("'best_of' must equal 'n' ({}): beam-free best-of is not supported, got {}",
                    base.params.n, *best_of),
        "best_of");
  }
  r.logprobs = base.params.logprobs;
  r.n = base.params.n;
  // echo with logprobs reports the prompt's logprobs too (vLLM): ask the engine for them.
  if (r.echo && r.logprobs && !base.params.prompt_logprobs) {
    base.params.prompt_logprobs = *r.logprobs;
  }

  check_request_size(body, base.params.n, ctx);
  std::vector<Prompt> prompts = read_prompts(body, add_special_tokens, ctx);
  if ((base.do_remote_decode || base.do_remote_prefill || base.return_kv) && prompts.size() != 1) {
    throw bad_request(
        fmt::format("'kv_transfer_params' is for one prompt; got {} prompts", prompts.size()),
        "kv_transfer_params");
  }
  r.model = resolve_model(body, ctx);
  for (Prompt& p : prompts) {
    // The echoed text is that of the tokens kept.
    if (truncate_prompt(p.ids, truncate) && ctx.tokenizer) {
      p.text = ctx.tokenizer->decode(p.ids, /*skip_special_tokens=*/false);
    }
  }
  for (size_t i = 0; i < prompts.size(); ++i) {
    check_context_length(static_cast<int64_t>(prompts[i].ids.size()), base.params.max_tokens, ctx,
                         "prompt");
    EngineRequest e = base;
    e.request_id = fmt::format("{}-{}", ids.engine_id, i);
    e.prompt_token_ids = prompts[i].ids;
    e.add_special_tokens = add_special_tokens;
    r.engine_requests.push_back(std::move(e));
    r.prompt_texts.push_back(prompts[i].text);
  }
  return r;
}

}  // namespace pagoda::openai
