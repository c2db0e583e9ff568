#include "tokenizer/pre_tokenizer.h"

#include <algorithm>
#include <utility>

#include "tokenizer/byte_level.h"
#include "tokenizer/pattern.h"

namespace pagoda {

namespace {

namespace tj = tokenizer_json;

// GPT-2's word pattern, used by ByteLevel when use_regex is true.
constexpr const char* kGpt2Pattern =
    R"('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+)";

enum class SplitBehavior { kRemoved, kIsolated, kMergedWithPrevious, kMergedWithNext, kContiguous };

struct Segment {
  size_t begin, end;
  bool is_match;
};

// Cuts text at the matches and regroups the pieces the way HF's SplitDelimiterBehavior does.
void split_words(std::string_view text, const std::vector<std::pair<size_t, size_t>>& matches,
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
  for (const auto& p : pieces) {
    if (p.end > p.begin) out.emplace_back(text.substr(p.begin, p.end - p.begin));
  }
}

class SequencePreTokenizer final : public PreTokenizer {
 public:
  explicit SequencePreTokenizer(std::vector<std::unique_ptr<PreTokenizer>> steps)
      : steps_(std::move(steps)) {}
  void pre_tokenize(std::vector<std::string>& words) const override {
    for (const auto& step : steps_) step->pre_tokenize(words);
  }

 private:
  std::vector<std::unique_ptr<PreTokenizer>> steps_;
};

class SplitPreTokenizer final : public PreTokenizer {
 public:
  SplitPreTokenizer(const tj::Json& j, const std::string& file)
      : pattern_(tj::require(j, "pattern", file, "Split pre_tokenizer"), file,
                 "Split pre_tokenizer pattern"),
        invert_(tj::get_bool(j, "invert", file, "Split pre_tokenizer", false)) {
    const std::string behavior = tj::get_string(j, "behavior", file, "Split pre_tokenizer");
    if (behavior == "Removed") {
      behavior_ = SplitBehavior::kRemoved;
    } else if (behavior == "Isolated") {
      behavior_ = SplitBehavior::kIsolated;
    } else if (behavior == "MergedWithPrevious") {
      behavior_ = SplitBehavior::kMergedWithPrevious;
    } else if (behavior == "MergedWithNext") {
      behavior_ = SplitBehavior::kMergedWithNext;
    } else if (behavior == "Contiguous") {
      behavior_ = SplitBehavior::kContiguous;
    } else {
      tj::fail(file, "unsupported Split pre_tokenizer behavior '" + behavior + "'");
    }
  }

  void pre_tokenize(std::vector<std::string>& words) const override {
    std::vector<std::string> out;
    out.reserve(words.size() * 4);
    std::vector<std::pair<size_t, size_t>> matches;
    for (const auto& word : words) {
      matches.clear();
      pattern_.find_all(word, matches);
      split_words(word, matches, behavior_, invert_, out);
    }
    words = std::move(out);
  }

 private:
  Pattern pattern_;
  bool invert_;
  SplitBehavior behavior_ = SplitBehavior::kIsolated;
};

class ByteLevelPreTokenizer final : public PreTokenizer {
 public:
  ByteLevelPreTokenizer(const tj::Json& j, const std::string& file)
      : add_prefix_space_(tj::get_bool(j, "add_prefix_space", file, "ByteLevel", true)) {
    if (tj::get_bool(j, "use_regex", file, "ByteLevel", true)) {
      regex_ = std::make_unique<Regex>(kGpt2Pattern, file + ": ByteLevel pre_tokenizer");
    }
  }

  void pre_tokenize(std::vector<std::string>& words) const override {
    std::vector<std::string> out;
    out.reserve(words.size());
    std::vector<std::pair<size_t, size_t>> matches;
    std::string prefixed;
    for (const auto& word : words) {
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
    words = std::move(out);
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
  if (type == "Split") return std::make_unique<SplitPreTokenizer>(j, file);
  if (type == "ByteLevel") return std::make_unique<ByteLevelPreTokenizer>(j, file);
  tj::fail(file, "unsupported pre_tokenizer type '" + type + "'");
}

}  // namespace pagoda
