#include "server/openai/tool_parser.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "core/status.h"

namespace pagoda::openai {

const std::vector<std::string>& tool_parser_names() {
  static const std::vector<std::string> names = {"hermes", "llama3_json", "mistral"};
  return names;
}

std::unique_ptr<ToolParser> make_tool_parser(std::string_view name) {
  if (name == "hermes") return make_hermes_tool_parser();
  if (name == "llama3_json") return make_llama3_json_tool_parser();
  if (name == "mistral") return make_mistral_tool_parser();
  throw InvalidArgument(fmt::format("invalid tool call parser: '{}' (choose from {})", name,
                                    fmt::join(tool_parser_names(), ", ")));
}

}  // namespace pagoda::openai
