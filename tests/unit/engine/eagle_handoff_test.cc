// The EAGLE proposer's device hand-off (runtime/eagle_proposer.h, on_device()) checked on the CPU:
// wrappers make the CPU target and head look like models of one device whose hidden states stay
// where they were computed (Model::device_hidden_states: the CPU model's fp32 buffer, valid until
// its next forward, as a GPU model's), and the head gathers its input rows from there
// (ForwardBatch::input_hidden_device) as the CUDA head does. A greedy speculative loop driven
// through ModelRunner then gives:
//  - the same drafts, step by step, and the same tokens as the host hand-off (the CPU path), for
//    EAGLE-1 and EAGLE-3, with the decode-shaped catch-up (a head that reports decode graphs),
//    drafts kept by a fixed schedule so that catch-ups of 1..k + 1 tokens occur;
//  - the tokens of plain greedy decoding when a sequence sits out steps (its pending rows on the
//    device are gone: it catches up from its KV), with drafts still proposed;
//  - with a head that chains its passes (Model::forward_chain, the default implementation over a
//    head that draws greedy rows itself as the GPU head does: ids fed from the previous pass's
//    draws, hidden states from its own output), the same drafts step by step as the pass-by-pass
//    device path and the host path, and plain greedy tokens.
#include <fmt/format.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <functional>
#include <limits>
#include <memory>

#include "eagle_test_util.h"
#include "runtime/device_model.h"
#include "runtime/model_runner.h"

namespace pagoda {
namespace {

using engine_test::kStories;

constexpr int kBlockSize = 16;
constexpr int kBlocks = 8;  // per sequence
constexpr int kDevice = 7;  // the wrappers' pretend device

/// Forwards every call to a CPU model; its hidden states "stay on the device" (the CPU buffer)
/// and only the first host_hidden_layers come back through hidden_states(). As a head, it gathers
/// ForwardBatch::input_hidden_rows from input_hidden_device (fp32) into input_hidden first.
class PretendDevice final : public Model {
 public:
  /// chains: as a head, it draws rows of temperature 0 itself (the argmax after logit_bias and
  /// the masked tokens, ties to the lower id, as the device sampler) and reports
  /// chains_on_device(), so that the proposer runs its passes as one forward_chain.
  PretendDevice(std::unique_ptr<Model> inner, bool graphs, bool chains = false)
      : inner_(std::move(inner)), graphs_(graphs), chains_(chains) {}

  const ModelConfig& config() const override { return inner_->config(); }
  const ModelDefinition& definition() const override { return inner_->definition(); }
  const kv::KVCacheSpec& kv_cache_spec() const override { return inner_->kv_cache_spec(); }
  void init_kv_cache(int64_t num_blocks, int block_size) override {
    inner_->init_kv_cache(num_blocks, block_size);
  }
  bool chains_on_device() const override { return chains_; }
  std::vector<int> decode_graph_sizes(int max_num_seqs) const override {
    return graphs_ ? std::vector<int>{1, 2} : inner_->decode_graph_sizes(max_num_seqs);
  }
  void copy_kv_blocks(std::span<const std::pair<int32_t, int32_t>> src_dst) override {
    inner_->copy_kv_blocks(src_dst);
  }
  void export_kv_block(int32_t block, std::span<std::byte> out) override {
    inner_->export_kv_block(block, out);
  }
  void import_kv_block(int32_t block, std::span<const std::byte> in) override {
    inner_->import_kv_block(block, in);
  }
  std::span<float> forward(const ForwardBatch& batch) override {
    return forward_sample(batch, {}, {}, {});
  }
  std::span<float> forward_sample(const ForwardBatch& batch, std::span<const DeviceDraw> draws,
                                  std::span<int32_t> tokens,
                                  std::span<DrawnLogprobs> logprobs) override {
    ForwardBatch b = batch;
    std::vector<float> gathered;
    if (batch.input_hidden_device != nullptr) {
      // The gather of gather_layer_rows, on the host, before the forward overwrites the source.
      const DeviceHidden& src = *batch.input_hidden_device;
      EXPECT_EQ(src.device, kDevice);
      EXPECT_EQ(src.dtype, DType::kF32);
      EXPECT_EQ(src.layers * src.hidden, batch.input_hidden_width);
      EXPECT_EQ(batch.input_hidden_rows.size(), static_cast<size_t>(batch.num_tokens()));
      const auto h = static_cast<size_t>(src.hidden);
      for (const int32_t r : batch.input_hidden_rows) {
        for (int l = 0; l < src.layers; ++l) {
          if (r < 0) {
            gathered.insert(gathered.end(), h, 0.0f);
            continue;
          }
          EXPECT_LT(r, src.layer_stride / src.hidden);
          const float* row = static_cast<const float*>(src.data) +
                             static_cast<size_t>(l) * static_cast<size_t>(src.layer_stride) +
                             static_cast<size_t>(r) * h;
          gathered.insert(gathered.end(), row, row + h);
        }
      }
      b.input_hidden = gathered;
      b.input_hidden_device = nullptr;
      b.input_hidden_rows = {};
    }
    b.host_hidden_layers = -1;
    ++forwards_;
    const std::span<float> logits = inner_->forward_sample(b, draws, tokens, logprobs);
    if (chains_) {
      const auto vocab = static_cast<size_t>(config().vocab_size);
      for (size_t r = 0; r < draws.size(); ++r) {
        if (draws[r].temperature != 0 || tokens[r] >= 0) continue;
        std::vector<float> row(logits.begin() + static_cast<std::ptrdiff_t>(r * vocab),
                               logits.begin() + static_cast<std::ptrdiff_t>((r + 1) * vocab));
        for (const auto& [t, bias] : draws[r].logit_bias) row[static_cast<size_t>(t)] += bias;
        for (const int32_t t : draws[r].masked)
          row[static_cast<size_t>(t)] = -std::numeric_limits<float>::infinity();
        tokens[r] = static_cast<int32_t>(std::max_element(row.begin(), row.end()) - row.begin());
        ++drawn_;
      }
    }
    layers_ = static_cast<int>(batch.hidden_layers.size());
    tokens_ = batch.num_tokens();
    host_layers_ = batch.host_hidden_layers < 0 ? layers_ : batch.host_hidden_layers;
    return logits;
  }
  std::span<float> hidden_states() override {
    const std::span<float> all = inner_->hidden_states();
    return all.first(static_cast<size_t>(host_layers_ * tokens_ * config().hidden_size));
  }
  void forward_chain(std::span<const ChainedPass> passes, std::span<int32_t> tokens) override {
    ++chains_run_;
    Model::forward_chain(passes, tokens);
  }
  std::optional<DeviceHidden> device_hidden_states() const override {
    DeviceHidden d;
    d.dtype = DType::kF32;
    d.device = kDevice;
    d.layers = layers_;
    d.hidden = config().hidden_size;
    d.layer_stride = tokens_ * d.hidden;
    if (layers_ > 0) d.data = inner_->hidden_states().data();
    return d;
  }

  /// Rows this head drew itself (chains), and forward_chain calls.
  [[nodiscard]] int64_t drawn() const { return drawn_; }
  [[nodiscard]] int64_t chains_run() const { return chains_run_; }
  [[nodiscard]] int64_t forwards() const { return forwards_; }

 private:
  std::unique_ptr<Model> inner_;
  bool graphs_, chains_;
  int64_t drawn_ = 0, chains_run_ = 0, forwards_ = 0;
  int layers_ = 0, host_layers_ = 0;
  int64_t tokens_ = 0;
};

struct Models {
  std::unique_ptr<Model> target, head;
};

Models load(int version, bool device, ThreadPool& pool, bool chains = false) {
  const std::string& dir = version == 1 ? eagle_test::eagle1_head() : eagle_test::eagle3_head();
  Models m{load_model_on_device(kStories, {}, "cpu", pool),
           load_eagle_head_on_device(dir, {version, kStories}, {}, "cpu", pool)};
  if (device) {
    m.target = std::make_unique<PretendDevice>(std::move(m.target), false);
    m.head = std::make_unique<PretendDevice>(std::move(m.head), true, chains);
  }
  m.target->init_kv_cache(64, kBlockSize);
  m.head->init_kv_cache(64, kBlockSize);
  return m;
}

RowDraw greedy() {
  RowDraw d;
  d.temperature = 0.0f;
  return d;
}

/// One sequence of the loop: its tokens so far and how many of them the KV holds.
struct Seq {
  uint64_t id;
  std::vector<int32_t> tokens;
  int32_t computed = 0;
  bool started = false;
};

/// What a run produced: every sequence's tokens and, per step, every sequence's drafts.
struct Outcome {
  std::vector<std::vector<int32_t>> tokens;
  std::vector<std::vector<int32_t>> drafts;
  int64_t accepted = 0;
};

/// Greedy speculative decoding of `prompts` with k drafts for `steps` steps; sequence i sits out
/// the steps where skip(i, step) (after its prompt). Verification on the host: draft j is kept
/// while it equals the target's argmax of row j; or, with `force`, sequence i keeps force(i,
/// step) drafts whatever they are (as the benchmark switch does: the stories heads are rarely
/// right, and the catch-ups after kept drafts are what the hand-off must get right), then the
/// target's token of the row after them. `ks`, when set, gives sequence i's drafts at a step (0..k;
/// 0: a plain one-token step) instead of k.
Outcome drive(Models& m, const std::vector<std::vector<int32_t>>& prompts, int k, int steps,
              const std::function<bool(size_t, int)>& skip,
              const std::function<int(size_t, int)>& force = {},
              const std::function<int(size_t, int)>& ks = {}) {
  ModelRunner runner(*m.target, kBlockSize, m.head.get());
  std::vector<Seq> seqs;
  for (size_t i = 0; i < prompts.size(); ++i) seqs.push_back({i + 1, prompts[i]});
  Outcome out;
  for (int step = 0; step < steps; ++step) {
    StepPlan plan;
    std::vector<size_t> in_plan;
    for (size_t i = 0; i < seqs.size(); ++i) {
      Seq& s = seqs[i];
      if (s.started && skip(i, step)) continue;
      PlannedSequence p;
      p.id = s.id;
      p.num_computed = s.computed;
      p.tokens.assign(s.tokens.begin() + s.computed, s.tokens.end());
      if (!s.started) {
        // kBlocks blocks per sequence from the start: blocks kBlocks i + 1 .. kBlocks (i + 1).
        p.fresh = true;
        for (int b = 1; b <= kBlocks; ++b)
          p.new_blocks.push_back(static_cast<int32_t>(kBlocks * i) + b);
        s.started = true;
        p.rows.push_back(greedy());
      } else {
        const int n = ks ? ks(i, step) : k;
        p.block_table_start = kBlocks;
        if (n == 0) {  // a plain decode step: no drafts asked for
          p.rows.push_back(greedy());
          plan.seqs.push_back(std::move(p));
          in_plan.push_back(i);
          continue;
        }
        p.num_spec = n;
        p.propose = true;
        p.draft_draw = greedy();
        p.tokens.insert(p.tokens.end(), static_cast<size_t>(n), 0);
        p.rows.assign(static_cast<size_t>(n) + 1, greedy());
      }
      plan.seqs.push_back(std::move(p));
      in_plan.push_back(i);
    }
    StepResult r = runner.execute(plan);
    std::vector<int32_t> drafts;
    for (size_t j = 0; j < in_plan.size(); ++j) {
      Seq& s = seqs[in_plan[j]];
      const SequenceResult& sr = r.seqs[j];
      const auto row_token = [&](size_t row) {
        const std::span<float> l = r.row(sr.first_row + static_cast<int64_t>(row));
        return static_cast<int32_t>(std::max_element(l.begin(), l.end()) - l.begin());
      };
      drafts.insert(drafts.end(), sr.drafts.begin(), sr.drafts.end());
      const auto computed_now = static_cast<int32_t>(s.tokens.size());
      size_t a = 0;
      if (force) {
        a = std::min(static_cast<size_t>(force(in_plan[j], step)), sr.drafts.size());
      } else {
        while (a < sr.drafts.size() && sr.drafts[a] == row_token(a)) ++a;
      }
      out.accepted += static_cast<int64_t>(a);
      s.tokens.insert(s.tokens.end(), sr.drafts.begin(),
                      sr.drafts.begin() + static_cast<std::ptrdiff_t>(a));
      s.tokens.push_back(row_token(a));
      s.computed = computed_now + static_cast<int32_t>(a);
      EXPECT_LE(s.tokens.size() + static_cast<size_t>(k), size_t{kBlocks * kBlockSize});
    }
    out.drafts.push_back(std::move(drafts));
  }
  for (const Seq& s : seqs) out.tokens.push_back(s.tokens);
  return out;
}

/// Plain greedy decoding of one prompt to `length` tokens.
std::vector<int32_t> plain(const std::vector<int32_t>& prompt, size_t length, ThreadPool& pool) {
  std::unique_ptr<Model> target = load_model_on_device(kStories, {}, "cpu", pool);
  target->init_kv_cache(kBlocks + 1, kBlockSize);
  ModelRunner runner(*target, kBlockSize);
  std::vector<int32_t> tokens = prompt;
  int32_t computed = 0;
  while (tokens.size() < length) {
    StepPlan plan;
    PlannedSequence p;
    p.id = 1;
    p.num_computed = computed;
    p.tokens.assign(tokens.begin() + computed, tokens.end());
    if (computed == 0)
      for (int b = 1; b <= kBlocks; ++b) p.new_blocks.push_back(b);
    p.block_table_start = computed == 0 ? 0 : kBlocks;
    p.rows.push_back(greedy());
    plan.seqs.push_back(std::move(p));
    StepResult r = runner.execute(plan);
    const std::span<float> l = r.row(0);
    computed = static_cast<int32_t>(tokens.size());
    tokens.push_back(static_cast<int32_t>(std::max_element(l.begin(), l.end()) - l.begin()));
  }
  return tokens;
}

const std::vector<std::vector<int32_t>> kPrompts{{1, 400, 36, 280, 7, 99, 12},
                                                 {1, 77, 250, 3, 3, 410}};

TEST(EagleHandoff, DeviceHandoffDraftsAsTheHost) {
  ThreadPool pool(2);
  for (const int version : {1, 3}) {
    SCOPED_TRACE(version);
    Models host = load(version, false, pool), device = load(version, true, pool);
    const auto never = [](size_t, int) { return false; };
    // Kept drafts: the same count for both sequences (decode-shaped catch-ups of 1..4 tokens),
    // except every fourth step (catch-ups of different lengths).
    const auto kept = [](size_t i, int step) {
      return (step % 4 == 3 ? step + static_cast<int>(i) : step) % 4;
    };
    const Outcome h = drive(host, kPrompts, 3, 14, never, kept);
    const Outcome d = drive(device, kPrompts, 3, 14, never, kept);
    ASSERT_EQ(h.drafts.size(), d.drafts.size());
    for (size_t step = 0; step < h.drafts.size(); ++step)
      EXPECT_EQ(h.drafts[step], d.drafts[step]) << "step " << step;
    EXPECT_EQ(h.tokens, d.tokens);
    EXPECT_GT(d.accepted, 14) << "too few kept drafts to exercise the catch-ups";
  }
}

TEST(EagleHandoff, SequenceSittingOutStepsKeepsPlainTokens) {
  // Sequence 2 sits out every third step: its pending rows are then from a step before the
  // target's last, gone on the device; it catches up from its KV and still drafts.
  ThreadPool pool(2);
  for (const int version : {1, 3}) {
    SCOPED_TRACE(version);
    Models device = load(version, true, pool);
    const Outcome d =
        drive(device, kPrompts, 3, 12, [](size_t i, int step) { return i == 1 && step % 3 == 2; });
    for (size_t i = 0; i < kPrompts.size(); ++i)
      EXPECT_EQ(d.tokens[i], plain(kPrompts[i], d.tokens[i].size(), pool)) << "sequence " << i;
    size_t drafts = 0;
    for (const std::vector<int32_t>& step : d.drafts) drafts += step.size();
    EXPECT_GT(drafts, 30u);
  }
}

TEST(EagleHandoff, ChainedPassesDraftAsPassByPass) {
  // The same loop with a head that chains its passes: the drafts of every step equal the
  // pass-by-pass device path's and the host path's, with equal and with different k per
  // sequence (sequences leaving the chain early), and the tokens follow.
  ThreadPool pool(2);
  for (const int version : {1, 3}) {
    SCOPED_TRACE(version);
    const auto never = [](size_t, int) { return false; };
    const auto kept = [](size_t i, int step) {
      return (step % 4 == 3 ? step + static_cast<int>(i) : step) % 4;
    };
    const auto mixed = [](size_t i, int step) { return 1 + (step + 2 * static_cast<int>(i)) % 3; };
    for (const bool mixed_k : {false, true}) {
      SCOPED_TRACE(mixed_k);
      const std::function<int(size_t, int)> ks =
          mixed_k ? mixed : std::function<int(size_t, int)>{};
      Models host = load(version, false, pool), device = load(version, true, pool);
      Models chained = load(version, true, pool, /*chains=*/true);
      const Outcome h = drive(host, kPrompts, 3, 14, never, kept, ks);
      const Outcome d = drive(device, kPrompts, 3, 14, never, kept, ks);
      const Outcome c = drive(chained, kPrompts, 3, 14, never, kept, ks);
      ASSERT_EQ(c.drafts.size(), d.drafts.size());
      for (size_t step = 0; step < c.drafts.size(); ++step) {
        EXPECT_EQ(d.drafts[step], c.drafts[step]) << "step " << step;
        EXPECT_EQ(h.drafts[step], c.drafts[step]) << "step " << step;
      }
      EXPECT_EQ(d.tokens, c.tokens);
      const auto& head = static_cast<const PretendDevice&>(*chained.head);
      EXPECT_EQ(head.chains_run(), 13) << "a chain per speculating step";
      EXPECT_GT(head.drawn(), 13 * 2);
    }
  }
}

TEST(EagleHandoff, ChainedPassesKeepPlainTokens) {
  // Greedy verification against the target's argmax with chained passes, a sequence sitting out
  // steps: the tokens of plain greedy decoding.
  ThreadPool pool(2);
  for (const int version : {1, 3}) {
    SCOPED_TRACE(version);
    Models chained = load(version, true, pool, /*chains=*/true);
    const Outcome c =
        drive(chained, kPrompts, 4, 12, [](size_t i, int step) { return i == 0 && step % 4 == 1; });
    for (size_t i = 0; i < kPrompts.size(); ++i)
      EXPECT_EQ(c.tokens[i], plain(kPrompts[i], c.tokens[i].size(), pool)) << "sequence " << i;
    EXPECT_GT(static_cast<const PretendDevice&>(*chained.head).chains_run(), 0);
  }
}

TEST(EagleHandoff, SequencesWithoutDraftsLag) {
  // Steps without drafts (the adaptive length at 0) run no head pass once the prompt is caught
  // up: here step 1 catches up the prompts (one pass without rows), steps 6 and 10 propose 3
  // drafts (a catch-up and two passes each), the other steps none; tokens stay plain greedy.
  ThreadPool pool(2);
  for (const int version : {1, 3}) {
    for (const bool chains : {false, true}) {
      SCOPED_TRACE(fmt::format("version {} chains {}", version, chains));
      Models device = load(version, true, pool, chains);
      const auto ks = [](size_t, int step) { return step >= 6 && step % 4 == 2 ? 3 : 0; };
      const Outcome d = drive(
          device, kPrompts, 3, 12, [](size_t, int) { return false; }, {}, ks);
      for (size_t i = 0; i < kPrompts.size(); ++i)
        EXPECT_EQ(d.tokens[i], plain(kPrompts[i], d.tokens[i].size(), pool)) << "sequence " << i;
      EXPECT_EQ(static_cast<const PretendDevice&>(*device.head).forwards(), 1 + 2 * 3);
      EXPECT_EQ(d.drafts[6].size(), 6u);
      EXPECT_EQ(d.drafts[10].size(), 6u);
    }
  }
}

}  // namespace
}  // namespace pagoda
