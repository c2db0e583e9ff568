// Encode throughput of the llama3 and qwen2 tokenizers on a few MB of generated mixed text
// (English prose, code, numbers, CJK, emojis). Prints MB/s; not a test.
// Usage: bench_tokenizer [tokenizers_dir]   (defaults to the repository's tests/data/tokenizers)
#include <chrono>
#include <cstdio>
#include <random>
#include <string>
#include <vector>

#include "tokenizer/tokenizer.h"

namespace {

// Deterministic mixed text: the same bytes on every run so that figures are comparable.
std::string make_corpus(size_t target_bytes) {
  const std::vector<std::string> prose = {
      "The quick brown fox jumps over the lazy dog. ",
      "In the beginning, inference engines were simple loops over a model's layers. ",
      "She said, \"it's not what you'd expect,\" and then they'll all go home. ",
      "Tokenization splits text into words, then merges bytes into subwords. "};
  const std::vector<std::string> code = {
      "for (int i = 0; i < n; ++i) { sum += a[i] * b[i]; }\n",
      "def encode(self, text: str) -> list[int]:\n    return self._bpe(text)\n",
      "    if (x != nullptr && x->next) return x->next->value;  // comment\n"};
  const std::vector<std::string> other = {"我想在苹果公司工作，因为他们的产品非常好。",
                                          "東京は日本の首都です。",
                                          "🦙🚀 😶‍🌫️ ✅ 👍🏽 ",
                                          "Привет, как дела? ",
                                          "Cửa Việt là một cửa biển. ",
                                          "\n\n",
                                          "    \t"};
  std::mt19937 rng(2024);
  std::string text;
  text.reserve(target_bytes + 256);
  while (text.size() < target_bytes) {
    switch (rng() % 6) {
      case 0:
      case 1:
        text += prose[rng() % prose.size()];
        break;
      case 2:
        text += code[rng() % code.size()];
        break;
      case 3:
        text += std::to_string(rng() % 100000000) + "." + std::to_string(rng() % 1000) + " ";
        break;
      default:
        text += other[rng() % other.size()];
        break;
    }
  }
  return text;
}

void bench(const std::string& tokenizers, const std::string& name, const std::string& corpus) {
  const std::string path = tokenizers + "/" + name + "/tokenizer.json";
  auto start = std::chrono::steady_clock::now();
  const pagoda::Tokenizer tok = pagoda::Tokenizer::load(path);
  const double load_s =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  // Split into ~4 KB documents, as a server sees many prompts rather than one huge string.
  std::vector<std::string> docs;
  for (size_t pos = 0; pos < corpus.size();) {
    size_t end = std::min(corpus.size(), pos + 4096);
    while (end < corpus.size() && (static_cast<unsigned char>(corpus[end]) & 0xC0) == 0x80) ++end;
    docs.push_back(corpus.substr(pos, end - pos));
    pos = end;
  }
  size_t tokens = 0;
  double best = 1e9;
  for (int rep = 0; rep < 3; ++rep) {  // the first pass also fills the word cache
    start = std::chrono::steady_clock::now();
    tokens = 0;
    for (const auto& doc : docs) tokens += tok.encode(doc, false).size();
    best = std::min(
        best, std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count());
  }
  start = std::chrono::steady_clock::now();
  const auto whole = tok.encode(corpus, false);
  const double whole_s =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  const double mb = static_cast<double>(corpus.size()) / 1e6;
  std::printf(
      "%-8s load %.2f s | encode %.2f MB in 4 KB docs: %.1f MB/s (%zu tokens, %.2f M tok/s) | "
      "one string: %.1f MB/s\n",
      name.c_str(), load_s, mb, mb / best, tokens, static_cast<double>(tokens) / best / 1e6,
      mb / whole_s);
}

}  // namespace

int main(int argc, char** argv) {
  const std::string tokenizers =
      argc > 1 ? argv[1] : std::string(PAGODA_SOURCE_DIR) + "/tests/data/tokenizers";
  const std::string corpus = make_corpus(4 << 20);
  for (const char* name : {"llama3", "qwen2"}) bench(tokenizers, name, corpus);
  return 0;
}
