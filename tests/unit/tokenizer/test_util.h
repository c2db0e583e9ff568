#pragma once
// Shared helpers for the tokenizer tests: where the test tokenizers live (tests/data/tokenizers),
// cached loading.
#include <map>
#include <mutex>
#include <string>

#include "tokenizer/tokenizer.h"

namespace pagoda::testing {

/// The tokenizer.json of a named test tokenizer ("llama3", ..., or "stories260K").
inline std::string tokenizer_path(const std::string& name) {
  const std::string source = PAGODA_SOURCE_DIR;
  if (name == "stories260K") return source + "/models/stories260K/tokenizer.json";
  return source + "/tests/data/tokenizers/" + name + "/tokenizer.json";
}

/// The Hugging Face vectors file of a named test tokenizer.
inline std::string vectors_path(const std::string& name) {
  return std::string(PAGODA_SOURCE_DIR) + "/tests/data/tokenizers/vectors/" + name + ".json";
}

/// Loads each tokenizer once per test binary (llama3's file is 17 MB).
inline const Tokenizer& shared_tokenizer(const std::string& name) {
  static std::mutex mutex;
  static std::map<std::string, Tokenizer> cache;
  std::lock_guard lock(mutex);
  auto it = cache.find(name);
  if (it == cache.end()) it = cache.emplace(name, Tokenizer::load(tokenizer_path(name))).first;
  return it->second;
}

inline const char* const kAllTokenizers[] = {"llama2", "llama3", "mistral_v3",
                                             "qwen2",  "gpt2",   "stories260K"};

}  // namespace pagoda::testing
