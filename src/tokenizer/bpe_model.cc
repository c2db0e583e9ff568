#include "tokenizer/bpe_model.h"

#include <queue>

#include "core/status.h"
#include "tokenizer/utf8.h"

namespace pagoda {

namespace tj = tokenizer_json;

// A bounded, sharded word -> ids cache. Words repeat heavily in natural text, so most words skip
// the merge loop; shards keep lock contention low when many threads encode at once. Once a shard
// is full it stops inserting (as HF's cache does) instead of evicting, which keeps it simple.
class BpeModel::WordCache {
 public:
  static constexpr size_t kMaxWordBytes = 128;

  bool find(std::string_view word, std::vector<int32_t>& out) {
    Shard& shard = shard_for(word);
    std::lock_guard lock(shard.mutex);
    const auto it = shard.map.find(word);
    if (it == shard.map.end()) return false;
    out.insert(out.end(), it->second.begin(), it->second.end());
    return true;
  }

  void insert(std::string_view word, const int32_t* ids, size_t count) {
    Shard& shard = shard_for(word);
    std::lock_guard lock(shard.mutex);
    if (shard.map.size() >= kShardCapacity) return;
    shard.map.emplace(std::string(word), std::vector<int32_t>(ids, ids + count));
  }

 private:
  static constexpr size_t kNumShards = 16;
  static constexpr size_t kShardCapacity = 4096;
  struct Shard {
    std::mutex mutex;
    std::unordered_map<std::string, std::vector<int32_t>, StringHash, std::equal_to<>> map;
  };
  Shard& shard_for(std::string_view word) { return shards_[StringHash{}(word) % kNumShards]; }

  std::array<Shard, kNumShards> shards_;
};

namespace {

// Splits a merges entry: "a b" (older files) or ["a", "b"] (newer files).
std::pair<std::string, std::string> parse_merge(const tj::Json& entry, const std::string& file,
                                                size_t index) {
  if (entry.is_string()) {
    const auto& s = entry.get_ref<const std::string&>();
    const size_t space = s.find(' ');
    if (space == std::string::npos || s.find(' ', space + 1) != std::string::npos) {
      tj::fail(file, fmt::format("model.merges[{}] '{}' is not two tokens", index, s));
    }
    return {s.substr(0, space), s.substr(space + 1)};
  }
  if (entry.is_array() && entry.size() == 2 && entry[0].is_string() && entry[1].is_string()) {
    return {entry[0].get<std::string>(), entry[1].get<std::string>()};
  }
  tj::fail(file, fmt::format("model.merges[{}] must be \"a b\" or [\"a\", \"b\"]", index));
}

}  // namespace

BpeModel::BpeModel(const tj::Json& j, const std::string& file)
    : cache_(std::make_unique<WordCache>()) {
  const std::string type = tj::get_string(j, "type", file, "model", "BPE");
  if (type != "BPE") tj::fail(file, "unsupported model type '" + type + "'");
  if (const auto it = j.find("dropout");
      it != j.end() && !it->is_null() && !(it->is_number() && it->get<double>() == 0.0)) {
    tj::fail(file, "model.dropout is not supported");
  }
  const tj::Json& vocab = tj::require(j, "vocab", file, "model");
  if (!vocab.is_object()) tj::fail(file, "model.vocab must be an object");
  vocab_.reserve(vocab.size());
  int32_t max_id = -1;
  for (const auto& [token, id_json] : vocab.items()) {
    if (!id_json.is_number_integer() || id_json.get<int64_t>() < 0 ||
        id_json.get<int64_t>() > INT32_MAX) {
      tj::fail(file, fmt::format("model.vocab['{}'] must be a non-negative integer id", token));
    }
    const auto id = static_cast<int32_t>(id_json.get<int64_t>());
    vocab_.emplace(token, id);
    max_id = std::max(max_id, id);
  }
  id_to_token_.resize(static_cast<size_t>(max_id + 1));
  has_id_.assign(id_to_token_.size(), 0);
  for (const auto& [token, id] : vocab_) {
    id_to_token_[id] = token;
    has_id_[id] = 1;
  }

  continuing_subword_prefix_ = tj::get_string(j, "continuing_subword_prefix", file, "model");
  end_of_word_suffix_ = tj::get_string(j, "end_of_word_suffix", file, "model");
  fuse_unk_ = tj::get_bool(j, "fuse_unk", file, "model", false);
  byte_fallback_ = tj::get_bool(j, "byte_fallback", file, "model", false);
  ignore_merges_ = tj::get_bool(j, "ignore_merges", file, "model", false);
  const std::string unk = tj::get_string(j, "unk_token", file, "model");
  if (!unk.empty()) {
    const auto it = vocab_.find(unk);
    if (it == vocab_.end()) tj::fail(file, "model.unk_token '" + unk + "' is not in model.vocab");
    unk_id_ = it->second;
  }
  for (int b = 0; b < 256; ++b) {
    const auto it = vocab_.find(fmt::format("<0x{:02X}>", b));
    byte_ids_[b] = it == vocab_.end() ? -1 : it->second;
  }

  const tj::Json& merges = tj::require(j, "merges", file, "model");
  if (!merges.is_array()) tj::fail(file, "model.merges must be an array");
  merges_.reserve(merges.size());
  const size_t prefix_len = continuing_subword_prefix_.size();
  for (size_t i = 0; i < merges.size(); ++i) {
    const auto [a, b] = parse_merge(merges[i], file, i);
    const auto ia = vocab_.find(a), ib = vocab_.find(b);
    if (ia == vocab_.end() || ib == vocab_.end()) {
      tj::fail(file, fmt::format("model.merges[{}] uses a token missing from model.vocab", i));
    }
    const std::string merged =
        a +
        (prefix_len > 0 && b.starts_with(continuing_subword_prefix_) ? b.substr(prefix_len) : b);
    const auto im = vocab_.find(merged);
    if (im == vocab_.end()) {
      tj::fail(file,
               fmt::format("model.merges[{}]: merged token '{}' is not in model.vocab", i, merged));
    }
    merges_.insert(ia->second, ib->second, MergeResult{static_cast<int32_t>(i), im->second});
  }
}

BpeModel::~BpeModel() = default;

std::optional<int32_t> BpeModel::token_to_id(std::string_view token) const {
  const auto it = vocab_.find(token);
  if (it == vocab_.end()) return std::nullopt;
  return it->second;
}

const std::string* BpeModel::id_to_token(int32_t id) const {
  if (id < 0 || id >= vocab_size() || !has_id_[id]) return nullptr;
  return &id_to_token_[id];
}

void BpeModel::encode_word(std::string_view word, std::vector<int32_t>& out) const {
  if (word.empty()) return;
  if (ignore_merges_) {
    if (const auto it = vocab_.find(word); it != vocab_.end()) {
      out.push_back(it->second);
      return;
    }
  }
  const bool cacheable = word.size() <= WordCache::kMaxWordBytes;
  if (cacheable && cache_->find(word, out)) return;
  const size_t start = out.size();
  merge_word(word, out);
  if (cacheable) cache_->insert(word, out.data() + start, out.size() - start);
}

// Why a heap and a linked list: applying the lowest-ranked merge first (leftmost on ties) is what
// defines BPE; a heap of candidate pairs with lazy invalidation makes each word O(n log n), so a
// 100k-character word without pre-tokenization (sentencepiece style) stays fast.
void BpeModel::merge_word(std::string_view word, std::vector<int32_t>& out) const {
  struct Symbol {
    int32_t id;
    int32_t prev, next;
    bool alive;
  };
  std::vector<Symbol> symbols;
  symbols.reserve(word.size());
  auto add = [&](int32_t id) {
    const auto n = static_cast<int32_t>(symbols.size());
    symbols.push_back({id, n - 1, n + 1, true});
  };
  std::optional<int32_t> pending_unk;
  std::string piece;
  size_t i = 0;
  while (i < word.size()) {
    const size_t begin = i;
    i += std::min(utf8::char_length(static_cast<unsigned char>(word[i])), word.size() - i);
    std::string_view ch = word.substr(begin, i - begin);
    if (!continuing_subword_prefix_.empty() || !end_of_word_suffix_.empty()) {
      piece.clear();
      if (begin > 0) piece += continuing_subword_prefix_;
      piece += ch;
      if (i == word.size()) piece += end_of_word_suffix_;
      ch = piece;
    }
    if (const auto it = vocab_.find(ch); it != vocab_.end()) {
      if (pending_unk) add(*std::exchange(pending_unk, std::nullopt));
      add(it->second);
      continue;
    }
    if (byte_fallback_) {
      bool all = true;
      for (size_t k = begin; k < i; ++k) all = all && byte_ids_[static_cast<uint8_t>(word[k])] >= 0;
      if (all) {
        // HF adds byte tokens without first flushing a pending unk; keep its order.
        for (size_t k = begin; k < i; ++k) add(byte_ids_[static_cast<uint8_t>(word[k])]);
        continue;
      }
    }
    if (unk_id_) {
      if (pending_unk && !fuse_unk_) add(*pending_unk);
      pending_unk = *unk_id_;
    }
  }
  if (pending_unk) add(*pending_unk);
  if (symbols.empty()) return;
  symbols.back().next = -1;

  struct Candidate {
    int32_t rank, pos, new_id;
    bool operator>(const Candidate& o) const {
      return rank != o.rank ? rank > o.rank : pos > o.pos;
    }
  };
  std::priority_queue<Candidate, std::vector<Candidate>, std::greater<>> queue;
  auto push_pair = [&](int32_t pos) {
    const int32_t next = symbols[pos].next;
    if (next < 0) return;
    if (const MergeResult* m = merges_.find(symbols[pos].id, symbols[next].id)) {
      queue.push({m->rank, pos, m->new_id});
    }
  };
  for (int32_t p = 0; p + 1 < static_cast<int32_t>(symbols.size()); ++p) push_pair(p);
  while (!queue.empty()) {
    const Candidate top = queue.top();
    queue.pop();
    Symbol& left = symbols[top.pos];
    if (!left.alive || left.next < 0) continue;
    const MergeResult* m = merges_.find(left.id, symbols[left.next].id);
    if (m == nullptr || m->new_id != top.new_id) continue;  // stale candidate
    Symbol& right = symbols[left.next];
    right.alive = false;
    left.id = top.new_id;
    left.next = right.next;
    if (right.next >= 0) symbols[right.next].prev = top.pos;
    if (left.prev >= 0) push_pair(left.prev);
    push_pair(top.pos);
  }
  for (int32_t p = 0; p >= 0; p = symbols[p].next) out.push_back(symbols[p].id);
}

}  // namespace pagoda
