// GBNF parsing and matching through the compiled automaton (byte vocabulary). To add a case:
// a grammar, texts it must match and texts it must not, or a bad grammar and the error text.
#include "structured/gbnf_parser.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "core/status.h"
#include "structured/compiled_grammar.h"
#include "structured/constraint.h"
#include "structured_test_util.h"

namespace pagoda::structured {
namespace {

using testing::full_match;

void expect_language(const std::string& gbnf, std::initializer_list<std::string_view> yes,
                     std::initializer_list<std::string_view> no) {
  const auto g = compile_grammar(parse_gbnf(gbnf), testing::byte_vocab());
  for (std::string_view t : yes) EXPECT_TRUE(full_match(g, t)) << gbnf << " should match " << t;
  for (std::string_view t : no) EXPECT_FALSE(full_match(g, t)) << gbnf << " should not match " << t;
}

std::string error_of(const std::string& gbnf) {
  try {
    (void)compile_grammar(parse_gbnf(gbnf), testing::byte_vocab());
  } catch (const InvalidArgument& e) {
    return e.what();
  }
  return "";
}

TEST(Gbnf, Arithmetic) {
  expect_language(R"x(
    root ::= expr
    expr ::= term (("+" | "-") term)*
    term ::= [0-9]+ | "(" expr ")"
  )x",
                  {"1", "1+2-33", "(1+2)-(3)", "((4))"}, {"", "1+", "+1", "(1", "1)", "1 + 2"});
}

TEST(Gbnf, BodiesSpanLinesUntilTheNextRule) {
  expect_language("root ::= a\n  | b # comment\n  | \"c\"\na ::= \"x\"\nb ::=\n  \"y\" \"z\"\n",
                  {"x", "yz", "c"}, {"y", "xyz"});
}

TEST(Gbnf, CharacterClassesAndEscapes) {
  expect_language(R"x(root ::= [^"\\\n]* "!")x", {"!", "abc!", "h\xC3\xA9!", "\xE2\x82\xAC!"},
                  {"\"!", "a\nb!", "\xC3!", "a"});
  expect_language(R"x(root ::= "\x41\u00e9\t" [a-cx-z]{2,3} .)x",
                  {"A\xC3\xA9\taxz", "A\xC3\xA9\tabc\xE2\x82\xAC"},
                  {"A\xC3\xA9\tad!", "A\xC3\xA9\ta!"});
  expect_language("root ::= 'single' \"\\\"\"", {"single\""}, {"single"});
}

TEST(Gbnf, Repetitions) {
  expect_language(R"x(root ::= "a"{3} "b"{0,2} "c"{2,} "d"{,1})x",
                  {"aaacc", "aaabbccccd", "aaabccc"}, {"aacc", "aaabbbcc", "aaac", "aaaccdd"});
}

TEST(Gbnf, NullableLoopsTerminate) {
  expect_language(R"x(root ::= ("a"?)* x* "b"
                     x ::= "c"?)x",
                  {"b", "aab", "acb", "ccb"}, {"", "ba"});
}

TEST(Gbnf, RecursionThroughRules) {
  expect_language(R"x(root ::= "[" items? "]"
                     items ::= root ("," root)*)x",
                  {"[]", "[[]]", "[[],[[]]]"}, {"[", "[,]", "[]]", "[[],]"});
}

TEST(Gbnf, Errors) {
  EXPECT_THAT(error_of("root ::= a\n"),
              ::testing::HasSubstr("line 1, column 10: undefined rule 'a'"));
  EXPECT_THAT(error_of("a ::= \"x\""), ::testing::HasSubstr("no 'root' rule"));
  EXPECT_THAT(error_of("root ::= \"x\"\nroot ::= \"y\""),
              ::testing::HasSubstr("line 2, column 1: rule 'root' is defined twice"));
  EXPECT_THAT(error_of("root ::= \"abc"), ::testing::HasSubstr("unterminated string literal"));
  EXPECT_THAT(error_of("root ::= \"\\q\""),
              ::testing::HasSubstr("line 1, column 11: unknown escape"));
  EXPECT_THAT(error_of("root ::= (= \"a\") \"b\""), ::testing::HasSubstr("lookahead"));
  EXPECT_THAT(error_of("root ::= [z-a]"), ::testing::HasSubstr("backwards"));
  EXPECT_THAT(error_of("root ::= \"a\" )"), ::testing::HasSubstr("unbalanced"));
  EXPECT_THAT(error_of("root ::= root \"a\" | \"b\""),
              ::testing::HasSubstr("left recursion (root -> root)"));
  EXPECT_THAT(error_of("root ::= x \"a\"\nx ::= \"\" | y\ny ::= x \"b\""),
              ::testing::HasSubstr("left recursion"));
  EXPECT_THAT(error_of("root ::= \"a\" root"), ::testing::HasSubstr("matches no finite text"));
}

TEST(Gbnf, DeadBranchesAreCut) {
  // "a" leads only into a rule that never ends: the matcher must not allow it.
  const auto g = compile_grammar(parse_gbnf("root ::= \"a\" loop | \"b\"\nloop ::= \"c\" loop"),
                                 testing::byte_vocab());
  EXPECT_FALSE(testing::prefix_match(g, "a"));
  EXPECT_TRUE(full_match(g, "b"));
}

}  // namespace
}  // namespace pagoda::structured

namespace pagoda::structured {
namespace {

TEST(StructuralTag, FreeTextAroundConstrainedCalls) {
  const auto g = compile_grammar(
      structural_tag_grammar(R"({"type": "structural_tag", "triggers": ["<tool_call>"],
          "structures": [{"begin": "<tool_call>{\"name\": \"f\", \"arguments\": ",
                          "schema": {"type": "object", "properties": {"x": {"type": "integer"}},
                                     "required": ["x"]},
                          "end": "}</tool_call>"}]})",
                             JsonFormat{false, std::nullopt, false}),
      testing::byte_vocab());
  EXPECT_TRUE(full_match(g, ""));
  EXPECT_TRUE(full_match(g, "Hello <tool wait \xC3\xA9"));
  EXPECT_TRUE(
      full_match(g, R"(ok <tool_call>{"name": "f", "arguments": {"x": 1}}</tool_call> done)"));
  EXPECT_TRUE(full_match(
      g,
      R"(<tool_call>{"name": "f", "arguments": {"x": 1}}</tool_call><tool_call>{"name": "f", "arguments": {"x": 22}}</tool_call>)"));
  EXPECT_FALSE(full_match(g, R"(<tool_call>{"name": "g", "arguments": {"x": 1}}</tool_call>)"));
  EXPECT_FALSE(full_match(g, R"(<tool_call>{"name": "f", "arguments": {"x": "1"}}</tool_call>)"));
  EXPECT_FALSE(full_match(g, "<tool_call>"));  // a call must finish
  EXPECT_FALSE(full_match(g, "bad utf-8 \xC3"));
  EXPECT_THAT(
      [] {
        try {
          (void)structural_tag_grammar(R"({"triggers": ["<a>"], "structures": [{"begin": "<b>",
              "schema": {}, "end": ""}]})",
                                       {});
        } catch (const InvalidArgument& e) {
          return std::string(e.what());
        }
        return std::string();
      }(),
      ::testing::HasSubstr("structures[0].begin: must start with one of the triggers"));
}

}  // namespace
}  // namespace pagoda::structured
