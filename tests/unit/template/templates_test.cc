// Every template in tests/data/chat_templates/templates (56 of them) parses, and renders through
// the chat layer (transformers' variables: tools and documents None unless given):
//  1. a plain system + user + assistant + user conversation with a generation prompt, checking
//     that every message's text reaches the output; and
//  2. the seven conversation shapes of data/template_goldens.json, compared byte for byte with
//     what Jinja2, configured as transformers configures it, renders (or the error it raises).
//
// Templates that legitimately refuse the plain conversation get one that satisfies them; each
// such exception is listed in kPlainConversationExceptions with the reason.
//
// To add a template: drop it in tests/data/chat_templates/templates and regenerate
// data/template_goldens.json with data/generate_goldens.py (needs Python with jinja2; see there).
#include <filesystem>
#include <map>

#include <gtest/gtest.h>

#include "template/chat_template.h"
#include "test_util.h"

namespace pagoda::tmpl {
namespace {

using testing::fixed_clock_options;
using testing::kDataDir;
using testing::kTemplatesDir;
using testing::read_file;
using testing::read_json;

std::vector<std::string> template_files() {
  std::vector<std::string> names;
  for (const auto& entry : std::filesystem::directory_iterator(kTemplatesDir)) {
    if (entry.path().extension() == ".jinja") names.push_back(entry.path().filename().string());
  }
  std::sort(names.begin(), names.end());
  return names;
}

const nlohmann::ordered_json kTool = nlohmann::ordered_json::parse(R"({
  "type": "function",
  "function": {"name": "get_time", "description": "Current time in a city",
               "parameters": {"type": "object",
                              "properties": {"city": {"type": "string", "description": "City"}},
                              "required": ["city"]}}})");

enum class Exception { kNeedsTools, kNoSystemRole };

// Templates that raise on the plain conversation by design.
const std::map<std::string, Exception> kPlainConversationExceptions = {
    // The "tool_use" variants are selected by transformers only when tools are given; with
    // tools=None they iterate None and fail, exactly as in transformers.
    {"CohereForAI-c4ai-command-r-plus-tool_use.jinja", Exception::kNeedsTools},
    {"NousResearch-Hermes-2-Pro-Llama-3-8B-tool_use.jinja", Exception::kNeedsTools},
    {"NousResearch-Hermes-3-Llama-3.1-8B-tool_use.jinja", Exception::kNeedsTools},
    // Gemma 2 raises "System role not supported".
    {"google-gemma-2-2b-it.jinja", Exception::kNoSystemRole},
};

std::string test_name(const ::testing::TestParamInfo<std::string>& info) {
  std::string name = info.param.substr(0, info.param.size() - 6);
  for (char& c : name) {
    if (!std::isalnum(static_cast<unsigned char>(c))) c = '_';
  }
  return name;
}

class TemplateTest : public ::testing::TestWithParam<std::string> {};

TEST_P(TemplateTest, RendersPlainConversation) {
  const ChatTemplate chat(read_file(kTemplatesDir + GetParam()));
  ChatTemplateInputs inputs;
  inputs.messages = nlohmann::ordered_json::parse(R"([
    {"role": "system", "content": "You are a helpful assistant."},
    {"role": "user", "content": "What is the capital of France?"},
    {"role": "assistant", "content": "The capital of France is Paris."},
    {"role": "user", "content": "And of Italy?"}])");
  inputs.add_generation_prompt = true;
  inputs.bos_token = "<s>";
  inputs.eos_token = "</s>";
  inputs.render = fixed_clock_options();
  auto it = kPlainConversationExceptions.find(GetParam());
  if (it != kPlainConversationExceptions.end()) {
    if (it->second == Exception::kNeedsTools) {
      EXPECT_THROW((void)chat.render(inputs), TemplateError);  // as transformers does
      inputs.tools = nlohmann::ordered_json::array({kTool});
    } else {
      EXPECT_THROW((void)chat.render(inputs), TemplateRaised);
      inputs.messages.erase(0);
    }
  }
  const std::string out = chat.render(inputs);
  for (const auto& m : inputs.messages) {
    EXPECT_NE(out.find(m["content"].get<std::string>()), std::string::npos)
        << "missing message text: " << m["content"] << "\n"
        << out;
  }
  EXPECT_GT(out.size(), 40u);
}

TEST_P(TemplateTest, MatchesJinja2GoldenRenders) {
  static const nlohmann::ordered_json goldens = read_json(kDataDir + "template_goldens.json");
  ASSERT_TRUE(goldens["templates"].contains(GetParam())) << "regenerate template_goldens.json";
  const ChatTemplate chat(read_file(kTemplatesDir + GetParam()));
  for (const auto& c : goldens["templates"][GetParam()]) {
    const std::string case_name = c["case"].get<std::string>();
    SCOPED_TRACE(case_name);
    const auto& vars = goldens["conversations"][case_name];
    ChatTemplateInputs inputs;
    inputs.messages = vars["messages"];
    if (vars.contains("tools")) inputs.tools = vars["tools"];
    inputs.add_generation_prompt = vars["add_generation_prompt"].get<bool>();
    inputs.bos_token = "<s>";
    inputs.eos_token = "</s>";
    inputs.render = fixed_clock_options();
    if (c.contains("error")) {
      try {
        (void)chat.render(inputs);
        ADD_FAILURE() << "expected an error: " << c["error"];
      } catch (const TemplateError& e) {
        EXPECT_EQ(e.message(), c["error"].get<std::string>());
      }
    } else {
      EXPECT_EQ(chat.render(inputs), c["expected"].get<std::string>());
    }
  }
}

INSTANTIATE_TEST_SUITE_P(SharedTemplates, TemplateTest, ::testing::ValuesIn(template_files()),
                         test_name);

TEST(TemplateFiles, AllFiftySixArePresent) { EXPECT_EQ(template_files().size(), 56u); }

}  // namespace
}  // namespace pagoda::tmpl
