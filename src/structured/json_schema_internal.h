#pragma once
// The JSON Schema compiler's state, shared by json_schema.cc (rules, references, whitespace) and
// json_schema_value.cc (one schema -> one expression). Private to src/structured.
#include <array>
#include <functional>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "structured/json_schema.h"

namespace pagoda::structured::json_schema {

using Json = nlohmann::ordered_json;

/// Throws InvalidArgument "json schema: at <path>: <what>".
[[noreturn]] void fail(const std::string& path, const std::string& what);
/// path + "/" + key as a JSON pointer token.
[[nodiscard]] std::string child(const std::string& path, std::string_view key);

/// Walks one schema document and builds its grammar.
class Converter {
 public:
  Converter(const Json& root, const JsonFormat& format);
  [[nodiscard]] Grammar build();
  /// The grammar of any JSON object.
  [[nodiscard]] Grammar build_any_object();

 private:
  enum class Shared : uint8_t { kString, kInteger, kNumber, kValue, kObject, kCount };

  [[nodiscard]] Expr value(const Json& schema, const std::string& path, int depth);
  [[nodiscard]] Expr typed(const Json& schema, const std::string& path, const std::string& type,
                           int depth);
  [[nodiscard]] Expr object(const Json& schema, const std::string& path, int depth);
  [[nodiscard]] Expr array(const Json& schema, const std::string& path, int depth);
  [[nodiscard]] Expr string(const Json& schema, const std::string& path);
  [[nodiscard]] Expr number(const Json& schema, const std::string& path, bool integer);
  [[nodiscard]] Expr literal(const Json& v) const;
  [[nodiscard]] Expr one_of(const Json& schema, const std::string& path, int depth, bool exclusive);
  [[nodiscard]] Expr ref(const std::string& target, const std::string& path);
  [[nodiscard]] const Json& resolve(const std::string& ref, const std::string& path);
  [[nodiscard]] int32_t shared(Shared kind);
  [[nodiscard]] int32_t new_rule(const std::string& hint);
  // A rule per distinct primitive (a string with a pattern, a bounded number, ...), shared by
  // every use: its states are few and precomputed once, and the same rule in another grammar
  // reuses their token sets (StateCache).
  [[nodiscard]] Expr primitive(const std::string& key, const std::string& hint,
                               const std::function<Expr()>& build);
  [[nodiscard]] Expr ws() const;
  [[nodiscard]] Expr comma() const;
  [[nodiscard]] Expr colon() const;
  [[nodiscard]] Expr extra_key(const std::vector<std::string>& declared) const;
  // oneOf support: whether two branch schemas can never match the same value.
  [[nodiscard]] bool disjoint(const Json& a, const Json& b, int depth);
  [[nodiscard]] std::set<std::string> types_of(const Json& s, int depth);
  [[nodiscard]] std::optional<std::vector<Json>> constants_of(const Json& s, int depth);

  const Json& root_;
  JsonFormat format_;
  Expr ws_;
  Grammar g_;
  std::map<std::string, int32_t> ref_rules_;
  std::map<std::string, int32_t> primitive_rules_;
  std::array<int32_t, static_cast<size_t>(Shared::kCount)> shared_{-1, -1, -1, -1, -1};
};

}  // namespace pagoda::structured::json_schema
