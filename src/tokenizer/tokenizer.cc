#include "tokenizer/tokenizer.h"

#include <algorithm>
#include <filesystem>

#include "core/mapped_file.h"
#include "core/status.h"
#include "tokenizer/json_util.h"
#include "tokenizer/tokenizer_impl.h"
#include "tokenizer/utf8.h"

namespace pagoda {

namespace tj = tokenizer_json;

namespace {

const tj::Json& optional_member(const tj::Json& j, const char* key) {
  static const tj::Json kNull;
  const auto it = j.find(key);
  return it == j.end() ? kNull : *it;
}

}  // namespace

Tokenizer Tokenizer::load(const std::string& path_or_dir) {
  namespace fs = std::filesystem;
  std::error_code ec;
  fs::path path(path_or_dir);
  if (fs::is_directory(path, ec)) path /= "tokenizer.json";
  if (!fs::is_regular_file(path, ec)) throw NotFound("tokenizer file not found: " + path.string());
  auto impl = std::make_shared<TokenizerImpl>();
  impl->path = path.string();
  const std::string& file = impl->path;

  tj::Json j;
  {
    const MappedFile mapped(file);
    const auto* begin = reinterpret_cast<const char*>(mapped.data());
    try {
      j = tj::Json::parse(begin, begin + mapped.size());
    } catch (const tj::Json::exception& e) {
      tj::fail(file, std::string("malformed JSON: ") + e.what());
    }
  }
  if (!j.is_object()) tj::fail(file, "must hold a JSON object");

  if (const auto& n = optional_member(j, "normalizer"); !n.is_null()) {
    impl->normalizer = make_normalizer(n, file);
  }
  if (const auto& p = optional_member(j, "pre_tokenizer"); !p.is_null()) {
    impl->pre_tokenizer = make_pre_tokenizer(p, file);
  }
  impl->model = std::make_unique<BpeModel>(tj::require(j, "model", file, "tokenizer.json"), file);
  if (const auto& d = optional_member(j, "decoder"); !d.is_null()) {
    impl->decoder = make_decoder(d, file);
  }
  impl->added = AddedVocabulary(optional_member(j, "added_tokens"), impl->normalizer.get(), file);
  impl->post_processor = make_post_processor(optional_member(j, "post_processor"), file);
  impl->config = load_tokenizer_config(path.parent_path().string());
  impl->vocab_size = std::max(impl->model->vocab_size(), impl->added.max_id() + 1);
  for (const std::vector<int32_t>* ids :
       {&impl->post_processor.prefix, &impl->post_processor.suffix}) {
    for (const int32_t id : *ids) {
      if (id < 0 || id >= impl->vocab_size) {
        tj::fail(file, fmt::format("post_processor uses id {} outside the vocabulary", id));
      }
    }
  }
  return Tokenizer(std::move(impl));
}

// The HF pipeline: added tokens are cut out of the raw text first; each piece between them is
// normalized, then normalized added tokens are cut out, then the rest is pre-tokenized into
// words that BPE encodes independently.
std::vector<int32_t> Tokenizer::encode(std::string_view text, bool add_special_tokens) const {
  const TokenizerImpl& t = *impl_;
  std::string repaired;
  if (!utf8::is_valid(text)) {
    repaired = utf8::to_valid_lossy(text);
    text = repaired;
  }
  std::vector<int32_t> ids;
  ids.reserve(text.size() / 3 + 4);
  std::vector<TextSplit> pieces;
  t.added.raw_matcher().split(text, pieces);
  std::vector<TextSplit> sub_pieces;
  PreTokenizedWords words;
  // Whether no added token or text has come before: Metaspace's prepend_scheme "first" needs it.
  bool at_input_start = true;
  for (auto& piece : pieces) {
    if (piece.added_id >= 0) {
      ids.push_back(piece.added_id);
      at_input_start = false;
      continue;
    }
    if (t.normalizer) t.normalizer->normalize(piece.text);
    sub_pieces.clear();
    if (t.added.normalized_matcher().empty()) {
      sub_pieces.push_back(std::move(piece));
    } else {
      t.added.normalized_matcher().split(piece.text, sub_pieces);
    }
    for (auto& sub : sub_pieces) {
      if (sub.added_id >= 0) {
        ids.push_back(sub.added_id);
        at_input_start = false;
        continue;
      }
      if (sub.text.empty()) continue;
      words.words.clear();
      words.words.push_back(std::move(sub.text));
      words.first_begins_input = at_input_start;
      at_input_start = false;
      if (t.pre_tokenizer) t.pre_tokenizer->pre_tokenize(words);
      for (const auto& word : words.words) t.model->encode_word(word, ids);
    }
  }
  if (add_special_tokens) t.post_processor.apply(ids);
  return ids;
}

std::string Tokenizer::decode(std::span<const int32_t> ids, bool skip_special_tokens) const {
  const TokenizerImpl& t = *impl_;
  std::vector<std::string> tokens;
  tokens.reserve(ids.size());
  for (const int32_t id : ids) {
    if (id < 0 || id >= t.vocab_size) {
      throw InvalidArgument(fmt::format("token id {} is outside the vocabulary [0, {}) of {}", id,
                                        t.vocab_size, t.path));
    }
    if (const AddedToken* added = t.added.find_id(id)) {
      if (!(skip_special_tokens && added->special)) tokens.push_back(added->content);
    } else if (const std::string* token = t.model->id_to_token(id)) {
      tokens.push_back(*token);
    }
  }
  if (!t.decoder) {
    std::string joined;
    for (size_t i = 0; i < tokens.size(); ++i) {
      if (i > 0) joined += ' ';
      joined += tokens[i];
    }
    return joined;
  }
  t.decoder->decode_chain(tokens);
  std::string text;
  for (const auto& token : tokens) text += token;
  return text;
}

int32_t Tokenizer::vocab_size() const { return impl_->vocab_size; }

std::optional<int32_t> Tokenizer::token_to_id(std::string_view token) const {
  if (auto id = impl_->added.find_content(token)) return id;
  return impl_->model->token_to_id(token);
}

std::string Tokenizer::id_to_token(int32_t id) const {
  if (id < 0 || id >= impl_->vocab_size) {
    throw InvalidArgument(fmt::format("token id {} is outside the vocabulary [0, {}) of {}", id,
                                      impl_->vocab_size, impl_->path));
  }
  if (const AddedToken* added = impl_->added.find_id(id)) return added->content;
  if (const std::string* token = impl_->model->id_to_token(id)) return *token;
  return "";
}

std::string Tokenizer::token_bytes(int32_t id) const {
  std::string token = id_to_token(id);
  if (token.empty()) return token;
  if (!impl_->decoder) return " " + token;  // decode joins tokens with spaces
  impl_->decoder->token_bytes(token);
  return token;
}

bool Tokenizer::is_special(int32_t id) const {
  const AddedToken* added = impl_->added.find_id(id);
  return added != nullptr && added->special;
}

std::optional<int32_t> Tokenizer::bos_id() const {
  if (impl_->config.bos_token) return token_to_id(*impl_->config.bos_token);
  if (impl_->post_processor.prefix.size() == 1) return impl_->post_processor.prefix[0];
  return std::nullopt;
}

std::vector<int32_t> Tokenizer::eos_ids() const {
  std::vector<int32_t> ids;
  if (impl_->config.eos_token) {
    if (const auto id = token_to_id(*impl_->config.eos_token)) ids.push_back(*id);
  }
  for (const int32_t id : impl_->config.generation_eos_ids) {
    if (std::find(ids.begin(), ids.end(), id) == ids.end()) ids.push_back(id);
  }
  return ids;
}

std::string Tokenizer::bos_token() const { return impl_->config.bos_token.value_or(""); }
std::string Tokenizer::eos_token() const { return impl_->config.eos_token.value_or(""); }
std::optional<bool> Tokenizer::add_bos_token() const { return impl_->config.add_bos_token; }
std::optional<bool> Tokenizer::add_eos_token() const { return impl_->config.add_eos_token; }
const std::string& Tokenizer::chat_template() const { return impl_->config.chat_template; }
const std::string& Tokenizer::path() const { return impl_->path; }

}  // namespace pagoda
