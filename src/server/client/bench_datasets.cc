// The datasets of `pagoda bench serve`. Synthetic prompts are random ids drawn from one seeded
// generator (std::mt19937_64, reduced modulo the vocabulary), in a fixed order, so that a seed
// gives the same prompts on every run; the word vocabulary of chat prompts stands in for token ids.
#include "server/client/bench_datasets.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <fstream>
#include <nlohmann/json.hpp>
#include <random>

#include "core/status.h"

namespace pagoda::client {
namespace {

using nlohmann::json;

// Prompts of the chat endpoint are words rather than token ids (messages carry text).
constexpr const char* kWords[] = {
    "time",     "year",    "people",   "way",    "day",    "man",     "thing",   "woman",
    "life",     "child",   "world",    "school", "state",  "family",  "student", "group",
    "country",  "problem", "hand",     "part",   "place",  "case",    "week",    "company",
    "system",   "program", "question", "work",   "number", "night",   "point",   "home",
    "water",    "room",    "mother",   "area",   "money",  "story",   "fact",    "month",
    "lot",      "right",   "study",    "book",   "eye",    "job",     "word",    "business",
    "issue",    "side",    "kind",     "head",   "house",  "service", "friend",  "father",
    "power",    "hour",    "game",     "line",   "end",    "member",  "law",     "car",
    "city",     "name",    "team",     "minute", "idea",   "kid",     "body",    "back",
    "parent",   "face",    "others",   "level",  "office", "door",    "health",  "person",
    "art",      "war",     "history",  "party",  "result", "change",  "morning", "reason",
    "research", "girl",    "guy",      "moment", "air",    "teacher", "force",   "education",
    "little",   "happy",   "tree",     "garden", "sun",    "dog",     "cat",     "bird",
    "boat",     "river"};

/// A length drawn from [len*(1-r), len*(1+r)] (at least 1), as vLLM's random dataset draws it.
int sample_len(int len, double range_ratio, std::mt19937_64& rng) {
  const int lo = std::max(1, static_cast<int>(std::floor(len * (1 - range_ratio))));
  const int hi = std::max(lo, static_cast<int>(std::ceil(len * (1 + range_ratio))));
  return std::uniform_int_distribution<int>(lo, hi)(rng);
}

/// Draws synthetic prompts: ids below the vocabulary (or word indices) from one generator.
class SyntheticPrompts {
 public:
  SyntheticPrompts(const SyntheticVocabulary& vocabulary, uint64_t seed)
      : words_(vocabulary.words),
        size_(vocabulary.words ? static_cast<int64_t>(std::size(kWords)) : vocabulary.vocab_size),
        rng_(seed) {
    if (size_ < 1) {
      throw InvalidArgument(fmt::format(
          "the vocabulary of random prompts has {} tokens (--random-vocab-size or --tokenizer)",
          size_));
    }
  }
  std::mt19937_64& rng() { return rng_; }

  /// `n` random ids.
  std::vector<int64_t> draw(int64_t n) {
    std::vector<int64_t> ids(static_cast<size_t>(n));
    for (int64_t& id : ids) id = static_cast<int64_t>(rng_() % static_cast<uint64_t>(size_));
    return ids;
  }

  /// The request of prompt `ids` (token ids, or words for chat) and an output length.
  SampleRequest request(std::vector<int64_t> ids, int64_t output_len) const {
    SampleRequest r;
    r.prompt_len = static_cast<int64_t>(ids.size());
    r.output_len = output_len;
    if (!words_) {
      r.prompt_token_ids = std::move(ids);
      return r;
    }
    for (size_t i = 0; i < ids.size(); ++i) {
      if (i > 0) r.prompt_text += ' ';
      r.prompt_text += kWords[ids[i]];
    }
    return r;
  }

 private:
  bool words_;
  int64_t size_;
  std::mt19937_64 rng_;
};

/// Fisher-Yates with the generator's raw draws (the same order on every standard library).
template <class T>
void shuffle(std::vector<T>& items, std::mt19937_64& rng) {
  for (size_t i = items.size(); i > 1; --i) std::swap(items[i - 1], items[rng() % i]);
}

void require_positive(int value, std::string_view flag) {
  if (value < 1) throw InvalidArgument(fmt::format("{} must be >= 1, got {}", flag, value));
}

}  // namespace

std::vector<SampleRequest> sample_random(const RandomDatasetOptions& o,
                                         const SyntheticVocabulary& vocabulary) {
  require_positive(o.num_prompts, "--num-prompts");
  require_positive(o.input_len, "--random-input-len");
  require_positive(o.output_len, "--random-output-len");
  if (o.prefix_len < 0)
    throw InvalidArgument(fmt::format("--random-prefix-len must be >= 0, got {}", o.prefix_len));
  if (!(o.range_ratio >= 0 && o.range_ratio < 1)) {
    throw InvalidArgument(
        fmt::format("--random-range-ratio must be in [0, 1), got {}", o.range_ratio));
  }
  SyntheticPrompts prompts(vocabulary, o.seed);
  // The prefix first, so that with no prefix the prompts are those of a run without the flag.
  const std::vector<int64_t> prefix = prompts.draw(o.prefix_len);
  std::vector<SampleRequest> requests;
  requests.reserve(static_cast<size_t>(o.num_prompts));
  for (int i = 0; i < o.num_prompts; ++i) {
    const int input_len = sample_len(o.input_len, o.range_ratio, prompts.rng());
    const int output_len = sample_len(o.output_len, o.range_ratio, prompts.rng());
    std::vector<int64_t> ids = prefix;
    const std::vector<int64_t> rest = prompts.draw(input_len);
    ids.insert(ids.end(), rest.begin(), rest.end());
    requests.push_back(prompts.request(std::move(ids), output_len));
  }
  return requests;
}

std::vector<SampleRequest> sample_prefix_repetition(const PrefixRepetitionOptions& o,
                                                    const SyntheticVocabulary& vocabulary) {
  require_positive(o.num_prompts, "--num-prompts");
  require_positive(o.prefix_len, "--prefix-repetition-prefix-len");
  require_positive(o.suffix_len, "--prefix-repetition-suffix-len");
  require_positive(o.num_prefixes, "--prefix-repetition-num-prefixes");
  require_positive(o.output_len, "--prefix-repetition-output-len");
  const int per_prefix = o.num_prompts / o.num_prefixes;
  if (per_prefix == 0) {
    throw InvalidArgument(
        fmt::format("--num-prompts ({}) must be at least --prefix-repetition-num-prefixes ({})",
                    o.num_prompts, o.num_prefixes));
  }
  SyntheticPrompts prompts(vocabulary, o.seed);
  std::vector<SampleRequest> requests;
  requests.reserve(static_cast<size_t>(per_prefix) * static_cast<size_t>(o.num_prefixes));
  for (int p = 0; p < o.num_prefixes; ++p) {
    const std::vector<int64_t> prefix = prompts.draw(o.prefix_len);
    for (int i = 0; i < per_prefix; ++i) {
      std::vector<int64_t> ids = prefix;
      const std::vector<int64_t> suffix = prompts.draw(o.suffix_len);
      ids.insert(ids.end(), suffix.begin(), suffix.end());
      requests.push_back(prompts.request(std::move(ids), o.output_len));
    }
  }
  shuffle(requests, prompts.rng());
  return requests;
}

bool is_valid_sequence(int64_t prompt_len, int64_t output_len, bool skip_min_output_len_check) {
  constexpr int64_t kMinLen = 4, kMaxPromptLen = 1024, kMaxTotalLen = 2048;
  const bool prompt_too_short = prompt_len < kMinLen;
  const bool output_too_short = !skip_min_output_len_check && output_len < kMinLen;
  const bool prompt_too_long = prompt_len > kMaxPromptLen;
  const bool total_too_long = prompt_len + output_len > kMaxTotalLen;
  return !(prompt_too_short || output_too_short || prompt_too_long || total_too_long);
}

std::vector<SampleRequest> sample_sharegpt(const ShareGptOptions& o,
                                           const TokenCounter& count_tokens) {
  require_positive(o.num_prompts, "--num-prompts");
  if (o.output_len && *o.output_len < 1)
    throw InvalidArgument(fmt::format("--sharegpt-output-len must be >= 1, got {}", *o.output_len));
  if (o.path.empty()) throw InvalidArgument("--dataset-name sharegpt needs --dataset-path FILE");
  std::ifstream in(o.path);
  if (!in) throw InvalidArgument(fmt::format("--dataset-path {}: cannot open the file", o.path));
  const json data = json::parse(in, nullptr, /*allow_exceptions=*/false);
  if (data.is_discarded())
    throw InvalidArgument(fmt::format("--dataset-path {}: not a JSON document", o.path));
  if (!data.is_array()) {
    throw InvalidArgument(fmt::format(
        "--dataset-path {}: a ShareGPT file is a JSON list of {{\"conversations\": [...]}}",
        o.path));
  }
  // (prompt, reply) of the entries with two turns or more, in the file's order.
  std::vector<std::pair<std::string, std::string>> pairs;
  for (size_t i = 0; i < data.size(); ++i) {
    const json& entry = data[i];
    if (!entry.is_object() || !entry.contains("conversations")) continue;
    const json& turns = entry["conversations"];
    if (!turns.is_array() || turns.size() < 2) continue;
    for (size_t t = 0; t < 2; ++t) {
      if (!turns[t].is_object() || !turns[t].contains("value") || !turns[t]["value"].is_string()) {
        throw InvalidArgument(fmt::format(
            "--dataset-path {}: entry {} turn {} has no string \"value\"", o.path, i, t));
      }
    }
    pairs.emplace_back(turns[0]["value"].get<std::string>(), turns[1]["value"].get<std::string>());
  }
  std::mt19937_64 rng(o.seed);
  shuffle(pairs, rng);

  std::vector<SampleRequest> requests;
  for (const auto& [prompt, reply] : pairs) {
    if (static_cast<int>(requests.size()) >= o.num_prompts) break;
    const int64_t prompt_len = count_tokens(prompt);
    const int64_t output_len = o.output_len ? *o.output_len : count_tokens(reply);
    if (!is_valid_sequence(prompt_len, output_len, o.output_len.has_value())) continue;
    SampleRequest r;
    r.prompt_text = prompt;
    r.prompt_len = prompt_len;
    r.output_len = output_len;
    requests.push_back(std::move(r));
  }
  if (requests.empty()) {
    throw InvalidArgument(fmt::format(
        "--dataset-path {}: no conversation passes the filter (a first turn of 4..1024 tokens, a "
        "second of 4 or more, 2048 in all)",
        o.path));
  }
  // vLLM's oversampling: repeat pairs drawn at random up to num_prompts.
  const size_t distinct = requests.size();
  while (!o.no_oversample && static_cast<int>(requests.size()) < o.num_prompts) {
    SampleRequest copy = requests[rng() % distinct];
    requests.push_back(std::move(copy));
  }
  return requests;
}

}  // namespace pagoda::client
