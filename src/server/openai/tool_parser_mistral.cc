// mistral (Mistral 7B v0.3, Mistral Nemo/Small): "[TOOL_CALLS]" then a JSON array of
// {"name", "arguments"} objects; the text before the marker is content. Call ids are 9
// alphanumerics because Mistral's chat template rejects any other id when the calls come back in
// the conversation (vLLM's MistralToolCall does the same).
#include <random>

#include "server/openai/tool_parser.h"
#include "server/openai/tool_parser_common.h"

namespace pagoda::openai {
namespace {

constexpr std::string_view kMarker = "[TOOL_CALLS]";

std::string make_mistral_call_id() {
  static constexpr std::string_view kAlphabet =
      "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789";
  thread_local std::mt19937_64 rng{std::random_device{}()};
  std::string id(9, ' ');
  for (char& c : id) c = kAlphabet[rng() % kAlphabet.size()];
  return id;
}

class MistralToolParser final : public ToolParser {
 public:
  ExtractedToolCalls extract(std::string_view text) const override {
    const ExtractedToolCalls as_content{{}, std::string(text)};
    const size_t first = text.find(kMarker);
    if (first == std::string_view::npos) return as_content;
    ExtractedToolCalls result;
    // Some checkpoints repeat the marker before every array; each one's calls count.
    for (size_t at = first; at != std::string_view::npos;) {
      const std::string_view rest = skip_space(text.substr(at + kMarker.size()));
      const size_t end = json_value_end(rest, 0);
      if (end == std::string_view::npos) return as_content;
      const std::optional<Json> value = parse_json_quietly(rest.substr(0, end));
      if (!value) return as_content;
      const Json calls = value->is_array() ? *value : Json::array({*value});
      if (calls.empty()) return as_content;
      for (const Json& call : calls) {
        std::optional<ToolCall> parsed =
            tool_call_from_json(call, ArgumentsKey::kArguments, make_mistral_call_id());
        if (!parsed) return as_content;
        result.calls.push_back(std::move(*parsed));
      }
      at = text.find(kMarker, static_cast<size_t>(rest.data() + end - text.data()));
    }
    if (first > 0) result.content = std::string(text.substr(0, first));
    return result;
  }

  size_t content_prefix(std::string_view text) const override {
    return content_before_marker(text, kMarker);
  }

  bool needs_special_tokens() const override { return true; }
};

}  // namespace

std::unique_ptr<ToolParser> make_mistral_tool_parser() {
  return std::make_unique<MistralToolParser>();
}

}  // namespace pagoda::openai
