#pragma once
// A strict reader of the Prometheus text format (version 0.0.4) for the metrics tests: it groups
// samples into families and rejects what a Prometheus scrape would reject, so the tests check the
// page the way a scraper reads it.
#include <map>
#include <string>
#include <string_view>
#include <vector>

namespace pagoda::server::testing {

struct Sample {
  std::string name;                           // with _bucket/_sum/_count/_total suffixes
  std::map<std::string, std::string> labels;  // unescaped values
  double value = 0;
};

struct Family {
  std::string name;
  std::string type;  // counter, gauge or histogram
  std::string help;
  std::vector<Sample> samples;
};

/// Families in page order. Throws std::runtime_error (naming the line) on: a sample before its
/// family's TYPE, a TYPE repeated, a sample name that is not the family's (or its histogram
/// suffixes), a malformed label set or value, a missing trailing newline.
[[nodiscard]] std::vector<Family> parse_exposition(std::string_view text);

}  // namespace pagoda::server::testing
