#include "engine/beam_search.h"

#include <algorithm>
#include <cmath>

#include "core/status.h"

namespace pagoda {

namespace {

// transformers keeps the top max(2, 1 + n_eos) * W continuations: enough for W that go on even
// when every stop token ranks among them.
int num_kept(const BeamSearchOptions& o) {
  return std::max(2, 1 + o.num_stop_tokens) * o.beam_width;
}

bool better(const BeamCandidate& a, const BeamCandidate& b) {
  if (a.sum_logprob != b.sum_logprob) return a.sum_logprob > b.sum_logprob;
  if (a.beam != b.beam) return a.beam < b.beam;
  return a.token < b.token;
}

}  // namespace

BeamSearch::BeamSearch(const BeamSearchOptions& options) : options_(options) {
  PAGODA_CHECK(
      options_.beam_width >= 1 && options_.max_tokens >= 1 && options_.num_stop_tokens >= 0,
      "beam search: width {}, max_tokens {}, {} stop tokens", options_.beam_width,
      options_.max_tokens, options_.num_stop_tokens);
  live_.emplace_back();
}

float BeamSearch::length_score(float sum_logprob, int length) const {
  // As torch computes a float32 tensor over a Python float: the divisor rounded to float32.
  return sum_logprob /
         static_cast<float>(std::pow(static_cast<double>(length), options_.length_penalty));
}

std::vector<BeamCandidate> BeamSearch::candidates(
    std::span<const std::span<const float>> rows) const {
  PAGODA_CHECK(rows.size() == live_.size(), "beam search: {} rows for {} live beams", rows.size(),
               live_.size());
  const size_t k = static_cast<size_t>(num_kept(options_));
  // The K best of all beams are among the K best of each: rank each row's tokens alone first.
  std::vector<BeamCandidate> all;
  std::vector<int32_t> ids;
  for (size_t b = 0; b < rows.size(); ++b) {
    const std::span<const float> row = rows[b];
    ids.clear();
    for (int32_t t = 0; t < static_cast<int32_t>(row.size()); ++t) {
      const float lp = row[static_cast<size_t>(t)];
      if (std::isfinite(lp)) ids.push_back(t);
    }
    const size_t take = std::min(k, ids.size());
    auto by_logprob = [&](int32_t x, int32_t y) {
      const float a = row[static_cast<size_t>(x)], c = row[static_cast<size_t>(y)];
      return a != c ? a > c : x < y;
    };
    std::partial_sort(ids.begin(), ids.begin() + static_cast<std::ptrdiff_t>(take), ids.end(),
                      by_logprob);
    for (size_t j = 0; j < take; ++j) {
      const int32_t t = ids[j];
      all.push_back({static_cast<int>(b), t, live_[b].sum_logprob + row[static_cast<size_t>(t)]});
    }
  }
  const size_t take = std::min(k, all.size());
  std::partial_sort(all.begin(), all.begin() + static_cast<std::ptrdiff_t>(take), all.end(),
                    better);
  all.resize(take);
  return all;
}

std::vector<BeamCandidate> BeamSearch::advance(std::span<const BeamCandidate> candidates,
                                               std::span<const std::optional<BeamEnd>> ends) {
  PAGODA_CHECK(!done_, "beam search: a step after the search ended");
  PAGODA_CHECK(ends.size() == candidates.size(), "beam search: {} ends for {} candidates",
               ends.size(), candidates.size());
  const auto width = static_cast<size_t>(options_.beam_width);
  // Hypotheses may be added unless the set is full under early_stopping true, or the previous
  // step found that no live beam can improve on it (both as they were before this step).
  const bool full = finished_.size() == width;
  const bool may_add =
      improvement_possible_ && !(full && options_.early_stopping == EarlyStopping::kTrue);
  const int length = num_generated_ + 1;  // of every continuation, its end token counted

  std::vector<BeamCandidate> next;
  std::vector<Beam> next_live;
  bool any_goes_on = false;
  for (size_t j = 0; j < candidates.size(); ++j) {
    const BeamCandidate& c = candidates[j];
    PAGODA_CHECK(c.beam >= 0 && static_cast<size_t>(c.beam) < live_.size(),
                 "beam search: candidate of beam {} of {}", c.beam, live_.size());
    // At max_tokens every continuation ends; a stop token or string there says why first.
    std::optional<BeamEnd> end = ends[j];
    if (!end && length >= options_.max_tokens) end = BeamEnd{FinishReason::kLength, ""};
    if (end) {
      // Only the first W ranks may finish: the rest exist so that W beams can go on.
      if (j < width && may_add) {
        BeamHypothesis h;
        h.tokens = live_[static_cast<size_t>(c.beam)].tokens;
        h.tokens.push_back(c.token);
        h.sum_logprob = c.sum_logprob;
        h.score = length_score(c.sum_logprob, length);
        h.end = std::move(*end);
        finished_.push_back(std::move(h));
      }
      continue;
    }
    any_goes_on = true;
    if (next.size() < width) {
      next.push_back(c);
      Beam beam{live_[static_cast<size_t>(c.beam)].tokens, c.sum_logprob};
      beam.tokens.push_back(c.token);
      next_live.push_back(std::move(beam));
    }
  }
  // The W best hypotheses, earlier ones first among equal scores.
  std::stable_sort(
      finished_.begin(), finished_.end(),
      [](const BeamHypothesis& a, const BeamHypothesis& b) { return a.score > b.score; });
  if (finished_.size() > width) finished_.resize(width);
  num_generated_ = length;
  live_ = std::move(next_live);

  // Can the best live beam still beat the worst of W finished hypotheses? Its score is taken at
  // the current length, or at max_tokens for "never" with a positive length penalty (the
  // longest it could grow, which is then its best).
  if (improvement_possible_ && finished_.size() == width) {
    const int hypothetical =
        options_.early_stopping == EarlyStopping::kNever && options_.length_penalty > 0
            ? options_.max_tokens
            : num_generated_;
    improvement_possible_ = !next.empty() && length_score(next.front().sum_logprob, hypothetical) >
                                                 finished_.back().score;
  }
  const bool stop_when_full =
      options_.early_stopping == EarlyStopping::kTrue && finished_.size() == width;
  done_ = !any_goes_on || !improvement_possible_ || stop_when_full;
  if (done_) {
    live_.clear();
    next.clear();
  }
  return next;
}

}  // namespace pagoda
