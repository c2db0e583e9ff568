#include "router/prompt_text.h"

#include <nlohmann/json.hpp>

namespace pagoda::router {
namespace {

using Json = nlohmann::json;

/// One prompt: a string, or token ids written as "1,2,3,".
void append_prompt(const Json& prompt, std::string& out) {
  if (prompt.is_string()) {
    out += prompt.get_ref<const std::string&>();
    return;
  }
  if (!prompt.is_array()) return;
  for (const Json& item : prompt) {
    if (item.is_number_integer()) {
      out += std::to_string(item.get<int64_t>());
      out += ',';
    }
  }
}

/// "prompt" or "input": one prompt, or a list of them (strings or token lists).
void append_prompts(const Json& value, std::string& out) {
  const bool batch =
      value.is_array() && !value.empty() && (value.front().is_string() || value.front().is_array());
  if (!batch) {
    append_prompt(value, out);
    return;
  }
  for (size_t i = 0; i < value.size(); ++i) {
    if (i > 0) out += '\n';
    append_prompt(value[i], out);
  }
}

void append_content(const Json& content, std::string& out) {
  if (content.is_string()) {
    out += content.get_ref<const std::string&>();
    return;
  }
  if (!content.is_array()) return;
  for (const Json& part : content) {
    auto text = part.is_object() ? part.find("text") : part.end();
    if (text != part.end() && text->is_string()) {
      out += text->get_ref<const std::string&>();
    } else {
      out += part.dump();
    }
  }
}

}  // namespace

std::string routing_text(std::string_view body) {
  const Json request = Json::parse(body, nullptr, /*allow_exceptions=*/false);
  if (!request.is_object()) return "";
  std::string out;
  if (auto messages = request.find("messages"); messages != request.end() && messages->is_array()) {
    for (const Json& message : *messages) {
      if (!message.is_object()) continue;
      if (auto role = message.find("role"); role != message.end() && role->is_string()) {
        out += role->get_ref<const std::string&>();
      }
      out += '\n';
      if (auto content = message.find("content"); content != message.end()) {
        append_content(*content, out);
      }
      out += '\n';
    }
    return out;
  }
  for (const char* field : {"prompt", "input"}) {
    if (auto value = request.find(field); value != request.end()) {
      append_prompts(*value, out);
      return out;
    }
  }
  return out;
}

}  // namespace pagoda::router
