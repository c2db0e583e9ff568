#include "exposition_parser.h"

#include <cmath>
#include <cstdlib>
#include <set>
#include <stdexcept>

namespace pagoda::server::testing {
namespace {

[[noreturn]] void fail(std::string_view why, std::string_view line) {
  throw std::runtime_error(std::string(why) + ": '" + std::string(line) + "'");
}

bool is_metric_name(std::string_view s) {
  if (s.empty()) return false;
  for (size_t i = 0; i < s.size(); ++i) {
    const char c = s[i];
    const bool ok = std::isalpha(static_cast<unsigned char>(c)) || c == '_' || c == ':' ||
                    (i > 0 && std::isdigit(static_cast<unsigned char>(c)));
    if (!ok) return false;
  }
  return true;
}

double parse_value(std::string_view s, std::string_view line) {
  if (s == "+Inf") return INFINITY;
  if (s == "-Inf") return -INFINITY;
  if (s == "NaN") return NAN;
  std::string str(s);
  char* end = nullptr;
  const double v = std::strtod(str.c_str(), &end);
  if (str.empty() || end != str.c_str() + str.size()) fail("bad value", line);
  return v;
}

Sample parse_sample(std::string_view line) {
  Sample s;
  const size_t name_end = line.find_first_of("{ ");
  if (name_end == std::string_view::npos) fail("no value", line);
  s.name = std::string(line.substr(0, name_end));
  if (!is_metric_name(s.name)) fail("bad metric name", line);
  size_t i = name_end;
  if (line[i] == '{') {
    ++i;
    while (line.at(i) != '}') {
      const size_t eq = line.find('=', i);
      if (eq == std::string_view::npos) fail("label without '='", line);
      std::string key(line.substr(i, eq - i));
      if (!is_metric_name(key) || key.find(':') != std::string::npos) fail("bad label name", line);
      if (line.at(eq + 1) != '"') fail("unquoted label value", line);
      std::string value;
      for (i = eq + 2; line.at(i) != '"'; ++i) {
        if (line[i] == '\n') fail("raw newline in a label value", line);
        if (line[i] != '\\') {
          value += line[i];
          continue;
        }
        const char e = line.at(++i);
        if (e == 'n') {
          value += '\n';
        } else if (e == '\\' || e == '"') {
          value += e;
        } else {
          fail("bad escape in a label value", line);
        }
      }
      ++i;  // closing quote
      if (!s.labels.emplace(std::move(key), std::move(value)).second) fail("repeated label", line);
      if (line.at(i) == ',')
        ++i;
      else if (line.at(i) != '}')
        fail("expected ',' or '}'", line);
    }
    ++i;
  }
  if (i >= line.size() || line[i] != ' ') fail("expected a space before the value", line);
  s.value = parse_value(line.substr(i + 1), line);
  return s;
}

/// The family a sample belongs to: the name itself or, for histograms, without its suffix.
bool belongs(const Family& f, const std::string& sample) {
  if (sample == f.name) return f.type != "histogram";
  if (f.type != "histogram") return false;
  for (const char* suffix : {"_bucket", "_sum", "_count"}) {
    if (sample == f.name + suffix) return true;
  }
  return false;
}

}  // namespace

std::vector<Family> parse_exposition(std::string_view text) {
  if (!text.empty() && text.back() != '\n')
    fail("no trailing newline", text.substr(text.size() - 1));
  std::vector<Family> families;
  std::set<std::string> typed;
  std::map<std::string, std::string> pending_help;
  while (!text.empty()) {
    const size_t nl = text.find('\n');
    const std::string_view line = text.substr(0, nl);
    text.remove_prefix(nl + 1);
    if (line.empty()) continue;
    if (line.starts_with("# HELP ")) {
      const std::string_view rest = line.substr(7);
      const size_t sp = rest.find(' ');
      pending_help[std::string(rest.substr(0, sp))] =
          sp == std::string_view::npos ? "" : std::string(rest.substr(sp + 1));
    } else if (line.starts_with("# TYPE ")) {
      const std::string_view rest = line.substr(7);
      const size_t sp = rest.find(' ');
      if (sp == std::string_view::npos) fail("TYPE without a type", line);
      Family f;
      f.name = std::string(rest.substr(0, sp));
      f.type = std::string(rest.substr(sp + 1));
      if (!is_metric_name(f.name)) fail("bad family name", line);
      if (f.type != "counter" && f.type != "gauge" && f.type != "histogram") fail("bad type", line);
      if (!typed.insert(f.name).second) fail("TYPE repeated", line);
      f.help = pending_help[f.name];
      families.push_back(std::move(f));
    } else if (line.front() == '#') {
      continue;
    } else {
      Sample s;
      try {
        s = parse_sample(line);
      } catch (const std::out_of_range&) {
        fail("truncated sample", line);
      }
      if (families.empty() || !belongs(families.back(), s.name))
        fail("sample outside its family", line);
      families.back().samples.push_back(std::move(s));
    }
  }
  return families;
}

}  // namespace pagoda::server::testing
