// Unit tests of the Jinja language itself.
//
// Most cases are data: data/language_cases.json holds {template, vars, expected} rows whose
// expected text was produced by Jinja2 configured as transformers configures it, plus error rows
// (message substring) and syntax-error rows (line). To add a case, add a row to the CASES,
// ERROR_CASES or SYNTAX_ERRORS lists in data/generate_language_cases.py and rerun it (it needs
// Python with jinja2, a developer tool only) - or, without Python, add a row to the JSON by hand
// with output you have checked against Jinja2's documented behaviour.
//
// The hand-written tests below cover what a table cannot: line numbers of runtime errors, limits
// against hostile templates and inputs, thread safety and the chat layer.
#include <thread>

#include <gtest/gtest.h>

#include "template/chat_template.h"
#include "template/template.h"
#include "test_util.h"

namespace pagoda::tmpl {
namespace {

using testing::fixed_clock_options;
using testing::kDataDir;
using testing::read_json;

const nlohmann::ordered_json& cases() {
  static const nlohmann::ordered_json doc = read_json(kDataDir + "language_cases.json");
  return doc;
}

std::string render(const std::string& source, const nlohmann::ordered_json& vars = {},
                   const RenderOptions& options = fixed_clock_options()) {
  return Template(source).render(vars.is_null() ? nlohmann::ordered_json::object() : vars, options);
}

TEST(LanguageCases, RenderLikeJinja2) {
  ASSERT_GT(cases()["cases"].size(), 50u);
  for (const auto& c : cases()["cases"]) {
    SCOPED_TRACE(c["name"].get<std::string>() + ": " + c["template"].get<std::string>());
    try {
      EXPECT_EQ(render(c["template"], c["vars"]), c["expected"].get<std::string>());
    } catch (const std::exception& e) {
      ADD_FAILURE() << "threw: " << e.what();
    }
  }
}

TEST(LanguageCases, RuntimeErrorsLikeJinja2) {
  ASSERT_GT(cases()["errors"].size(), 10u);
  for (const auto& c : cases()["errors"]) {
    SCOPED_TRACE(c["name"].get<std::string>() + ": " + c["template"].get<std::string>());
    try {
      (void)render(c["template"], c["vars"]);
      ADD_FAILURE() << "expected an error";
    } catch (const TemplateError& e) {
      EXPECT_NE(e.message().find(c["error"].get<std::string>()), std::string::npos) << e.what();
    }
  }
}

TEST(LanguageCases, SyntaxErrorsCarryTheLine) {
  ASSERT_GT(cases()["syntax_errors"].size(), 5u);
  for (const auto& c : cases()["syntax_errors"]) {
    SCOPED_TRACE(c["name"].get<std::string>() + ": " + c["template"].get<std::string>());
    try {
      Template tpl(c["template"].get<std::string>());
      ADD_FAILURE() << "expected a syntax error";
    } catch (const TemplateError& e) {
      EXPECT_EQ(e.line(), c["line"].get<int>()) << e.what();
      EXPECT_NE(std::string(e.what()).find("syntax error"), std::string::npos);
    }
  }
}

TEST(Errors, RuntimeErrorsNameTheLine) {
  try {
    (void)render("line 1\n{% for m in messages %}\n{{ m.content + 1 }}\n{% endfor %}",
                 {{"messages", {{{"content", "x"}}}}});
    FAIL();
  } catch (const TemplateError& e) {
    EXPECT_EQ(e.line(), 3);
    EXPECT_STREQ(e.what(), "can only concatenate str (not \"int\") to str (template line 3)");
  }
}

TEST(Errors, RaiseExceptionKeepsTheTemplatesMessageExactly) {
  try {
    (void)render("a\n{{ raise_exception('Only user and assistant roles are supported!') }}");
    FAIL();
  } catch (const TemplateRaised& e) {
    EXPECT_STREQ(e.what(), "Only user and assistant roles are supported!");
    EXPECT_EQ(e.line(), 2);
  }
  // TemplateError is an InvalidArgument, so the HTTP layer answers 400.
  EXPECT_THROW((void)render("{{ raise_exception('x') }}"), InvalidArgument);
}

TEST(Errors, BadEscapesAndFormatIndicesAreTemplateErrors) {
  // Found by fuzz_jinja: these threw std::invalid_argument / std::out_of_range before.
  EXPECT_THROW((void)render("{{ '\\xZZ' }}"), TemplateError);
  EXPECT_THROW((void)render("{{ '\\uD8' }}"), TemplateError);
  EXPECT_THROW((void)render("{{ '{99999999999999999999999}'.format(1) }}"), TemplateError);
  EXPECT_THROW((void)render("{{ 0b123 }}"), TemplateError);
  EXPECT_THROW((void)render("{{ 0x }}"), TemplateError);
  EXPECT_THROW((void)render("{{ 0xffffffffffffffffffff }}"), TemplateError);
  EXPECT_THROW((void)render("{{ x.99999999999999999999999 }}", {{"x", {1}}}), TemplateError);
  EXPECT_EQ(render("{{ 1e999999 > 1 }}"), "True");
  EXPECT_EQ(render("{{ '\\x41\\u00e9' }}"), "A\u00e9");
}

// ---- hostile templates and inputs: an error, never a crash or a hang ----

TEST(Hostile, DeeplyNestedExpressionIsASyntaxError) {
  const std::string deep =
      "{{ " + std::string(100000, '(') + "1" + std::string(100000, ')') + " }}";
  EXPECT_THROW(Template{deep}, TemplateError);
  std::string lists = "{{ " + std::string(50000, '[') + std::string(50000, ']') + " }}";
  EXPECT_THROW(Template{lists}, TemplateError);
  std::string nots = "{{ ";
  for (int i = 0; i < 50000; ++i) nots += "not ";
  EXPECT_THROW(Template{nots + "1 }}"}, TemplateError);
}

TEST(Hostile, DeeplyNestedBlocksAreASyntaxError) {
  std::string s;
  for (int i = 0; i < 20000; ++i) s += "{% if true %}";
  EXPECT_THROW(Template{s}, TemplateError);
}

TEST(Hostile, InfiniteMacroRecursionIsBounded) {
  try {
    (void)render("{% macro f(n) %}{{ f(n + 1) }}{% endmacro %}{{ f(0) }}");
    FAIL();
  } catch (const TemplateError& e) {
    EXPECT_NE(e.message().find("maximum macro call depth"), std::string::npos) << e.what();
  }
  // Mutual recursion through a call block's caller too.
  EXPECT_THROW((void)render("{% macro a() %}{{ b() }}{% endmacro %}"
                            "{% macro b() %}{{ a() }}{% endmacro %}{{ a() }}"),
               TemplateError);
}

TEST(Hostile, InfiniteRecursiveLoopIsBounded) {
  try {
    (void)render("{% for x in [1] recursive %}{{ loop([1]) }}{% endfor %}");
    FAIL();
  } catch (const TemplateError& e) {
    EXPECT_NE(e.message().find("maximum recursive loop depth"), std::string::npos) << e.what();
  }
  // Deep (but finite) input through a recursive loop hits the same bound, not the stack.
  nlohmann::ordered_json tree = nlohmann::ordered_json::array();
  for (int i = 0; i < 100; ++i) {  // 200 JSON levels: accepted as input, too deep to recurse
    tree = nlohmann::ordered_json::array({{{"children", tree}}});
  }
  try {
    (void)render("{% for n in tree recursive %}{{ loop(n.children) }}{% endfor %}",
                 {{"tree", tree}});
    FAIL();
  } catch (const TemplateError& e) {
    EXPECT_NE(e.message().find("maximum recursive loop depth"), std::string::npos) << e.what();
  }
  // A shallow tree renders.
  EXPECT_EQ(render("{% for n in t recursive %}{{ loop.depth }}{{ loop(n.c or []) }}{% endfor %}",
                   {{"t", {{{"c", {{{"c", nullptr}}}}}}}}),
            "12");
}

TEST(Hostile, HugePaddingIsRejectedBeforeAllocating) {
  for (const char* source :
       {"{{ 'a'.center(2000000000) }}", "{{ 'a'.ljust(2000000000) }}",
        "{{ 'a'.zfill(3000000000) }}", "{{ '%2000000000s' % 'a' }}",
        "{{ '%99999999999999999999d' % 1 }}", "{{ '{:>2000000000}'.format('a') }}",
        "{{ '%.2000000000f' | format(1.5) }}"}) {
    SCOPED_TRACE(source);
    EXPECT_THROW((void)render(source), TemplateError);
  }
}

TEST(Hostile, SliceAndBatchCountsAreBounded) {
  RenderOptions options;
  options.limits.max_loop_iterations = 100000;
  EXPECT_THROW((void)render("{{ [1] | slice(100000000) | list }}", {}, options), TemplateError);
  EXPECT_THROW((void)render("{{ 'x' | truncate(-1) }}"), TemplateError);
  EXPECT_THROW((void)render("{{ 'x y' | wordwrap(0) }}"), TemplateError);
  EXPECT_THROW((void)render("{{ cycler() }}"), TemplateError);
}

TEST(Hostile, HugeLoopsAreBounded) {
  RenderOptions options;
  options.limits.max_loop_iterations = 100000;
  EXPECT_THROW((void)render("{% for i in range(1000000000) %}{% endfor %}", {}, options),
               TemplateError);
  EXPECT_THROW((void)render("{% for i in range(1000) %}{% for j in range(1000) %}"
                            "{% endfor %}{% endfor %}",
                            {}, options),
               TemplateError);
  EXPECT_THROW((void)render("{{ ([1] * 1000000000) | length }}", {}, options), TemplateError);
}

TEST(Hostile, EvaluationStepsAreBounded) {
  // Few iterations, much work in each: the step limit stops it where the loop limit would not.
  RenderOptions options;
  options.limits.max_steps = 10000;
  try {
    (void)render("{% for i in range(1000) %}{{ i + i + i + i + i + i + i + i }}{% endfor %}", {},
                 options);
    ADD_FAILURE() << "the render was not stopped";
  } catch (const TemplateError& e) {
    EXPECT_NE(std::string(e.what()).find("10000 evaluation steps"), std::string::npos) << e.what();
  }
  // A template within the limit renders.
  EXPECT_EQ(render("{% for i in range(3) %}{{ i }}{% endfor %}", {}, options), "012");
}

TEST(Hostile, OutputAndStringGrowthAreBounded) {
  RenderOptions options;
  options.limits.max_output_bytes = 1 << 20;
  EXPECT_THROW((void)render("{% set ns = namespace(s='xx') %}{% for i in range(40) %}"
                            "{% set ns.s = ns.s + ns.s %}{% endfor %}",
                            {}, options),
               TemplateError);
  EXPECT_THROW((void)render("{{ 'x' * 100000000 }}", {}, options), TemplateError);
  EXPECT_THROW(
      (void)render("{% for i in range(100000) %}0123456789abcdef{% endfor %}", {}, options),
      TemplateError);
}

TEST(Hostile, DeeplyNestedInputIsRejected) {
  nlohmann::ordered_json deep = 1;
  for (int i = 0; i < 5000; ++i) deep = nlohmann::ordered_json::array({deep});
  EXPECT_THROW((void)render("{{ x }}", {{"x", deep}}), TemplateError);
}

TEST(Hostile, SelfReferenceIsAnErrorNotAStackOverflow) {
  EXPECT_THROW((void)render("{% set ns = namespace() %}{% set ns.me = ns %}{{ ns }}"),
               TemplateError);
  EXPECT_THROW((void)render("{% set ns = namespace(l=[]) %}{% for i in range(10000) %}"
                            "{% set ns.l = [ns.l] %}{% endfor %}{{ ns.l | tojson }}"),
               TemplateError);
}

// ---- thread safety: one parsed template, many concurrent renders ----

TEST(Concurrency, OneTemplateRendersOnManyThreads) {
  const Template tpl(
      "{% set ns = namespace(n=0) %}{% for m in messages %}{% set ns.n = ns.n + 1 %}"
      "{{ m.role }}:{{ m.content | upper }};{% endfor %}{{ ns.n }}");
  std::vector<std::thread> threads;
  std::vector<int> ok(8, 0);
  for (int t = 0; t < 8; ++t) {
    threads.emplace_back([&, t] {
      for (int i = 0; i < 200; ++i) {
        nlohmann::ordered_json vars = {
            {"messages", {{{"role", "user"}, {"content", "hi" + std::to_string(t)}}}}};
        if (tpl.render(vars) == "user:HI" + std::to_string(t) + ";1") ++ok[t];
      }
    });
  }
  for (auto& th : threads) th.join();
  for (int t = 0; t < 8; ++t) EXPECT_EQ(ok[t], 200);
}

// ---- the chat layer ----

TEST(ChatLayer, PassesTransformersVariables) {
  const ChatTemplate chat(
      "{{ bos_token }}|{{ tools is none }}|{{ documents is none }}|{{ add_generation_prompt }}|"
      "{{ messages | length }}|{{ eos_token }}|{{ enable_thinking }}");
  ChatTemplateInputs inputs;
  inputs.messages = nlohmann::ordered_json::parse(R"([{"role": "user", "content": "x"}])");
  inputs.bos_token = "<s>";
  inputs.eos_token = "</s>";
  inputs.add_generation_prompt = true;
  inputs.extra = {{"enable_thinking", false}};
  EXPECT_EQ(chat.render(inputs), "<s>|True|True|True|1|</s>|False");
  inputs.tools = nlohmann::ordered_json::array();
  inputs.extra = {{"bos_token", "[BOS]"}};
  EXPECT_EQ(chat.render(inputs), "[BOS]|False|True|True|1|</s>|");
}

TEST(ChatLayer, ReservedKwargsAreRejected) {
  const ChatTemplate chat("{{ messages }}");
  ChatTemplateInputs inputs;
  inputs.extra = {{"messages", 1}};
  EXPECT_THROW((void)chat.render(inputs), InvalidArgument);
  inputs.extra = nlohmann::ordered_json::object();
  inputs.messages = "not a list";
  EXPECT_THROW((void)chat.render(inputs), InvalidArgument);
}

TEST(ChatLayer, DefaultTemplate) {
  const ChatTemplate chat("");
  ChatTemplateInputs inputs;
  inputs.messages = nlohmann::ordered_json::parse(R"([
    {"role": "system", "content": "Be brief."},
    {"role": "user", "content": [{"type": "text", "text": "Hi "}, {"type": "image"},
                                 {"type": "text", "text": "there"}]},
    {"role": "assistant", "content": null}])");
  EXPECT_EQ(chat.render(inputs), "system: Be brief.\nuser: Hi there\nassistant: \n");
  inputs.messages.erase(2);
  inputs.add_generation_prompt = true;
  EXPECT_EQ(chat.render(inputs), "system: Be brief.\nuser: Hi there\nassistant:");
  EXPECT_EQ(std::string(kDefaultChatTemplate).empty(), false);
}

// Python's str.splitlines() breaks (expected values from CPython 3): str.splitlines, and the
// indent and wordwrap filters, which Jinja2 builds on it.
TEST(Strings, SplitlinesBreaksWherePythonDoes) {
  const nlohmann::ordered_json vars = {
      {"s", "a\nb\r\nc\rd\ve\ff\x1cg\x1dh\x1ei\u0085j\u2028k\u2029l\n"}};
  EXPECT_EQ(render("{{ s.splitlines() | join('|') }}", vars), "a|b|c|d|e|f|g|h|i|j|k|l");
  EXPECT_EQ(render("{{ s.splitlines() | length }}", {{"s", "x\n\ny"}}), "3");
  EXPECT_EQ(render("{{ s.splitlines() | length }}", {{"s", ""}}), "0");
  EXPECT_EQ(render("{{ s | indent(2) }}", {{"s", "a\u2028b"}}), "a\n  b");
  EXPECT_EQ(render("{{ s | wordwrap(5) }}", {{"s", "ab\vcd"}}), "ab\ncd");
  // Not a break: U+2027, the code point before U+2028 (its last byte differs by one bit too).
  EXPECT_EQ(render("{{ s.splitlines() | length }}", {{"s", "a\u2027b\u00a5c"}}), "1");
}

TEST(ChatLayer, StrftimeNowUsesTheInjectedClock) {
  ChatTemplateInputs inputs;
  inputs.render = fixed_clock_options();
  EXPECT_EQ(render_chat_template("{{ strftime_now('%d %b %Y') }}", inputs), "26 Jul 2024");
  ChatTemplateInputs wall;
  EXPECT_EQ(render_chat_template("{{ strftime_now('%Y') | length }}", wall), "4");
}

}  // namespace
}  // namespace pagoda::tmpl
