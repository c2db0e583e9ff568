#include "engine/constrained_decoding.h"

#include <algorithm>

#include "core/status.h"

namespace pagoda {

RequestConstraint resolve_constraint(const StructuredOutputsParams& so,
                                     structured::GrammarCompiler& compiler,
                                     const Tokenizer& tokenizer, std::span<const int32_t> prompt) {
  RequestConstraint out;
  try {
    out.grammar = compiler.compile(constraint_of(so));
  } catch (const InvalidArgument& e) {
    throw InvalidArgument(fmt::format("structured_outputs: {}", e.what()));
  }
  if (!so.reasoning_end.empty()) {
    out.reasoning_end = so.reasoning_end;
    out.tokenizer = &tokenizer;
    // vLLM's rule: the prompt has ended the reasoning when its last end marker comes after its
    // last start marker (Qwen3 with enable_thinking=false closes an empty block in the prompt;
    // DeepSeek-R1's template opens one). The markers are looked for in the text, so that they
    // match however they were tokenized.
    std::string text;
    for (int32_t id : prompt) text += tokenizer.token_bytes(id);
    const size_t end_at = text.rfind(so.reasoning_end);
    const size_t start_at =
        so.reasoning_start.empty() ? std::string::npos : text.rfind(so.reasoning_start);
    out.active_from_start =
        end_at != std::string::npos && (start_at == std::string::npos || end_at > start_at);
  }
  return out;
}

ConstrainedDecoding::ConstrainedDecoding(const RequestConstraint& c)
    : matcher_(c.grammar),
      reasoning_end_(c.reasoning_end),
      tokenizer_(c.tokenizer),
      active_(c.active_from_start) {
  mask_.assign(static_cast<size_t>(matcher_.vocab().mask_words()), 0);
}

std::span<const uint32_t> ConstrainedDecoding::compute_mask() {
  matcher_.fill_mask(mask_);
  return mask_;
}

ConstrainedDecoding::Result ConstrainedDecoding::accept(int32_t token) {
  if (!active_) {
    recent_ += tokenizer_->token_bytes(token);
    if (recent_.find(reasoning_end_) != std::string::npos) {
      active_ = true;  // the next token is the answer's first
      recent_.clear();
    } else if (recent_.size() > reasoning_end_.size()) {
      recent_.erase(0, recent_.size() - reasoning_end_.size());  // a marker's possible start
    }
    return Result::kContinue;
  }
  if (!matcher_.accept_token(token)) return Result::kRejected;
  return matcher_.completed() ? Result::kCompleted : Result::kContinue;
}

std::span<const uint32_t> CompletionConstraint::compute_masks(std::span<const int32_t> drafts) {
  const std::span<const uint32_t> first = decoding->compute_mask();
  draft_masks.resize(drafts.size());
  if (drafts.empty()) return first;
  ConstrainedDecoding ahead = *decoding;  // as if the drafts were accepted
  for (size_t j = 0; j < drafts.size(); ++j) {
    if (ahead.accept(drafts[j]) != ConstrainedDecoding::Result::kContinue) {
      // forced_drafts() proposes only tokens that continue the text: never here.
      draft_masks.resize(j);
      break;
    }
    const std::span<const uint32_t> m = ahead.compute_mask();
    draft_masks[j].assign(m.begin(), m.end());
  }
  return first;
}

std::span<const uint32_t> CompletionConstraint::allowed(size_t row) const {
  if (!active()) return {};
  if (row == 0) return decoding->mask();
  return row - 1 < draft_masks.size() ? std::span<const uint32_t>(draft_masks[row - 1])
                                      : std::span<const uint32_t>();
}

std::vector<int32_t> CompletionConstraint::forced_drafts(const Tokenizer& tokenizer,
                                                         int max_drafts) {
  std::vector<int32_t> drafts;
  if (!active() || max_drafts <= 0) return drafts;
  // Four bytes a token on average: enough text for max_drafts tokens without walking far.
  const std::string text = decoding->forced_text(static_cast<size_t>(max_drafts) * 4);
  if (text.empty()) return drafts;
  ConstrainedDecoding ahead = *decoding;
  for (const int32_t t : tokenizer.encode(text, /*add_special_tokens=*/false)) {
    if (static_cast<int>(drafts.size()) == max_drafts) break;
    // A tokenizer may add a prefix space or merge differently: keep what the grammar accepts.
    if (ahead.accept(t) != ConstrainedDecoding::Result::kContinue) break;
    drafts.push_back(t);
  }
  return drafts;
}

void CompletionConstraint::accept(int32_t token) {
  if (!decoding || completed || !error.empty()) return;
  ++num_fed;
  switch (decoding->accept(token)) {
    case ConstrainedDecoding::Result::kContinue:
      break;
    case ConstrainedDecoding::Result::kCompleted:
      completed = true;
      completed_at = num_fed;
      break;
    case ConstrainedDecoding::Result::kRejected:
      error_at = num_fed;
      error = fmt::format(
          "structured outputs: token {} does not follow the grammar (no token the grammar allows "
          "could be drawn: allowed_token_ids, bad_words or min_tokens exclude them all)",
          token);
      break;
  }
}

}  // namespace pagoda
