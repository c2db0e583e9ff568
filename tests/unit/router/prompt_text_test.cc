#include "router/prompt_text.h"

#include <gtest/gtest.h>

namespace pagoda::router {
namespace {

TEST(RoutingTextTest, CompletionPrompts) {
  EXPECT_EQ(routing_text(R"({"model": "m", "prompt": "Once upon"})"), "Once upon");
  EXPECT_EQ(routing_text(R"({"prompt": [1, 22, 333]})"), "1,22,333,");
  EXPECT_EQ(routing_text(R"({"prompt": ["a", "b"]})"), "a\nb");
  EXPECT_EQ(routing_text(R"({"prompt": [[1, 2], [3]]})"), "1,2,\n3,");
  EXPECT_EQ(routing_text(R"({"input": "embed me"})"), "embed me");
}

TEST(RoutingTextTest, ChatMessagesInOrder) {
  EXPECT_EQ(routing_text(R"({"messages": [{"role": "system", "content": "Be brief."},
                                          {"role": "user", "content": "Hi"}]})"),
            "system\nBe brief.\nuser\nHi\n");
  EXPECT_EQ(routing_text(R"({"messages": [{"role": "user", "content": [
              {"type": "text", "text": "look: "}, {"type": "image_url", "image_url": {"url": "u"}}]}]})"),
            "user\nlook: {\"image_url\":{\"url\":\"u\"},\"type\":\"image_url\"}\n");
}

TEST(RoutingTextTest, AnythingElseIsEmpty) {
  EXPECT_EQ(routing_text("not json"), "");
  EXPECT_EQ(routing_text("[1, 2]"), "");
  EXPECT_EQ(routing_text(R"({"tokens": [1, 2]})"), "");
  EXPECT_EQ(routing_text(R"({"prompt": 5})"), "");
}

}  // namespace
}  // namespace pagoda::router
