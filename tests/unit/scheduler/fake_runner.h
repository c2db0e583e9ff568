#pragma once
// A fake model runner for scheduler tests: it plays the engine's step (execute, sample, update)
// against a simulated paged KV cache, so that wrong block tables, missing copy-on-write copies,
// bad prefix hits or lost tokens all change the sampled tokens or fail a check.
//
// Each KV slot holds (position, token, hash of the whole prefix up to it). Computing a token reads
// the previous position's slot through the block table, as attention would; sampling reads every
// slot of the sequence, checks it, and derives the token from the prefix hash. reference_output()
// computes the same tokens for a request running alone, with no KV cache at all.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "kv/kv_cache_manager.h"
#include "scheduler/scheduler.h"

namespace pagoda::scheduler::testing {

constexpr int32_t kVocabSize = 1000;

inline uint64_t mix(uint64_t h, int32_t token) {
  h ^= static_cast<uint64_t>(static_cast<uint32_t>(token)) + 0x9e3779b97f4a7c15ULL + (h << 6) +
       (h >> 2);
  h *= 0xff51afd7ed558ccdULL;
  return h ^ (h >> 33);
}

/// The token the fake model samples after a prefix with this hash.
inline int32_t token_after(uint64_t prefix_hash) {
  return static_cast<int32_t>(prefix_hash % kVocabSize);
}

inline uint64_t prefix_hash(std::span<const int32_t> tokens) {
  uint64_t h = 0;
  for (const int32_t t : tokens) h = mix(h, t);
  return h;
}

/// The output a request would produce alone: continue `tokens` (prompt + outputs so far) until
/// num_output reaches max_tokens.
inline std::vector<int32_t> reference_output(std::vector<int32_t> tokens, int num_prompt,
                                             int max_tokens) {
  uint64_t h = prefix_hash(tokens);
  while (static_cast<int>(tokens.size()) - num_prompt < max_tokens) {
    tokens.push_back(token_after(h));
    h = mix(h, tokens.back());
  }
  return {tokens.begin() + num_prompt, tokens.end()};
}

using NewTokens = std::vector<std::pair<kv::RequestId, std::vector<int32_t>>>;

class FakeRunner {
 public:
  FakeRunner(Scheduler& scheduler, kv::KVCacheManager& kv)
      : scheduler_(scheduler),
        kv_(kv),
        slots_(static_cast<size_t>(kv.config().num_blocks) * kv.block_size()) {}

  /// Runs one step like the engine: copies, computes every scheduled token, samples. Fails the
  /// current test (ADD_FAILURE) on any KV inconsistency.
  NewTokens execute(const SchedulerOutput& output) {
    const int bs = kv_.block_size();
    for (const kv::BlockCopy& copy : output.block_copies) {
      std::copy_n(slots_.begin() + int64_t{copy.src} * bs, bs,
                  slots_.begin() + int64_t{copy.dst} * bs);
    }
    NewTokens new_tokens;
    for (const ScheduledRequest& s : output.scheduled) {
      const Request* request = scheduler_.get(s.id);
      if (request == nullptr) {
        ADD_FAILURE() << "scheduled unknown request " << s.id;
        continue;
      }
      std::vector<int32_t> tokens(request->all_token_ids().begin(), request->all_token_ids().end());
      tokens.insert(tokens.end(), request->spec_token_ids().begin(),
                    request->spec_token_ids().end());
      const std::span<const kv::BlockId> table = kv_.block_table(s.id);
      const int end = s.num_computed_tokens + s.num_new_tokens;
      if (static_cast<int64_t>(table.size()) * bs < end) {
        ADD_FAILURE() << "request " << s.id << ": block table of " << table.size() << " blocks for "
                      << end << " tokens";
        continue;
      }
      for (int pos = s.num_computed_tokens; pos < end; ++pos) {
        uint64_t h = 0;
        if (pos > 0) {
          const Slot& prev = slot(table, pos - 1);
          if (prev.position != pos - 1 || prev.token != tokens[pos - 1]) {
            ADD_FAILURE() << "request " << s.id << ": KV of position " << pos - 1
                          << " missing (slot holds position " << prev.position << ")";
          }
          h = prev.hash;
        }
        const Slot fresh{pos, tokens[pos], mix(h, tokens[pos])};
        Slot& target = slot(table, pos);
        if (kv_.block_pool().block(table[pos / bs]).ref_count > 1) {
          check_shared_write(s.id, table[pos / bs], pos, fresh);
        }
        target = fresh;
      }
      if (!s.samples) continue;
      // Attention reads the whole sequence: every slot must hold its own position's KV.
      uint64_t h = 0;
      for (int pos = 0; pos < end; ++pos) {
        h = mix(h, tokens[pos]);
        const Slot& held = slot(table, pos);
        if (held.position != pos || held.hash != h) {
          ADD_FAILURE() << "request " << s.id << ": wrong KV at position " << pos;
          break;
        }
      }
      // Verify drafts as a rejection sampler would with greedy sampling.
      const int first_draft = request->num_tokens();
      std::vector<int32_t> sampled;
      uint64_t state = slot(table, first_draft - 1).hash;
      bool all_accepted = true;
      for (int pos = first_draft; pos < end && all_accepted; ++pos) {
        sampled.push_back(token_after(state));
        all_accepted = tokens[pos] == sampled.back();
        state = mix(state, tokens[pos]);
      }
      if (all_accepted) sampled.push_back(token_after(state));
      new_tokens.emplace_back(s.id, std::move(sampled));
    }
    return new_tokens;
  }

  /// schedule -> execute -> update; returns the output and appends finished ids to `finished`.
  SchedulerOutput step(std::vector<kv::RequestId>* finished = nullptr) {
    SchedulerOutput output = scheduler_.schedule();
    const NewTokens new_tokens = execute(output);
    std::vector<kv::RequestId> done = scheduler_.update_from_output(output, new_tokens);
    if (finished != nullptr) finished->insert(finished->end(), done.begin(), done.end());
    return output;
  }

 private:
  struct Slot {
    int position = -1;
    int32_t token = -1;
    uint64_t hash = 0;
    friend bool operator==(const Slot&, const Slot&) = default;
  };

  // A block shared with other requests is only ever written by the request filling it in the
  // same step as another one's prefix hit on it; what it writes must then be exactly the KV that
  // every other holder counts as computed.
  void check_shared_write(kv::RequestId writer, kv::BlockId block, int pos, const Slot& fresh) {
    const int bs = kv_.block_size();
    for (const kv::RequestId id : scheduler_.running_request_ids()) {
      if (id == writer || !kv_.has_request(id)) continue;
      const std::span<const kv::BlockId> table = kv_.block_table(id);
      for (size_t j = 0; j < table.size(); ++j) {
        const int their_pos = static_cast<int>(j) * bs + pos % bs;
        const Request* other = scheduler_.get(id);
        if (table[j] != block || their_pos >= other->num_computed_tokens()) continue;
        const std::span<const int32_t> tokens = other->all_token_ids().first(their_pos + 1);
        const Slot expected{their_pos, tokens.back(), prefix_hash(tokens)};
        if (fresh != expected) {
          ADD_FAILURE() << "request " << writer << " overwrote block " << block << " that request "
                        << id << " holds as computed";
        }
      }
    }
  }

  Slot& slot(std::span<const kv::BlockId> table, int pos) {
    const int bs = kv_.block_size();
    return slots_[static_cast<size_t>(table[pos / bs]) * bs + pos % bs];
  }

  Scheduler& scheduler_;
  kv::KVCacheManager& kv_;
  std::vector<Slot> slots_;
};

/// Prompt tokens in [1, kVocabSize), deterministic in `seed`.
inline std::vector<int32_t> make_prompt(int length, uint64_t seed) {
  std::vector<int32_t> tokens(length);
  uint64_t h = seed * 0x9e3779b97f4a7c15ULL + 1;
  for (int i = 0; i < length; ++i) {
    h = mix(h, i);
    tokens[i] = static_cast<int32_t>(1 + h % (kVocabSize - 1));
  }
  return tokens;
}

struct Fixture {
  Fixture(SchedulerConfig config, kv::KVCacheConfig kv_config)
      : kv(kv_config), scheduler(config, kv), runner(scheduler, kv) {}

  kv::KVCacheManager kv;
  Scheduler scheduler;
  FakeRunner runner;
  std::map<kv::RequestId, std::vector<int32_t>> expected;  // the output each request must give
  std::map<kv::RequestId, std::vector<int32_t>> outputs;   // as they finished

  void submit(kv::RequestId id, std::vector<int32_t> prompt, int max_tokens, int priority = 0,
              std::string salt = {}) {
    expected[id] = reference_output(prompt, static_cast<int>(prompt.size()), max_tokens);
    scheduler.add_request(
        std::make_unique<Request>(id, std::move(prompt), max_tokens, priority, std::move(salt)));
  }

  SchedulerOutput step() {
    // Keep each request's output: a finished request is forgotten by the scheduler.
    std::map<kv::RequestId, std::vector<int32_t>> before;
    SchedulerOutput output = scheduler.schedule();
    const testing::NewTokens new_tokens = runner.execute(output);
    for (const auto& [id, tokens] : new_tokens) {
      const Request* r = scheduler.get(id);
      before[id].assign(r->output_token_ids().begin(), r->output_token_ids().end());
    }
    const std::vector<kv::RequestId> finished = scheduler.update_from_output(output, new_tokens);
    for (const kv::RequestId id : finished) {
      std::vector<int32_t> out = before[id];
      for (const auto& [nid, tokens] : new_tokens) {
        if (nid == id) out.insert(out.end(), tokens.begin(), tokens.end());
      }
      out.resize(expected[id].size());
      outputs[id] = out;
    }
    return output;
  }

  // Steps until nothing is left (bounded), then checks outputs and that the pool is whole again.
  void drain(int max_steps = 10000) {
    for (int i = 0; i < max_steps && scheduler.has_unfinished_requests(); ++i) step();
    ASSERT_FALSE(scheduler.has_unfinished_requests()) << "no progress in " << max_steps << " steps";
    for (const auto& [id, out] : outputs) EXPECT_EQ(out, expected[id]) << "request " << id;
    EXPECT_EQ(kv.num_free_blocks(), kv.config().num_blocks - 1);
    EXPECT_EQ(kv.usage(), 0.0);
    EXPECT_EQ(kv.num_requests(), 0);
  }
};

inline SchedulerConfig config_of(int budget, int max_seqs, int64_t max_model_len,
                                 SchedulingPolicy policy = SchedulingPolicy::kFcfs) {
  return {.max_num_batched_tokens = budget,
          .max_num_seqs = max_seqs,
          .max_model_len = max_model_len,
          .policy = policy};
}

inline kv::KVCacheConfig kv_of(int num_blocks, int block_size = 16, bool caching = true) {
  return {.num_blocks = num_blocks, .block_size = block_size, .enable_prefix_caching = caching};
}

inline std::optional<ScheduledRequest> find(const SchedulerOutput& out, kv::RequestId id) {
  for (const ScheduledRequest& s : out.scheduled) {
    if (s.id == id) return s;
  }
  return std::nullopt;
}

}  // namespace pagoda::scheduler::testing
