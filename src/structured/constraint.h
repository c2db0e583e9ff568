#pragma once
// What a request constrains its output to, in vLLM's kinds (structured_outputs.json / regex /
// choice / grammar / json_object / structural_tag), and the grammar of each.
#include <cstdint>
#include <string>
#include <vector>

#include "structured/grammar.h"
#include "structured/json_schema.h"

namespace pagoda::structured {

/// One output constraint.
struct Constraint {
  enum class Kind : uint8_t { kJsonSchema, kJsonObject, kRegex, kChoice, kGrammar, kStructuralTag };
  Kind kind = Kind::kJsonObject;
  /// The JSON Schema, regex, GBNF grammar or structural tag (JSON) text.
  std::string text;
  std::vector<std::string> choices;  // kChoice: the output is exactly one of them
  JsonFormat json;                   // whitespace of JSON output (schemas, json_object, tags)

  /// A key that is equal for constraints with the same grammar.
  [[nodiscard]] std::string cache_key() const;
};

/// The grammar of c. Throws InvalidArgument naming what is wrong: the position in a grammar or
/// regex, the JSON pointer in a schema, the field of a structural tag.
[[nodiscard]] Grammar build_grammar(const Constraint& c);

/// vLLM's structural tag {"type": "structural_tag", "structures": [{"begin", "schema", "end"}],
/// "triggers": [...]}: free text in which every occurrence of a trigger starts one of the
/// structures whose begin starts with it: begin, JSON following the schema, end.
[[nodiscard]] Grammar structural_tag_grammar(const std::string& json, const JsonFormat& format);

/// Appends the rules of `from` to `into` (names prefixed) and returns the index of from's root.
int32_t import_grammar(Grammar& into, const Grammar& from, const std::string& prefix);

}  // namespace pagoda::structured
