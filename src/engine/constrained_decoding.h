#pragma once
// Structured outputs in the engine: a request's constraint compiled once at submit() (cached by
// content), and per completion the grammar matcher with the bitmask of its next token. With a
// reasoning model the grammar applies from the token after the end of the reasoning.
#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "engine/structured_constraint.h"
#include "sampling/sampling_params.h"
#include "structured/constraint.h"
#include "structured/grammar_compiler.h"
#include "structured/matcher.h"
#include "tokenizer/tokenizer.h"

namespace pagoda {

/// What submit() resolves for a constrained request.
struct RequestConstraint {
  std::shared_ptr<const structured::CompiledGrammar> grammar;
  std::string reasoning_end;             // the text that ends the reasoning; empty: none
  const Tokenizer* tokenizer = nullptr;  // outlives the request (the engine's)
  bool active_from_start = true;         // no reasoning, or the prompt already closed it
};

/// Compiles so for this prompt. Throws InvalidArgument "structured_outputs: ..." naming the
/// problem (and its position in the schema, grammar or regex).
[[nodiscard]] RequestConstraint resolve_constraint(const StructuredOutputsParams& so,
                                                   structured::GrammarCompiler& compiler,
                                                   const Tokenizer& tokenizer,
                                                   std::span<const int32_t> prompt);

/// One completion's constraint. Copies are independent (n > 1 forks copy the parent's before
/// its first token).
class ConstrainedDecoding {
 public:
  explicit ConstrainedDecoding(const RequestConstraint& c);

  /// Whether the next token is constrained (reasoning over, text not terminated).
  [[nodiscard]] bool active() const { return active_ && !matcher_.terminated(); }
  /// Computes the bitmask of the next token [ceil(vocab / 32)] and returns it; it stays valid
  /// (mask()) until the next compute_mask().
  std::span<const uint32_t> compute_mask();
  [[nodiscard]] std::span<const uint32_t> mask() const { return mask_; }

  enum class Result : uint8_t {
    kContinue,   // more may follow
    kCompleted,  // the text is complete and nothing but its end may follow: finish with stop
    kRejected,   // the grammar does not allow the token (its mask was empty or not applied)
  };
  /// Feeds a sampled token: before the end of the reasoning it only watches the text for that
  /// end (the grammar applies from the next token on); after, it advances the grammar.
  [[nodiscard]] Result accept(int32_t token);
  /// The text the grammar forces next (at most max_bytes; empty while inactive or at a choice).
  [[nodiscard]] std::string forced_text(size_t max_bytes) {
    return active() ? matcher_.forced_bytes(max_bytes) : std::string();
  }

 private:
  structured::GrammarMatcher matcher_;
  std::string reasoning_end_;
  const Tokenizer* tokenizer_ = nullptr;
  std::string recent_;  // the end of the text so far while inactive
  bool active_ = true;
  std::vector<uint32_t> mask_;
};

/// A completion's structured-output state in the engine: no constraint, or its decoding with the
/// outcome of the tokens fed so far.
///
/// Jump-forward drafts: where the grammar forces the next bytes (a JSON key after a comma, the
/// closing of an object), their tokenization is proposed as speculative drafts of a greedy
/// request. The step computes a row per draft; row j draws with the mask of the grammar after
/// drafts 0..j-1 (draft_masks), and a draft is kept only if it is the token that row draws. The
/// output is therefore exactly that of token-by-token decoding; forced text costs one step
/// instead of one per token. Example: after `{"id": 12` under {"id": int, "ok": bool} the next
/// byte may be a digit or `,` (no drafts); after `,` the grammar forces ` "ok": `, proposed as
/// [` "`, `ok`, `":`, ` `] (whatever the tokenizer makes of it); rows 0..4 draw with the masks at
/// `,` + "", ` "`, ` "ok`, ` "ok":`, ` "ok": `.
struct CompletionConstraint {
  std::optional<ConstrainedDecoding> decoding;
  bool completed = false;  // the grammar completed the text: finish with stop
  std::string error;       // the grammar refused a token: fail the completion with this
  int num_fed = 0;         // tokens fed (accept): the completion's output tokens so far
  int completed_at = 0;    // completed: the output token (1-based) that completed the text
  int error_at = 0;        // error: the output token (1-based) the grammar refused
  // This step's masks of the rows after its drafts: draft_masks[j] is the row after draft j's
  // ([ceil(vocab / 32)] each); the first row's is decoding->mask().
  std::vector<std::vector<uint32_t>> draft_masks;

  /// Whether the next token is constrained.
  [[nodiscard]] bool active() const { return decoding && decoding->active(); }
  std::span<const uint32_t> compute_mask() { return decoding->compute_mask(); }
  /// Computes the mask of the first row (returned) and of the rows after each of `drafts`.
  std::span<const uint32_t> compute_masks(std::span<const int32_t> drafts);
  /// The mask of the token drawn at row `row` of this step (0: the first; empty: unconstrained).
  [[nodiscard]] std::span<const uint32_t> allowed(size_t row = 0) const;
  /// Feeds the drawn token to the grammar (sets completed or error).
  void accept(int32_t token);
  /// Jump-forward drafts: the tokens of the text the grammar forces next, at most max_drafts,
  /// each one the grammar accepts after the ones before it.
  [[nodiscard]] std::vector<int32_t> forced_drafts(const Tokenizer& tokenizer, int max_drafts);
};

}  // namespace pagoda
