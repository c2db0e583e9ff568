// Regexes compiled to grammars (full-match semantics). To add a case: a pattern, texts it must
// match and texts it must not, or a pattern and the start of its error.
#include "structured/regex_parser.h"

#include "structured/automaton.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "core/status.h"
#include "structured_test_util.h"

namespace pagoda::structured {
namespace {

Grammar regex_grammar(std::string_view pattern, RegexEncoding encoding = RegexEncoding::kRaw) {
  Grammar g;
  g.root = g.add_rule("root");
  g.rules[0].body = parse_regex(pattern, encoding).expr;
  return g;
}

void expect_language(std::string_view pattern, std::initializer_list<std::string_view> yes,
                     std::initializer_list<std::string_view> no,
                     RegexEncoding encoding = RegexEncoding::kRaw) {
  const auto g = compile_grammar(regex_grammar(pattern, encoding), testing::byte_vocab());
  for (std::string_view t : yes) EXPECT_TRUE(testing::full_match(g, t)) << pattern << " ~ " << t;
  for (std::string_view t : no) EXPECT_FALSE(testing::full_match(g, t)) << pattern << " !~ " << t;
}

std::string error_of(std::string_view pattern) {
  try {
    (void)parse_regex(pattern, RegexEncoding::kRaw);
  } catch (const InvalidArgument& e) {
    return e.what();
  }
  return "";
}

TEST(Regex, Basics) {
  expect_language(R"x([a-z]+@[a-z]+\.com)x", {"a@b.com", "xyz@host.com"},
                  {"@b.com", "a@b.org", "A@b.com"});
  expect_language(R"x(\d{3}-\d{4})x", {"555-1234"}, {"55-1234", "555-12345", "abc-defg"});
  expect_language("(ab|cd)*e?", {"", "ab", "cdabe", "e"}, {"abc", "ee"});
  expect_language("^foo(bar)?$", {"foo", "foobar"}, {"foob", "xfoo"});
  expect_language("a.c",
                  {"abc",
                   "a\xC3\xA9"
                   "c"},
                  {"a\nc", "ac"});
  expect_language("(?:x|y){2,}z+?", {"xyz", "yyyzz"}, {"xz", "xyy"});
  expect_language(R"x([^\d\s]\w*)x", {"a", "_x9"}, {"1a", " a"});
  expect_language(R"x(\u00e9\x41[\-\]])x",
                  {"\xC3\xA9"
                   "A-",
                   "\xC3\xA9"
                   "A]"},
                  {"\xC3\xA9"
                   "A"});
  expect_language("a{,2}b", {"b", "aab"}, {"aaab"});
  expect_language("{x}", {"{x}"}, {"x"});  // a brace that is no quantifier is a literal
  expect_language("(?P<year>[0-9]{4})-(?<m>[01][0-9])", {"2024-01"}, {"2024-1"});
}

TEST(Regex, JsonStringEncoding) {
  // The pattern sees decoded characters; the output writes them as JSON string content.
  expect_language(R"x(a"b\\c\n)x", {R"x(a\"b\\c\n)x"}, {"a\"b\\c\n", R"x(a"b\\c\n)x"},
                  RegexEncoding::kJsonString);
  expect_language("[^a]", {"b", "\\\"", "\\u0001", "\\n"}, {"a", "\"", "\n"},
                  RegexEncoding::kJsonString);
}

TEST(Regex, LongChainsAndLimits) {
  // Long counted repetitions minimize in n log n (Hopcroft) and match exactly.
  const auto g = compile_grammar(regex_grammar("[ab]{3000}c"), testing::byte_vocab());
  EXPECT_TRUE(testing::full_match(g, std::string(3000, 'a') + "c"));
  EXPECT_FALSE(testing::full_match(g, std::string(2999, 'b') + "c"));
  // Past the limits: refused by size, before building, or by the subset construction.
  auto error = [](std::string_view pattern) {
    try {
      (void)build_automaton(regex_grammar(pattern));
    } catch (const InvalidArgument& e) {
      return std::string(e.what());
    }
    return std::string();
  };
  EXPECT_THAT(error("(a{1000}){1000}"), ::testing::HasSubstr("too large"));
  EXPECT_THAT(error("(a|b)*a(a|b){20}"), ::testing::HasSubstr("too complex"));
}

TEST(Regex, Errors) {
  EXPECT_THAT(error_of("(a)\\1"), ::testing::HasSubstr("at offset 3: backreferences"));
  EXPECT_THAT(error_of("a(?=b)"), ::testing::HasSubstr("at offset 1: lookaround"));
  EXPECT_THAT(error_of("\\bword"), ::testing::HasSubstr("word boundaries"));
  EXPECT_THAT(error_of("(ab"), ::testing::HasSubstr("unterminated group"));
  EXPECT_THAT(error_of("ab)"), ::testing::HasSubstr("unbalanced"));
  EXPECT_THAT(error_of("a^b"), ::testing::HasSubstr("anchors"));
  EXPECT_THAT(error_of("a$b"), ::testing::HasSubstr("anchors"));
  EXPECT_THAT(error_of("*a"), ::testing::HasSubstr("nothing to repeat"));
  EXPECT_THAT(error_of("[b-a]"), ::testing::HasSubstr("backwards"));
  EXPECT_THAT(error_of("(?i)a"), ::testing::HasSubstr("inline flags"));
  EXPECT_THAT(error_of("a{3,2}"), ::testing::HasSubstr("max < min"));
}

}  // namespace
}  // namespace pagoda::structured
