#pragma once
// Tool calls in a model's text output (vLLM's --tool-call-parser): the parser interface and the
// registry of the named parsers.
#include <cstddef>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace pagoda::openai {

/// One function call the model asked for, as OpenAI's message.tool_calls[i] carries it.
struct ToolCall {
  std::string id;  // "chatcmpl-tool-<32 hex>"; mistral: 9 alphanumerics (its template checks)
  std::string name;
  std::string arguments;  // a JSON text, written as Python's json.dumps writes it
};

/// What a parser found in a finished completion's text.
struct ExtractedToolCalls {
  std::vector<ToolCall> calls;  // empty: no calls, and content is the whole text
  /// message.content: the text before the calls; nullopt (JSON null) when there is none.
  std::optional<std::string> content;
};

/// Finds the tool calls of one model family's output format.
class ToolParser {
 public:
  virtual ~ToolParser() = default;

  /// Parses a finished completion. Malformed call text is not an error: the result then has no
  /// calls and the whole text as content (vLLM falls back the same way), so a model that
  /// stumbles over the format still gets its text to the client.
  [[nodiscard]] virtual ExtractedToolCalls extract(std::string_view text) const = 0;

  /// Streaming: how long a prefix of `text` (the completion so far) is content whatever comes
  /// next, i.e. holds no call and no beginning of a call marker. It never shrinks as text grows
  /// and never passes the point where extract() would cut the content.
  [[nodiscard]] virtual size_t content_prefix(std::string_view text) const = 0;

  /// Whether the call marker is a special token that the detokenizer must keep (vLLM's
  /// adjust_request sets skip_special_tokens=False for these parsers).
  [[nodiscard]] virtual bool needs_special_tokens() const { return false; }

  /// Whether a choice with calls finishes with "tool_calls" (else with the engine's reason).
  [[nodiscard]] virtual bool finish_with_tool_calls() const { return true; }

  /// Strict tools under tool_choice "auto": a vLLM structural tag (JSON) under which text is
  /// free and every call this format writes follows its tool's parameters (strict tools) or is
  /// any JSON object (the others); nullopt when the format's marker is a special token, which a
  /// grammar cannot produce. tools: the request's validated tools.
  [[nodiscard]] virtual std::optional<std::string> strict_calls_tag(
      const std::string& tools_json) const {
    (void)tools_json;
    return std::nullopt;
  }
};

/// The structural tag of calls written as begin(name) + arguments + end, triggered by `trigger`:
/// strict tools' arguments follow their parameters, other tools' are any JSON object.
[[nodiscard]] std::string calls_structural_tag(const std::string& tools_json,
                                               std::string_view trigger,
                                               std::string_view begin_before_name,
                                               std::string_view begin_after_name,
                                               std::string_view end);

/// The names --tool-call-parser accepts, sorted.
[[nodiscard]] const std::vector<std::string>& tool_parser_names();

/// The parser called `name`; throws InvalidArgument listing the known names otherwise.
[[nodiscard]] std::unique_ptr<ToolParser> make_tool_parser(std::string_view name);

/// Parsers of the formats (one file each).
[[nodiscard]] std::unique_ptr<ToolParser> make_hermes_tool_parser();
[[nodiscard]] std::unique_ptr<ToolParser> make_llama3_json_tool_parser();
[[nodiscard]] std::unique_ptr<ToolParser> make_mistral_tool_parser();
/// The calls of an output constrained by tool_choice: "required" (nullopt) or a named function.
[[nodiscard]] std::unique_ptr<ToolParser> make_forced_tool_parser(
    std::optional<std::string> function_name);

}  // namespace pagoda::openai
