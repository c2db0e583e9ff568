#include "json_test_util.h"

#include <cmath>
#include <regex>

namespace pagoda::structured::testing {
namespace {

const Json& resolve(const Json& schema, const Json& root) {
  const Json* s = &schema;
  for (int i = 0; i < 32 && s->is_object() && s->contains("$ref"); ++i) {
    const std::string ref = (*s)["$ref"].get<std::string>();
    const Json* node = &root;
    size_t pos = 1;
    while (pos < ref.size()) {
      const size_t end = std::min(ref.find('/', pos + 1), ref.size());
      std::string token = ref.substr(pos + 1, end - pos - 1);
      node = node->is_array() ? &(*node)[std::stoul(token)] : &(*node)[token];
      pos = end;
    }
    s = node;
  }
  return *s;
}

bool is_integer(const Json& v) {
  return v.is_number_integer() || v.is_number_unsigned() ||
         (v.is_number_float() && std::floor(v.get<double>()) == v.get<double>());
}

size_t codepoint_count(const std::string& s) {
  size_t n = 0;
  for (unsigned char c : s) n += (c & 0xC0) != 0x80;
  return n;
}

bool leap(int y) { return (y % 4 == 0 && y % 100 != 0) || y % 400 == 0; }

bool valid_date(const std::string& s) {
  static const std::regex re(R"(^(\d{4})-(\d{2})-(\d{2})$)");
  std::smatch m;
  if (!std::regex_match(s, m, re)) return false;
  const int y = std::stoi(m[1]), mo = std::stoi(m[2]), d = std::stoi(m[3]);
  static const int days[] = {31, 28, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31};
  if (mo < 1 || mo > 12 || d < 1) return false;
  return d <= days[mo - 1] + (mo == 2 && leap(y) ? 1 : 0);
}

bool valid_time(const std::string& s) {
  static const std::regex re(
      R"(^([01]\d|2[0-3]):[0-5]\d:[0-5]\d(\.\d+)?(Z|[+-]([01]\d|2[0-3]):[0-5]\d)$)");
  return std::regex_match(s, re);
}

bool valid_format(const std::string& format, const std::string& s) {
  if (format == "date") return valid_date(s);
  if (format == "time") return valid_time(s);
  if (format == "date-time") {
    const size_t t = s.find('T');
    return t == 10 && valid_date(s.substr(0, 10)) && valid_time(s.substr(11));
  }
  if (format == "uuid") {
    static const std::regex re(
        "^[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}$");
    return std::regex_match(s, re);
  }
  if (format == "email") {
    static const std::regex re(R"(^[^@\s]+@[A-Za-z0-9-]+(\.[A-Za-z0-9-]+)+$)");
    return std::regex_match(s, re);
  }
  if (format == "ipv4") {
    static const std::regex re(R"(^(\d{1,3})\.(\d{1,3})\.(\d{1,3})\.(\d{1,3})$)");
    std::smatch m;
    if (!std::regex_match(s, m, re)) return false;
    for (int i = 1; i <= 4; ++i) {
      const std::string part = m[i];
      if (std::stoi(part) > 255 || (part.size() > 1 && part[0] == '0')) return false;
    }
    return true;
  }
  return true;
}

bool type_ok(const std::string& t, const Json& v) {
  if (t == "null") return v.is_null();
  if (t == "boolean") return v.is_boolean();
  if (t == "integer") return v.is_number() && is_integer(v);
  if (t == "number") return v.is_number();
  if (t == "string") return v.is_string();
  if (t == "array") return v.is_array();
  if (t == "object") return v.is_object();
  return false;
}

}  // namespace

bool validates(const Json& schema_in, const Json& v, const Json& root) {
  if (schema_in.is_boolean()) return schema_in.get<bool>();
  const Json& s = resolve(schema_in, root);
  if (&s != &schema_in && schema_in.size() > 1) {
    Json rest = schema_in;
    rest.erase("$ref");
    if (!validates(rest, v, root)) return false;
  }
  if (s.contains("allOf")) {
    for (const Json& b : s["allOf"]) {
      if (!validates(b, v, root)) return false;
    }
  }
  if (s.contains("anyOf")) {
    bool any = false;
    for (const Json& b : s["anyOf"]) any = any || validates(b, v, root);
    if (!any) return false;
  }
  if (s.contains("oneOf")) {
    int n = 0;
    for (const Json& b : s["oneOf"]) n += validates(b, v, root) ? 1 : 0;
    if (n != 1) return false;
  }
  if (s.contains("const") && s["const"] != v) return false;
  if (s.contains("enum")) {
    bool found = false;
    for (const Json& e : s["enum"]) found = found || e == v;
    if (!found) return false;
  }
  if (s.contains("type")) {
    bool ok = false;
    if (s["type"].is_string()) ok = type_ok(s["type"].get<std::string>(), v);
    for (const Json& t : s["type"].is_array() ? s["type"] : Json::array())
      ok = ok || type_ok(t.get<std::string>(), v);
    if (s.value("nullable", false) && v.is_null()) ok = true;
    if (!ok) return false;
  }
  if (v.is_string()) {
    const std::string str = v.get<std::string>();
    if (s.contains("minLength") && codepoint_count(str) < s["minLength"].get<size_t>())
      return false;
    if (s.contains("maxLength") && codepoint_count(str) > s["maxLength"].get<size_t>())
      return false;
    if (s.contains("pattern") &&
        !std::regex_search(str, std::regex(s["pattern"].get<std::string>())))
      return false;
    if (s.contains("format") && !valid_format(s["format"].get<std::string>(), str)) return false;
  }
  if (v.is_number()) {
    const double x = v.get<double>();
    if (s.contains("minimum") && !(x >= s["minimum"].get<double>())) return false;
    if (s.contains("maximum") && !(x <= s["maximum"].get<double>())) return false;
    if (s.contains("exclusiveMinimum") && !(x > s["exclusiveMinimum"].get<double>())) return false;
    if (s.contains("exclusiveMaximum") && !(x < s["exclusiveMaximum"].get<double>())) return false;
  }
  if (v.is_object()) {
    const Json props = s.value("properties", Json::object());
    for (const Json& r : s.value("required", Json::array())) {
      if (!v.contains(r.get<std::string>())) return false;
    }
    for (const auto& [key, item] : v.items()) {
      if (props.contains(key)) {
        if (!validates(props[key], item, root)) return false;
      } else if (s.contains("additionalProperties")) {
        if (!validates(s["additionalProperties"], item, root)) return false;
      }
    }
  }
  if (v.is_array()) {
    if (s.contains("minItems") && v.size() < s["minItems"].get<size_t>()) return false;
    if (s.contains("maxItems") && v.size() > s["maxItems"].get<size_t>()) return false;
    const Json prefix = s.value("prefixItems", Json::array());
    for (size_t i = 0; i < v.size(); ++i) {
      if (i < prefix.size()) {
        if (!validates(prefix[i], v[i], root)) return false;
      } else if (s.contains("items") && !validates(s["items"], v[i], root)) {
        return false;
      }
    }
  }
  return true;
}

namespace {

std::string random_text(std::mt19937& rng, size_t n) {
  static const char* const kPieces[] = {
      "a", "b",  "Z",  "0",    " ",        "\"",           "\\",
      "/", "\n", "\t", "\x01", "\xC3\xA9", "\xE2\x82\xAC", "\xF0\x9F\x98\x80",
      "{", ","};
  std::string out;
  for (size_t i = 0; i < n; ++i) out += kPieces[rng() % (sizeof(kPieces) / sizeof(kPieces[0]))];
  return out;
}

std::string two(int x) { return (x < 10 ? "0" : "") + std::to_string(x); }

std::optional<std::string> random_format(const std::string& f, std::mt19937& rng) {
  auto date = [&] {
    const int y = 1900 + static_cast<int>(rng() % 200), m = 1 + static_cast<int>(rng() % 12);
    static const int days[] = {31, 28, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31};
    const int d =
        1 + static_cast<int>(rng() % static_cast<unsigned>(days[m - 1] + (m == 2 && leap(y))));
    return std::to_string(y) + "-" + two(m) + "-" + two(d);
  };
  auto time = [&] {
    return two(static_cast<int>(rng() % 24)) + ":" + two(static_cast<int>(rng() % 60)) + ":" +
           two(static_cast<int>(rng() % 60)) + (rng() % 2 ? "Z" : "+05:30");
  };
  if (f == "date") return date();
  if (f == "time") return time();
  if (f == "date-time") return date() + "T" + time();
  if (f == "uuid")
    return std::string("123e4567-e89b-12d3-a456-42661417400") + std::to_string(rng() % 10);
  if (f == "email") return "user" + std::to_string(rng() % 100) + "@example.com";
  if (f == "ipv4") return std::to_string(rng() % 256) + ".0.0." + std::to_string(rng() % 256);
  return std::nullopt;
}

}  // namespace

std::optional<Json> random_instance(const Json& schema_in, const Json& root, std::mt19937& rng,
                                    int depth) {
  if (depth > 8) return std::nullopt;
  if (schema_in.is_boolean()) return Json(static_cast<int>(rng() % 100));
  Json s = resolve(schema_in, root);
  if (s.contains("allOf")) {
    Json merged = s["allOf"][0].is_object() ? resolve(s["allOf"][0], root) : Json::object();
    for (const auto& [k, v] : s.items()) {
      if (k != "allOf") merged[k] = v;
    }
    s = merged;
  }
  for (const char* comb : {"anyOf", "oneOf"}) {
    if (!s.contains(comb)) continue;
    const Json& list = s[comb];
    Json branch = list[rng() % list.size()];
    branch = resolve(branch, root);
    for (const auto& [k, v] : s.items()) {
      if (k != comb && k != "$defs" && k != "definitions") branch[k] = v;
    }
    auto out = random_instance(branch, root, rng, depth + 1);
    if (out && !validates(s, *out, root)) return std::nullopt;
    return out;
  }
  if (s.contains("const")) return s["const"];
  if (s.contains("enum")) return s["enum"][rng() % s["enum"].size()];
  std::vector<std::string> types;
  if (s.contains("type")) {
    if (s["type"].is_string()) types.push_back(s["type"].get<std::string>());
    for (const Json& t : s["type"].is_array() ? s["type"] : Json::array())
      types.push_back(t.get<std::string>());
  } else if (s.contains("properties")) {
    types.push_back("object");
  } else if (s.contains("items") || s.contains("prefixItems")) {
    types.push_back("array");
  } else {
    return Json(static_cast<int>(rng() % 10));
  }
  if (s.value("nullable", false)) types.push_back("null");
  const std::string t = types[rng() % types.size()];
  if (t == "null") return Json(nullptr);
  if (t == "boolean") return Json(rng() % 2 == 0);
  if (t == "integer" || t == "number") {
    double lo = -1000, hi = 1000;
    if (s.contains("minimum")) lo = s["minimum"].get<double>();
    if (s.contains("exclusiveMinimum")) lo = s["exclusiveMinimum"].get<double>();
    if (s.contains("maximum")) hi = s["maximum"].get<double>();
    if (s.contains("exclusiveMaximum")) hi = s["exclusiveMaximum"].get<double>();
    if (hi < lo) lo = hi - 2000;
    if (hi - lo > 2000) hi = lo + 2000;
    std::uniform_real_distribution<double> unit(0.0, 1.0);
    for (int tries = 0; tries < 50; ++tries) {
      double x = lo + (hi - lo) * unit(rng);
      const bool whole = t == "integer" || rng() % 3 == 0;
      x = whole ? std::round(x) : std::round(x * 100) / 100;
      const Json v = whole ? Json(static_cast<int64_t>(x)) : Json(x);
      if (validates(s, v, root)) return v;
    }
    return std::nullopt;
  }
  if (t == "string") {
    if (s.contains("pattern")) {
      if (!s.contains("examples")) return std::nullopt;
      return s["examples"][rng() % s["examples"].size()];
    }
    if (s.contains("format")) {
      auto f = random_format(s["format"].get<std::string>(), rng);
      if (!f) return std::nullopt;
      return Json(*f);
    }
    const size_t lo = s.value("minLength", size_t{0});
    const size_t hi = s.value("maxLength", lo + 6);
    return Json(random_text(rng, lo + rng() % (hi - lo + 1)));
  }
  if (t == "array") {
    const Json prefix = s.value("prefixItems", Json::array());
    size_t lo = s.value("minItems", size_t{0});
    size_t hi = s.value("maxItems", lo + 3);
    if (s.contains("items") && s["items"] == Json(false)) hi = std::min(hi, prefix.size());
    const size_t n = lo + rng() % (hi - lo + 1);
    Json out = Json::array();
    for (size_t i = 0; i < n; ++i) {
      const Json& item =
          i < prefix.size() ? prefix[i] : (s.contains("items") ? s["items"] : Json(true));
      auto v = random_instance(item, root, rng, depth + 1);
      if (!v) return std::nullopt;
      out.push_back(*v);
    }
    return out;
  }
  Json out = Json::object();
  const Json props = s.value("properties", Json::object());
  const Json required = s.value("required", Json::array());
  for (const auto& [key, sub] : props.items()) {
    const bool req = std::find(required.begin(), required.end(), Json(key)) != required.end();
    if (!req && rng() % 2 == 0) continue;
    auto v = random_instance(sub, root, rng, depth + 1);
    if (!v) return std::nullopt;
    out[key] = *v;
  }
  for (const Json& r : required) {  // required names only additional properties provide
    const std::string key = r.get<std::string>();
    if (out.contains(key) || !s.contains("additionalProperties")) continue;
    auto v = random_instance(s["additionalProperties"], root, rng, depth + 1);
    if (!v) return std::nullopt;
    out[key] = *v;
  }
  if (s.contains("additionalProperties") && s["additionalProperties"] != Json(false) &&
      rng() % 2 == 0) {
    auto v = random_instance(s["additionalProperties"], root, rng, depth + 1);
    if (!v) return std::nullopt;
    out["extra_" + std::to_string(rng() % 100)] = *v;
  }
  return out;
}

std::string dump(const Json& v, std::mt19937* rng) {
  auto ws = [&]() -> std::string {
    if (!rng) return "";
    static const char* const kWs[] = {"", "", " ", "\n", "\n  ", "\t"};
    return kWs[(*rng)() % 6];
  };
  if (v.is_object()) {
    std::string out = "{" + ws();
    bool first = true;
    for (const auto& [key, item] : v.items()) {
      if (!first) out += rng ? ws() + "," + ws() : ", ";
      first = false;
      out += Json(key).dump() + (rng ? ws() + ":" + ws() : ": ") + dump(item, rng);
    }
    return out + ws() + "}";
  }
  if (v.is_array()) {
    std::string out = "[" + ws();
    for (size_t i = 0; i < v.size(); ++i) {
      if (i > 0) out += rng ? ws() + "," + ws() : ", ";
      out += dump(v[i], rng);
    }
    return out + ws() + "]";
  }
  return v.dump();
}

Json mutate(const Json& instance, std::mt19937& rng) {
  Json out = instance;
  // Walk to a random node.
  Json* node = &out;
  for (int d = 0;
       d < 4 && (node->is_object() || node->is_array()) && !node->empty() && rng() % 3 != 0; ++d) {
    if (node->is_object()) {
      auto it = node->begin();
      std::advance(it, static_cast<long>(rng() % node->size()));
      node = &it.value();
    } else {
      node = &(*node)[rng() % node->size()];
    }
  }
  switch (rng() % 6) {
    case 0:
      *node = Json("mutated");
      break;
    case 1:
      *node = Json(12345);
      break;
    case 2:
      *node = Json(nullptr);
      break;
    case 3:
      if (node->is_object() && !node->empty()) {
        node->erase(node->begin());
      } else {
        *node = Json::array();
      }
      break;
    case 4:
      if (node->is_object()) {
        (*node)["unexpected"] = 1;
      } else if (node->is_array()) {
        node->push_back(Json(true));
      } else {
        *node = Json(-7.5);
      }
      break;
    default:
      *node = Json::object();
  }
  return out;
}

}  // namespace pagoda::structured::testing
