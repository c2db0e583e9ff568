// Property-based tests of block accounting. A Simulation plays a scheduler against one
// KVCacheManager over random workloads (submit, prefix lookups, chunked prefill, decode with
// lookahead slots, fork, preemption, abort, finish) from fixed std::mt19937 seeds, and checks every
// invariant after every operation; then it drains and proves the whole pool is free and evictable.
// To add a case: add an Op and its branch in Simulation::step() (keep a model of what the manager
// should now hold in SimRequest), and add any new invariant to check_invariants(). Keep the total
// run time to a few seconds: kNumSeeds x kOpsPerSeed bounds it.
#include <algorithm>
#include <cstdio>
#include <map>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "kv/kv_cache_manager.h"

namespace pagoda::kv {
namespace {

constexpr uint32_t kNumSeeds = 2000;
constexpr int kOpsPerSeed = 150;
constexpr int kMaxRequests = 10;

// The model of one request, as the scheduler would keep it.
struct SimRequest {
  RequestId id = 0;
  RequestId family = 0;  // the id of the request it was forked from, transitively; else its own
  std::vector<TokenId> tokens;
  std::string salt;
  int num_computed = 0;
  int max_tokens = 0;
  bool holds_blocks = false;

  [[nodiscard]] KVRequestView view() const { return {id, tokens, num_computed, salt}; }
};

int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }

// How often the interesting paths ran, summed over seeds: the test fails if a workload change
// stops exercising one of them.
struct Coverage {
  int64_t prefix_hits = 0;      // get_computed_blocks calls that found blocks
  int64_t free_block_hits = 0;  // hits on blocks no request held (pulled from the free queue)
  int64_t failed_allocations = 0;
  int64_t forks_with_copy = 0;
  int64_t failed_forks = 0;
  int64_t preemptions = 0;
  int64_t finished = 0;
  int64_t shared_block_checks = 0;
};

class Simulation {
 public:
  Simulation(uint32_t seed, Coverage& coverage) : rng_(seed), coverage_(coverage) {
    block_size_ = pick(std::vector<int>{1, 2, 3, 4, 16});
    num_blocks_ = uniform(2, 48);
    caching_ = uniform(0, 3) != 0;
    manager_ = std::make_unique<KVCacheManager>(KVCacheConfig{num_blocks_, block_size_, caching_});
    for (auto& base : bases_) {
      base.resize(4 * block_size_);
      for (TokenId& t : base) t = uniform(0, 3);  // a tiny vocabulary: contents repeat often
    }
  }

  void run() {
    for (int op = 0; op < kOpsPerSeed && !::testing::Test::HasFailure(); ++op) {
      step();
      check_invariants();
    }
  }

  // Frees everything, then proves every block is free and that the cached ones are evictable.
  void drain() {
    for (auto& [id, r] : requests_) manager_->free(id);
    requests_.clear();
    const int usable = num_blocks_ - 1;
    ASSERT_EQ(manager_->num_free_blocks(), usable);
    ASSERT_EQ(manager_->num_requests(), 0);
    for (BlockId b = 1; b < num_blocks_; ++b) ASSERT_EQ(pool().block(b).ref_count, 0);
    SimRequest everything;
    everything.id = next_id_++;
    everything.tokens.assign(static_cast<size_t>(usable) * block_size_, 1'000'000);
    const auto blocks = manager_->allocate_slots(everything.view(), usable * block_size_);
    ASSERT_TRUE(blocks.has_value()) << "cached blocks were not evictable";
    ASSERT_EQ(static_cast<int>(blocks->size()), usable);
    ASSERT_EQ(manager_->num_free_blocks(), 0);
    manager_->free(everything.id);
    ASSERT_EQ(manager_->num_free_blocks(), usable);
    ASSERT_DOUBLE_EQ(manager_->usage(), 0.0);
  }

 private:
  enum class Op { kSubmit, kScheduleWaiting, kScheduleRunning, kFork, kPreempt, kAbort };

  int uniform(int lo, int hi) { return std::uniform_int_distribution<int>(lo, hi)(rng_); }
  template <typename T>
  T pick(const std::vector<T>& values) {
    return values[uniform(0, static_cast<int>(values.size()) - 1)];
  }
  const BlockPool& pool() const { return manager_->block_pool(); }

  std::vector<RequestId> ids_where(bool holds_blocks) const {
    std::vector<RequestId> ids;
    for (const auto& [id, r] : requests_) {
      if (r.holds_blocks == holds_blocks) ids.push_back(id);
    }
    return ids;
  }

  void step() {
    const Op op = pick(std::vector<Op>{
        Op::kSubmit, Op::kSubmit, Op::kScheduleWaiting, Op::kScheduleWaiting, Op::kScheduleRunning,
        Op::kScheduleRunning, Op::kScheduleRunning, Op::kFork, Op::kPreempt, Op::kAbort});
    switch (op) {
      case Op::kSubmit:
        submit();
        break;
      case Op::kScheduleWaiting:
        schedule_waiting();
        break;
      case Op::kScheduleRunning:
        schedule_running();
        break;
      case Op::kFork:
        fork();
        break;
      case Op::kPreempt:
        preempt();
        break;
      case Op::kAbort:
        abort();
        break;
    }
  }

  void submit() {
    if (static_cast<int>(requests_.size()) >= kMaxRequests) return;
    SimRequest r;
    r.id = r.family = next_id_++;
    const auto& base = bases_[uniform(0, 2)];
    r.tokens.assign(base.begin(), base.begin() + uniform(0, static_cast<int>(base.size())));
    for (int i = uniform(r.tokens.empty() ? 1 : 0, 2 * block_size_); i > 0; --i) {
      r.tokens.push_back(uniform(0, 3));
    }
    r.salt = pick(std::vector<std::string>{"", "", "tenant"});
    r.max_tokens = static_cast<int>(r.tokens.size()) + uniform(1, 3 * block_size_);
    requests_.emplace(r.id, std::move(r));
  }

  // Counts what an allocation needs, from the model alone, to prove failures are never spurious.
  int64_t blocks_needed(const SimRequest& r, const ComputedBlocks& hits, int num_new,
                        int num_lookahead) const {
    const int64_t held = r.holds_blocks ? manager_->block_table(r.id).size() : 0;
    const int64_t required =
        ceil_div(r.num_computed + hits.num_computed_tokens + num_new + num_lookahead, block_size_);
    int64_t needed = std::max<int64_t>(required - held - hits.block_ids.size(), 0);
    for (BlockId b : hits.block_ids) needed += pool().block(b).ref_count == 0 ? 1 : 0;
    return needed;
  }

  // Allocates and "executes" one step of `r`; returns false when the pool could not fit it.
  bool schedule(SimRequest& r, const ComputedBlocks& hits) {
    const int first_to_compute = r.num_computed + hits.num_computed_tokens;
    const int num_new = uniform(1, static_cast<int>(r.tokens.size()) - first_to_compute);
    const int num_lookahead = uniform(0, 3) == 0 ? uniform(1, 3) : 0;
    const int64_t needed = blocks_needed(r, hits, num_new, num_lookahead);
    const int free_before = manager_->num_free_blocks();
    const std::vector<BlockId> table_before =
        r.holds_blocks ? std::vector<BlockId>(manager_->block_table(r.id).begin(),
                                              manager_->block_table(r.id).end())
                       : std::vector<BlockId>{};
    const auto new_blocks = manager_->allocate_slots(r.view(), num_new, hits, num_lookahead);
    EXPECT_EQ(new_blocks.has_value(), needed <= free_before) << "needed " << needed;
    if (!new_blocks) {
      EXPECT_EQ(manager_->num_free_blocks(), free_before);
      EXPECT_EQ(manager_->has_request(r.id), r.holds_blocks);
      if (r.holds_blocks) {
        const auto table = manager_->block_table(r.id);
        EXPECT_TRUE(
            std::equal(table.begin(), table.end(), table_before.begin(), table_before.end()));
      }
      ++coverage_.failed_allocations;
      return false;
    }
    r.holds_blocks = true;
    // Every slot this step writes (computed tokens and lookahead) is in a block no one else holds.
    const auto table = manager_->block_table(r.id);
    const int64_t last_slot = first_to_compute + num_new + num_lookahead - 1;
    EXPECT_GE(static_cast<int64_t>(table.size()), last_slot / block_size_ + 1);
    for (int64_t i = first_to_compute / block_size_; i <= last_slot / block_size_; ++i) {
      EXPECT_EQ(pool().block(table[i]).ref_count, 1) << "writes into shared block " << table[i];
    }
    r.num_computed = first_to_compute + num_new;
    if (r.num_computed == static_cast<int>(r.tokens.size())) sample(r);
    return true;
  }

  // The step computed the last token: sample the next one, or finish.
  void sample(SimRequest& r) {
    if (static_cast<int>(r.tokens.size()) >= r.max_tokens) {
      ++coverage_.finished;
      manager_->free(r.id);
      requests_.erase(r.id);
      return;
    }
    r.tokens.push_back(uniform(0, 3));
  }

  void schedule_waiting() {
    const auto waiting = ids_where(false);
    if (waiting.empty()) return;
    SimRequest& r = requests_.at(pick(waiting));
    const int64_t queries_before = manager_->queries_tokens();
    const int64_t hits_before = manager_->hits_tokens();
    const ComputedBlocks hits = manager_->get_computed_blocks(r.view());
    EXPECT_LT(hits.num_computed_tokens, static_cast<int>(r.tokens.size()));
    EXPECT_EQ(hits.num_computed_tokens % block_size_, 0);
    coverage_.prefix_hits += hits.empty() ? 0 : 1;
    for (BlockId b : hits.block_ids) coverage_.free_block_hits += pool().block(b).ref_count == 0;
    if (caching_) {
      EXPECT_EQ(manager_->queries_tokens(), queries_before + static_cast<int64_t>(r.tokens.size()));
      EXPECT_EQ(manager_->hits_tokens(), hits_before + hits.num_computed_tokens);
    } else {
      EXPECT_TRUE(hits.empty());
      EXPECT_EQ(manager_->queries_tokens(), 0);
    }
    schedule(r, hits);
  }

  void schedule_running() {
    const auto running = ids_where(true);
    if (running.empty()) return;
    schedule(requests_.at(pick(running)), ComputedBlocks{});
  }

  void fork() {
    const auto running = ids_where(true);
    if (running.empty() || static_cast<int>(requests_.size()) >= kMaxRequests) return;
    const SimRequest& parent = requests_.at(pick(running));
    const int free_before = manager_->num_free_blocks();
    SimRequest child = parent;
    child.id = next_id_++;
    // The child samples its own token at the fork point (n > 1 draws differ).
    child.tokens.resize(parent.num_computed);
    child.tokens.push_back(uniform(0, 3));
    const auto result = manager_->fork(parent.id, child.id, parent.num_computed);
    const bool partial = parent.num_computed % block_size_ != 0;
    EXPECT_EQ(result.has_value(), !partial || free_before > 0);
    if (!result) {
      ++coverage_.failed_forks;
      EXPECT_FALSE(manager_->has_request(child.id));
      EXPECT_EQ(manager_->num_free_blocks(), free_before);
      return;
    }
    EXPECT_EQ(result->copy_on_write.has_value(), partial);
    coverage_.forks_with_copy += partial ? 1 : 0;
    const auto parent_table = manager_->block_table(parent.id);
    const auto child_table = manager_->block_table(child.id);
    EXPECT_EQ(static_cast<int64_t>(child_table.size()), ceil_div(parent.num_computed, block_size_));
    if (result->copy_on_write) {
      EXPECT_EQ(result->copy_on_write->src, parent_table[child_table.size() - 1]);
      EXPECT_EQ(result->copy_on_write->dst, child_table.back());
    }
    requests_.emplace(child.id, std::move(child));
  }

  void preempt() {
    const auto running = ids_where(true);
    if (running.empty()) return;
    SimRequest& r = requests_.at(pick(running));
    ++coverage_.preemptions;
    manager_->free(r.id);
    r.holds_blocks = false;
    r.num_computed = 0;
  }

  void abort() {
    if (requests_.empty() || uniform(0, 9) == 0) {
      manager_->free(next_id_ + 1000);  // unknown ids are a no-op
      return;
    }
    auto it = requests_.begin();
    std::advance(it, uniform(0, static_cast<int>(requests_.size()) - 1));
    manager_->free(it->first);
    manager_->free(it->first);  // idempotent: an abort racing a finish
    requests_.erase(it);
  }

  // The chained hash the manager should have given block `index` of `r`.
  BlockHash expected_hash(const SimRequest& r, size_t index) const {
    std::optional<BlockHash> parent;
    for (size_t i = 0; i <= index; ++i) {
      const std::span<const TokenId> block(r.tokens.data() + i * block_size_, block_size_);
      parent = hash_block_tokens(parent, block, i == 0 ? std::string_view(r.salt) : "");
    }
    return *parent;
  }

  void check_invariants() {
    // Who holds each block, from the block tables.
    std::vector<std::vector<std::pair<RequestId, size_t>>> holders(num_blocks_);
    int num_holding = 0;
    for (const auto& [id, r] : requests_) {
      ASSERT_EQ(manager_->has_request(id), r.holds_blocks) << "request " << id;
      if (!r.holds_blocks) continue;
      ++num_holding;
      const auto table = manager_->block_table(id);
      ASSERT_GE(static_cast<int64_t>(table.size()), ceil_div(r.num_computed, block_size_));
      for (size_t i = 0; i < table.size(); ++i) {
        ASSERT_GT(table[i], kNullBlockId);
        ASSERT_LT(table[i], num_blocks_);
        holders[table[i]].push_back({id, i});
      }
    }
    ASSERT_EQ(manager_->num_requests(), num_holding);

    int num_in_use = 0;
    for (BlockId b = 1; b < num_blocks_; ++b) {
      const KVCacheBlock& block = pool().block(b);
      // Reference counts equal the number of block tables holding the block; never negative.
      ASSERT_EQ(block.ref_count, static_cast<int>(holders[b].size())) << "block " << b;
      ASSERT_EQ(block.in_free_queue, block.ref_count == 0) << "block " << b;
      num_in_use += block.ref_count > 0 ? 1 : 0;
      if (block.block_hash) {
        ASSERT_TRUE(caching_);
        ASSERT_EQ(pool().get_cached_block(*block.block_hash), b);
      }
      for (size_t h = 0; h < holders[b].size(); ++h) {
        const auto& [id, index] = holders[b][h];
        const SimRequest& r = requests_.at(id);
        // A cached block holds exactly its holder's prefix: a hit can never serve wrong KV.
        if (block.block_hash) {
          ASSERT_LE((index + 1) * block_size_, r.tokens.size());
          ASSERT_EQ(*block.block_hash, expected_hash(r, index)) << "block " << b;
        }
        if (h == 0) continue;
        ++coverage_.shared_block_checks;
        // Sharing only through a prefix hit or a fork: same position, full and computed in both,
        // same tokens up to its end and the same salt.
        const auto& [first_id, first_index] = holders[b][0];
        const SimRequest& first = requests_.at(first_id);
        ASSERT_NE(first_id, id) << "block " << b << " twice in one table";
        ASSERT_EQ(first_index, index);
        const size_t end = (index + 1) * block_size_;
        ASSERT_LE(end, static_cast<size_t>(r.num_computed));
        ASSERT_LE(end, static_cast<size_t>(first.num_computed));
        ASSERT_TRUE(std::equal(r.tokens.begin(), r.tokens.begin() + end, first.tokens.begin()));
        ASSERT_EQ(r.salt, first.salt);
        ASSERT_TRUE(block.block_hash || r.family == first.family)
            << "block " << b << " shared without a hash or a fork";
      }
    }
    ASSERT_EQ(manager_->num_free_blocks(), num_blocks_ - 1 - num_in_use);
    ASSERT_EQ(static_cast<int>(pool().free_queue_order().size()), manager_->num_free_blocks());
    ASSERT_LE(manager_->hits_tokens(), manager_->queries_tokens());
  }

  std::mt19937 rng_;
  Coverage& coverage_;
  int block_size_ = 0;
  int num_blocks_ = 0;
  bool caching_ = true;
  std::unique_ptr<KVCacheManager> manager_;
  std::vector<TokenId> bases_[3];
  std::map<RequestId, SimRequest> requests_;  // ordered, so runs are reproducible
  RequestId next_id_ = 1;
};

TEST(KVCacheProperty, BlockAccountingHoldsOverRandomWorkloads) {
  Coverage coverage;
  for (uint32_t seed = 0; seed < kNumSeeds && !HasFailure(); ++seed) {
    SCOPED_TRACE(::testing::Message() << "seed " << seed);
    Simulation simulation(seed, coverage);
    simulation.run();
    if (HasFailure()) break;
    simulation.drain();
  }
  for (const auto& [name, count] : std::vector<std::pair<const char*, int64_t>>{
           {"prefix_hits", coverage.prefix_hits},
           {"free_block_hits", coverage.free_block_hits},
           {"failed_allocations", coverage.failed_allocations},
           {"forks_with_copy", coverage.forks_with_copy},
           {"failed_forks", coverage.failed_forks},
           {"preemptions", coverage.preemptions},
           {"finished", coverage.finished},
           {"shared_block_checks", coverage.shared_block_checks}}) {
    EXPECT_GT(count, 100) << name << " was barely exercised";
    std::printf("%s: %lld\n", name, static_cast<long long>(count));
  }
}

}  // namespace
}  // namespace pagoda::kv
