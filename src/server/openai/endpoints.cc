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

Json version_response() {
  Json out = Json::object();
  out["version"] = PAGODA_VERSION;
  return out;
}

}  // namespace pagoda::openai
