// hermes (Hermes 2 Pro, Qwen2.5, Qwen3): calls are JSON objects in <tool_call>...</tool_call>
// blocks; the text before the first block is content. The last block may be left open (the model
// stopped at EOS or max_tokens): its JSON still counts, as in vLLM.
#include "server/openai/tool_parser.h"
#include "server/openai/tool_parser_common.h"

namespace pagoda::openai {
namespace {

constexpr std::string_view kStart = "<tool_call>";
constexpr std::string_view kEnd = "</tool_call>";

class HermesToolParser final : public ToolParser {
 public:
  ExtractedToolCalls extract(std::string_view text) const override {
    const ExtractedToolCalls as_content{{}, std::string(text)};
    const size_t first = text.find(kStart);
    if (first == std::string_view::npos) return as_content;
    ExtractedToolCalls result;
    // Text between and after blocks is dropped, as vLLM's regex does.
    for (size_t at = first; at != std::string_view::npos;) {
      const size_t body = at + kStart.size();
      const size_t end = text.find(kEnd, body);
      const std::optional<Json> call =
          parse_json_quietly(text.substr(body, end == std::string_view::npos ? end : end - body));
      if (!call) return as_content;
      std::optional<ToolCall> parsed =
          tool_call_from_json(*call, ArgumentsKey::kArguments, make_tool_call_id());
      if (!parsed) return as_content;
      result.calls.push_back(std::move(*parsed));
      if (end == std::string_view::npos) break;
      at = text.find(kStart, end + kEnd.size());
    }
    if (first > 0) result.content = std::string(text.substr(0, first));
    return result;
  }

  size_t content_prefix(std::string_view text) const override {
    return content_before_marker(text, kStart);
  }

  bool needs_special_tokens() const override { return true; }

  std::optional<std::string> strict_calls_tag(const std::string& tools_json) const override {
    return calls_structural_tag(tools_json, kStart, "<tool_call>\n{\"name\": \"",
                                ", \"arguments\": ", "}\n</tool_call>");
  }
};

}  // namespace

std::unique_ptr<ToolParser> make_hermes_tool_parser() {
  return std::make_unique<HermesToolParser>();
}

}  // namespace pagoda::openai
