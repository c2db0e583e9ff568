// The 16 conversations-with-expected-renders in tests/data/chat_templates/expected, each rendered
// with exactly the variables the case gives (absent variables are undefined) and compared byte for
// byte; cases with "error" must raise a TemplateError with that message.
//
// To add a case: add a file of the same format to tests/data/chat_templates/expected (its
// "template_file" names a template in tests/data/chat_templates/templates); it is picked up here.
#include <filesystem>

#include <gtest/gtest.h>

#include "template/chat_template.h"
#include "template/template.h"
#include "test_util.h"

namespace pagoda::tmpl {
namespace {

using testing::fixed_clock_options;
using testing::kExpectedDir;
using testing::kTemplatesDir;
using testing::read_file;
using testing::read_json;

std::vector<std::string> expected_files() {
  std::vector<std::string> names;
  for (const auto& entry : std::filesystem::directory_iterator(kExpectedDir)) {
    if (entry.path().extension() == ".json") names.push_back(entry.path().filename().string());
  }
  std::sort(names.begin(), names.end());
  return names;
}

class ExpectedRenderTest : public ::testing::TestWithParam<std::string> {};

TEST_P(ExpectedRenderTest, MatchesJinja2ByteForByte) {
  const auto doc = read_json(kExpectedDir + GetParam());
  const Template tpl(read_file(kTemplatesDir + doc["template_file"].get<std::string>()));
  ASSERT_FALSE(doc["cases"].empty());
  for (const auto& c : doc["cases"]) {
    SCOPED_TRACE(c["case"].get<std::string>());
    if (c.contains("error")) {
      // The file writes the Python exception as "TemplateError: <message>".
      std::string message = c["error"].get<std::string>();
      message = message.substr(message.find(": ") + 2);
      try {
        (void)tpl.render(c["vars"], fixed_clock_options());
        ADD_FAILURE() << "expected the template to raise: " << message;
      } catch (const TemplateRaised& e) {
        EXPECT_EQ(e.what(), message);
      }
    } else {
      EXPECT_EQ(tpl.render(c["vars"], fixed_clock_options()), c["expected"].get<std::string>());
    }
  }
}

INSTANTIATE_TEST_SUITE_P(SharedExpected, ExpectedRenderTest, ::testing::ValuesIn(expected_files()),
                         [](const ::testing::TestParamInfo<std::string>& info) {
                           std::string name = info.param.substr(0, info.param.size() - 5);
                           for (char& c : name) {
                             if (!std::isalnum(static_cast<unsigned char>(c))) c = '_';
                           }
                           return name;
                         });

TEST(ExpectedRenderFiles, AllSixteenArePresent) { EXPECT_EQ(expected_files().size(), 16u); }

// The same cases through the chat layer where transformers would pass the same variables: when
// the case gives tools, the only difference is documents=None, which these templates ignore.
TEST(ExpectedRenderChatLayer, CasesWithToolsRenderTheSameThroughChatTemplate) {
  int checked = 0;
  for (const auto& file : expected_files()) {
    const auto doc = read_json(kExpectedDir + file);
    const ChatTemplate chat(read_file(kTemplatesDir + doc["template_file"].get<std::string>()));
    for (const auto& c : doc["cases"]) {
      const auto& vars = c["vars"];
      if (!vars.contains("tools") || c.contains("error")) continue;
      SCOPED_TRACE(file + " " + c["case"].get<std::string>());
      ChatTemplateInputs inputs;
      inputs.messages = vars["messages"];
      inputs.tools = vars["tools"];
      inputs.add_generation_prompt = vars["add_generation_prompt"].get<bool>();
      inputs.bos_token = vars["bos_token"].get<std::string>();
      inputs.eos_token = vars["eos_token"].get<std::string>();
      inputs.render = fixed_clock_options();
      EXPECT_EQ(chat.render(inputs), c["expected"].get<std::string>());
      ++checked;
    }
  }
  EXPECT_GT(checked, 20);
}

}  // namespace
}  // namespace pagoda::tmpl
