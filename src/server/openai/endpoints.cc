#include "server/openai/endpoints.h"

#include <cctype>

#include <fmt/format.h>

#include "server/openai/api_error.h"
#include "server/openai/chat_prompt.h"
#include "server/openai/request_common.h"
#include "server/openai/response_common.h"

#ifndef PAGODA_VERSION
#define PAGODA_VERSION "unknown"
#endif

namespace pagoda::openai {

Json model_response(const ServerContext& ctx, const std::string& name) {
  Json model = Json::object();
  model["id"] = name;
  model["object"] = "model";
  model["created"] = ctx.model_created;
  model["owned_by"] = "pagoda";
  model["root"] = ctx.served_model_names.front();
  model["parent"] = nullptr;
  model["max_model_len"] = ctx.max_model_len;
  return model;
}

std::string encode_path_segment(const std::string& name) {
  static constexpr char kHex[] = "0123456789ABCDEF";
  std::string out;
  for (const unsigned char c : name) {
    // encodeURIComponent keeps A-Z a-z 0-9 - _ . ! ~ * ' ( )
    if (std::isalnum(c) ||
        std::string_view("-_.!~*'()").find(static_cast<char>(c)) != std::string_view::npos) {
      out += static_cast<char>(c);
    } else {
      out += '%';
      out += kHex[c >> 4];
      out += kHex[c & 15];
    }
  }
  return out;
}

Json models_response(const ServerContext& ctx) {
  Json data = Json::array();
  for (const std::string& name : ctx.served_model_names) data.push_back(model_response(ctx, name));
  Json body = Json::object();
  body["object"] = "list";
  body["data"] = std::move(data);
  return body;
}

Json tokenize_response(std::string_view body_text, const ServerContext& ctx) {
  const Json body = parse_json_body(body_text);
  (void)resolve_model(body, ctx);
  if (!ctx.tokenizer) throw bad_request("This model has no tokenizer");
  const bool return_strs = get_bool(body, "return_token_strs", "return_token_strs").value_or(false);
  std::vector<int32_t> ids;
  const bool has_messages = body.contains("messages");
  if (has_messages && body.contains("prompt")) {
    throw bad_request("Give either 'prompt' or 'messages', not both", "prompt");
  }
  if (has_messages) {
    const bool add_special =
        get_bool(body, "add_special_tokens", "add_special_tokens").value_or(false);
    const ChatConversation conversation = read_chat_conversation(body, ctx);
    ids = ctx.tokenizer->encode(render_chat_prompt(conversation, ctx), add_special);
  } else {
    const bool add_special =
        get_bool(body, "add_special_tokens", "add_special_tokens").value_or(true);
    const std::optional<std::string> prompt = get_string(body, "prompt", "prompt");
    if (!prompt) throw bad_request("Field 'prompt' or 'messages' is required", "prompt");
    ids = ctx.tokenizer->encode(*prompt, add_special);
  }
  Json out = Json::object();
  out["count"] = ids.size();
  out["max_model_len"] = ctx.max_model_len;
  out["tokens"] = ids;
  if (return_strs) {
    Json strs = Json::array();
    for (int32_t id : ids) strs.push_back(token_text(ctx.tokenizer, id).text);
    out["token_strs"] = std::move(strs);
  } else {
    out["token_strs"] = nullptr;
  }
  return out;
}

Json detokenize_response(std::string_view body_text, const ServerContext& ctx) {
  const Json body = parse_json_body(body_text);
  (void)resolve_model(body, ctx);
  if (!ctx.tokenizer) throw bad_request("This model has no tokenizer");
  const Json* tokens = find_field(body, "tokens");
  if (!tokens) throw bad_request("Field 'tokens' is required", "tokens");
  if (!tokens->is_array()) throw bad_request("'tokens' must be a list of token ids", "tokens");
  std::vector<int32_t> ids;
  for (const Json& t : *tokens)
    ids.push_back(static_cast<int32_t>(as_int(t, "tokens", 0, INT32_MAX)));
  const int64_t limit = std::min<int64_t>(ctx.vocab_size, ctx.tokenizer->vocab_size());
  for (int32_t id : ids) {
    if (id >= limit) {
      throw bad_request(fmt::format("Token id {} is outside the vocabulary [0, {})", id, limit),
                        "tokens");
    }
  }
  const std::string text = ctx.tokenizer->decode(ids, /*skip_special_tokens=*/false);
  Json out = Json::object();
  out["prompt"] = text;  // sse/json_body dump with replacement for partial characters
  return out;
}

KVImportRequest parse_kv_import_request(std::string_view body_text) {
  const Json body = parse_json_body(body_text);
  if (!body.is_object()) throw bad_request("The body must be a JSON object");
  for (const auto& [key, value] : body.items()) {
    if (key != "kv_transfer_params" && key != "cache_salt")
      throw bad_request(fmt::format("Unknown field '{}'", key), key);
  }
  if (find_field(body, "kv_transfer_params") == nullptr) {
    throw bad_request("Field 'kv_transfer_params' is required", "kv_transfer_params");
  }
  EngineRequest request;
  read_kv_transfer_params(body, request);
  if (!request.do_remote_prefill || request.do_remote_decode || request.return_kv) {
    throw bad_request(
        "'kv_transfer_params' must be a finished turn's hand-off: do_remote_prefill true with "
        "its remote_* keys, no do_remote_decode or return_kv",
        "kv_transfer_params.do_remote_prefill");
  }
  KVImportRequest out;
  out.params = std::move(request.remote);
  if (auto salt = get_string(body, "cache_salt", "cache_salt")) {
    if (salt->empty()) throw bad_request("'cache_salt' must be a non-empty string", "cache_salt");
    out.cache_salt = std::move(*salt);
  }
  return out;
}

Json kv_import_response(const KVImportResult& result) {
  Json out = Json::object();
  out["object"] = "kv_transfer.import";
  out["num_blocks"] = result.num_blocks;
  out["imported_blocks"] = result.imported_blocks;
  out["cached_blocks"] = result.cached_blocks;
  return out;
}

Json version_response() {
  Json out = Json::object();
  out["version"] = PAGODA_VERSION;
  return out;
}

}  // namespace pagoda::openai
