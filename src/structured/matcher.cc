#include "structured/matcher.h"

#include <algorithm>
#include <cstring>

#include "core/status.h"

namespace pagoda::structured {
namespace {

void set_bit(std::span<uint32_t> mask, int32_t id) {
  mask[static_cast<size_t>(id) >> 5] |= 1u << (id & 31);
}

void clear_bit(std::span<uint32_t> mask, int32_t id) {
  mask[static_cast<size_t>(id) >> 5] &= ~(1u << (id & 31));
}

}  // namespace

GrammarMatcher::GrammarMatcher(std::shared_ptr<const CompiledGrammar> grammar, bool cache_masks)
    : grammar_(std::move(grammar)), arena_(grammar_->automaton), cache_masks_(cache_masks) {
  pos_ = arena_.start(grammar_->automaton.root);
}

bool GrammarMatcher::accept_bytes(std::string_view bytes) {
  if (terminated_) return false;
  if (bytes.empty()) return true;
  const Position* cur = &pos_;
  for (size_t i = 0; i < bytes.size(); ++i) {
    Position& next = scratch_[i & 1];
    if (!arena_.advance(*cur, static_cast<uint8_t>(bytes[i]), next)) return false;
    cur = &next;
  }
  pos_ = *cur;
  return true;
}

bool GrammarMatcher::can_accept_bytes(std::string_view bytes) {
  return !terminated_ && arena_.accepts(pos_, bytes);
}

std::string GrammarMatcher::forced_bytes(size_t max_bytes) {
  // A position's frames are the scanning states it may be in; the bytes that may follow are the
  // union of their byte edges. One byte, and no end of the text here: it is forced; advance by it
  // (on copies; pos_ is unchanged) and look again.
  std::string out;
  if (terminated_) return out;
  const Automaton& a = grammar_->automaton;
  Position cur = pos_, next;
  while (out.size() < max_bytes && !cur.ended) {
    ByteSet bytes;
    for (const Frame& f : cur.frames) bytes |= a.scan_bytes(f.state);
    if (bytes.count() != 1) break;
    size_t b = 0;
    while (!bytes.test(b)) ++b;
    if (!arena_.advance(cur, static_cast<uint8_t>(b), next)) break;
    out.push_back(static_cast<char>(b));
    std::swap(cur, next);
  }
  return out;
}

bool GrammarMatcher::accept_token(int32_t id) {
  const Vocabulary& v = vocab();
  if (terminated_ || id < 0 || id >= v.size()) return false;
  const auto& eos = v.eos_ids();
  if (std::binary_search(eos.begin(), eos.end(), id)) {
    if (!pos_.ended) return false;
    terminated_ = true;
    return true;
  }
  const std::string_view bytes = v.bytes(id);
  return !bytes.empty() && accept_bytes(bytes);
}

void GrammarMatcher::add_state(const Frame& f, std::span<uint32_t> mask) {
  const StateTokens& st = grammar_->states[static_cast<size_t>(f.state)];
  const Vocabulary& v = vocab();
  const auto words = static_cast<size_t>(v.mask_words());
  switch (st.kind) {
    case StateTokens::Kind::kAcceptedList:
      for (int32_t id : *st.ids) set_bit(mask, id);
      break;
    case StateTokens::Kind::kBitmask:
      for (size_t w = 0; w < words; ++w) mask[w] |= (*st.bits)[w];
      break;
    case StateTokens::Kind::kRejectedList: {
      // Everything but the rejected and the uncertain, then OR-ed in.
      temp_.assign(words, ~0u);
      if (v.size() % 32 != 0) temp_[words - 1] = (1u << (v.size() % 32)) - 1;
      for (int32_t id : *st.ids) clear_bit(temp_, id);
      for (int32_t id : st.uncertain) clear_bit(temp_, id);
      for (size_t w = 0; w < words; ++w) mask[w] |= temp_[w];
      break;
    }
  }
  if (st.uncertain.empty() || f.parent < 0) return;  // below the root nothing follows
  Position below;
  arena_.close(arena_.node(f.parent), below);
  normalize(below);
  std::vector<char> ok(st.suffixes.size());
  for (size_t k = 0; k < st.suffixes.size(); ++k) ok[k] = arena_.accepts(below, st.suffixes[k]);
  for (size_t i = 0; i < st.uncertain.size(); ++i) {
    for (int32_t j = st.suffix_begin[i]; j < st.suffix_begin[i + 1]; ++j) {
      if (ok[static_cast<size_t>(st.suffix_ids[static_cast<size_t>(j)])]) {
        set_bit(mask, st.uncertain[i]);
        break;
      }
    }
  }
}

void GrammarMatcher::compute_mask(std::span<uint32_t> mask) {
  std::fill(mask.begin(), mask.end(), 0u);
  if (!terminated_) {
    for (const Frame& f : pos_.frames) add_state(f, mask);
  }
  if (can_end()) {
    for (int32_t id : vocab().eos_ids()) set_bit(mask, id);
  }
}

void GrammarMatcher::fill_mask(std::span<uint32_t> mask) {
  const auto words = static_cast<size_t>(vocab().mask_words());
  PAGODA_CHECK(mask.size() == words, "mask of {} words for a vocabulary of {} words", mask.size(),
               words);
  ++clock_;
  if (!terminated_ && cache_masks_) {
    for (CachedMask& c : cache_) {
      if (c.used != 0 && c.position == pos_) {
        std::memcpy(mask.data(), c.mask.data(), words * sizeof(uint32_t));
        c.used = clock_;
        return;
      }
    }
  }
  compute_mask(mask);
  if (terminated_ || !cache_masks_) return;
  CachedMask& victim =
      *std::min_element(cache_.begin(), cache_.end(),
                        [](const CachedMask& a, const CachedMask& b) { return a.used < b.used; });
  victim.position = pos_;
  victim.mask.assign(mask.begin(), mask.end());
  victim.used = clock_;
}

}  // namespace pagoda::structured
