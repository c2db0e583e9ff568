#include "engine/static_batch_generator.h"

#include <algorithm>
#include <random>

#include "core/status.h"

namespace pagoda {

StaticBatchGenerator::StaticBatchGenerator(Model& model, int block_size)
    : model_(model), block_size_(block_size) {
  PAGODA_CHECK(block_size > 0);
}

std::vector<GenerationResult> StaticBatchGenerator::generate(
    const std::vector<GenerationRequest>& requests, const TokenCallback& on_token) {
  const ModelConfig& config = model_.config();
  const size_t num = requests.size();
  std::vector<GenerationResult> results(num);
  if (num == 0) return results;

  // Each sequence owns blocks [first_block[s], first_block[s] + blocks[s]).
  std::vector<int32_t> first_block(num);
  int32_t max_blocks = 0;
  int64_t total_blocks = 0;
  for (size_t s = 0; s < num; ++s) {
    const auto& r = requests[s];
    if (r.prompt_ids.empty()) throw InvalidArgument("prompt must contain at least one token");
    r.params.validate(config.vocab_size);
    for (int32_t id : r.prompt_ids) {
      if (id < 0 || id >= config.vocab_size) {
        throw InvalidArgument(fmt::format("prompt token id {} is outside the vocabulary [0, {})",
                                          id, config.vocab_size));
      }
    }
    const int64_t need = static_cast<int64_t>(r.prompt_ids.size()) + r.params.max_tokens;
    if (need > config.max_position_embeddings) {
      throw InvalidArgument(
          fmt::format("prompt ({} tokens) + max_tokens ({}) exceeds the model length {}",
                      r.prompt_ids.size(), r.params.max_tokens, config.max_position_embeddings));
    }
    const auto blocks = static_cast<int32_t>((need + block_size_ - 1) / block_size_);
    first_block[s] = static_cast<int32_t>(total_blocks);
    total_blocks += blocks;
    max_blocks = std::max(max_blocks, blocks);
  }
  KVCacheStorage kv(config, total_blocks, block_size_);
  std::vector<int32_t> block_tables(num * static_cast<size_t>(max_blocks), 0);
  for (size_t s = 0; s < num; ++s) {
    for (int32_t j = 0; j < max_blocks; ++j)
      block_tables[s * static_cast<size_t>(max_blocks) + static_cast<size_t>(j)] =
          first_block[s] + j;
  }

  std::vector<RequestSampler> samplers;
  std::random_device entropy;
  for (const auto& r : requests)
    samplers.emplace_back(r.params, config.eos_token_ids, (uint64_t{entropy()} << 32) | entropy());

  std::vector<bool> done(num, false);
  std::vector<int32_t> context_len(num, 0);  // tokens already in the cache
  std::vector<float> logits;
  for (;;) {
    // Build the flat batch: the whole prompt on the first step, then one token per live sequence.
    std::vector<int32_t> ids, positions, query_start{0}, seq_lens, tables, logits_rows;
    std::vector<int64_t> slots;
    std::vector<size_t> live;
    for (size_t s = 0; s < num; ++s) {
      if (done[s]) continue;
      const auto& prompt = requests[s].prompt_ids;
      const auto& out = results[s].token_ids;
      const int32_t total = static_cast<int32_t>(prompt.size() + out.size());
      for (int32_t p = context_len[s]; p < total; ++p) {
        ids.push_back(p < static_cast<int32_t>(prompt.size())
                          ? prompt[static_cast<size_t>(p)]
                          : out[static_cast<size_t>(p) - prompt.size()]);
        positions.push_back(p);
        slots.push_back(static_cast<int64_t>(first_block[s]) * block_size_ + p);
      }
      context_len[s] = total;
      query_start.push_back(static_cast<int32_t>(ids.size()));
      seq_lens.push_back(total);
      tables.insert(
          tables.end(),
          block_tables.begin() + static_cast<std::ptrdiff_t>(s * static_cast<size_t>(max_blocks)),
          block_tables.begin() +
              static_cast<std::ptrdiff_t>((s + 1) * static_cast<size_t>(max_blocks)));
      logits_rows.push_back(static_cast<int32_t>(ids.size()) - 1);
      live.push_back(s);
    }
    if (live.empty()) break;
    ForwardBatch batch{ids,    positions,  query_start, seq_lens,
                       tables, max_blocks, slots,       logits_rows};
    logits.resize(logits_rows.size() * static_cast<size_t>(config.vocab_size));
    model_.forward(batch, kv, logits.data());

    for (size_t i = 0; i < live.size(); ++i) {
      const size_t s = live[i];
      auto& result = results[s];
      const auto& params = requests[s].params;
      std::span<float> row(logits.data() + i * static_cast<size_t>(config.vocab_size),
                           static_cast<size_t>(config.vocab_size));
      SampledToken tok = samplers[s].sample(row, requests[s].prompt_ids, result.token_ids);
      result.token_ids.push_back(tok.token);
      if (on_token) on_token(s, tok);
      result.sampled.push_back(std::move(tok));
      const int32_t t = result.token_ids.back();
      const bool min_reached = static_cast<int>(result.token_ids.size()) >= params.min_tokens;
      const bool is_eos = !params.ignore_eos &&
                          std::find(config.eos_token_ids.begin(), config.eos_token_ids.end(), t) !=
                              config.eos_token_ids.end();
      const bool is_stop = std::find(params.stop_token_ids.begin(), params.stop_token_ids.end(),
                                     t) != params.stop_token_ids.end();
      if (min_reached && (is_eos || is_stop)) {
        result.finish_reason = "stop";
        done[s] = true;
      } else if (static_cast<int>(result.token_ids.size()) >= params.max_tokens) {
        result.finish_reason = "length";
        done[s] = true;
      }
    }
  }
  return results;
}

}  // namespace pagoda
