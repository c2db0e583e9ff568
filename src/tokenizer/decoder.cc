#include "tokenizer/decoder.h"

#include <optional>
#include <string_view>
#include <utility>

#include "tokenizer/byte_level.h"
#include "tokenizer/metaspace.h"
#include "tokenizer/pattern.h"
#include "tokenizer/utf8.h"

namespace pagoda {

void Decoder::token_bytes(std::string& token) const {
  std::vector<std::string> one{std::move(token)};
  decode_chain(one);
  token.clear();
  for (const auto& t : one) token += t;
}

namespace {

namespace tj = tokenizer_json;

class SequenceDecoder final : public Decoder {
 public:
  explicit SequenceDecoder(std::vector<std::unique_ptr<Decoder>> steps)
      : steps_(std::move(steps)) {}
  void decode_chain(std::vector<std::string>& tokens) const override {
    for (const auto& step : steps_) step->decode_chain(tokens);
  }
  void token_bytes(std::string& token) const override {
    for (const auto& step : steps_) step->token_bytes(token);
  }

 private:
  std::vector<std::unique_ptr<Decoder>> steps_;
};

// Maps every token's characters back to bytes, then repairs the joined bytes once, so that a
// character split over several tokens decodes whole.
class ByteLevelDecoder final : public Decoder {
 public:
  void decode_chain(std::vector<std::string>& tokens) const override {
    std::string bytes;
    for (const auto& token : tokens) {
      if (!byte_level::unmap_token(token, bytes)) bytes.append(token);
    }
    tokens.assign(1, utf8::to_valid_lossy(bytes));
  }
  void token_bytes(std::string& token) const override {
    std::string bytes;
    if (byte_level::unmap_token(token, bytes)) token = std::move(bytes);
  }
};

class ReplaceDecoder final : public Decoder {
 public:
  ReplaceDecoder(const tj::Json& j, const std::string& file)
      : pattern_(tj::require(j, "pattern", file, "Replace decoder"), file,
                 "Replace decoder pattern"),
        content_(tj::get_string(j, "content", file, "Replace decoder")) {}
  void decode_chain(std::vector<std::string>& tokens) const override {
    for (auto& token : tokens) token = pattern_.replace_all(token, content_);
  }

 private:
  Pattern pattern_;
  std::string content_;
};

// Parses "<0xXX>" (exactly six characters, uppercase or lowercase hex) into its byte.
std::optional<uint8_t> parse_byte_token(const std::string& token) {
  if (token.size() != 6 || token[0] != '<' || token[1] != '0' || token[2] != 'x' ||
      token[5] != '>') {
    return std::nullopt;
  }
  auto hex = [](char c) -> int {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    return -1;
  };
  const int hi = hex(token[3]), lo = hex(token[4]);
  if (hi < 0 || lo < 0) return std::nullopt;
  return static_cast<uint8_t>(hi * 16 + lo);
}

// Runs of byte tokens become text; a run that is not valid UTF-8 becomes one U+FFFD per byte,
// exactly as HF's ByteFallback does (it does not use lossy repair here).
class ByteFallbackDecoder final : public Decoder {
 public:
  void decode_chain(std::vector<std::string>& tokens) const override {
    std::vector<std::string> out;
    out.reserve(tokens.size());
    std::string run;
    size_t run_tokens = 0;
    auto flush = [&] {
      if (run_tokens == 0) return;
      if (utf8::is_valid(run)) {
        out.push_back(run);
      } else {
        for (size_t k = 0; k < run_tokens; ++k) out.emplace_back(utf8::kReplacementUtf8);
      }
      run.clear();
      run_tokens = 0;
    };
    for (auto& token : tokens) {
      if (const auto byte = parse_byte_token(token)) {
        run.push_back(static_cast<char>(*byte));
        ++run_tokens;
      } else {
        flush();
        out.push_back(std::move(token));
      }
    }
    flush();
    tokens = std::move(out);
  }
  void token_bytes(std::string& token) const override {
    if (const auto byte = parse_byte_token(token)) token.assign(1, static_cast<char>(*byte));
  }
};

class FuseDecoder final : public Decoder {
 public:
  void decode_chain(std::vector<std::string>& tokens) const override {
    std::string joined;
    for (const auto& token : tokens) joined += token;
    tokens.assign(1, std::move(joined));
  }
};

// Removes up to `start` leading and `stop` trailing copies of a character from each token.
class StripDecoder final : public Decoder {
 public:
  StripDecoder(std::string content, size_t start, size_t stop)
      : content_(std::move(content)), start_(start), stop_(stop) {}
  void decode_chain(std::vector<std::string>& tokens) const override {
    for (auto& token : tokens) {
      std::string_view view = token;
      for (size_t k = 0; k < start_ && view.starts_with(content_); ++k) {
        view.remove_prefix(content_.size());
      }
      for (size_t k = 0; k < stop_ && view.ends_with(content_); ++k) {
        view.remove_suffix(content_.size());
      }
      token = std::string(view);
    }
  }
  // Strip trims the ends of the fused text (or of each token where no Fuse comes first); in the
  // middle of a text a token keeps its bytes.
  void token_bytes(std::string& token) const override { (void)token; }

 private:
  std::string content_;
  size_t start_, stop_;
};

// Replaces every occurrence of `from` in text by `to`, scanning left to right like Rust's
// str::replace.
std::string replace_all(std::string_view text, std::string_view from, std::string_view to) {
  std::string out;
  out.reserve(text.size());
  size_t begin = 0;
  for (size_t pos = text.find(from); pos != std::string_view::npos; pos = text.find(from, begin)) {
    out.append(text.substr(begin, pos - begin));
    out.append(to);
    begin = pos + from.size();
  }
  out.append(text.substr(begin));
  return out;
}

// The English detokenization fix-ups of HF's WordPiece decoder, applied in its order.
std::string cleanup_tokenization(std::string text) {
  static constexpr std::pair<std::string_view, std::string_view> kRules[] = {
      {" .", "."},   {" ?", "?"},     {" !", "!"},    {" ,", ","},
      {" ' ", "'"},  {" n't", "n't"}, {" 'm", "'m"},  {" do not", " don't"},
      {" 's", "'s"}, {" 've", "'ve"}, {" 're", "'re"}};
  for (const auto& [from, to] : kRules) text = replace_all(text, from, to);
  return text;
}

// Word-continuation tokens ("##ing") glue to the previous token; every other token after the
// first opens a new word with a space.
class WordPieceDecoder final : public Decoder {
 public:
  WordPieceDecoder(std::string prefix, bool cleanup)
      : prefix_(std::move(prefix)), cleanup_(cleanup) {}
  void decode_chain(std::vector<std::string>& tokens) const override {
    for (size_t i = 0; i < tokens.size(); ++i) {
      std::string& token = tokens[i];
      if (i != 0) {
        if (token.starts_with(prefix_)) {
          token.erase(0, prefix_.size());
        } else {
          token.insert(token.begin(), ' ');
        }
      }
      if (cleanup_) token = cleanup_tokenization(std::move(token));
    }
  }
  void token_bytes(std::string& token) const override {
    if (token.starts_with(prefix_)) {
      token.erase(0, prefix_.size());
    } else {
      token.insert(token.begin(), ' ');
    }
  }

 private:
  std::string prefix_;
  bool cleanup_;
};

// Word-final tokens carry `suffix` ("</w>"); each becomes a space, except in the last token.
class BpeSuffixDecoder final : public Decoder {
 public:
  explicit BpeSuffixDecoder(std::string suffix) : suffix_(std::move(suffix)) {}
  void decode_chain(std::vector<std::string>& tokens) const override {
    for (size_t i = 0; i < tokens.size(); ++i) {
      tokens[i] = replace_all(tokens[i], suffix_, i + 1 == tokens.size() ? "" : " ");
    }
  }
  void token_bytes(std::string& token) const override { token = replace_all(token, suffix_, " "); }

 private:
  std::string suffix_;
};

}  // namespace

std::unique_ptr<Decoder> make_decoder(const tj::Json& j, const std::string& file) {
  const std::string type = tj::component_type(j, file, "decoder");
  if (type == "Sequence") {
    const tj::Json& list = tj::require(j, "decoders", file, "Sequence decoder");
    if (!list.is_array()) tj::fail(file, "Sequence decoder 'decoders' must be an array");
    std::vector<std::unique_ptr<Decoder>> steps;
    for (const auto& item : list) steps.push_back(make_decoder(item, file));
    return std::make_unique<SequenceDecoder>(std::move(steps));
  }
  if (type == "ByteLevel") return std::make_unique<ByteLevelDecoder>();
  if (type == "Replace") return std::make_unique<ReplaceDecoder>(j, file);
  if (type == "ByteFallback") return std::make_unique<ByteFallbackDecoder>();
  if (type == "Fuse") return std::make_unique<FuseDecoder>();
  if (type == "Metaspace") return make_metaspace_decoder(j, file);
  if (type == "WordPiece") {
    const std::string prefix = tj::get_string(j, "prefix", file, "WordPiece decoder", "##");
    if (prefix.empty()) tj::fail(file, "WordPiece decoder 'prefix' must not be empty");
    return std::make_unique<WordPieceDecoder>(
        prefix, tj::get_bool(j, "cleanup", file, "WordPiece decoder", true));
  }
  if (type == "BPEDecoder") {
    const std::string suffix = tj::get_string(j, "suffix", file, "BPEDecoder", "</w>");
    if (suffix.empty()) tj::fail(file, "BPEDecoder 'suffix' must not be empty");
    return std::make_unique<BpeSuffixDecoder>(suffix);
  }
  if (type == "Strip") {
    const std::string content = tj::get_string(j, "content", file, "Strip decoder", " ");
    const int64_t start = tj::get_int(j, "start", file, "Strip decoder", 0);
    const int64_t stop = tj::get_int(j, "stop", file, "Strip decoder", 0);
    if (content.empty() || start < 0 || stop < 0) tj::fail(file, "Strip decoder has bad fields");
    return std::make_unique<StripDecoder>(content, static_cast<size_t>(start),
                                          static_cast<size_t>(stop));
  }
  tj::fail(file, "unsupported decoder type '" + type + "'");
}

}  // namespace pagoda
