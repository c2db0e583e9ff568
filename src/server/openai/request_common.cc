#include "server/openai/request_common.h"

#include <algorithm>
#include <chrono>
#include <random>

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include "core/status.h"
#include "sampling/params_json.h"
#include "server/openai/api_error.h"

namespace pagoda::openai {

std::string resolve_model(const Json& body, const ServerContext& ctx) {
  const std::optional<std::string> model = get_string(body, "model", "model");
  if (!model) {
    return ctx.served_model_names.empty() ? std::string() : ctx.served_model_names.front();
  }
  const auto& names = ctx.served_model_names;
  if (std::find(names.begin(), names.end(), *model) == names.end()) {
    throw not_found(fmt::format("The model `{}` does not exist.", *model), "model");
  }
  return *model;
}

void read_sampling_fields(const Json& body, const ServerContext& ctx, SamplingParams& params,
                          std::initializer_list<std::string_view> skip) {
  const GenerationDefaults& d = ctx.defaults;
  if (d.temperature) params.temperature = *d.temperature;
  if (d.top_p) params.top_p = *d.top_p;
  if (d.top_k) params.top_k = *d.top_k;
  if (d.min_p) params.min_p = *d.min_p;
  if (d.repetition_penalty) params.repetition_penalty = *d.repetition_penalty;
  for (const std::string& field : sampling_json_fields()) {
    if (std::find(skip.begin(), skip.end(), field) != skip.end()) continue;
    const auto it = body.find(field);
    if (it == body.end()) continue;
    // One field at a time, so that a type error names its field in `param`.
    nlohmann::json single = nlohmann::json::object();
    single[field] = nlohmann::json(*it);
    try {
      read_sampling_params(single, params);
    } catch (const InvalidArgument& e) {
      throw bad_request(e.what(), field);
    }
  }
  if (params.use_beam_search) {
    // The generation config's sampling defaults do not apply to beam search (it ranks the raw
    // log-probabilities); fields the request sets itself are still checked (a 400 naming them).
    if (!body.contains("top_p")) params.top_p = 1.0f;
    if (!body.contains("top_k")) params.top_k = 0;
    if (!body.contains("min_p")) params.min_p = 0.0f;
    if (!body.contains("repetition_penalty")) params.repetition_penalty = 1.0f;
  }
}

std::optional<int64_t> read_truncate_prompt_tokens(const Json& body, const ServerContext& ctx) {
  std::optional<int64_t> keep =
      get_int(body, "truncate_prompt_tokens", "truncate_prompt_tokens", INT32_MIN, INT32_MAX);
  if (!keep) return std::nullopt;
  if (*keep == -1) return ctx.max_model_len;
  if (*keep < 1) {
    throw bad_request(fmt::format("truncate_prompt_tokens must be -1 or at least 1, got {}", *keep),
                      "truncate_prompt_tokens");
  }
  if (*keep > ctx.max_model_len) {
    throw bad_request(fmt::format("truncate_prompt_tokens value ({}) is greater than "
                                  "max_model_len ({}). Please, select a smaller truncation size.",
                                  *keep, ctx.max_model_len),
                      "truncate_prompt_tokens");
  }
  return keep;
}

bool truncate_prompt(std::vector<int32_t>& ids, std::optional<int64_t> keep) {
  if (!keep || static_cast<int64_t>(ids.size()) <= *keep) return false;
  ids.erase(ids.begin(), ids.end() - *keep);
  return true;
}

void reject_unsupported_vllm_fields(const Json& body) {
  auto is_set = [](const Json& v) {
    return !(v.is_null() || (v.is_boolean() && !v.get<bool>()) ||
             ((v.is_array() || v.is_object()) && v.empty()) ||
             (v.is_string() && v.get_ref<const std::string&>().empty()));
  };
  for (std::string_view field : {"logits_processors"}) {
    if (const Json* v = find_field(body, field); v && is_set(*v)) {
      throw bad_request(fmt::format("'{}' is not supported", field), std::string(field));
    }
  }
}

void validate_sampling(const SamplingParams& params, const ServerContext& ctx) {
  try {
    params.validate(ctx.vocab_size);
  } catch (const InvalidArgument& e) {
    // validate() opens its message with the parameter's name.
    const std::string message = e.what();
    throw bad_request(message, message.substr(0, message.find(' ')));
  }
}

void check_context_length(int64_t prompt_tokens, int64_t max_tokens, const ServerContext& ctx,
                          const char* prompt_param) {
  if (prompt_tokens + max_tokens <= ctx.max_model_len) return;
  throw bad_request(
      fmt::format("This model's maximum context length is {} tokens. However, you requested {} "
                  "tokens ({} in the messages, {} in the completion). Please reduce the length of "
                  "the messages or completion.",
                  ctx.max_model_len, prompt_tokens + max_tokens, prompt_tokens, max_tokens),
      prompt_tokens >= ctx.max_model_len ? prompt_param : "max_tokens");
}

void check_token_ids(std::span<const int32_t> ids, const ServerContext& ctx,
                     const std::string& param) {
  for (int32_t id : ids) {
    if (id < 0 || id >= ctx.vocab_size) {
      throw bad_request(
          fmt::format("Token id {} is outside the vocabulary [0, {})", id, ctx.vocab_size), param);
    }
  }
}

StreamOptions read_stream_options(const Json& body, bool stream) {
  const Json* options = find_field(body, "stream_options");
  if (!options) return {};
  if (!options->is_object()) {
    throw bad_request("'stream_options' must be an object", "stream_options");
  }
  if (!stream) {
    throw bad_request("Stream options can only be defined when `stream=True`.", "stream_options");
  }
  reject_unknown_keys(*options, {"include_usage", "continuous_usage_stats"}, "stream_options");
  StreamOptions out;
  out.include_usage =
      get_bool(*options, "include_usage", "stream_options.include_usage").value_or(false);
  // vLLM's extension: usage in every chunk, and only together with include_usage.
  out.continuous_usage = out.include_usage && get_bool(*options, "continuous_usage_stats",
                                                       "stream_options.continuous_usage_stats")
                                                  .value_or(false);
  return out;
}

void read_request_extensions(const Json& body, const ServerContext& ctx, EngineRequest& request) {
  (void)get_string(body, "user", "user");  // OpenAI's end-user id: accepted, unused
  if (auto priority = get_int(body, "priority", "priority", INT32_MIN, INT32_MAX)) {
    if (*priority != 0 && !ctx.priority_scheduling) {
      throw bad_request(fmt::format("Got priority {} but Priority scheduling is not enabled "
                                    "(start the server with --scheduling-policy priority).",
                                    *priority),
                        "priority");
    }
    request.priority = static_cast<int>(*priority);
  }
  if (auto salt = get_string(body, "cache_salt", "cache_salt")) {
    if (salt->empty()) throw bad_request("'cache_salt' must be a non-empty string", "cache_salt");
    request.cache_salt = std::move(*salt);
  }
  read_kv_transfer_params(body, request);
}

void read_kv_transfer_params(const Json& body, EngineRequest& request) {
  const Json* p = find_field(body, "kv_transfer_params");
  if (p == nullptr) return;
  const std::string where = "kv_transfer_params";
  if (!p->is_object()) throw bad_request("'kv_transfer_params' must be an object", where);
  reject_unknown_keys(*p,
                      {"do_remote_decode", "do_remote_prefill", "remote_engine_id", "remote_host",
                       "remote_port", "remote_block_ids", "remote_request_id", "return_kv"},
                      where);
  request.return_kv = get_bool(*p, "return_kv", where + ".return_kv").value_or(false);
  request.do_remote_decode =
      get_bool(*p, "do_remote_decode", where + ".do_remote_decode").value_or(false);
  request.do_remote_prefill =
      get_bool(*p, "do_remote_prefill", where + ".do_remote_prefill").value_or(false);
  if (request.do_remote_decode && request.do_remote_prefill) {
    throw bad_request(
        "'kv_transfer_params': do_remote_decode and do_remote_prefill exclude each other", where);
  }
  if (request.do_remote_decode) {
    const Json* stream = find_field(body, "stream");
    if (stream != nullptr && stream->is_boolean() && stream->get<bool>()) {
      throw bad_request(
          "'kv_transfer_params.do_remote_decode' needs stream false: the hand-off comes back in "
          "the response body",
          where + ".do_remote_decode");
    }
  }
  if (!request.do_remote_prefill) return;
  KVTransferParams& r = request.remote;
  auto required_string = [&](const char* key) {
    std::optional<std::string> v = get_string(*p, key, where + "." + key);
    if (!v || v->empty()) {
      throw bad_request(fmt::format("'{}.{}' is required (a non-empty string) with "
                                    "do_remote_prefill",
                                    where, key),
                        where + "." + key);
    }
    return *v;
  };
  r.remote_engine_id = required_string("remote_engine_id");
  r.remote_host = required_string("remote_host");
  r.remote_request_id = required_string("remote_request_id");
  const std::optional<int64_t> port = get_int(*p, "remote_port", where + ".remote_port", 1, 65535);
  if (!port) {
    throw bad_request(fmt::format("'{}.remote_port' is required with do_remote_prefill", where),
                      where + ".remote_port");
  }
  r.remote_port = static_cast<int>(*port);
  const Json* ids = find_field(*p, "remote_block_ids");
  if (ids == nullptr || !ids->is_array()) {
    throw bad_request(fmt::format("'{}.remote_block_ids' must be an array of block ids", where),
                      where + ".remote_block_ids");
  }
  for (size_t i = 0; i < ids->size(); ++i) {
    r.remote_block_ids.push_back(static_cast<int32_t>(
        as_int((*ids)[i], field_path(where + ".remote_block_ids", i), 0, INT32_MAX)));
  }
}

Json kv_transfer_params_json(const KVTransferParams& p) {
  Json ids = Json::array();
  for (const int32_t id : p.remote_block_ids) ids.push_back(id);
  return Json{{"do_remote_decode", false},
              {"do_remote_prefill", true},
              {"remote_engine_id", p.remote_engine_id},
              {"remote_host", p.remote_host},
              {"remote_port", p.remote_port},
              {"remote_block_ids", std::move(ids)},
              {"remote_request_id", p.remote_request_id}};
}

OutputOptions read_output_options(const Json& body, const ServerContext& ctx) {
  OutputOptions o;
  o.return_token_ids = get_bool(body, "return_token_ids", "return_token_ids").value_or(false);
  o.tokens_as_ids = get_bool(body, "return_tokens_as_token_ids", "return_tokens_as_token_ids")
                        .value_or(ctx.return_tokens_as_token_ids);
  return o;
}

RequestIds read_request_ids(const Json& body, std::string_view header, std::string_view prefix) {
  std::optional<std::string> chosen = get_string(body, "request_id", "request_id");
  if (!header.empty()) chosen = std::string(header);  // vLLM: the header wins over the body
  if (!chosen) {
    std::string id = make_response_id(prefix);
    return {id, id};
  }
  if (chosen->empty() || chosen->size() > 256) {
    throw bad_request("'request_id' must hold 1 to 256 characters", "request_id");
  }
  RequestIds ids;
  ids.response_id = std::string(prefix) + *chosen;
  ids.engine_id = make_response_id(ids.response_id + "~");
  return ids;
}

void check_prompt_logprobs_stream(const SamplingParams& params, bool stream) {
  if (stream && params.prompt_logprobs && *params.prompt_logprobs != 0) {
    throw bad_request("`prompt_logprobs` are not available when `stream=True`.", "prompt_logprobs");
  }
}

std::string make_response_id(std::string_view prefix) {
  thread_local std::mt19937_64 rng{std::random_device{}()};
  return fmt::format("{}{:016x}{:016x}", prefix, rng(), rng());
}

int64_t unix_time_now() {
  return std::chrono::duration_cast<std::chrono::seconds>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
}

void note_ignored_fields(const Json& body, std::initializer_list<std::string_view> known,
                         const char* endpoint) {
  for (const auto& [key, value] : body.items()) {
    if (std::find(known.begin(), known.end(), key) != known.end()) continue;
    if (sampling_json_fields().count(key)) continue;
    spdlog::debug("{}: ignoring unknown field '{}'", endpoint, key);
  }
}

}  // namespace pagoda::openai
