#include "structured/constraint.h"

#include <map>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "core/status.h"
#include "structured/gbnf_parser.h"
#include "structured/regex_parser.h"

namespace pagoda::structured {
namespace {

using Json = nlohmann::ordered_json;

Expr remap(const Expr& e, int32_t offset) {
  if (e.kind == Expr::Kind::kRef) return Expr::ref(e.rule + offset);
  if (e.children().empty()) return e;
  std::vector<Expr> children;
  for (const Expr& c : e.children()) children.push_back(remap(c, offset));
  return e.with_children(std::move(children));
}

// The UTF-8 decoder as a DFA: state 0 is a character boundary; the others wait for continuation
// bytes (with the tighter first-continuation ranges after E0, ED, F0 and F4).
int utf8_step(int s, uint8_t b) {
  auto in = [&](int lo, int hi) { return b >= lo && b <= hi; };
  switch (s) {
    case 0:
      if (b < 0x80) return 0;
      if (in(0xC2, 0xDF)) return 1;
      if (b == 0xE0) return 4;
      if (in(0xE1, 0xEC) || in(0xEE, 0xEF)) return 2;
      if (b == 0xED) return 5;
      if (b == 0xF0) return 6;
      if (in(0xF1, 0xF3)) return 3;
      if (b == 0xF4) return 7;
      return -1;
    case 1:  // one continuation byte left
      return in(0x80, 0xBF) ? 0 : -1;
    case 2:  // two left
      return in(0x80, 0xBF) ? 1 : -1;
    case 3:  // three left
      return in(0x80, 0xBF) ? 2 : -1;
    case 4:  // after E0
      return in(0xA0, 0xBF) ? 1 : -1;
    case 5:  // after ED (no surrogates)
      return in(0x80, 0x9F) ? 1 : -1;
    case 6:  // after F0
      return in(0x90, 0xBF) ? 2 : -1;
    case 7:  // after F4
      return in(0x80, 0x8F) ? 2 : -1;
    default:
      return -1;
  }
}

// Valid UTF-8 text in which no trigger occurs: an Aho-Corasick automaton of the triggers (match
// states removed) times the UTF-8 decoder.
std::shared_ptr<const ByteDfa> text_without(const std::vector<std::string>& triggers) {
  // Trie with goto function completed through failure links.
  std::vector<std::array<int32_t, 256>> go(1);
  go[0].fill(-1);
  std::vector<uint8_t> match(1, 0);
  for (const std::string& t : triggers) {
    int32_t n = 0;
    for (char ch : t) {
      const auto b = static_cast<uint8_t>(ch);
      if (go[static_cast<size_t>(n)][b] < 0) {
        go[static_cast<size_t>(n)][b] = static_cast<int32_t>(go.size());
        go.emplace_back();
        go.back().fill(-1);
        match.push_back(0);
      }
      n = go[static_cast<size_t>(n)][b];
    }
    match[static_cast<size_t>(n)] = 1;
  }
  std::vector<int32_t> fail(go.size(), 0), queue;
  for (int b = 0; b < 256; ++b) {
    int32_t& t = go[0][static_cast<size_t>(b)];
    if (t < 0) {
      t = 0;
    } else {
      queue.push_back(t);
    }
  }
  for (size_t i = 0; i < queue.size(); ++i) {
    const int32_t n = queue[i];
    match[static_cast<size_t>(n)] |= match[static_cast<size_t>(fail[static_cast<size_t>(n)])];
    for (int b = 0; b < 256; ++b) {
      int32_t& t = go[static_cast<size_t>(n)][static_cast<size_t>(b)];
      const int32_t via_fail =
          go[static_cast<size_t>(fail[static_cast<size_t>(n)])][static_cast<size_t>(b)];
      if (t < 0) {
        t = via_fail;
      } else {
        fail[static_cast<size_t>(t)] = via_fail;
        queue.push_back(t);
      }
    }
  }
  // Product with the UTF-8 decoder, from (root, boundary).
  auto dfa = std::make_shared<ByteDfa>();
  std::map<std::pair<int32_t, int>, int32_t> ids;
  std::vector<std::pair<int32_t, int>> states{{0, 0}};
  ids[{0, 0}] = 0;
  for (size_t i = 0; i < states.size(); ++i) {
    const auto [ac, u] = states[i];
    std::array<int32_t, 256> row;
    row.fill(-1);
    for (int b = 0; b < 256; ++b) {
      const int32_t ac2 = go[static_cast<size_t>(ac)][static_cast<size_t>(b)];
      const int u2 = utf8_step(u, static_cast<uint8_t>(b));
      if (u2 < 0 || match[static_cast<size_t>(ac2)]) continue;
      auto [it, inserted] = ids.try_emplace({ac2, u2}, static_cast<int32_t>(states.size()));
      if (inserted) states.emplace_back(ac2, u2);
      row[static_cast<size_t>(b)] = it->second;
    }
    dfa->next.push_back(row);
    dfa->final.push_back(u == 0 ? 1 : 0);
  }
  return dfa;
}

}  // namespace

int32_t import_grammar(Grammar& into, const Grammar& from, const std::string& prefix) {
  const auto offset = static_cast<int32_t>(into.rules.size());
  for (const Rule& r : from.rules) {
    into.rules.push_back(Rule{prefix + r.name, remap(r.body, offset)});
  }
  return offset + from.root;
}

Grammar structural_tag_grammar(const std::string& text, const JsonFormat& format) {
  auto bad = [](const std::string& where, const std::string& what) {
    throw InvalidArgument(
        fmt::format("structural_tag: {}{}", where.empty() ? "" : where + ": ", what));
  };
  Json j;
  try {
    j = Json::parse(text);
  } catch (const nlohmann::json::exception& e) {
    bad("", fmt::format("not valid JSON: {}", e.what()));
  }
  if (!j.is_object()) bad("", "must be an object");
  for (const auto& [key, v] : j.items()) {
    if (key != "type" && key != "structures" && key != "triggers") {
      bad(key, key == "format" ? "the 'format' form of structural tags is not supported"
                               : "unknown field");
    }
  }
  if (j.contains("type") && j["type"] != Json("structural_tag"))
    bad("type", "must be 'structural_tag'");
  if (!j.contains("structures") || !j["structures"].is_array() || j["structures"].empty()) {
    bad("structures", "must be a non-empty array");
  }
  if (!j.contains("triggers") || !j["triggers"].is_array() || j["triggers"].empty()) {
    bad("triggers", "must be a non-empty array of strings");
  }
  std::vector<std::string> triggers;
  for (const Json& t : j["triggers"]) {
    if (!t.is_string() || t.get<std::string>().empty())
      bad("triggers", "must be non-empty strings");
    triggers.push_back(t.get<std::string>());
  }
  Grammar g;
  g.root = g.add_rule("root");
  std::vector<Expr> structures;
  for (size_t i = 0; i < j["structures"].size(); ++i) {
    const std::string where = fmt::format("structures[{}]", i);
    const Json& s = j["structures"][i];
    if (!s.is_object()) bad(where, "must be an object");
    for (const auto& [key, v] : s.items()) {
      if (key != "begin" && key != "schema" && key != "end")
        bad(where + "." + key, "unknown field");
    }
    if (!s.contains("begin") || !s["begin"].is_string()) bad(where + ".begin", "must be a string");
    if (!s.contains("end") || !s["end"].is_string()) bad(where + ".end", "must be a string");
    if (!s.contains("schema")) bad(where + ".schema", "is required");
    const std::string begin = s["begin"].get<std::string>();
    bool triggered = false;
    for (const std::string& t : triggers) triggered = triggered || begin.starts_with(t);
    if (!triggered) bad(where + ".begin", "must start with one of the triggers");
    Grammar schema;
    try {
      schema = json_schema_grammar(s["schema"].dump(), format);
    } catch (const InvalidArgument& e) {
      bad(where + ".schema", e.what());
    }
    const int32_t root = import_grammar(g, schema, fmt::format("s{}-", i));
    structures.push_back(Expr::seq(
        {Expr::literal(begin), Expr::ref(root), Expr::literal(s["end"].get<std::string>())}));
  }
  const Expr free_text = Expr::automaton(text_without(triggers));
  g.rules[0].body =
      Expr::seq({free_text, Expr::star(Expr::seq({Expr::alt(std::move(structures)), free_text}))});
  return g;
}

std::string Constraint::cache_key() const {
  std::string key =
      fmt::format("{}\x1f{}\x1f{}\x1f{}\x1f{}\x1f", static_cast<int>(kind), json.any_whitespace,
                  json.unlisted_properties, json.whitespace_pattern.has_value(),
                  json.whitespace_pattern.value_or(""));
  for (const std::string& c : choices) key += fmt::format("{}:{}\x1f", c.size(), c);
  key += text;
  return key;
}

Grammar build_grammar(const Constraint& c) {
  switch (c.kind) {
    case Constraint::Kind::kJsonSchema:
      return json_schema_grammar(c.text, c.json);
    case Constraint::Kind::kJsonObject:
      return json_object_grammar(c.json);
    case Constraint::Kind::kRegex: {
      Grammar g;
      g.root = g.add_rule("root");
      g.rules[0].body = parse_regex(c.text, RegexEncoding::kRaw).expr;
      return g;
    }
    case Constraint::Kind::kChoice: {
      if (c.choices.empty()) throw InvalidArgument("choice: the list of choices is empty");
      std::vector<Expr> options;
      for (const std::string& s : c.choices) options.push_back(Expr::literal(s));
      Grammar g;
      g.root = g.add_rule("root");
      g.rules[0].body = Expr::alt(std::move(options));
      return g;
    }
    case Constraint::Kind::kGrammar:
      return parse_gbnf(c.text);
    case Constraint::Kind::kStructuralTag:
      return structural_tag_grammar(c.text, c.json);
  }
  throw InvalidArgument("unknown constraint kind");
}

}  // namespace pagoda::structured
