// The compiled automaton: byte classes, minimal rule automata, tail calls, FOLLOW sets, and the
// matcher's end-of-text handling. To add a case: a grammar and the property to check.
#include "structured/automaton.h"

#include <gtest/gtest.h>

#include "structured/gbnf_parser.h"
#include "structured/json_schema.h"
#include "structured/matcher.h"
#include "structured_test_util.h"

namespace pagoda::structured {
namespace {

TEST(Automaton, ByteClassesAreCoarse) {
  const Automaton a = build_automaton(parse_gbnf(R"x(root ::= [a-z]+ "@" [a-z]+)x"));
  EXPECT_EQ(a.num_classes, 3);  // [a-z], "@", everything else
}

TEST(Automaton, RulesAreMinimal) {
  // Both alternatives and the loop collapse into one state that loops on "a".
  const Automaton a = build_automaton(parse_gbnf(R"x(root ::= ("a" | "a")* | "a"+)x"));
  EXPECT_EQ(a.num_states(), 1);
  EXPECT_TRUE(a.final(0));
}

TEST(Automaton, TailCallsAndFollow) {
  const Automaton a = build_automaton(parse_gbnf(R"x(root ::= "[" item ("," item)* "]"
                                                    item ::= [0-9]+ | "x" root)x"));
  const int32_t item = 1;
  ASSERT_EQ(a.rule_names[item], "item");
  ByteSet expected;
  expected.set(',');
  expected.set(']');
  EXPECT_EQ(a.follow[item], expected);
  EXPECT_EQ(a.follow[0], expected);  // root after "x" is item's end
  bool any_tail = false;
  for (const Call& c : a.calls) any_tail = any_tail || (c.rule == 0 && c.tail);
  EXPECT_TRUE(any_tail);  // "x" root: nothing after root in item
}

TEST(Matcher, EndOfTextAndTermination) {
  const auto g = compile_grammar(parse_gbnf(R"x(root ::= "ab" "c"?)x"), testing::byte_vocab());
  GrammarMatcher m(g);
  EXPECT_FALSE(m.can_end());
  EXPECT_FALSE(m.accept_token(256));  // end of text too early
  EXPECT_TRUE(m.accept_token('a'));
  EXPECT_FALSE(m.accept_token('x'));
  EXPECT_TRUE(m.accept_token('b'));
  EXPECT_TRUE(m.can_end());
  EXPECT_FALSE(m.completed());  // "c" may still come
  std::vector<uint32_t> mask(static_cast<size_t>(g->vocab->mask_words()));
  m.fill_mask(mask);
  EXPECT_EQ(mask['c' / 32], 1u << ('c' % 32));
  EXPECT_EQ(mask[256 / 32], 1u);  // end of text allowed
  EXPECT_TRUE(m.accept_token('c'));
  EXPECT_TRUE(m.completed());
  EXPECT_TRUE(m.accept_token(256));
  EXPECT_TRUE(m.terminated());
  EXPECT_FALSE(m.accept_token('c'));
}

TEST(Matcher, ForcedBytesStopAtAChoiceOrAnEnd) {
  const auto g =
      compile_grammar(parse_gbnf(R"x(root ::= "{\"name\": " [a-z]+ ", \"age\": " [0-9]+ "}")x"),
                      testing::byte_vocab());
  GrammarMatcher m(g);
  EXPECT_EQ(m.forced_bytes(64), R"({"name": )");
  EXPECT_EQ(m.forced_bytes(3), R"({"n)");  // bounded
  ASSERT_TRUE(m.accept_bytes(R"({"name": bob)"));
  EXPECT_EQ(m.forced_bytes(64), "");  // a letter or the comma
  ASSERT_TRUE(m.accept_bytes(","));
  EXPECT_EQ(m.forced_bytes(64), R"( "age": )");
  ASSERT_TRUE(m.accept_bytes(R"( "age": 4)"));
  EXPECT_EQ(m.forced_bytes(64), "");
  ASSERT_TRUE(m.accept_bytes("}"));
  EXPECT_EQ(m.forced_bytes(64), "");  // the text may end here: nothing is forced
  // Nothing changed: the matcher is where the accepted bytes left it.
  EXPECT_TRUE(m.completed());
}

TEST(Matcher, ForcedBytesOfACompactJsonSchema) {
  // Required properties in their order, json.dumps spacing: each key is forced once its value
  // ends.
  const auto g = compile_grammar(
      json_schema_grammar(R"({"type": "object", "properties": {"id": {"type": "integer"},
                             "ok": {"type": "boolean"}}, "required": ["id", "ok"],
                             "additionalProperties": false})",
                          {false, std::nullopt}),
      testing::byte_vocab());
  GrammarMatcher m(g);
  EXPECT_EQ(m.forced_bytes(64), R"({"id": )");
  ASSERT_TRUE(m.accept_bytes(R"({"id": 12)"));
  EXPECT_EQ(m.forced_bytes(64), "");  // another digit or the comma
  ASSERT_TRUE(m.accept_bytes(","));
  EXPECT_EQ(m.forced_bytes(64), R"( "ok": )");
  ASSERT_TRUE(m.accept_bytes(R"( "ok": t)"));
  EXPECT_EQ(m.forced_bytes(64), "rue}");
}

}  // namespace
}  // namespace pagoda::structured
