#pragma once
// The multi-token step cases shared by the CPU and GPU runner tests: two sequences are prefilled,
// then sequence A computes k + 1 more tokens either in one step (k + 1 logits rows, as when
// verifying k drafts) or in k + 1 steps of one token; B computes one token next to A's first.
// The logits rows and the hidden states of A's tokens (embeddings, first and last layer) of the
// two runs are returned for comparison.
#include <string>
#include <vector>

#include "core/thread_pool.h"
#include "model/model.h"
#include "runtime/model_runner.h"

namespace pagoda::runner_test {

struct Case {
  const char* name;
  const char* dir;  // relative to the repository
  std::vector<int32_t> prompt_a, prompt_b;
  std::vector<int32_t> extra;  // A's k + 1 tokens after its prompt
  int block_size;
};

inline const std::vector<Case> kCases = {
    {"stories260K, k = 3",
     "models/stories260K",
     {1, 403, 407, 260, 2},
     {1, 9, 8, 7},
     {11, 12, 13, 14},
     4},
    {"qwen3 q/k norms, k = 5",
     "tests/data/tiny/qwen3-qknorm-headdim",
     {1, 40, 41},
     {1, 5},
     {100, 200, 300, 400, 500, 7},
     16},
    {"mistral, k = 1", "tests/data/tiny/mistral-mqa", {1, 2, 3, 4, 5, 6, 7}, {1}, {9, 10}, 5},
};

inline std::string model_dir(const Case& c) { return std::string(PAGODA_SOURCE_DIR) + "/" + c.dir; }

struct Outputs {
  std::vector<float> logits;  // A's k + 1 rows, then B's row
  std::vector<float> hidden;  // [3 layers][A's k + 1 tokens][hidden]
};

/// Rows are returned as logits (RowDraw's default temperature < 0).
inline Outputs run(Model& model, const Case& c, bool split) {
  const int bs = c.block_size;
  model.init_kv_cache(65, bs);
  ModelRunner runner(model, bs);
  const int last_layer = model.config().num_layers - 1;
  const int64_t h = model.config().hidden_size;
  auto table = [&](int first) {
    std::vector<int32_t> t(32);
    for (int i = 0; i < 32; ++i) t[static_cast<size_t>(i)] = first + i;
    return t;
  };
  auto seq = [&](uint64_t id, int computed, std::vector<int32_t> tokens, int rows, bool fresh,
                 int first_block) {
    PlannedSequence s;
    s.id = id;
    s.num_computed = computed;
    s.tokens = std::move(tokens);
    if (fresh)
      s.new_blocks = table(first_block);
    else
      s.block_table_start = 32;
    s.rows.resize(static_cast<size_t>(rows));
    return s;
  };
  StepPlan prefill;
  prefill.seqs.push_back(seq(1, 0, c.prompt_a, 1, true, 1));
  prefill.seqs.push_back(seq(2, 0, c.prompt_b, 1, true, 33));
  (void)runner.execute(std::move(prefill));

  Outputs out;
  const auto k1 = static_cast<int>(c.extra.size());
  std::vector<std::vector<float>> a_rows;
  std::vector<float> b_row;
  std::vector<std::vector<std::vector<float>>> hidden(3);  // [layer][token] -> [h]
  const std::vector<int32_t> layers = {-1, 0, last_layer};
  auto collect = [&](StepResult& r, int a_tokens, int64_t T, bool with_b) {
    for (int j = 0; j < a_tokens; ++j) {
      const auto row = r.row(r.seqs[0].first_row + j);
      a_rows.emplace_back(row.begin(), row.end());
      for (size_t l = 0; l < layers.size(); ++l) {
        const float* base = r.hidden_states.data() + (static_cast<int64_t>(l) * T + j) * h;
        hidden[l].emplace_back(base, base + h);
      }
    }
    if (with_b) {
      const auto row = r.row(r.seqs[1].first_row);
      b_row.assign(row.begin(), row.end());
    }
  };
  const auto a0 = static_cast<int>(c.prompt_a.size());
  const auto b0 = static_cast<int>(c.prompt_b.size());
  if (!split) {
    StepPlan step;
    step.hidden_layers = layers;
    step.seqs.push_back(seq(1, a0, c.extra, k1, false, 1));
    step.seqs.push_back(seq(2, b0, {c.extra[0]}, 1, false, 33));
    StepResult r = runner.execute(std::move(step));
    collect(r, k1, k1 + 1, true);
  } else {
    for (int j = 0; j < k1; ++j) {
      StepPlan step;
      step.hidden_layers = layers;
      step.seqs.push_back(seq(1, a0 + j, {c.extra[static_cast<size_t>(j)]}, 1, false, 1));
      if (j == 0) step.seqs.push_back(seq(2, b0, {c.extra[0]}, 1, false, 33));
      StepResult r = runner.execute(std::move(step));
      collect(r, 1, j == 0 ? 2 : 1, j == 0);
    }
  }
  for (const auto& row : a_rows) out.logits.insert(out.logits.end(), row.begin(), row.end());
  out.logits.insert(out.logits.end(), b_row.begin(), b_row.end());
  for (const auto& layer : hidden)
    for (const auto& v : layer) out.hidden.insert(out.hidden.end(), v.begin(), v.end());
  return out;
}

}  // namespace pagoda::runner_test
