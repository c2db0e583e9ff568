// Replays tests/server/malformed_requests.json through the parsers: every POST entry for an
// endpoint this layer parses must fail with the entry's status (and param, and message text when
// the entry gives them). The end-to-end suite replays the same file against a live server.
// To add a case, append an entry to the JSON file ("body" as a string, or "body_base64" for raw
// bytes; "param": null means the error names no field).
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "server/openai/api_error.h"
#include "server/openai/chat_request.h"
#include "server/openai/completion_request.h"
#include "server/openai/endpoints.h"
#include "test_util.h"

namespace pagoda::openai {
namespace {

std::string base64_decode(const std::string& in) {
  auto value = [](char c) -> int {
    if (c >= 'A' && c <= 'Z') return c - 'A';
    if (c >= 'a' && c <= 'z') return c - 'a' + 26;
    if (c >= '0' && c <= '9') return c - '0' + 52;
    if (c == '+') return 62;
    if (c == '/') return 63;
    return -1;
  };
  std::string out;
  int bits = 0;
  uint32_t buffer = 0;
  for (char c : in) {
    const int v = value(c);
    if (v < 0) continue;  // '=' padding
    buffer = (buffer << 6) | static_cast<uint32_t>(v);
    bits += 6;
    if (bits >= 8) {
      bits -= 8;
      out.push_back(static_cast<char>((buffer >> bits) & 0xFF));
    }
  }
  return out;
}

// Runs a body through the endpoint's parser; status 200 when it is accepted.
ApiError run(const std::string& path, const std::string& body, const ServerContext& ctx) {
  try {
    if (path == "/v1/completions") {
      (void)parse_completion_request(body, ctx);
    } else if (path == "/v1/chat/completions") {
      (void)parse_chat_request(body, ctx);
    } else if (path == "/tokenize") {
      (void)tokenize_response(body, ctx);
    } else if (path == "/detokenize") {
      (void)detokenize_response(body, ctx);
    }
    return {200, "", "", ""};
  } catch (const std::exception& e) {
    return api_error_from(e);
  }
}

TEST(MalformedCorpus, EveryEntryFailsWithItsStatusAndParam) {
  const nlohmann::json corpus = nlohmann::json::parse(
      testing::read_file(PAGODA_SOURCE_DIR "/tests/server/malformed_requests.json"));
  ASSERT_TRUE(corpus.is_array());
  EXPECT_GE(corpus.size(), 50u);
  // As the end-to-end suite starts its server: --trust-request-chat-template, fcfs scheduling.
  ServerContext ctx = testing::context();
  ctx.priority_scheduling = false;
  int checked = 0;
  for (const auto& entry : corpus) {
    const std::string name = entry.at("name");
    const std::string path = entry.at("path");
    if (entry.at("method") != "POST") continue;
    if (path != "/v1/completions" && path != "/v1/chat/completions" && path != "/tokenize" &&
        path != "/detokenize") {
      continue;
    }
    SCOPED_TRACE(name);
    const std::string body = entry.contains("body_base64") ? base64_decode(entry.at("body_base64"))
                                                           : entry.at("body").get<std::string>();
    const ApiError error = run(path, body, ctx);
    EXPECT_EQ(error.status, entry.at("status").get<int>()) << error.message;
    if (entry.contains("param")) {
      const std::string want = entry.at("param").is_null() ? "" : entry.at("param");
      EXPECT_EQ(error.param, want) << error.message;
    }
    if (entry.contains("message_contains")) {
      EXPECT_NE(error.message.find(entry.at("message_contains").get<std::string>()),
                std::string::npos)
          << error.message;
    }
    // Whatever the input, the error body is valid JSON in the documented shape.
    const nlohmann::json sent = nlohmann::json::parse(error_body(error));
    EXPECT_EQ(sent.at("error").at("code"), error.status);
    EXPECT_TRUE(sent.at("error").at("message").is_string());
    ++checked;
  }
  EXPECT_GE(checked, 50);
}

}  // namespace
}  // namespace pagoda::openai
