#pragma once
// Incremental decoding for streaming generation: turns ids arriving one (or a few) at a time into
// text deltas whose concatenation equals Tokenizer::decode of all the ids.
#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "tokenizer/tokenizer.h"

namespace pagoda {

/// Emits text only once it can no longer change: never half a UTF-8 character, never a byte
/// token whose run is still open. One instance per request; not thread-safe.
class StreamingDetokenizer {
 public:
  StreamingDetokenizer(Tokenizer tokenizer, bool skip_special_tokens);
  /// Starts after `context` (the prompt): its last few ids are left context only, never emitted, so
  /// that a completion's first word keeps the space a sentencepiece "▁" gives it after the prompt
  /// (as vLLM's completions do). The output then equals decode(context + ids) - decode(context).
  StreamingDetokenizer(Tokenizer tokenizer, bool skip_special_tokens,
                       std::span<const int32_t> context);

  /// Adds one id and returns the newly completed text (often empty). Throws InvalidArgument for
  /// an id outside the vocabulary.
  [[nodiscard]] std::string add(int32_t id);
  /// Adds several ids at once and returns the newly completed text.
  [[nodiscard]] std::string add(std::span<const int32_t> ids);
  /// Ends the stream: returns all text still held back (e.g. an incomplete character as U+FFFD).
  /// No ids may be added afterwards.
  [[nodiscard]] std::string flush();

  /// The ids added so far, after the context ids when there is a context.
  [[nodiscard]] const std::vector<int32_t>& ids() const { return ids_; }

 private:
  [[nodiscard]] bool is_open_byte_token(int32_t id) const;

  Tokenizer tokenizer_;
  bool skip_special_tokens_;
  std::vector<int32_t> ids_;
  // vLLM's offsets: ids_[prefix_offset_, read_offset_) decode to text already emitted and serve
  // as left context, so that decoders that look at neighbours (Strip, byte runs) see the same
  // tokens as a full decode would; ids_[read_offset_, end) are not yet emitted.
  size_t prefix_offset_ = 0;
  size_t read_offset_ = 0;
  size_t emitted_bytes_ = 0;
  size_t num_context_ids_ = 0;       // leading ids_ that are context, not output
  bool last_is_byte_token_ = false;  // the last id that reaches the decoder is "<0xXX>"
  bool flushed_ = false;
};

}  // namespace pagoda
