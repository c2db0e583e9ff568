#include "tokenizer/streaming_detokenizer.h"

#include "core/status.h"
#include "tokenizer/utf8.h"

namespace pagoda {

StreamingDetokenizer::StreamingDetokenizer(Tokenizer tokenizer, bool skip_special_tokens)
    : tokenizer_(std::move(tokenizer)), skip_special_tokens_(skip_special_tokens) {}

StreamingDetokenizer::StreamingDetokenizer(Tokenizer tokenizer, bool skip_special_tokens,
                                           std::span<const int32_t> context)
    : StreamingDetokenizer(std::move(tokenizer), skip_special_tokens) {
  // vLLM keeps five ids of left context: enough for every decoder that looks at its neighbours.
  constexpr size_t kContextIds = 5;
  const size_t begin = context.size() > kContextIds ? context.size() - kContextIds : 0;
  for (size_t i = begin; i < context.size(); ++i) {
    const int32_t id = context[i];
    if (id < 0 || id >= tokenizer_.vocab_size()) {
      throw InvalidArgument(fmt::format("token id {} is outside the vocabulary [0, {})", id,
                                        tokenizer_.vocab_size()));
    }
    ids_.push_back(id);
  }
  num_context_ids_ = ids_.size();
  read_offset_ = ids_.size();
}

// A byte-fallback token ("<0xXX>") may still join the bytes that follow it: HF decodes a whole run
// of byte tokens at once and turns an invalid run into one U+FFFD per byte, so even a valid
// character can turn into replacement characters when a stray continuation byte follows.
bool StreamingDetokenizer::is_open_byte_token(int32_t id) const {
  const std::string token = tokenizer_.id_to_token(id);
  return token.size() == 6 && token.starts_with("<0x") && token.back() == '>';
}

std::string StreamingDetokenizer::add(int32_t id) { return add(std::span<const int32_t>(&id, 1)); }

std::string StreamingDetokenizer::add(std::span<const int32_t> ids) {
  PAGODA_CHECK(!flushed_, "StreamingDetokenizer::add after flush");
  for (const int32_t id : ids) {
    if (id < 0 || id >= tokenizer_.vocab_size()) {
      throw InvalidArgument(fmt::format("token id {} is outside the vocabulary [0, {})", id,
                                        tokenizer_.vocab_size()));
    }
    ids_.push_back(id);
    if (!(skip_special_tokens_ && tokenizer_.is_special(id))) {
      last_is_byte_token_ = is_open_byte_token(id);
    }
  }
  if (last_is_byte_token_) return "";
  const std::span<const int32_t> all(ids_);
  const std::string prefix_text = tokenizer_.decode(
      all.subspan(prefix_offset_, read_offset_ - prefix_offset_), skip_special_tokens_);
  std::string new_text = tokenizer_.decode(all.subspan(prefix_offset_), skip_special_tokens_);
  if (new_text.size() <= prefix_text.size() || new_text.ends_with(utf8::kReplacementUtf8) ||
      !new_text.starts_with(prefix_text)) {
    return "";  // an incomplete character (or nothing new): wait for more ids
  }
  prefix_offset_ = read_offset_;
  read_offset_ = ids_.size();
  new_text.erase(0, prefix_text.size());
  emitted_bytes_ += new_text.size();
  return new_text;
}

std::string StreamingDetokenizer::flush() {
  PAGODA_CHECK(!flushed_, "StreamingDetokenizer::flush called twice");
  flushed_ = true;
  // Decoding everything once makes the total exact whatever was held back.
  const std::span<const int32_t> all(ids_);
  std::string full = tokenizer_.decode(all, skip_special_tokens_);
  if (num_context_ids_ > 0) {
    const std::string context =
        tokenizer_.decode(all.first(num_context_ids_), skip_special_tokens_);
    // A byte run split by the context boundary decodes differently on each side: then the output
    // is taken on its own.
    full = full.starts_with(context)
               ? full.substr(context.size())
               : tokenizer_.decode(all.subspan(num_context_ids_), skip_special_tokens_);
  }
  return full.size() > emitted_bytes_ ? full.substr(emitted_bytes_) : std::string();
}

}  // namespace pagoda
