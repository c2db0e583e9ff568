// Bi-directional KV in the router: KVReturnScanner finds the kv_transfer_params of an engine's
// answer, whole or streamed in arbitrary pieces, and the import body carries them with the salt.
#include "router/kv_return.h"

#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

namespace pagoda::router {
namespace {

constexpr const char* kParams =
    R"({"do_remote_prefill":true,"remote_host":"127.0.0.1","remote_port":5,"remote_block_ids":[1,2]})";

TEST(KVReturnScanner, FindsTheHandOffInAWholeAnswer) {
  KVReturnScanner s;
  s.feed_body(R"({"choices":[{"text":"x"}],"kv_transfer_params":)" + std::string(kParams) + "}");
  ASSERT_TRUE(s.params().has_value());
  EXPECT_EQ(nlohmann::json::parse(*s.params()), nlohmann::json::parse(kParams));
  KVReturnScanner none;
  none.feed_body(R"({"choices":[]})");
  EXPECT_FALSE(none.params().has_value());
  none.feed_body("not json");
  EXPECT_FALSE(none.params().has_value());
}

TEST(KVReturnScanner, FindsTheHandOffInAStreamCutAnywhere) {
  const std::string stream = std::string("data: {\"choices\":[{\"text\":\"a\"}]}\n\n") +
                             "data: {\"choices\":[{\"finish_reason\":\"length\"}]," +
                             "\"kv_transfer_params\":" + kParams + "}\n\n" + "data: [DONE]\n\n";
  for (size_t piece : {1u, 3u, 7u, 64u, 4096u}) {
    KVReturnScanner s;
    for (size_t i = 0; i < stream.size(); i += piece) s.feed_stream(stream.substr(i, piece));
    ASSERT_TRUE(s.params().has_value()) << piece;
    EXPECT_EQ(nlohmann::json::parse(*s.params()), nlohmann::json::parse(kParams));
  }
  // A stream without one, or whose event never ends, gives none.
  KVReturnScanner s;
  s.feed_stream("data: {\"choices\":[]}\n\ndata: {\"kv_transfer_params\":{}");
  EXPECT_FALSE(s.params().has_value());
}

TEST(KVReturnScanner, TheImportBodyCarriesTheParamsAndTheSalt) {
  const auto body = nlohmann::json::parse(kv_import_body(kParams, "tenant-1"));
  EXPECT_EQ(body["kv_transfer_params"], nlohmann::json::parse(kParams));
  EXPECT_EQ(body["cache_salt"], "tenant-1");
  EXPECT_FALSE(nlohmann::json::parse(kv_import_body(kParams, "")).contains("cache_salt"));
}

}  // namespace
}  // namespace pagoda::router
