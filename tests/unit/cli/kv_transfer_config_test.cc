// --kv-transfer-config as vLLM's JSON: the roles, pagoda's transport keys and their defaults, and
// refusals that name the key.
#include <gtest/gtest.h>

#include "cli/kv_transfer_config.h"
#include "core/status.h"

namespace pagoda::cli {
namespace {

std::string error_of(const std::string& json) {
  try {
    (void)parse_kv_transfer_config(json);
  } catch (const InvalidArgument& e) {
    return e.what();
  }
  return "accepted";
}

TEST(KVTransferConfigFlag, RolesAndTransportKeys) {
  KVTransferConfig c =
      parse_kv_transfer_config(R"({"kv_connector": "PagodaConnector", "kv_role": "kv_producer"})");
  EXPECT_TRUE(c.producer());
  EXPECT_FALSE(c.consumer());
  EXPECT_EQ(c.transport, "tcp");
  EXPECT_EQ(c.host, "127.0.0.1");
  EXPECT_EQ(c.port, 0);
  EXPECT_EQ(c.pull_timeout_ms, 30000);
  EXPECT_EQ(c.keep_timeout_ms, 120000);
  c = parse_kv_transfer_config(
      R"({"kv_connector": "PagodaConnector", "kv_role": "kv_both", "engine_id": "p0",
          "kv_connector_extra_config": {"transport": "tcp", "host": "10.0.0.7", "port": 14579,
                                        "pull_timeout": 2.5, "keep_timeout": 60}})");
  EXPECT_TRUE(c.producer());
  EXPECT_TRUE(c.consumer());
  EXPECT_EQ(c.engine_id, "p0");
  EXPECT_EQ(c.host, "10.0.0.7");
  EXPECT_EQ(c.port, 14579);
  EXPECT_EQ(c.pull_timeout_ms, 2500);
  EXPECT_EQ(c.keep_timeout_ms, 60000);
  EXPECT_TRUE(
      parse_kv_transfer_config(R"({"kv_connector": "PagodaConnector", "kv_role": "kv_consumer"})")
          .consumer());
  EXPECT_TRUE(c.ucx_tls.empty());
  c = parse_kv_transfer_config(
      R"({"kv_connector": "PagodaConnector", "kv_role": "kv_consumer",
          "kv_connector_extra_config": {"transport": "ucx", "ucx_tls": "rc,sm,self"}})");
  EXPECT_EQ(c.transport, "ucx");
  EXPECT_EQ(c.ucx_tls, "rc,sm,self");
  c = parse_kv_transfer_config(
      R"({"kv_connector": "PagodaConnector", "kv_role": "kv_producer",
          "kv_connector_extra_config": {"transport": "ucx"}})");
  EXPECT_EQ(c.transport, "ucx");
  EXPECT_TRUE(c.ucx_tls.empty());  // UCX's own choice
}

TEST(KVTransferConfigFlag, RefusalsNameTheKey) {
  EXPECT_NE(error_of("{").find("not valid JSON"), std::string::npos);
  EXPECT_NE(error_of("[]").find("JSON object"), std::string::npos);
  EXPECT_NE(error_of(R"({"kv_role": "kv_producer"})").find("kv_connector is required"),
            std::string::npos);
  EXPECT_NE(error_of(R"({"kv_connector": "PagodaConnector"})").find("kv_role is required"),
            std::string::npos);
  EXPECT_NE(error_of(R"({"kv_connector": "NixlConnector", "kv_role": "kv_producer"})")
                .find("kv_connector 'NixlConnector' is vLLM's"),
            std::string::npos);
  EXPECT_NE(error_of(R"({"kv_connector": "Other", "kv_role": "kv_producer"})")
                .find("kv_connector 'Other'"),
            std::string::npos);
  EXPECT_NE(error_of(R"({"kv_connector": "PagodaConnector", "kv_role": "producer"})")
                .find("kv_role 'producer'"),
            std::string::npos);
  EXPECT_NE(error_of(R"({"kv_connector": "PagodaConnector", "kv_role": 1})").find("kv_role must"),
            std::string::npos);
  EXPECT_NE(error_of(R"({"kv_connector": "PagodaConnector", "kv_role": "kv_both", "kv_ip": "x"})")
                .find("unknown key kv_ip"),
            std::string::npos);
  const std::string base = R"({"kv_connector": "PagodaConnector", "kv_role": "kv_both", )";
  EXPECT_NE(error_of(base + R"("kv_connector_extra_config": 3})")
                .find("kv_connector_extra_config must be a JSON object"),
            std::string::npos);
  EXPECT_NE(error_of(base + R"("kv_connector_extra_config": {"transport": "rdma"}})")
                .find("kv_connector_extra_config.transport 'rdma' must be tcp or ucx"),
            std::string::npos);
  EXPECT_NE(error_of(base + R"("kv_connector_extra_config": {"ucx_tls": "tcp"}})")
                .find("kv_connector_extra_config.ucx_tls needs transport ucx (transport is tcp)"),
            std::string::npos);
  EXPECT_NE(
      error_of(base + R"("kv_connector_extra_config": {"transport": "ucx", "ucx_tls": "tcp; x"}})")
          .find("kv_connector_extra_config.ucx_tls must be UCX's transport list"),
      std::string::npos);
  EXPECT_NE(error_of(base + R"("kv_connector_extra_config": {"transport": "ucx", "ucx_tls": 1}})")
                .find("kv_connector_extra_config.ucx_tls must be a string"),
            std::string::npos);
  EXPECT_NE(error_of(base + R"("kv_connector_extra_config": {"host": "localhost"}})")
                .find("kv_connector_extra_config.host 'localhost' is not an IP address"),
            std::string::npos);
  EXPECT_NE(error_of(base + R"("kv_connector_extra_config": {"port": 70000}})")
                .find("kv_connector_extra_config.port must be an integer in [0, 65535]"),
            std::string::npos);
  EXPECT_NE(error_of(base + R"("kv_connector_extra_config": {"pull_timeout": 0}})")
                .find("kv_connector_extra_config.pull_timeout must be in (0, 86400]"),
            std::string::npos);
  EXPECT_NE(error_of(base + R"("kv_connector_extra_config": {"keep_timeout": "1"}})")
                .find("kv_connector_extra_config.keep_timeout must be a number"),
            std::string::npos);
  EXPECT_NE(error_of(base + R"("kv_connector_extra_config": {"buffer": 1}})")
                .find("unknown key kv_connector_extra_config.buffer"),
            std::string::npos);
  EXPECT_NE(error_of(base + R"("engine_id": ""})").find("engine_id must not be empty"),
            std::string::npos);
}

}  // namespace
}  // namespace pagoda::cli
