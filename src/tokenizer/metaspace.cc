#include "tokenizer/metaspace.h"

#include <string_view>
#include <utility>
#include <vector>

#include "tokenizer/utf8.h"

namespace pagoda {

namespace {

namespace tj = tokenizer_json;

enum class PrependScheme { kAlways, kFirst, kNever };

struct MetaspaceOptions {
  std::string replacement;  // one character, UTF-8
  PrependScheme prepend_scheme = PrependScheme::kAlways;
  bool split = true;
};

// Reads both spellings: newer files write prepend_scheme (and split); older ones only the
// add_prefix_space bool. HF rejects add_prefix_space false next to a scheme other than "never".
MetaspaceOptions parse_options(const tj::Json& j, const std::string& file,
                               const std::string& where) {
  MetaspaceOptions options;
  options.replacement = tj::get_string(j, "replacement", file, where, "\u2581");
  const std::string& r = options.replacement;
  if (r.empty() || utf8::valid_sequence_length(r, 0) != r.size()) {
    tj::fail(file, where + " 'replacement' must be exactly one character");
  }
  const std::string scheme = tj::get_string(j, "prepend_scheme", file, where, "");
  if (scheme == "always") {
    options.prepend_scheme = PrependScheme::kAlways;
  } else if (scheme == "first") {
    options.prepend_scheme = PrependScheme::kFirst;
  } else if (scheme == "never") {
    options.prepend_scheme = PrependScheme::kNever;
  } else if (!scheme.empty()) {
    tj::fail(file, where + " has unsupported prepend_scheme '" + scheme + "'");
  }
  if (!tj::get_bool(j, "add_prefix_space", file, where, true)) {
    if (!scheme.empty() && scheme != "never") {
      tj::fail(file, where + " add_prefix_space false contradicts prepend_scheme '" + scheme + "'");
    }
    options.prepend_scheme = PrependScheme::kNever;
  }
  options.split = tj::get_bool(j, "split", file, where, true);
  return options;
}

std::string replace_spaces(std::string_view word, std::string_view replacement) {
  std::string out;
  out.reserve(word.size() + 2 * replacement.size());
  for (const char c : word) {
    if (c == ' ') {
      out.append(replacement);
    } else {
      out.push_back(c);
    }
  }
  return out;
}

class MetaspacePreTokenizer final : public PreTokenizer {
 public:
  explicit MetaspacePreTokenizer(MetaspaceOptions options) : options_(std::move(options)) {}

  void pre_tokenize(PreTokenizedWords& words) const override {
    const std::string& rep = options_.replacement;
    std::vector<std::string> out;
    out.reserve(words.words.size() * 2);
    for (size_t i = 0; i < words.words.size(); ++i) {
      std::string text = replace_spaces(words.words[i], rep);
      if (!text.empty() && !text.starts_with(rep) && prepends(i, words.first_begins_input)) {
        text.insert(0, rep);
      }
      if (!options_.split) {
        if (!text.empty()) out.push_back(std::move(text));
        continue;
      }
      // MergedWithNext on the replacement: each one opens a new word ("▁a▁▁b" -> ▁a, ▁, ▁b).
      size_t begin = 0;
      for (size_t pos = text.find(rep, 1); pos != std::string::npos;
           pos = text.find(rep, pos + rep.size())) {
        if (pos > begin) out.push_back(text.substr(begin, pos - begin));
        begin = pos;
      }
      if (begin < text.size()) out.push_back(text.substr(begin));
    }
    words.words = std::move(out);
  }

 private:
  bool prepends(size_t word_index, bool first_begins_input) const {
    switch (options_.prepend_scheme) {
      case PrependScheme::kAlways:
        return true;
      case PrependScheme::kFirst:
        return word_index == 0 && first_begins_input;
      case PrependScheme::kNever:
        return false;
    }
    return false;
  }

  MetaspaceOptions options_;
};

class MetaspaceDecoder final : public Decoder {
 public:
  explicit MetaspaceDecoder(MetaspaceOptions options) : options_(std::move(options)) {}

  void decode_chain(std::vector<std::string>& tokens) const override {
    const std::string& rep = options_.replacement;
    for (size_t i = 0; i < tokens.size(); ++i) {
      // HF drops every replacement of the first token, not only a leading one.
      const bool drop = i == 0 && options_.prepend_scheme != PrependScheme::kNever;
      std::string out;
      out.reserve(tokens[i].size());
      size_t begin = 0;
      for (size_t pos = tokens[i].find(rep); pos != std::string::npos;
           pos = tokens[i].find(rep, begin)) {
        out.append(tokens[i], begin, pos - begin);
        if (!drop) out.push_back(' ');
        begin = pos + rep.size();
      }
      out.append(tokens[i], begin);
      tokens[i] = std::move(out);
    }
  }
  void token_bytes(std::string& token) const override {
    // As a token after the first: every replacement is a space.
    std::vector<std::string> two{std::string(), std::move(token)};
    decode_chain(two);
    token = std::move(two[1]);
  }

 private:
  MetaspaceOptions options_;
};

}  // namespace

std::unique_ptr<PreTokenizer> make_metaspace_pre_tokenizer(const tj::Json& j,
                                                           const std::string& file) {
  return std::make_unique<MetaspacePreTokenizer>(parse_options(j, file, "Metaspace pre_tokenizer"));
}

std::unique_ptr<Decoder> make_metaspace_decoder(const tj::Json& j, const std::string& file) {
  return std::make_unique<MetaspaceDecoder>(parse_options(j, file, "Metaspace decoder"));
}

}  // namespace pagoda
