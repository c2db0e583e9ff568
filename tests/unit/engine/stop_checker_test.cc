// StopChecker: matches across deltas, hold-back of possible prefixes, earliest match, min_tokens.
// To add a case: feed deltas to a StopChecker and compare the emitted text and the match.
#include "engine/stop_checker.h"

#include <gtest/gtest.h>

namespace pagoda {
namespace {

std::string feed(StopChecker& c, const std::vector<std::string>& deltas) {
  std::string out;
  for (const auto& d : deltas) out += c.add(d);
  return out + c.flush();
}

TEST(StopChecker, PassesTextThroughWithoutStopStrings) {
  StopChecker c({});
  EXPECT_EQ(c.add("hello "), "hello ");
  EXPECT_EQ(feed(c, {"wor", "ld"}), "world");
  EXPECT_FALSE(c.matched());
}

TEST(StopChecker, FindsAMatchSpanningDeltasAndCutsIt) {
  StopChecker c({"STOP"});
  EXPECT_EQ(c.add("abc ST"), "abc ");  // "ST" could start "STOP": held back
  EXPECT_EQ(c.add("O"), "");
  EXPECT_EQ(c.add("P and more"), "");
  EXPECT_EQ(c.matched(), "STOP");
  EXPECT_EQ(c.flush(), "");
  EXPECT_EQ(c.add("ignored"), "");
}

TEST(StopChecker, ReleasesAHeldPrefixThatDidNotMatch) {
  StopChecker c({"STOP"});
  EXPECT_EQ(c.add("xST"), "x");
  EXPECT_EQ(c.add("ART"), "START");
  EXPECT_EQ(c.add("ST"), "");
  EXPECT_EQ(c.flush(), "ST");
  EXPECT_FALSE(c.matched());
}

TEST(StopChecker, EarliestMatchWinsThenTheLongest) {
  StopChecker c({"cd", "bc", "b"});
  EXPECT_EQ(feed(c, {"abcd"}), "a");
  EXPECT_EQ(c.matched(), "bc");
}

TEST(StopChecker, NotArmedBeforeMinTokens) {
  StopChecker c({"end"});
  // Before min_tokens a whole stop string is ordinary text (as in vLLM); a possible start of one
  // is still held back.
  EXPECT_EQ(c.add("the end", /*armed=*/false), "the end");
  EXPECT_EQ(c.add(" and the e", /*armed=*/false), " and the ");
  EXPECT_FALSE(c.matched());
  EXPECT_EQ(c.add("nd", /*armed=*/true), "");
  EXPECT_EQ(c.matched(), "end");
}

}  // namespace
}  // namespace pagoda
