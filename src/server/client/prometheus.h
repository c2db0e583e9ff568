#pragma once
// Reading a Prometheus text exposition (the server's /metrics page) on the client side.
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace pagoda::client {

/// One sample line: `name{label="value",...} value`.
struct PromSample {
  std::string name;
  std::vector<std::pair<std::string, std::string>> labels;  // values unescaped
  double value = 0;
};

/// Parses every sample line (comments and blank lines skipped). Throws InvalidArgument naming the
/// line when one is malformed.
[[nodiscard]] std::vector<PromSample> parse_prometheus_text(std::string_view text);

/// The sum of the samples named `name` over all label sets (0 when there is none; `found`, when
/// given, says whether there was one).
[[nodiscard]] double sum_samples(const std::vector<PromSample>& samples, std::string_view name,
                                 bool* found = nullptr);

}  // namespace pagoda::client
