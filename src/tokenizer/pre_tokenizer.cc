#include "tokenizer/pre_tokenizer.h"

#include <algorithm>
#include <utility>

#include "tokenizer/byte_level.h"
#include "tokenizer/metaspace.h"
#include "tokenizer/pattern.h"

namespace pagoda {

namespace {

namespace tj = tokenizer_json;

// GPT-2's word pattern, used by ByteLevel when use_regex is true.
constexpr const char* kGpt2Pattern =
    R"('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+)";

// HF's character predicates, one character per match as its split-by-function does. Rust's
// char::is_whitespace is the White_Space property; punctuation is is_ascii_punctuation (which
// includes the ASCII symbols $+<=>^`|~) or a Unicode P* category; digits are char::is_numeric.
constexpr const char* kWhitespaceChar =
    R"([\t-\r \x{85}\x{A0}\x{1680}\x{2000}-\x{200A}\x{2028}\x{2029}\x{202F}\x{205F}\x{3000}])";
constexpr const char* kPunctuationChar = R"([\p{P}!-/:-@\[-`{-~])";
constexpr const char* kNumericChar = R"(\p{N})";
// The Whitespace pre-tokenizer keeps the matches of this pattern and drops the rest.
constexpr const char* kWhitespaceWordPattern = R"(\w+|[^\w\s]+)";

enum class SplitBehavior { kRemoved, kIsolated, kMergedWithPrevious, kMergedWithNext, kContiguous };

struct Segment {
  size_t begin, end;
  bool is_match;
};

// Cuts text at the matches and regroups the pieces the way HF's SplitDelimiterBehavior does.
// Returns whether the first piece appended begins at offset 0 of text.
bool split_words(std::string_view text, const std::vector<std::pair<size_t, size_t>>& matches,
                 SplitBehavior behavior, bool invert, std::vector<std::string>& out) {
  std::vector<Segment> segments;
  size_t last = 0;
  for (const auto& [begin, end] : matches) {
    if (begin > last) segments.push_back({last, begin, invert});
    segments.push_back({begin, end, !invert});
    last = end;
  }
  if (last < text.size()) segments.push_back({last, text.size(), invert});

  std::vector<Segment> pieces;
  bool previous_match = false;
  switch (behavior) {
    case SplitBehavior::kIsolated:
      pieces = std::move(segments);
      break;
    case SplitBehavior::kRemoved:
      for (const auto& s : segments) {
        if (!s.is_match) pieces.push_back(s);
      }
      break;
    case SplitBehavior::kMergedWithPrevious:
      for (const auto& s : segments) {
        if (s.is_match && !previous_match && !pieces.empty()) {
          pieces.back().end = s.end;
        } else {
          pieces.push_back(s);
        }
        previous_match = s.is_match;
      }
      break;
    case SplitBehavior::kMergedWithNext:
      for (auto it = segments.rbegin(); it != segments.rend(); ++it) {
        if (it->is_match && !previous_match && !pieces.empty()) {
          pieces.back().begin = it->begin;
        } else {
          pieces.push_back(*it);
        }
        previous_match = it->is_match;
      }
      std::reverse(pieces.begin(), pieces.end());
      break;
    case SplitBehavior::kContiguous:
      for (const auto& s : segments) {
        if (s.is_match && previous_match && !pieces.empty()) {
          pieces.back().end = s.end;
        } else {
          pieces.push_back(s);
        }
        previous_match = s.is_match;
      }
      break;
  }
  bool first_at_zero = false;
  bool first = true;
  for (const auto& p : pieces) {
    if (p.end <= p.begin) continue;
    if (first) first_at_zero = p.begin == 0;
    first = false;
    out.emplace_back(text.substr(p.begin, p.end - p.begin));
  }
  return first_at_zero;
}

SplitBehavior parse_behavior(const std::string& behavior, const std::string& file,
                             const std::string& where) {
  if (behavior == "Removed") return SplitBehavior::kRemoved;
  if (behavior == "Isolated") return SplitBehavior::kIsolated;
  if (behavior == "MergedWithPrevious") return SplitBehavior::kMergedWithPrevious;
  if (behavior == "MergedWithNext") return SplitBehavior::kMergedWithNext;
  if (behavior == "Contiguous") return SplitBehavior::kContiguous;
  tj::fail(file, "unsupported " + where + " behavior '" + behavior + "'");
}

class SequencePreTokenizer final : public PreTokenizer {
 public:
  explicit SequencePreTokenizer(std::vector<std::unique_ptr<PreTokenizer>> steps)
      : steps_(std::move(steps)) {}
  void pre_tokenize(PreTokenizedWords& words) const override {
    for (const auto& step : steps_) step->pre_tokenize(words);
  }

 private:
  std::vector<std::unique_ptr<PreTokenizer>> steps_;
};

// Split and every fixed-pattern splitter (Whitespace, Punctuation, Digits, ...) share this.
class SplitPreTokenizer final : public PreTokenizer {
 public:
  SplitPreTokenizer(Pattern pattern, SplitBehavior behavior, bool invert)
      : pattern_(std::move(pattern)), invert_(invert), behavior_(behavior) {}

  void pre_tokenize(PreTokenizedWords& words) const override {
    std::vector<std::string> out;
    out.reserve(words.words.size() * 4);
    std::vector<std::pair<size_t, size_t>> matches;
    for (size_t i = 0; i < words.words.size(); ++i) {
      matches.clear();
      pattern_.find_all(words.words[i], matches);
      const bool first_at_zero = split_words(words.words[i], matches, behavior_, invert_, out);
      if (i == 0) words.first_begins_input = words.first_begins_input && first_at_zero;
    }
    words.words = std::move(out);
  }

 private:
  Pattern pattern_;
  bool invert_;
  SplitBehavior behavior_;
};

std::unique_ptr<PreTokenizer> make_split(const tj::Json& j, const std::string& file) {
  const std::string where = "Split pre_tokenizer";
  Pattern pattern(tj::require(j, "pattern", file, where), file, where + " pattern");
  return std::make_unique<SplitPreTokenizer>(
      std::move(pattern), parse_behavior(tj::get_string(j, "behavior", file, where), file, where),
      tj::get_bool(j, "invert", file, where, false));
}

// A splitter on a built-in regex (never user input, so it always compiles).
std::unique_ptr<PreTokenizer> make_fixed_split(const char* regex, SplitBehavior behavior,
                                               bool invert, const std::string& file) {
  return std::make_unique<SplitPreTokenizer>(
      Pattern(tj::Json{{"Regex", regex}}, file, "built-in pattern"), behavior, invert);
}

class ByteLevelPreTokenizer final : public PreTokenizer {
 public:
  ByteLevelPreTokenizer(const tj::Json& j, const std::string& file)
      : add_prefix_space_(tj::get_bool(j, "add_prefix_space", file, "ByteLevel", true)) {
    if (tj::get_bool(j, "use_regex", file, "ByteLevel", true)) {
      regex_ = std::make_unique<Regex>(kGpt2Pattern, file + ": ByteLevel pre_tokenizer");
    }
  }

  void pre_tokenize(PreTokenizedWords& words) const override {
    std::vector<std::string> out;
    out.reserve(words.words.size());
    std::vector<std::pair<size_t, size_t>> matches;
    std::string prefixed;
    for (const auto& word : words.words) {
      std::string_view text = word;
      if (add_prefix_space_ && !word.starts_with(' ')) {
        prefixed = " " + word;
        text = prefixed;
      }
      if (regex_) {
        matches.clear();
        regex_->find_all(text, matches);
        std::vector<std::string> parts;
        split_words(text, matches, SplitBehavior::kIsolated, false, parts);
        for (const auto& part : parts) map_word(part, out);
      } else {
        map_word(text, out);
      }
    }
    words.words = std::move(out);
  }

 private:
  static void map_word(std::string_view text, std::vector<std::string>& out) {
    if (text.empty()) return;
    std::string mapped;
    mapped.reserve(text.size() * 2);
    byte_level::map_bytes(text, mapped);
    out.push_back(std::move(mapped));
  }

  bool add_prefix_space_;
  std::unique_ptr<Regex> regex_;
};

}  // namespace

std::unique_ptr<PreTokenizer> make_pre_tokenizer(const tj::Json& j, const std::string& file) {
  const std::string type = tj::component_type(j, file, "pre_tokenizer");
  if (type == "Sequence") {
    const tj::Json& list = tj::require(j, "pretokenizers", file, "Sequence pre_tokenizer");
    if (!list.is_array()) tj::fail(file, "Sequence pre_tokenizer 'pretokenizers' must be an array");
    std::vector<std::unique_ptr<PreTokenizer>> steps;
    for (const auto& item : list) steps.push_back(make_pre_tokenizer(item, file));
    return std::make_unique<SequencePreTokenizer>(std::move(steps));
  }
  if (type == "Split") return make_split(j, file);
  if (type == "ByteLevel") return std::make_unique<ByteLevelPreTokenizer>(j, file);
  if (type == "Metaspace") return make_metaspace_pre_tokenizer(j, file);
  if (type == "Whitespace") {
    return make_fixed_split(kWhitespaceWordPattern, SplitBehavior::kRemoved, true, file);
  }
  if (type == "WhitespaceSplit") {
    return make_fixed_split(kWhitespaceChar, SplitBehavior::kRemoved, false, file);
  }
  if (type == "Punctuation") {
    const std::string behavior = tj::get_string(j, "behavior", file, "Punctuation", "Isolated");
    return make_fixed_split(
        kPunctuationChar, parse_behavior(behavior, file, "Punctuation pre_tokenizer"), false, file);
  }
  if (type == "Digits") {
    const bool individual = tj::get_bool(j, "individual_digits", file, "Digits", false);
    return make_fixed_split(kNumericChar,
                            individual ? SplitBehavior::kIsolated : SplitBehavior::kContiguous,
                            false, file);
  }
  if (type == "BertPreTokenizer") {
    // Whitespace separates words, then every punctuation character is a word of its own.
    std::vector<std::unique_ptr<PreTokenizer>> steps;
    steps.push_back(make_fixed_split(kWhitespaceChar, SplitBehavior::kRemoved, false, file));
    steps.push_back(make_fixed_split(kPunctuationChar, SplitBehavior::kIsolated, false, file));
    return std::make_unique<SequencePreTokenizer>(std::move(steps));
  }
  tj::fail(file, "unsupported pre_tokenizer type '" + type + "'");
}

}  // namespace pagoda
