// Objects, arrays and the anyOf/oneOf combinators of the JSON Schema compiler.
#include <algorithm>
#include <set>

#include <fmt/format.h>

#include "core/status.h"
#include "structured/json_primitives.h"
#include "structured/json_schema_internal.h"

namespace pagoda::structured::json_schema {
namespace {

std::set<std::string> value_types(const Json& v) {
  if (v.is_null()) return {"null"};
  if (v.is_boolean()) return {"boolean"};
  if (v.is_number()) return {"number"};
  if (v.is_string()) return {"string"};
  if (v.is_array()) return {"array"};
  return {"object"};
}

}  // namespace

Grammar Converter::build_any_object() {
  g_.root = g_.add_rule("root");
  g_.rules[0].body = Expr::ref(shared(Shared::kObject));
  return std::move(g_);
}

Expr Converter::object(const Json& schema, const std::string& path, int depth) {
  Json props = Json::object();
  if (schema.contains("properties")) {
    props = schema["properties"];
    if (!props.is_object()) fail(child(path, "properties"), "'properties' must be an object");
  }
  std::vector<std::string> required;
  if (schema.contains("required")) {
    const Json& r = schema["required"];
    if (!r.is_array()) fail(child(path, "required"), "'required' must be an array of strings");
    for (const Json& name : r) {
      if (!name.is_string())
        fail(child(path, "required"), "'required' must be an array of strings");
      if (std::find(required.begin(), required.end(), name.get<std::string>()) == required.end()) {
        required.push_back(name.get<std::string>());
      }
    }
  }
  // additionalProperties: absent or false -> none (xgrammar's strict reading of an absent one,
  // unless the format asks for JSON Schema's default); true -> any value; a schema -> that one.
  std::optional<Expr> extra_value;
  if (!schema.contains("additionalProperties") && format_.unlisted_properties) {
    extra_value = Expr::ref(shared(Shared::kValue));
  }
  if (schema.contains("additionalProperties")) {
    const Json& a = schema["additionalProperties"];
    if (a.is_boolean()) {
      if (a.get<bool>()) extra_value = Expr::ref(shared(Shared::kValue));
    } else if (a.is_object()) {
      extra_value = value(a, child(path, "additionalProperties"), depth + 1);
    } else {
      fail(child(path, "additionalProperties"),
           "'additionalProperties' must be a boolean or a schema");
    }
  }
  struct Property {
    std::string name;
    Expr kv;
    bool required = false;
  };
  std::vector<Property> list;
  std::vector<std::string> declared;
  for (const auto& [name, sub] : props.items()) {
    const bool req = std::find(required.begin(), required.end(), name) != required.end();
    Expr v = value(sub, child(child(path, "properties"), name), depth + 1);
    list.push_back(
        {name, Expr::seq({Expr::literal(json::quote(name)), colon(), std::move(v)}), req});
    declared.push_back(name);
  }
  for (const std::string& name : required) {
    if (std::find(declared.begin(), declared.end(), name) != declared.end()) continue;
    if (!extra_value) {
      fail(child(path, "required"),
           fmt::format("required property '{}' is not in 'properties' and no additional "
                       "properties are allowed",
                       name));
    }
    list.push_back(
        {name, Expr::seq({Expr::literal(json::quote(name)), colon(), *extra_value}), true});
    declared.push_back(name);
  }
  // The members in declared order, each optional one present or not, commas only between
  // members. Built from the end: `tail` is the rest after at least one member (each member
  // preceded by a comma), `head` the rest before any (valid where a later step reads it). An
  // expression two branches share becomes a rule, so that nothing is copied twice.
  auto share = [&](Expr e, const std::string& hint) {
    if (e.kind == Expr::Kind::kEmpty || e.kind == Expr::Kind::kRef) return e;
    const int32_t rule = new_rule(path + "-" + hint);
    g_.rules[static_cast<size_t>(rule)].body = std::move(e);
    return Expr::ref(rule);
  };
  Expr tail = Expr::empty(), head = Expr::empty();
  if (extra_value) {
    Expr extra = share(Expr::seq({extra_key(declared), colon(), *extra_value}), "extra");
    tail = Expr::star(Expr::seq({comma(), extra}));
    head = Expr::optional(Expr::seq({extra, tail}));
  }
  for (size_t k = list.size(); k-- > 0;) {
    Property& p = list[k];
    if (p.required) {
      // head_k = kv_k tail_{k+1}; tail_k = "," head_k. An optional member before this one reads
      // both, so then head_k is a rule; otherwise only tail_k is read on (or head_0 at the end).
      Expr body = Expr::seq({std::move(p.kv), std::move(tail)});
      if (k == 0) {
        head = std::move(body);
        break;
      }
      if (!list[k - 1].required) {
        body = share(std::move(body), "from-" + p.name);
        head = body;  // a rule reference
      }
      tail = Expr::seq({comma(), std::move(body)});
      continue;
    }
    Expr rest = share(std::move(tail), "after-" + p.name);
    head = Expr::alt({Expr::seq({p.kv, rest}), std::move(head)});
    tail = Expr::seq({Expr::optional(Expr::seq({comma(), std::move(p.kv)})), std::move(rest)});
  }
  return Expr::seq({Expr::byte('{'), ws(), std::move(head), ws(), Expr::byte('}')});
}

Expr Converter::array(const Json& schema, const std::string& path, int depth) {
  auto count = [&](const char* key, int64_t fallback) -> int64_t {
    if (!schema.contains(key)) return fallback;
    const Json& v = schema[key];
    if (!(v.is_number_integer() || v.is_number_unsigned()) || v.get<int64_t>() < 0) {
      fail(child(path, key), fmt::format("'{}' must be a non-negative integer", key));
    }
    return v.get<int64_t>();
  };
  const int64_t min = count("minItems", 0);
  int64_t max = count("maxItems", -1);
  constexpr int64_t kMaxItems = 10000;
  if (min > kMaxItems || max > kMaxItems) {
    fail(child(path, min > kMaxItems ? "minItems" : "maxItems"),
         fmt::format("item counts above {} are not supported", kMaxItems));
  }
  if (schema.contains("uniqueItems") && schema["uniqueItems"] != Json(false)) {
    fail(child(path, "uniqueItems"), "'uniqueItems' is not supported");
  }
  // Positional items (prefixItems, or draft-4 `items: [...]`) and the schema of the rest.
  std::vector<Expr> prefix;
  std::optional<Expr> rest;
  bool rest_is_any = true;  // no schema for the items after the positional ones: any value
  const Json* positional = nullptr;
  std::string positional_path;
  if (schema.contains("prefixItems")) {
    positional = &schema["prefixItems"];
    positional_path = child(path, "prefixItems");
    if (schema.contains("items")) {
      const Json& items = schema["items"];
      rest_is_any = false;
      if (items != Json(false)) rest = value(items, child(path, "items"), depth + 1);
    }
  } else if (schema.contains("items") && schema["items"].is_array()) {
    positional = &schema["items"];
    positional_path = child(path, "items");
    if (schema.contains("additionalItems")) {
      const Json& more = schema["additionalItems"];
      rest_is_any = false;
      if (more != Json(false)) rest = value(more, child(path, "additionalItems"), depth + 1);
    }
  } else if (schema.contains("items")) {
    rest_is_any = false;
    if (schema["items"] != Json(false))
      rest = value(schema["items"], child(path, "items"), depth + 1);
  }
  if (rest_is_any) rest = Expr::ref(shared(Shared::kValue));
  if (positional) {
    if (!positional->is_array()) fail(positional_path, "must be an array of schemas");
    for (size_t i = 0; i < positional->size(); ++i) {
      prefix.push_back(
          value((*positional)[i], child(positional_path, std::to_string(i)), depth + 1));
    }
  }
  const auto k = static_cast<int64_t>(prefix.size());
  if (!rest) max = max < 0 ? k : std::min(max, k);
  if (max >= 0 && min > max)
    fail(path, fmt::format("no array has between {} and {} items", min, max));
  // list(j): the items from index j on, j items already written.
  auto list = [&](auto&& self, int64_t j) -> Expr {
    if (max >= 0 && j >= max) return Expr::empty();
    if (j >= k) {
      // Only `rest` items from here: j + n items with n in [min - j, max - j].
      const auto lo = static_cast<int32_t>(std::max<int64_t>(min - j, 0));
      const auto hi = static_cast<int32_t>(max < 0 ? -1 : max - j);
      if (j > 0) return Expr::repeat(Expr::seq({comma(), *rest}), lo, hi);
      Expr more =
          Expr::repeat(Expr::seq({comma(), *rest}), std::max(lo - 1, 0), hi < 0 ? -1 : hi - 1);
      Expr some = Expr::seq({*rest, std::move(more)});
      return lo >= 1 ? std::move(some) : Expr::optional(std::move(some));
    }
    Expr item = j == 0 ? prefix[static_cast<size_t>(j)]
                       : Expr::seq({comma(), prefix[static_cast<size_t>(j)]});
    Expr here = Expr::seq({std::move(item), self(self, j + 1)});
    return j < min ? std::move(here) : Expr::optional(std::move(here));
  };
  return Expr::seq({Expr::byte('['), ws(), list(list, 0), ws(), Expr::byte(']')});
}

Expr Converter::one_of(const Json& schema, const std::string& path, int depth, bool exclusive) {
  const char* key = exclusive ? "oneOf" : "anyOf";
  const Json& list = schema[key];
  const std::string list_path = child(path, key);
  if (!list.is_array() || list.empty())
    fail(list_path, fmt::format("'{}' must be a non-empty array", key));
  Json siblings = Json::object();
  for (const auto& [k, v] : schema.items()) {
    if (k != key && k != "title" && k != "description" && k != "default" && k != "examples" &&
        k != "$defs" && k != "definitions" && k != "$schema" && k != "$id" && k != "$comment" &&
        k != "discriminator" && !k.starts_with("x-")) {
      siblings[k] = v;
    }
  }
  if (exclusive && schema.contains("anyOf")) fail(path, "'anyOf' beside 'oneOf' is not supported");
  std::vector<Json> branches;
  std::vector<std::string> paths;
  for (size_t i = 0; i < list.size(); ++i) {
    const std::string p = child(list_path, std::to_string(i));
    Json b = list[i];
    if (b.is_boolean()) {
      if (!b.get<bool>()) continue;
      b = Json::object();
    }
    if (!b.is_object()) fail(p, "a schema must be an object or a boolean");
    if (!siblings.empty()) {
      if (b.contains("$ref")) {  // resolve, so that the siblings can join the referenced schema
        const Json target = resolve(b["$ref"].get<std::string>(), p);
        Json rest = b;
        rest.erase("$ref");
        b = target.is_object() ? target : Json::object();
        for (const auto& [k2, v2] : rest.items()) b[k2] = v2;
      }
      for (const auto& [k2, v2] : siblings.items()) {
        if (b.contains(k2) && b[k2] != v2) {
          fail(p,
               fmt::format("'{}' both beside '{}' and inside a branch is not supported", k2, key));
        }
        b[k2] = v2;
      }
    }
    branches.push_back(std::move(b));
    paths.push_back(p);
  }
  if (branches.empty()) fail(list_path, "every branch is the schema 'false'");
  if (exclusive) {
    for (size_t i = 0; i < branches.size(); ++i) {
      for (size_t j = i + 1; j < branches.size(); ++j) {
        if (!disjoint(branches[i], branches[j], 0)) {
          fail(list_path,
               fmt::format("'oneOf' branches {} and {} may both match a value; only oneOf with "
                           "provably disjoint branches (different types, different constants, "
                           "or a property with different constant values) is supported",
                           i, j));
        }
      }
    }
  }
  std::vector<Expr> options;
  for (size_t i = 0; i < branches.size(); ++i)
    options.push_back(value(branches[i], paths[i], depth + 1));
  return Expr::alt(std::move(options));
}

// The JSON types a schema admits (an over-approximation: every type when unsure).
std::set<std::string> Converter::types_of(const Json& s, int depth) {
  static const std::set<std::string> kAll = {"null",   "boolean", "number",
                                             "string", "array",   "object"};
  if (depth > 16 || !s.is_object()) return kAll;
  if (s.contains("$ref") && s["$ref"].is_string()) {
    const std::string r = s["$ref"].get<std::string>();
    try {
      return types_of(resolve(r, ""), depth + 1);
    } catch (const InvalidArgument&) {
      return kAll;
    }
  }
  if (s.contains("const")) return value_types(s["const"]);
  if (s.contains("enum") && s["enum"].is_array()) {
    std::set<std::string> out;
    for (const Json& v : s["enum"]) {
      const auto t = value_types(v);
      out.insert(t.begin(), t.end());
    }
    return out;
  }
  for (const char* comb : {"anyOf", "oneOf"}) {
    if (s.contains(comb) && s[comb].is_array()) {
      std::set<std::string> out;
      for (const Json& b : s[comb]) {
        const auto t = types_of(b, depth + 1);
        out.insert(t.begin(), t.end());
      }
      return out;
    }
  }
  if (!s.contains("type")) return kAll;
  std::set<std::string> out;
  auto add = [&](const std::string& t) { out.insert(t == "integer" ? "number" : t); };
  if (s["type"].is_string()) add(s["type"].get<std::string>());
  if (s["type"].is_array()) {
    for (const Json& t : s["type"]) {
      if (t.is_string()) add(t.get<std::string>());
    }
  }
  if (s.contains("nullable") && s["nullable"] == Json(true)) out.insert("null");
  return out;
}

// The constant values a schema admits, when it is an enum or const (resolving $ref).
std::optional<std::vector<Json>> Converter::constants_of(const Json& s, int depth) {
  if (depth > 16 || !s.is_object()) return std::nullopt;
  if (s.contains("$ref") && s["$ref"].is_string()) {
    try {
      return constants_of(resolve(s["$ref"].get<std::string>(), ""), depth + 1);
    } catch (const InvalidArgument&) {
      return std::nullopt;
    }
  }
  if (s.contains("const")) return std::vector<Json>{s["const"]};
  if (s.contains("enum") && s["enum"].is_array())
    return std::vector<Json>(s["enum"].begin(), s["enum"].end());
  return std::nullopt;
}

bool Converter::disjoint(const Json& a, const Json& b, int depth) {
  const auto ta = types_of(a, depth), tb = types_of(b, depth);
  std::vector<std::string> common;
  std::set_intersection(ta.begin(), ta.end(), tb.begin(), tb.end(), std::back_inserter(common));
  if (common.empty()) return true;
  const auto ca = constants_of(a, depth), cb = constants_of(b, depth);
  if (ca && cb) {
    for (const Json& x : *ca) {
      if (std::find(cb->begin(), cb->end(), x) != cb->end()) return false;
    }
    return true;
  }
  // Objects told apart by a property both require, with disjoint constant values.
  if (common != std::vector<std::string>{"object"}) return false;
  const Json& ra =
      a.is_object() && a.contains("$ref") ? resolve(a["$ref"].get<std::string>(), "") : a;
  const Json& rb =
      b.is_object() && b.contains("$ref") ? resolve(b["$ref"].get<std::string>(), "") : b;
  if (!ra.contains("properties") || !rb.contains("properties") || !ra.contains("required") ||
      !rb.contains("required")) {
    return false;
  }
  for (const Json& name : ra["required"]) {
    if (!name.is_string()) continue;
    const std::string n = name.get<std::string>();
    const bool in_b =
        std::find(rb["required"].begin(), rb["required"].end(), name) != rb["required"].end();
    if (!in_b || !ra["properties"].contains(n) || !rb["properties"].contains(n)) continue;
    const auto va = constants_of(ra["properties"][n], depth + 1);
    const auto vb = constants_of(rb["properties"][n], depth + 1);
    if (!va || !vb) continue;
    bool overlap = false;
    for (const Json& x : *va)
      overlap = overlap || std::find(vb->begin(), vb->end(), x) != vb->end();
    if (!overlap) return true;
  }
  return false;
}

}  // namespace pagoda::structured::json_schema
