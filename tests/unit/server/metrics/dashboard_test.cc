// deploy/grafana/pagoda-dashboard.json: valid JSON, the datasource and model_name variables, and
// only series that ServingMetrics renders. A new panel needs no change here unless it uses a new
// series, which must then be exported first.
#include <gtest/gtest.h>

#include <fstream>
#include <nlohmann/json.hpp>
#include <regex>
#include <set>
#include <sstream>

#include "exposition_parser.h"
#include "server/metrics.h"

namespace pagoda::server {
namespace {

nlohmann::json load_dashboard() {
  std::ifstream in(std::string(PAGODA_SOURCE_DIR) + "/deploy/grafana/pagoda-dashboard.json");
  EXPECT_TRUE(in.good());
  std::stringstream text;
  text << in.rdbuf();
  return nlohmann::json::parse(text.str());  // throws (and fails the test) on invalid JSON
}

/// Every series name a query may use: the families, and _bucket/_sum/_count of the histograms.
std::set<std::string> exported_series() {
  MetricsOptions options;
  options.model_name = "m";
  options.max_model_len = 2048;
  options.cache = {16, 100, true, 0.9, 0, 0};
  ServingMetrics metrics(options);
  std::set<std::string> names;
  for (const auto& f : testing::parse_exposition(metrics.render(EngineStats{}))) {
    names.insert(f.name);
    for (const auto& s : f.samples) names.insert(s.name);
  }
  return names;
}

void collect_exprs(const nlohmann::json& panels, std::vector<std::string>& exprs, int& count) {
  for (const auto& p : panels) {
    ++count;
    if (p.contains("panels")) collect_exprs(p["panels"], exprs, count);
    if (!p.contains("targets")) continue;
    for (const auto& t : p["targets"]) exprs.push_back(t.at("expr").get<std::string>());
  }
}

TEST(DashboardTest, UsesOnlyExportedSeriesAndFiltersOnTheModel) {
  const nlohmann::json dash = load_dashboard();
  std::vector<std::string> exprs;
  int num_panels = 0;
  collect_exprs(dash.at("panels"), exprs, num_panels);
  ASSERT_GE(exprs.size(), 10u);

  const std::set<std::string> exported = exported_series();
  const std::regex series(R"(\b[a-zA-Z_]+:[a-zA-Z0-9_:]+)");
  std::set<std::string> used;
  for (const std::string& e : exprs) {
    EXPECT_NE(e.find("model_name=\"$model_name\""), std::string::npos) << e;
    for (auto it = std::sregex_iterator(e.begin(), e.end(), series); it != std::sregex_iterator();
         ++it) {
      const std::string name = it->str();
      EXPECT_TRUE(exported.count(name)) << name << " is not exported, in: " << e;
      used.insert(name);
    }
  }
  // The panels the dashboard promises.
  for (const char* name :
       {"pagoda:time_to_first_token_seconds_bucket", "pagoda:inter_token_latency_seconds_bucket",
        "pagoda:e2e_request_latency_seconds_bucket", "pagoda:prompt_tokens_total",
        "pagoda:generation_tokens_total", "pagoda:num_requests_running",
        "pagoda:num_requests_waiting", "pagoda:kv_cache_usage_perc",
        "pagoda:prefix_cache_hits_total", "pagoda:prefix_cache_queries_total",
        "pagoda:num_preemptions_total"}) {
    EXPECT_TRUE(used.count(name)) << "no panel uses " << name;
  }
}

TEST(DashboardTest, HasDatasourceAndModelVariablesAndConsistentPanels) {
  const nlohmann::json dash = load_dashboard();
  std::map<std::string, nlohmann::json> vars;
  for (const auto& v : dash.at("templating").at("list")) vars[v.at("name")] = v;
  ASSERT_TRUE(vars.count("datasource"));
  EXPECT_EQ(vars["datasource"].at("type"), "datasource");
  EXPECT_EQ(vars["datasource"].at("query"), "prometheus");
  ASSERT_TRUE(vars.count("model_name"));
  const std::string query = vars["model_name"].at("definition");
  EXPECT_NE(query.find("model_name"), std::string::npos);
  const std::set<std::string> exported = exported_series();
  EXPECT_TRUE(
      exported.count(query.substr(query.find('(') + 1, query.find(',') - query.find('(') - 1)))
      << query;

  std::set<int> ids;
  for (const auto& p : dash.at("panels")) {
    EXPECT_TRUE(ids.insert(p.at("id").get<int>()).second) << "duplicate panel id";
    const auto& pos = p.at("gridPos");
    EXPECT_LE(pos.at("x").get<int>() + pos.at("w").get<int>(), 24) << p.at("title");
    if (p.at("type") == "row") continue;
    EXPECT_EQ(p.at("datasource").at("uid"), "${datasource}") << p.at("title");
    for (const auto& t : p.at("targets"))
      EXPECT_EQ(t.at("datasource").at("uid"), "${datasource}") << p.at("title");
  }
  EXPECT_EQ(dash.dump().find("vllm:"), std::string::npos) << "the file is in its pagoda: form";
}

}  // namespace
}  // namespace pagoda::server
