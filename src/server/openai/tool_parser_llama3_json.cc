// llama3_json (Llama 3.1, 3.2, 3.3 with JSON tool calling): the whole output is one or more
// {"name": ..., "parameters": {...}} objects separated by ";", optionally after "<|python_tag|>".
// Output that does not start so is plain content; a call that fails to parse makes all of it
// content. Calls leave no content (null), as in vLLM.
#include "server/openai/tool_parser.h"
#include "server/openai/tool_parser_common.h"

namespace pagoda::openai {
namespace {

constexpr std::string_view kPythonTag = "<|python_tag|>";

/// The output after leading whitespace and the optional tag.
std::string_view call_text(std::string_view text) {
  std::string_view rest = skip_space(text);
  if (rest.starts_with(kPythonTag)) rest = skip_space(rest.substr(kPythonTag.size()));
  return rest;
}

class Llama3JsonToolParser final : public ToolParser {
 public:
  ExtractedToolCalls extract(std::string_view text) const override {
    const ExtractedToolCalls as_content{{}, std::string(text)};
    std::string_view rest = call_text(text);
    if (!rest.starts_with('{')) return as_content;
    ExtractedToolCalls result;
    while (!rest.empty()) {
      const size_t end = json_value_end(rest, 0);
      if (end == std::string_view::npos) return as_content;
      const std::optional<Json> call = parse_json_quietly(rest.substr(0, end));
      if (!call) return as_content;
      std::optional<ToolCall> parsed =
          tool_call_from_json(*call, ArgumentsKey::kArgumentsOrParameters, make_tool_call_id());
      if (!parsed) return as_content;
      result.calls.push_back(std::move(*parsed));
      rest = skip_space(rest.substr(end));
      if (rest.starts_with(';')) rest = skip_space(rest.substr(1));
      if (!rest.empty() && !rest.starts_with('{')) return as_content;
    }
    return result;
  }

  size_t content_prefix(std::string_view text) const override {
    // Calls are recognised only at the start: hold the text while it may still begin with one.
    const std::string_view start = skip_space(text);
    if (start.empty() || start.starts_with('{') || start.starts_with(kPythonTag) ||
        kPythonTag.starts_with(start)) {
      return 0;
    }
    return text.size();
  }

  std::optional<std::string> strict_calls_tag(const std::string& tools_json) const override {
    return calls_structural_tag(tools_json, "{\"name\": \"", "{\"name\": \"",
                                ", \"parameters\": ", "}");
  }
};

}  // namespace

std::unique_ptr<ToolParser> make_llama3_json_tool_parser() {
  return std::make_unique<Llama3JsonToolParser>();
}

}  // namespace pagoda::openai
