#pragma once
// Measured step costs for adaptive speculation length: what a decode step of a given batch size
// costs with k drafts per request, relative to the same step without drafts.
//
// How it works. The engine times every decode-shaped step (each scheduled request past its
// prompt, computing its last token and its drafts) from its launch to its result: that span
// holds the draft model's passes (k of them, in the executor) and the target's verification of
// 1 + k rows per request. Steps are keyed by (batch bucket b, k): b the power of two at or above
// the number of requests, k the longest draft run of the step. Each key keeps an exponentially
// weighted mean of its seconds; a key's first kSkipped samples are dropped (a draft model's first
// pass of a shape captures its CUDA graph), and so is a sample above kOutlier times the mean (a
// step delayed by something else: a graph capture, the host). The relative cost of k at bucket b is
// t(b, k) / t(b, 0); a key not measured yet is interpolated along k from the measured ones (linear
// between two, or the slope from t(b, 0) to the nearest measured k beyond it), and without t(b, 0)
// the prior 1 + c k (SpeculativeConfig::draft_row_cost) stands in. choose() takes, for the batch,
// the k with the most expected tokens per relative cost, summing each request's 1 + a + ... + a^k
// (its acceptance estimate a, its k capped by its room). The prior is optimistic on purpose
// (c = 0.1 where a large batch's verification rows cost nearly a whole step each): a length
// the prior favours is tried, measured and dropped if it does not pay. Every kExploreInterval
// decode steps of a bucket, the batch tries the length next to its best (best + 1, else best - 1)
// so the neighbours' figures stay current.
// Worked example, batch bucket 1, K = 4, measured t(1, 0) = 4.2 ms, t(1, 4) = 6.5 ms, nothing
// else: t(1, 2) is interpolated to 4.2 + 2 (6.5 - 4.2) / 4 = 5.35 ms, relative 1.27; one request
// at a = 0.8 expects 1 + 0.8 + 0.64 = 2.44 tokens for k = 2 (1.92 per cost) and 3.36 for k = 4
// (2.17 per cost): k = 4. At a = 0 every k expects 1 token: k = 0.
#include <cstdint>
#include <span>
#include <string>
#include <utility>
#include <vector>

namespace pagoda {

class SpeculationCosts {
 public:
  static constexpr double kWeight = 0.2;  // of each new measurement in a key's mean
  static constexpr int kExploreInterval = 64;
  static constexpr int kSkipped = 2;
  static constexpr double kOutlier = 3.0;
  static constexpr int kBuckets = 12;  // batch buckets 1, 2, 4, ..., 2048 (larger ones: the last)

  /// max_k: the configured number of drafts; prior_row_cost: draft_row_cost.
  SpeculationCosts(int max_k, double prior_row_cost);

  /// A decode-shaped step of `batch` requests whose longest draft run was k took `seconds`.
  void observe(int batch, int k, double seconds);
  /// t(b, k) / t(b, 0) for `batch`'s bucket (measured, interpolated, or the prior), k in 0..K.
  [[nodiscard]] double relative_cost(int batch, int k) const;
  /// The batch's speculation length: requests as (acceptance estimate, room for drafts). Counts
  /// the bucket's decode steps towards its next exploration.
  [[nodiscard]] int choose(int batch, std::span<const std::pair<double, int>> requests);
  /// Whether (batch's bucket, k) has a measurement.
  [[nodiscard]] bool measured(int batch, int k) const;
  /// The measured keys, one line per bucket: "batch <=B: k=0 4.12 ms (n 510), k=4 6.50 ms ...".
  [[nodiscard]] std::string describe() const;

 private:
  struct Key {
    double seconds = 0;
    int64_t samples = 0;  // in the mean
    int skipped = 0;
  };
  [[nodiscard]] static int bucket(int batch);
  [[nodiscard]] double value(int b, int k, std::span<const std::pair<double, int>> requests) const;

  int max_k_;
  double prior_row_cost_;
  std::vector<std::vector<Key>> keys_;  // [kBuckets][max_k + 1]
  std::vector<int> steps_;  // [kBuckets]: decode steps chosen since the last exploration
};

}  // namespace pagoda
