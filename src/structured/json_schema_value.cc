// One schema -> one grammar expression: keyword checks, $ref/allOf/anyOf/oneOf, and the typed
// forms (objects, arrays, strings, numbers). See json_schema.h for the choices.
#include <cmath>
#include <map>
#include <set>

#include <fmt/format.h>

#include "core/status.h"
#include "structured/json_primitives.h"
#include "structured/json_schema_internal.h"

namespace pagoda::structured::json_schema {
namespace {

using Names = std::set<std::string, std::less<>>;

const Names kAnnotations = {"title", "description", "default",       "examples", "$schema",
                            "$id",   "$comment",    "deprecated",    "readOnly", "writeOnly",
                            "$defs", "definitions", "discriminator", "$anchor",  "example"};
const Names kGeneric = {"type", "enum", "const", "anyOf", "oneOf", "allOf", "$ref", "nullable"};
const Names kObjectWords = {"properties", "required", "additionalProperties"};
const Names kArrayWords = {"items",    "prefixItems", "minItems",
                           "maxItems", "uniqueItems", "additionalItems"};
const Names kStringWords = {"minLength", "maxLength", "pattern", "format"};
const Names kNumberWords = {"minimum",          "maximum",    "exclusiveMinimum",
                            "exclusiveMaximum", "multipleOf", "format"};

bool is_annotation(const std::string& key) {
  return kAnnotations.count(key) != 0 || key.starts_with("x-");
}

bool has_any(const Json& s, const Names& words) {
  for (const auto& [key, v] : s.items()) {
    if (words.count(key)) return true;
  }
  return false;
}

// A copy of a without the keys in drop and without annotations.
Json without(const Json& a, const Names& drop) {
  Json out = Json::object();
  for (const auto& [key, v] : a.items()) {
    if (!drop.count(key) && !is_annotation(key)) out[key] = v;
  }
  return out;
}

// The keywords of `siblings` added to branch; a keyword in both with different values cannot be
// expressed as one schema here.
Json merge(const Json& siblings, const Json& branch, const std::string& path) {
  Json out = branch;
  for (const auto& [key, v] : siblings.items()) {
    if (out.contains(key) && out[key] != v) {
      fail(path,
           fmt::format("'{}' both beside and inside a combinator branch is not supported", key));
    }
    out[key] = v;
  }
  return out;
}

std::string json_type(const Json& v) {
  if (v.is_null()) return "null";
  if (v.is_boolean()) return "boolean";
  if (v.is_number_integer() || v.is_number_unsigned() ||
      (v.is_number_float() && std::floor(v.get<double>()) == v.get<double>())) {
    return "integer";
  }
  if (v.is_number()) return "number";
  if (v.is_string()) return "string";
  if (v.is_array()) return "array";
  return "object";
}

// UTF-8 text -> codepoints (the text comes from a parsed JSON document: valid UTF-8).
std::vector<uint32_t> codepoints(std::string_view s) {
  std::vector<uint32_t> out;
  for (size_t i = 0; i < s.size();) {
    const auto b = static_cast<uint8_t>(s[i]);
    const int len = b < 0x80 ? 1 : b < 0xE0 ? 2 : b < 0xF0 ? 3 : 4;
    uint32_t cp = len == 1 ? b : b & (0x7F >> len);
    for (int k = 1; k < len && i + static_cast<size_t>(k) < s.size(); ++k) {
      cp = (cp << 6) | (static_cast<uint8_t>(s[i + static_cast<size_t>(k)]) & 0x3F);
    }
    out.push_back(cp);
    i += static_cast<size_t>(len);
  }
  return out;
}

}  // namespace

Expr Converter::literal(const Json& v) const {
  if (v.is_string()) return Expr::literal(json::quote(v.get<std::string>()));
  if (v.is_object()) {
    std::vector<Expr> parts{Expr::byte('{'), ws()};
    bool first = true;
    for (const auto& [key, item] : v.items()) {
      if (!first) parts.push_back(comma());
      first = false;
      parts.push_back(Expr::literal(json::quote(key)));
      parts.push_back(colon());
      parts.push_back(literal(item));
    }
    parts.push_back(ws());
    parts.push_back(Expr::byte('}'));
    return Expr::seq(std::move(parts));
  }
  if (v.is_array()) {
    std::vector<Expr> parts{Expr::byte('['), ws()};
    for (size_t i = 0; i < v.size(); ++i) {
      if (i > 0) parts.push_back(comma());
      parts.push_back(literal(v[i]));
    }
    parts.push_back(ws());
    parts.push_back(Expr::byte(']'));
    return Expr::seq(std::move(parts));
  }
  return Expr::literal(v.dump());
}

Expr Converter::value(const Json& schema, const std::string& path, int depth) {
  if (depth > 64) fail(path, "schemas nested deeper than 64 levels are not supported");
  if (schema.is_boolean()) {
    if (schema.get<bool>()) return Expr::ref(shared(Shared::kValue));
    fail(path, "the schema 'false' matches nothing");
  }
  if (!schema.is_object()) fail(path, "a schema must be an object or a boolean");
  for (const auto& [key, v] : schema.items()) {
    if (is_annotation(key) || kGeneric.count(key) || kObjectWords.count(key) ||
        kArrayWords.count(key) || kStringWords.count(key) || kNumberWords.count(key)) {
      continue;
    }
    fail(child(path, key), fmt::format("unsupported keyword '{}'", key));
  }
  if (schema.contains("$ref")) {
    if (!schema["$ref"].is_string()) fail(child(path, "$ref"), "'$ref' must be a string");
    const Json rest = without(schema, {"$ref"});
    if (!rest.empty()) {
      // Keywords beside $ref apply too: merge them into the referenced schema (not recursive).
      const Json& target = resolve(schema["$ref"].get<std::string>(), path);
      if (!target.is_object())
        fail(path, "'$ref' beside other keywords must name an object schema");
      return value(merge(rest, target, path), path, depth + 1);
    }
    return ref(schema["$ref"].get<std::string>(), child(path, "$ref"));
  }
  if (schema.contains("allOf")) {
    const Json& list = schema["allOf"];
    if (!list.is_array() || list.empty())
      fail(child(path, "allOf"), "'allOf' must be a non-empty array");
    if (list.size() != 1) {
      fail(child(path, "allOf"), "'allOf' with more than one schema is not supported");
    }
    const Json rest = without(schema, {"allOf"});
    if (list[0].is_boolean()) return value(list[0].get<bool>() ? rest : list[0], path, depth + 1);
    if (rest.empty()) return value(list[0], child(child(path, "allOf"), "0"), depth + 1);
    return value(merge(rest, list[0], path), path, depth + 1);
  }
  if (schema.contains("anyOf")) return one_of(schema, path, depth, false);
  if (schema.contains("oneOf")) return one_of(schema, path, depth, true);

  // The types this schema allows.
  std::vector<std::string> types;
  if (schema.contains("type")) {
    const Json& t = schema["type"];
    if (t.is_string()) {
      types.push_back(t.get<std::string>());
    } else if (t.is_array() && !t.empty()) {
      for (const Json& x : t) {
        if (!x.is_string()) fail(child(path, "type"), "'type' must be a string or strings");
        types.push_back(x.get<std::string>());
      }
    } else {
      fail(child(path, "type"), "'type' must be a string or a non-empty array of strings");
    }
  } else {
    // Without a type, the keywords present tell which types are meant (a narrower reading than
    // JSON Schema's, which lets other types through: never a looser one).
    if (has_any(schema, kObjectWords)) types.push_back("object");
    if (has_any(schema, kArrayWords)) types.push_back("array");
    if (has_any(schema, {"minLength", "maxLength", "pattern", "format"})) types.push_back("string");
    if (has_any(schema,
                {"minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum", "multipleOf"})) {
      types.push_back("number");
    }
  }
  if (schema.contains("nullable")) {
    if (!schema["nullable"].is_boolean())
      fail(child(path, "nullable"), "'nullable' must be a boolean");
    if (schema["nullable"].get<bool>() && !types.empty() &&
        std::find(types.begin(), types.end(), "null") == types.end()) {
      types.push_back("null");
    }
  }
  static const Names kTypes = {"string", "integer", "number", "boolean", "null", "object", "array"};
  for (const std::string& t : types) {
    if (!kTypes.count(t)) fail(child(path, "type"), fmt::format("unknown type '{}'", t));
  }

  if (schema.contains("enum") || schema.contains("const")) {
    std::vector<Json> values;
    if (schema.contains("const")) {
      values.push_back(schema["const"]);
    } else {
      if (!schema["enum"].is_array() || schema["enum"].empty()) {
        fail(child(path, "enum"), "'enum' must be a non-empty array");
      }
      for (const Json& v : schema["enum"]) values.push_back(v);
    }
    const Json rest = without(schema, {"enum", "const", "type", "nullable"});
    if (!rest.empty()) {
      fail(child(path, rest.begin().key()),
           fmt::format("'{}' beside enum/const is not supported", rest.begin().key()));
    }
    std::vector<Expr> options;
    for (const Json& v : values) {
      const std::string t = json_type(v);
      const bool allowed =
          types.empty() || std::find(types.begin(), types.end(), t) != types.end() ||
          (t == "integer" && std::find(types.begin(), types.end(), "number") != types.end());
      if (allowed) options.push_back(literal(v));
    }
    if (options.empty()) fail(path, "no enum/const value has an allowed type");
    return Expr::alt(std::move(options));
  }
  if (types.empty()) return Expr::ref(shared(Shared::kValue));
  std::vector<Expr> options;
  for (const std::string& t : types) options.push_back(typed(schema, path, t, depth));
  return Expr::alt(std::move(options));
}

Expr Converter::typed(const Json& schema, const std::string& path, const std::string& type,
                      int depth) {
  if (type == "string") return string(schema, path);
  if (type == "integer") return number(schema, path, true);
  if (type == "number") return number(schema, path, false);
  if (type == "boolean") return Expr::alt({Expr::literal("true"), Expr::literal("false")});
  if (type == "null") return Expr::literal("null");
  if (type == "object") return object(schema, path, depth);
  return array(schema, path, depth);
}

Expr Converter::extra_key(const std::vector<std::string>& declared) const {
  // Keys of additional properties: plain characters (no escapes, so that the text is the key)
  // spelling none of the declared names. A trie of the names: at each node the key may end
  // (unless a name ends there), continue along a child, or leave the trie for any text.
  struct Node {
    std::map<uint32_t, int32_t> children;
    bool name_ends = false;
  };
  std::vector<Node> trie(1);
  for (const std::string& name : declared) {
    int32_t n = 0;
    for (uint32_t cp : codepoints(name)) {
      auto it = trie[static_cast<size_t>(n)].children.find(cp);
      if (it == trie[static_cast<size_t>(n)].children.end()) {
        trie.emplace_back();
        it = trie[static_cast<size_t>(n)]
                 .children.emplace(cp, static_cast<int32_t>(trie.size()) - 1)
                 .first;
      }
      n = it->second;
    }
    trie[static_cast<size_t>(n)].name_ends = true;
  }
  const std::vector<std::pair<uint32_t, uint32_t>> plain = {
      {0x20, 0x21}, {0x23, 0x5B}, {0x5D, kMaxCodepoint}};
  auto build = [&](auto&& self, int32_t n) -> Expr {
    const Node& node = trie[static_cast<size_t>(n)];
    std::vector<Expr> options;
    if (!node.name_ends) options.push_back(Expr::empty());
    std::vector<std::pair<uint32_t, uint32_t>> excluded = {{0, 0x1F}, {'"', '"'}, {'\\', '\\'}};
    for (const auto& [cp, next] : node.children) {
      std::string bytes;
      append_utf8(bytes, cp);
      options.push_back(Expr::seq({Expr::literal(bytes), self(self, next)}));
      excluded.emplace_back(cp, cp);
    }
    const auto others = normalize_ranges(excluded, true);
    if (!others.empty()) {
      options.push_back(Expr::seq({Expr::codepoints(others), Expr::star(Expr::codepoints(plain))}));
    }
    return Expr::alt(std::move(options));
  };
  return Expr::seq({Expr::byte('"'), build(build, 0), Expr::byte('"')});
}

Expr Converter::string(const Json& schema, const std::string& path) {
  auto length = [&](const char* key) -> std::optional<int64_t> {
    if (!schema.contains(key)) return std::nullopt;
    const Json& v = schema[key];
    if (!(v.is_number_integer() || v.is_number_unsigned()) || v.get<int64_t>() < 0) {
      fail(child(path, key), fmt::format("'{}' must be a non-negative integer", key));
    }
    return v.get<int64_t>();
  };
  const std::optional<int64_t> min = length("minLength"), max = length("maxLength");
  constexpr int64_t kMaxLength = 10000;
  if ((min && *min > kMaxLength) || (max && *max > kMaxLength)) {
    fail(child(path, max && *max > kMaxLength ? "maxLength" : "minLength"),
         fmt::format("string lengths above {} are not supported", kMaxLength));
  }
  if (min && max && *min > *max) fail(child(path, "minLength"), "minLength exceeds maxLength");
  const bool has_length = min.has_value() || max.has_value();
  if (schema.contains("pattern")) {
    if (!schema["pattern"].is_string()) fail(child(path, "pattern"), "'pattern' must be a string");
    if (has_length || schema.contains("format")) {
      fail(child(path, "pattern"),
           "'pattern' together with minLength, maxLength or format is not supported");
    }
    try {
      const std::string pattern = schema["pattern"].get<std::string>();
      return primitive("pattern:" + pattern, "string-pattern",
                       [&] { return json::string_with_pattern(pattern); });
    } catch (const InvalidArgument& e) {
      fail(child(path, "pattern"), e.what());
    }
  }
  if (schema.contains("format")) {
    if (!schema["format"].is_string()) fail(child(path, "format"), "'format' must be a string");
    const std::string format = schema["format"].get<std::string>();
    if (has_length) {
      fail(child(path, "format"), "'format' together with minLength or maxLength is not supported");
    }
    if (auto e = json::string_with_format(format)) {
      return primitive("format:" + format, "string-" + format, [&] { return std::move(*e); });
    }
    fail(child(path, "format"),
         fmt::format("unsupported string format '{}' (supported: date, time, date-time, uuid, "
                     "email, ipv4)",
                     format));
  }
  if (!has_length || (min.value_or(0) == 0 && !max)) return Expr::ref(shared(Shared::kString));
  return primitive(fmt::format("string:{}:{}", min.value_or(0), max.value_or(-1)), "string-length",
                   [&] { return json::string_value(min.value_or(0), max.value_or(-1)); });
}

Expr Converter::number(const Json& schema, const std::string& path, bool integer) {
  // Bounds up to 1e18 in magnitude; a number's bounds must be integers.
  constexpr double kLimit = 1e18;
  auto read = [&](const char* key) -> std::optional<double> {
    if (!schema.contains(key) || schema[key].is_boolean()) return std::nullopt;
    const Json& v = schema[key];
    if (!v.is_number()) fail(child(path, key), fmt::format("'{}' must be a number", key));
    const double d = v.get<double>();
    if (!(std::fabs(d) <= kLimit)) {
      fail(child(path, key), fmt::format("bounds beyond 1e18 are not supported"));
    }
    if (!integer && std::floor(d) != d) {
      fail(child(path, key), "non-integer bounds on numbers are not supported");
    }
    return d;
  };
  auto flag = [&](const char* key) {  // draft 4: exclusiveMinimum: true beside minimum
    return schema.contains(key) && schema[key].is_boolean() && schema[key].get<bool>();
  };
  std::optional<double> minimum = read("minimum"), maximum = read("maximum");
  const std::optional<double> ex_min = read("exclusiveMinimum"), ex_max = read("exclusiveMaximum");
  bool min_exclusive = flag("exclusiveMinimum") && minimum,
       max_exclusive = flag("exclusiveMaximum") && maximum;
  if (ex_min && (!minimum || *ex_min >= *minimum)) minimum = ex_min, min_exclusive = true;
  if (ex_max && (!maximum || *ex_max <= *maximum)) maximum = ex_max, max_exclusive = true;
  if (schema.contains("multipleOf")) {
    const Json& m = schema["multipleOf"];
    if (!(integer && m.is_number() && m.get<double>() == 1.0)) {
      fail(child(path, "multipleOf"), "'multipleOf' is not supported (except 1 on integers)");
    }
  }
  if (schema.contains("format")) {
    const Json& f = schema["format"];
    const std::string format = f.is_string() ? f.get<std::string>() : "";
    if (integer && format == "int32") {
      const double lo = -2147483648.0, hi = 2147483647.0;
      if (!minimum || *minimum < lo) minimum = lo, min_exclusive = false;
      if (!maximum || *maximum > hi) maximum = hi, max_exclusive = false;
    } else if (!(integer && format == "int64") &&
               !(!integer && (format == "float" || format == "double"))) {
      fail(child(path, "format"),
           fmt::format("unsupported {} format '{}'", integer ? "integer" : "number", f.dump()));
    }
  }
  try {
    if (integer) {
      if (!minimum && !maximum) return Expr::ref(shared(Shared::kInteger));
      std::optional<int64_t> lo, hi;
      if (minimum)
        lo = static_cast<int64_t>(min_exclusive ? std::floor(*minimum) + 1 : std::ceil(*minimum));
      if (maximum)
        hi = static_cast<int64_t>(max_exclusive ? std::ceil(*maximum) - 1 : std::floor(*maximum));
      const std::string key = fmt::format("integer:{}:{}", lo ? std::to_string(*lo) : "",
                                          hi ? std::to_string(*hi) : "");
      return primitive(key, "integer-range", [&] { return json::integer_range(lo, hi); });
    }
    if (!minimum && !maximum) return Expr::ref(shared(Shared::kNumber));
    std::optional<json::Bound> lo, hi;
    if (minimum) lo = json::Bound{static_cast<int64_t>(*minimum), !min_exclusive};
    if (maximum) hi = json::Bound{static_cast<int64_t>(*maximum), !max_exclusive};
    const std::string key =
        fmt::format("number:{}:{}:{}:{}", lo ? std::to_string(lo->value) : "", lo && lo->inclusive,
                    hi ? std::to_string(hi->value) : "", hi && hi->inclusive);
    return primitive(key, "number-range", [&] { return json::number_range(lo, hi); });
  } catch (const InvalidArgument& e) {
    fail(path, e.what());
  }
}

}  // namespace pagoda::structured::json_schema
