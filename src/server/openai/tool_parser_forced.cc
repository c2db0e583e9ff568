// Tool calls forced by tool_choice "required" or a named function: the output was constrained to
// the calls' JSON (structured_request.h's forced_tool_schema), so the whole text is the calls,
// whatever --tool-call-parser says. "required": [{"name": ..., "parameters": {...}}, ...] (vLLM's
// form); a named function: its arguments object. Text that does not parse (max_tokens cut it)
// stays content, as with the other parsers.
#include "server/openai/tool_parser.h"
#include "server/openai/tool_parser_common.h"

namespace pagoda::openai {
namespace {

class ForcedToolParser final : public ToolParser {
 public:
  explicit ForcedToolParser(std::optional<std::string> name) : name_(std::move(name)) {}

  ExtractedToolCalls extract(std::string_view text) const override {
    const ExtractedToolCalls as_content{{}, std::string(text)};
    const std::optional<Json> parsed = parse_json_quietly(text);
    if (!parsed) return as_content;
    ExtractedToolCalls result;
    if (name_) {
      if (!parsed->is_object()) return as_content;
      result.calls.push_back(ToolCall{make_tool_call_id(), *name_, python_json_dumps(*parsed)});
      return result;
    }
    if (!parsed->is_array() || parsed->empty()) return as_content;
    for (const Json& call : *parsed) {
      std::optional<ToolCall> c =
          tool_call_from_json(call, ArgumentsKey::kArgumentsOrParameters, make_tool_call_id());
      if (!c) return as_content;
      result.calls.push_back(std::move(*c));
    }
    return result;
  }

  // The whole output is the calls: nothing is content until it is known not to parse.
  size_t content_prefix(std::string_view text) const override {
    (void)text;
    return 0;
  }

  // vLLM: "tool_calls" for "required"; a named function keeps the engine's reason (OpenAI's too).
  bool finish_with_tool_calls() const override { return !name_.has_value(); }

 private:
  std::optional<std::string> name_;
};

}  // namespace

std::unique_ptr<ToolParser> make_forced_tool_parser(std::optional<std::string> function_name) {
  return std::make_unique<ForcedToolParser>(std::move(function_name));
}

}  // namespace pagoda::openai
