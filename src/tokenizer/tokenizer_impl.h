#pragma once
// The pieces a Tokenizer is made of; private to src/tokenizer.
#include <memory>
#include <optional>
#include <string>

#include "tokenizer/added_vocabulary.h"
#include "tokenizer/bpe_model.h"
#include "tokenizer/decoder.h"
#include "tokenizer/normalizer.h"
#include "tokenizer/post_processor.h"
#include "tokenizer/pre_tokenizer.h"
#include "tokenizer/tokenizer_config.h"

namespace pagoda {

/// Everything read from tokenizer.json and its neighbours; immutable after loading.
struct TokenizerImpl {
  std::string path;
  std::unique_ptr<Normalizer> normalizer;       // may be null
  std::unique_ptr<PreTokenizer> pre_tokenizer;  // may be null: the whole piece is one word
  std::unique_ptr<BpeModel> model;
  std::unique_ptr<Decoder> decoder;  // may be null: tokens are joined with spaces
  AddedVocabulary added;
  PostProcessor post_processor;
  TokenizerConfig config;
  int32_t vocab_size = 0;
};

}  // namespace pagoda
