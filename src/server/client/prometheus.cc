#include "server/client/prometheus.h"

#include <cmath>
#include <cstdlib>
#include <string>

#include "core/status.h"

namespace pagoda::client {
namespace {

bool is_name_char(char c, bool first) {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_' || c == ':' ||
         (!first && c >= '0' && c <= '9');
}

[[noreturn]] void fail(std::string_view line, std::string_view why) {
  throw InvalidArgument(fmt::format("bad Prometheus line ({}): {}", why, line));
}

double parse_number(std::string_view s, std::string_view line) {
  if (s == "+Inf" || s == "Inf") return INFINITY;
  if (s == "-Inf") return -INFINITY;
  if (s == "NaN") return NAN;
  const std::string str(s);
  char* end = nullptr;
  const double v = std::strtod(str.c_str(), &end);
  if (str.empty() || end != str.c_str() + str.size()) fail(line, "value");
  return v;
}

PromSample parse_line(std::string_view line) {
  PromSample s;
  size_t i = 0;
  while (i < line.size() && is_name_char(line[i], i == 0)) ++i;
  if (i == 0) fail(line, "name");
  s.name = std::string(line.substr(0, i));
  if (i < line.size() && line[i] == '{') {
    ++i;
    while (true) {
      if (i < line.size() && line[i] == '}') break;
      const size_t start = i;
      while (i < line.size() && is_name_char(line[i], i == start) && line[i] != ':') ++i;
      if (i == start || i + 1 >= line.size() || line[i] != '=' || line[i + 1] != '"')
        fail(line, "label");
      std::string key(line.substr(start, i - start));
      i += 2;
      std::string value;
      while (i < line.size() && line[i] != '"') {
        if (line[i] == '\\') {
          if (++i >= line.size()) fail(line, "escape");
          value += line[i] == 'n' ? '\n' : line[i];
        } else {
          value += line[i];
        }
        ++i;
      }
      if (i >= line.size()) fail(line, "unterminated label value");
      ++i;
      s.labels.emplace_back(std::move(key), std::move(value));
      if (i < line.size() && line[i] == ',') ++i;
    }
    ++i;  // '}'
  }
  if (i >= line.size() || line[i] != ' ') fail(line, "missing value");
  std::string_view rest = line.substr(i + 1);
  const size_t space = rest.find(' ');  // an optional timestamp follows
  s.value = parse_number(rest.substr(0, space), line);
  return s;
}

}  // namespace

std::vector<PromSample> parse_prometheus_text(std::string_view text) {
  std::vector<PromSample> out;
  while (!text.empty()) {
    const size_t nl = text.find('\n');
    std::string_view line = text.substr(0, nl);
    text = nl == std::string_view::npos ? std::string_view() : text.substr(nl + 1);
    if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
    if (line.empty() || line.front() == '#') continue;
    out.push_back(parse_line(line));
  }
  return out;
}

double sum_samples(const std::vector<PromSample>& samples, std::string_view name, bool* found) {
  double sum = 0;
  bool any = false;
  for (const PromSample& s : samples) {
    if (s.name == name) {
      sum += s.value;
      any = true;
    }
  }
  if (found != nullptr) *found = any;
  return sum;
}

}  // namespace pagoda::client
