#include "server/openai/tool_parser_common.h"

#include <algorithm>

#include "server/openai/request_common.h"

namespace pagoda::openai {

std::optional<ToolCall> tool_call_from_json(const Json& call, ArgumentsKey key, std::string id) {
  if (!call.is_object()) return std::nullopt;
  const auto name = call.find("name");
  if (name == call.end() || !name->is_string()) return std::nullopt;
  auto arguments = call.find("arguments");
  if (arguments == call.end() && key == ArgumentsKey::kArgumentsOrParameters) {
    arguments = call.find("parameters");
  }
  ToolCall out;
  out.id = std::move(id);
  out.name = name->get<std::string>();
  if (arguments == call.end() || arguments->is_null()) {
    out.arguments = "{}";
  } else if (arguments->is_string()) {
    out.arguments = arguments->get<std::string>();
  } else {
    out.arguments = python_json_dumps(*arguments);
  }
  return out;
}

std::optional<Json> parse_json_quietly(std::string_view text) {
  Json value = Json::parse(text, /*cb=*/nullptr, /*allow_exceptions=*/false);
  if (value.is_discarded()) return std::nullopt;
  return value;
}

namespace {

void dump_python(const Json& value, std::string& out) {
  if (value.is_object()) {
    out += '{';
    bool first = true;
    for (const auto& [key, item] : value.items()) {
      if (!first) out += ", ";
      first = false;
      out += Json(key).dump();
      out += ": ";
      dump_python(item, out);
    }
    out += '}';
  } else if (value.is_array()) {
    out += '[';
    for (size_t i = 0; i < value.size(); ++i) {
      if (i > 0) out += ", ";
      dump_python(value[i], out);
    }
    out += ']';
  } else {
    // Scalars: nlohmann escapes strings as Python does with ensure_ascii=False (\n, \", \u001f,
    // non-ASCII kept as UTF-8); the text was parsed from valid UTF-8, so dump() cannot throw.
    out += value.dump();
  }
}

}  // namespace

std::string python_json_dumps(const Json& value) {
  std::string out;
  dump_python(value, out);
  return out;
}

size_t json_value_end(std::string_view text, size_t begin) {
  if (begin >= text.size() || (text[begin] != '{' && text[begin] != '[')) {
    return std::string_view::npos;
  }
  int depth = 0;
  bool in_string = false;
  for (size_t i = begin; i < text.size(); ++i) {
    const char c = text[i];
    if (in_string) {
      if (c == '\\') {
        ++i;  // the escaped character cannot end the string
      } else if (c == '"') {
        in_string = false;
      }
    } else if (c == '"') {
      in_string = true;
    } else if (c == '{' || c == '[') {
      ++depth;
    } else if (c == '}' || c == ']') {
      if (--depth == 0) return i + 1;
    }
  }
  return std::string_view::npos;
}

size_t partial_marker_length(std::string_view text, std::string_view marker) {
  const size_t longest = std::min(text.size(), marker.size() - 1);
  for (size_t n = longest; n > 0; --n) {
    if (text.substr(text.size() - n) == marker.substr(0, n)) return n;
  }
  return 0;
}

size_t content_before_marker(std::string_view text, std::string_view marker) {
  const size_t at = text.find(marker);
  if (at != std::string_view::npos) return at;
  return text.size() - partial_marker_length(text, marker);
}

std::string make_tool_call_id() { return make_response_id("chatcmpl-tool-"); }

std::string_view skip_space(std::string_view text) {
  const size_t begin = text.find_first_not_of(" \t\n\r");
  return begin == std::string_view::npos ? std::string_view() : text.substr(begin);
}

std::string calls_structural_tag(const std::string& tools_json, std::string_view trigger,
                                 std::string_view begin_before_name,
                                 std::string_view begin_after_name, std::string_view end) {
  const Json tools = Json::parse(tools_json);
  Json structures = Json::array();
  for (const Json& tool : tools) {
    const Json& fn = tool.at("function");
    const bool strict = fn.contains("strict") && fn["strict"] == Json(true);
    Json schema = {{"type", "object"}, {"additionalProperties", true}};
    if (strict && fn.contains("parameters") && fn["parameters"].is_object())
      schema = fn["parameters"];
    const std::string name = fn.at("name").get<std::string>();
    structures.push_back({{"begin", std::string(begin_before_name) + Json(name).dump().substr(1) +
                                        std::string(begin_after_name)},
                          {"schema", std::move(schema)},
                          {"end", std::string(end)}});
  }
  Json tag = Json::object();
  tag["type"] = "structural_tag";
  tag["structures"] = std::move(structures);
  tag["triggers"] = Json::array({std::string(trigger)});
  return tag.dump();
}

}  // namespace pagoda::openai
