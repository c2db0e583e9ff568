// libFuzzer target: the input is a chat template's source, parsed and rendered with a fixed small
// conversation (system, user, assistant with a tool call, tool, user) and one tool. TemplateError
// (and the InvalidArgument it derives from) is the expected outcome of bad templates; anything
// else escaping, a crash, a hang past libFuzzer's timeout or undefined behaviour is a bug.
#include <cstddef>
#include <cstdint>
#include <string_view>

#include "core/status.h"
#include "template/chat_template.h"

namespace {

using pagoda::tmpl::ChatTemplateInputs;

ChatTemplateInputs make_inputs() {
  ChatTemplateInputs in;
  in.messages = nlohmann::ordered_json::parse(R"([
    {"role": "system", "content": "You are terse."},
    {"role": "user", "content": "Weather in Paris?"},
    {"role": "assistant", "content": null, "tool_calls": [{"id": "c1", "type": "function",
      "function": {"name": "get_weather", "arguments": {"city": "Paris"}}}]},
    {"role": "tool", "tool_call_id": "c1", "content": "sunny"},
    {"role": "user", "content": "Thanks"}])");
  in.tools = nlohmann::ordered_json::parse(R"([{"type": "function", "function": {
    "name": "get_weather", "description": "Weather now",
    "parameters": {"type": "object", "properties": {"city": {"type": "string"}}}}}])");
  in.add_generation_prompt = true;
  in.bos_token = "<s>";
  in.eos_token = "</s>";
  in.extra["enable_thinking"] = false;
  // Small bounds keep every input fast; the limits themselves are what is being tested.
  in.render.limits.max_output_bytes = size_t{1} << 20;
  in.render.limits.max_loop_iterations = 100'000;
  in.render.now = std::chrono::system_clock::time_point{};
  return in;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static const ChatTemplateInputs inputs = make_inputs();
  const std::string_view source(reinterpret_cast<const char*>(data), size);
  try {
    const pagoda::tmpl::ChatTemplate chat(source);
    (void)chat.render(inputs);
  } catch (const pagoda::InvalidArgument&) {
    // TemplateError / TemplateRaised: a bad template is the caller's 400.
  }
  return 0;
}
