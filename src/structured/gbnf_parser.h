#pragma once
// GBNF, the EBNF dialect of llama.cpp grammars that xgrammar and vLLM also accept, parsed into a
// Grammar. Supported: `name ::= body` rules (a body runs until the next `name ::=`, so bodies may
// span lines), alternatives `|`, grouping `( )`, string literals "..." and '...', character
// classes [a-z] and [^...], `.` (any character), rule references, the postfixes * + ? {m} {m,}
// {m,n} {,n}, escapes \n \r \t \\ \" \' \[ \] \- \^ \xHH \uHHHH \UHHHHHHHH, and # comments. The
// start rule is `root`.
#include <string_view>

#include "structured/grammar.h"

namespace pagoda::structured {

/// Parses GBNF text. Throws InvalidArgument "grammar: line L, column C: ..." for a syntax error,
/// a reference to an undefined rule, a rule defined twice, a missing root, and for xgrammar's
/// lookahead assertions `(= ...)`, which are not supported.
[[nodiscard]] Grammar parse_gbnf(std::string_view text);

}  // namespace pagoda::structured
