#include "tokenizer/added_vocabulary.h"

#include <cctype>

#include "core/status.h"
#include "tokenizer/normalizer.h"
#include "tokenizer/utf8.h"

namespace pagoda {

namespace tj = tokenizer_json;

namespace {

bool is_space(char32_t c) {
  return (c >= 0x09 && c <= 0x0D) || c == 0x20 || c == 0x85 || c == 0xA0 || c == 0x1680 ||
         (c >= 0x2000 && c <= 0x200A) || c == 0x2028 || c == 0x2029 || c == 0x202F || c == 0x205F ||
         c == 0x3000;
}

// HF's single_word test uses char::is_alphanumeric; outside ASCII we count every non-space
// character as part of a word, which errs towards not matching a single_word token.
bool is_word_char(char32_t c) {
  if (c < 0x80) return std::isalnum(static_cast<int>(c)) != 0 || c == '_';
  return !is_space(c);
}

char32_t last_char(std::string_view s) {
  size_t start = s.size() - 1;
  while (start > 0 && (static_cast<unsigned char>(s[start]) & 0xC0) == 0x80) --start;
  return utf8::decode_at(s, start);
}

// Byte offset just past the last non-space character of s (0 when s is all spaces).
size_t end_of_non_space(std::string_view s) {
  size_t end = s.size();
  while (end > 0) {
    size_t start = end - 1;
    while (start > 0 && (static_cast<unsigned char>(s[start]) & 0xC0) == 0x80) --start;
    size_t i = start;
    if (!is_space(utf8::decode_at(s, i))) break;
    end = start;
  }
  return end;
}

// Number of bytes of leading spaces in s.
size_t leading_space_bytes(std::string_view s) {
  size_t i = 0;
  while (i < s.size()) {
    size_t next = i;
    if (!is_space(utf8::decode_at(s, next))) break;
    i = next;
  }
  return i;
}

}  // namespace

AddedTokenMatcher::AddedTokenMatcher(const std::vector<const AddedToken*>& tokens,
                                     const std::vector<std::string>& patterns)
    : nodes_(1) {
  for (size_t t = 0; t < tokens.size(); ++t) {
    const std::string& pattern = patterns[t];
    if (pattern.empty()) continue;
    int32_t node = 0;
    for (const char c : pattern) {
      const auto b = static_cast<unsigned char>(c);
      const auto it = nodes_[node].children.find(b);
      if (it != nodes_[node].children.end()) {
        node = it->second;
      } else {
        const auto child = static_cast<int32_t>(nodes_.size());
        nodes_[node].children.emplace(b, child);
        nodes_.emplace_back();
        node = child;
      }
    }
    if (nodes_[node].token < 0) {  // the first token with this pattern wins
      nodes_[node].token = static_cast<int32_t>(tokens_.size());
      tokens_.push_back(tokens[t]);
      lengths_.push_back(pattern.size());
    }
    first_byte_[static_cast<unsigned char>(pattern[0])] = true;
  }
}

void AddedTokenMatcher::split(std::string_view text, std::vector<TextSplit>& out) const {
  size_t emitted = 0;  // text before this offset has been emitted
  size_t pos = 0;
  while (pos < text.size()) {
    if (!first_byte_[static_cast<unsigned char>(text[pos])]) {
      ++pos;
      continue;
    }
    // Longest token starting at pos; scanning positions left to right makes it leftmost-longest.
    int32_t best = -1;
    int32_t node = 0;
    for (size_t k = pos; k < text.size(); ++k) {
      const auto it = nodes_[node].children.find(static_cast<unsigned char>(text[k]));
      if (it == nodes_[node].children.end()) break;
      node = it->second;
      if (nodes_[node].token >= 0) best = nodes_[node].token;
    }
    if (best < 0) {
      ++pos;
      continue;
    }
    const AddedToken& token = *tokens_[best];
    size_t start = pos, stop = pos + lengths_[best];
    if (token.single_word) {
      const bool start_ok = start == 0 || !is_word_char(last_char(text.substr(0, start)));
      size_t next = stop;
      const bool stop_ok = stop == text.size() || !is_word_char(utf8::decode_at(text, next));
      if (!start_ok || !stop_ok) {  // HF drops the match; scanning resumes after it
        pos = stop;
        continue;
      }
    }
    if (token.lstrip) start = std::max(end_of_non_space(text.substr(0, start)), emitted);
    if (token.rstrip) stop += leading_space_bytes(text.substr(stop));
    if (start > emitted) out.push_back({std::string(text.substr(emitted, start - emitted)), -1});
    out.push_back({std::string(), token.id});
    emitted = stop;
    pos = stop;
  }
  if (emitted < text.size()) out.push_back({std::string(text.substr(emitted)), -1});
}

AddedVocabulary::AddedVocabulary(const tj::Json& list, const Normalizer* normalizer,
                                 const std::string& file) {
  if (list.is_null()) return;
  if (!list.is_array()) tj::fail(file, "added_tokens must be an array");
  tokens_.reserve(list.size());
  for (size_t i = 0; i < list.size(); ++i) {
    const std::string where = fmt::format("added_tokens[{}]", i);
    const tj::Json& j = list[i];
    AddedToken t;
    const int64_t id = tj::get_int(j, "id", file, where, -1);
    if (id < 0 || id > INT32_MAX) tj::fail(file, where + ".id must be a non-negative integer");
    t.id = static_cast<int32_t>(id);
    const tj::Json& content = tj::require(j, "content", file, where);
    if (!content.is_string()) tj::fail(file, where + ".content must be a string");
    t.content = content.get<std::string>();
    t.single_word = tj::get_bool(j, "single_word", file, where, false);
    t.lstrip = tj::get_bool(j, "lstrip", file, where, false);
    t.rstrip = tj::get_bool(j, "rstrip", file, where, false);
    t.normalized = tj::get_bool(j, "normalized", file, where, false);
    t.special = tj::get_bool(j, "special", file, where, false);
    tokens_.push_back(std::move(t));
  }
  std::vector<const AddedToken*> raw, normalized;
  std::vector<std::string> raw_patterns, normalized_patterns;
  for (size_t i = 0; i < tokens_.size(); ++i) {
    const AddedToken& t = tokens_[i];
    by_id_[t.id] = i;
    by_content_.emplace(t.content, t.id);
    max_id_ = std::max(max_id_, t.id);
    if (t.normalized && normalizer != nullptr) {
      std::string pattern = t.content;
      normalizer->normalize(pattern);
      normalized.push_back(&t);
      normalized_patterns.push_back(std::move(pattern));
    } else if (t.normalized) {
      normalized.push_back(&t);
      normalized_patterns.push_back(t.content);
    } else {
      raw.push_back(&t);
      raw_patterns.push_back(t.content);
    }
  }
  raw_ = AddedTokenMatcher(raw, raw_patterns);
  normalized_ = AddedTokenMatcher(normalized, normalized_patterns);
}

const AddedToken* AddedVocabulary::find_id(int32_t id) const {
  const auto it = by_id_.find(id);
  return it == by_id_.end() ? nullptr : &tokens_[it->second];
}

std::optional<int32_t> AddedVocabulary::find_content(std::string_view content) const {
  const auto it = by_content_.find(content);
  if (it == by_content_.end()) return std::nullopt;
  return it->second;
}

}  // namespace pagoda
