#include "structured/json_schema.h"

#include <algorithm>
#include <cmath>
#include <map>
#include <set>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "core/status.h"
#include "structured/json_primitives.h"
#include "structured/json_schema_internal.h"
#include "structured/regex_parser.h"

namespace pagoda::structured {
namespace json_schema {

[[noreturn]] void fail(const std::string& path, const std::string& what) {
  throw InvalidArgument(fmt::format("json schema: at {}: {}", path.empty() ? "/" : path, what));
}

std::string child(const std::string& path, std::string_view key) {
  std::string k;
  for (char c : key) {
    if (c == '~') {
      k += "~0";
    } else if (c == '/') {
      k += "~1";
    } else {
      k += c;
    }
  }
  return path + "/" + k;
}

Converter::Converter(const Json& root, const JsonFormat& format) : root_(root), format_(format) {
  if (format.whitespace_pattern) {
    try {
      ws_ = parse_regex(*format.whitespace_pattern, RegexEncoding::kRaw).expr;
    } catch (const InvalidArgument& e) {
      throw InvalidArgument(fmt::format("whitespace_pattern: {}", e.what()));
    }
  } else if (format.any_whitespace) {
    ws_ = Expr::star(Expr::codepoints({{' ', ' '}, {'\t', '\t'}, {'\n', '\n'}, {'\r', '\r'}}));
  }
}

Expr Converter::ws() const { return ws_; }

Expr Converter::comma() const {
  if (!format_.any_whitespace && !format_.whitespace_pattern) return Expr::literal(", ");
  return Expr::seq({ws_, Expr::byte(','), ws_});
}

Expr Converter::colon() const {
  if (!format_.any_whitespace && !format_.whitespace_pattern) return Expr::literal(": ");
  return Expr::seq({ws_, Expr::byte(':'), ws_});
}

int32_t Converter::new_rule(const std::string& hint) {
  std::string name;
  for (char c : hint) {
    const bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9');
    name += ok ? c : '-';
  }
  while (name.find("--") != std::string::npos) name.replace(name.find("--"), 2, "-");
  while (!name.empty() && name.front() == '-') name.erase(0, 1);
  if (name.empty()) name = "rule";
  std::string unique = name;
  for (int i = 2; g_.find_rule(unique) >= 0; ++i) unique = fmt::format("{}-{}", name, i);
  return g_.add_rule(unique);
}

Expr Converter::primitive(const std::string& key, const std::string& hint,
                          const std::function<Expr()>& build) {
  auto it = primitive_rules_.find(key);
  if (it == primitive_rules_.end()) {
    Expr body = build();  // may throw: no rule is added then
    const int32_t id = new_rule(hint);
    g_.rules[static_cast<size_t>(id)].body = std::move(body);
    it = primitive_rules_.emplace(key, id).first;
  }
  return Expr::ref(it->second);
}

int32_t Converter::shared(Shared kind) {
  int32_t& id = shared_[static_cast<size_t>(kind)];
  if (id >= 0) return id;
  switch (kind) {
    case Shared::kString:
      id = new_rule("string");
      g_.rules[static_cast<size_t>(id)].body = json::string_value(0, -1);
      break;
    case Shared::kInteger:
      id = new_rule("integer");
      g_.rules[static_cast<size_t>(id)].body = json::integer_value();
      break;
    case Shared::kNumber:
      id = new_rule("number");
      g_.rules[static_cast<size_t>(id)].body = json::number_value();
      break;
    case Shared::kValue: {
      id = new_rule("value");
      const int32_t object = new_rule("object");
      const int32_t array = new_rule("array");
      const Expr value = Expr::ref(id);
      const Expr member = Expr::seq({Expr::ref(shared(Shared::kString)), colon(), value});
      g_.rules[static_cast<size_t>(object)].body =
          Expr::seq({Expr::byte('{'), ws(),
                     Expr::optional(Expr::seq({member, Expr::star(Expr::seq({comma(), member}))})),
                     ws(), Expr::byte('}')});
      g_.rules[static_cast<size_t>(array)].body =
          Expr::seq({Expr::byte('['), ws(),
                     Expr::optional(Expr::seq({value, Expr::star(Expr::seq({comma(), value}))})),
                     ws(), Expr::byte(']')});
      shared_[static_cast<size_t>(Shared::kObject)] = object;
      g_.rules[static_cast<size_t>(id)].body =
          Expr::alt({Expr::ref(object), Expr::ref(array), Expr::ref(shared(Shared::kString)),
                     Expr::ref(shared(Shared::kNumber)), Expr::literal("true"),
                     Expr::literal("false"), Expr::literal("null")});
      break;
    }
    case Shared::kObject:
      (void)shared(Shared::kValue);
      break;
    case Shared::kCount:
      break;
  }
  return shared_[static_cast<size_t>(kind)];
}

const Json& Converter::resolve(const std::string& ref, const std::string& path) {
  if (ref.empty() || ref[0] != '#') {
    fail(path,
         fmt::format("$ref '{}': only references inside the schema ('#/...') are supported", ref));
  }
  const Json* node = &root_;
  size_t pos = 1;
  while (pos < ref.size()) {
    if (ref[pos] != '/') fail(path, fmt::format("$ref '{}' is not a JSON pointer", ref));
    const size_t end = std::min(ref.find('/', pos + 1), ref.size());
    std::string token;
    for (size_t i = pos + 1; i < end; ++i) {
      if (ref[i] == '~' && i + 1 < end && (ref[i + 1] == '0' || ref[i + 1] == '1')) {
        token += ref[i + 1] == '0' ? '~' : '/';
        ++i;
      } else if (ref[i] == '%' && i + 2 < end) {
        token += static_cast<char>(std::stoi(ref.substr(i + 1, 2), nullptr, 16));
        i += 2;
      } else {
        token += ref[i];
      }
    }
    if (node->is_object() && node->contains(token)) {
      node = &(*node)[token];
    } else if (node->is_array() && !token.empty() &&
               std::all_of(token.begin(), token.end(),
                           [](char c) { return c >= '0' && c <= '9'; }) &&
               std::stoul(token) < node->size()) {
      node = &(*node)[std::stoul(token)];
    } else {
      fail(path, fmt::format("$ref '{}' does not resolve", ref));
    }
    pos = end;
  }
  return *node;
}

Expr Converter::ref(const std::string& target, const std::string& path) {
  auto it = ref_rules_.find(target);
  if (it != ref_rules_.end()) return Expr::ref(it->second);
  const Json& schema = resolve(target, path);
  const int32_t id = new_rule(target.size() > 1 ? target.substr(1) : "root-ref");
  ref_rules_[target] = id;  // before the body: recursive schemas refer to it
  Expr body = value(schema, target.substr(1), 0);
  g_.rules[static_cast<size_t>(id)].body = std::move(body);
  return Expr::ref(id);
}

Grammar Converter::build() {
  g_.root = g_.add_rule("root");
  Expr body = value(root_, "", 0);
  g_.rules[0].body = std::move(body);
  return std::move(g_);
}

}  // namespace json_schema

Grammar json_schema_grammar(std::string_view schema, const JsonFormat& format) {
  json_schema::Json root;
  try {
    root = json_schema::Json::parse(schema);
  } catch (const nlohmann::json::exception& e) {
    throw InvalidArgument(fmt::format("json schema: not valid JSON: {}", e.what()));
  }
  return json_schema::Converter(root, format).build();
}

Grammar json_object_grammar(const JsonFormat& format) {
  const json_schema::Json root = json_schema::Json::object();
  json_schema::Converter c(root, format);
  return c.build_any_object();
}

}  // namespace pagoda::structured
