// Property test: random workloads (submit, step, abort, stop, fork, speculative drafts) from fixed
// seeds against small KV pools, checking the scheduler's invariants after every step, every
// request's tokens against reference_output(), and that draining frees every block.
// To add a case: add an Op to Simulation::run_op() (and whatever it must keep in `live_`), add any
// new invariant to check_step() or check_pool(), and keep kNumSeeds x kOpsPerSeed within a few
// seconds of run time.
#include <gtest/gtest.h>

#include <algorithm>
#include <map>
#include <random>
#include <set>
#include <string>
#include <vector>

#include "fake_runner.h"

namespace pagoda::scheduler {
namespace {

using testing::FakeRunner;
using testing::make_prompt;
using testing::reference_output;

constexpr uint32_t kNumSeeds = 300;
constexpr int kOpsPerSeed = 200;

// How often the interesting paths ran over all seeds: a workload change that stops exercising one
// of them fails the test.
struct Coverage {
  int64_t preemptions = 0;
  int64_t prefix_hits = 0;
  int64_t forks_shared = 0;
  int64_t aborts_running = 0;
  int64_t aborts_waiting = 0;
  int64_t finished_length = 0;
  int64_t drafts_scheduled = 0;
  int64_t chunks = 0;
};

struct LiveRequest {
  std::vector<int32_t> expected;  // full reference output (max_tokens long)
  int num_prompt = 0;
};

class Simulation {
 public:
  Simulation(uint32_t seed, Coverage& coverage) : rng_(seed), coverage_(coverage) {
    block_size_ = pick({1, 2, 4, 16});
    max_model_len_ = uniform(8, 96);
    const int min_blocks = (max_model_len_ + 2 + block_size_ - 1) / block_size_ + 1;
    kv_.emplace(kv::KVCacheConfig{.num_blocks = min_blocks + uniform(0, 3 * min_blocks),
                                  .block_size = block_size_,
                                  .enable_prefix_caching = uniform(0, 3) != 0});
    config_ = {.max_num_batched_tokens = pick({1, 3, 16, 64, 512}),
               .max_num_seqs = pick({1, 2, 4, 16}),
               .max_model_len = max_model_len_,
               .policy = uniform(0, 1) ? SchedulingPolicy::kPriority : SchedulingPolicy::kFcfs,
               .num_lookahead_tokens = pick({0, 0, 2})};
    scheduler_.emplace(config_, *kv_);
    runner_.emplace(*scheduler_, *kv_);
  }

  void run() {
    for (int op = 0; op < kOpsPerSeed && !::testing::Test::HasFailure(); ++op) run_op();
    // Drain: with no new work, everything finishes within a bounded number of steps.
    for (int i = 0; i < 20000 && scheduler_->has_unfinished_requests(); ++i) {
      if (::testing::Test::HasFailure()) return;
      step();
    }
    ASSERT_FALSE(scheduler_->has_unfinished_requests()) << "no progress while draining";
    EXPECT_TRUE(live_.empty());
    EXPECT_EQ(kv_->num_free_blocks(), kv_->config().num_blocks - 1);
    EXPECT_EQ(kv_->usage(), 0.0);
    EXPECT_EQ(kv_->num_requests(), 0);
  }

 private:
  int uniform(int lo, int hi) { return std::uniform_int_distribution<int>(lo, hi)(rng_); }
  int pick(std::initializer_list<int> values) {
    return *(values.begin() + uniform(0, static_cast<int>(values.size()) - 1));
  }
  kv::RequestId random_live() {
    auto it = live_.begin();
    std::advance(it, uniform(0, static_cast<int>(live_.size()) - 1));
    return it->first;
  }

  void run_op() {
    const int op = uniform(0, 99);
    if (op < 25) {
      submit();
    } else if (op < 31 && !live_.empty()) {
      const kv::RequestId id = random_live();
      const Request* r = scheduler_->get(id);
      if (r->status() == RequestStatus::kRunning)
        ++coverage_.aborts_running;
      else
        ++coverage_.aborts_waiting;
      finish(id, uniform(0, 1) ? RequestStatus::kFinishedAborted : RequestStatus::kFinishedStopped);
    } else if (op < 36 && !live_.empty()) {
      fork(random_live());
    } else if (op < 42 && !live_.empty()) {
      propose_drafts(random_live());
    } else {
      step();
    }
  }

  void submit() {
    const kv::RequestId id = next_id_++;
    const int max_tokens = uniform(1, std::max(1, max_model_len_ / 3));
    const int prompt_len = uniform(1, max_model_len_ - max_tokens);
    // Prompts share prefixes: one of a few families, cut at a random length, then own tokens.
    std::vector<int32_t> prompt = make_prompt(prompt_len, uniform(0, 2));
    const int own = uniform(0, prompt_len);
    for (int i = prompt_len - own; i < prompt_len; ++i) prompt[i] = 1 + (id * 31 + i) % 997;
    std::string salt = uniform(0, 4) == 0 ? "tenant" : "";
    live_[id] = {reference_output(prompt, prompt_len, max_tokens), prompt_len};
    scheduler_->add_request(std::make_unique<Request>(id, std::move(prompt), max_tokens,
                                                      uniform(0, 3), std::move(salt)));
  }

  void finish(kv::RequestId id, RequestStatus reason) {
    check_prefix(id);
    scheduler_->finish_request(id, reason);
    EXPECT_FALSE(kv_->has_request(id));
    EXPECT_EQ(scheduler_->get(id), nullptr);
    live_.erase(id);
  }

  // n > 1: the child continues the parent's prompt with its own first token.
  void fork(kv::RequestId parent_id) {
    const Request* parent = scheduler_->get(parent_id);
    if (parent->num_output_tokens() == 0 || parent->max_tokens() < 2) return;
    const kv::RequestId id = next_id_++;
    std::vector<int32_t> tokens(parent->prompt_token_ids().begin(),
                                parent->prompt_token_ids().end());
    const int32_t first = 1 + static_cast<int32_t>(id % 997);
    tokens.push_back(first);
    live_[id] = {reference_output(tokens, parent->num_prompt_tokens(), parent->max_tokens()),
                 parent->num_prompt_tokens()};
    auto child = std::make_unique<Request>(id, std::vector<int32_t>{}, parent->max_tokens(),
                                           parent->priority(), parent->cache_salt());
    child->append_output_tokens(std::vector<int32_t>{first});
    if (scheduler_->fork_request(parent_id, std::move(child))) ++coverage_.forks_shared;
  }

  // Drafts for a decoding request: a random number of right tokens, then maybe a wrong one.
  void propose_drafts(kv::RequestId id) {
    Request* r = scheduler_->get_mutable(id);
    if (r->status() != RequestStatus::kRunning || r->num_computed_tokens() != r->num_tokens() - 1) {
      return;
    }
    const LiveRequest& live = live_.at(id);
    std::vector<int32_t> drafts;
    const int num_right = uniform(0, 3);
    for (int i = 0; i < num_right; ++i) {
      const size_t index = static_cast<size_t>(r->num_output_tokens() + i);
      if (index >= live.expected.size()) break;
      drafts.push_back(live.expected[index]);
    }
    if (uniform(0, 1)) drafts.push_back(0);  // token 0 is never sampled by make_prompt families
    r->set_spec_token_ids(std::move(drafts));
  }

  // The request's output so far must be a prefix of what it would produce alone.
  void check_prefix(kv::RequestId id) {
    const Request* r = scheduler_->get(id);
    const std::vector<int32_t>& want = live_.at(id).expected;
    const std::span<const int32_t> got = r->output_token_ids();
    ASSERT_LE(got.size(), want.size());
    EXPECT_TRUE(std::equal(got.begin(), got.end(), want.begin()))
        << "request " << id << ": got "
        << ::testing::PrintToString(std::vector(got.begin(), got.end())) << " want "
        << ::testing::PrintToString(want) << " prompt " << r->num_prompt_tokens() << " preemptions "
        << r->num_preemptions();
  }

  void step() {
    const SchedulerOutput out = scheduler_->schedule();
    check_step(out);
    check_pool();
    const testing::NewTokens new_tokens = runner_->execute(out);
    std::map<kv::RequestId, std::vector<int32_t>> outputs;
    for (const auto& [id, tokens] : new_tokens) {
      const Request* r = scheduler_->get(id);
      outputs[id].assign(r->output_token_ids().begin(), r->output_token_ids().end());
      outputs[id].insert(outputs[id].end(), tokens.begin(), tokens.end());
    }
    for (const kv::RequestId id : scheduler_->update_from_output(out, new_tokens)) {
      ++coverage_.finished_length;
      std::vector<int32_t> got = outputs.at(id);
      got.resize(live_.at(id).expected.size());
      EXPECT_EQ(got, live_.at(id).expected) << "request " << id;
      EXPECT_EQ(scheduler_->get(id), nullptr);
      EXPECT_FALSE(kv_->has_request(id));
      live_.erase(id);
    }
    for (const auto& [id, tokens] : new_tokens) {
      if (scheduler_->get(id) != nullptr) check_prefix(id);
    }
    check_pool();
  }

  void check_step(const SchedulerOutput& out) {
    coverage_.preemptions += static_cast<int64_t>(out.preempted.size());
    std::set<kv::RequestId> seen;
    int total = 0;
    bool admitted = false;
    EXPECT_LE(static_cast<int>(out.scheduled.size()), config_.max_num_seqs);
    for (const ScheduledRequest& s : out.scheduled) {
      EXPECT_TRUE(seen.insert(s.id).second) << "request " << s.id << " scheduled twice";
      EXPECT_GE(s.num_new_tokens, 1);
      total += s.num_new_tokens;
      const Request* r = scheduler_->get(s.id);
      ASSERT_NE(r, nullptr);
      EXPECT_EQ(r->status(), RequestStatus::kRunning);
      EXPECT_EQ(r->num_computed_tokens(), s.num_computed_tokens);
      EXPECT_LE(s.num_computed_tokens + s.num_new_tokens, r->num_tokens_with_spec());
      EXPECT_LE(s.num_computed_tokens + s.num_new_tokens, max_model_len_);
      const int64_t covered = static_cast<int64_t>(kv_->block_table(s.id).size()) * block_size_;
      EXPECT_GE(covered, s.num_computed_tokens + s.num_new_tokens) << "request " << s.id;
      if (s.resumed_or_new) {
        admitted = true;
        if (s.num_computed_tokens > 0) ++coverage_.prefix_hits;
      } else {
        EXPECT_FALSE(admitted) << "running request " << s.id << " after an admitted one";
      }
      if (!s.samples) ++coverage_.chunks;
      coverage_.drafts_scheduled += s.num_spec_tokens;
    }
    EXPECT_EQ(total, out.total_num_scheduled_tokens);
    EXPECT_LE(total, config_.max_num_batched_tokens);
    for (const kv::RequestId id : out.preempted) {
      EXPECT_FALSE(seen.contains(id)) << "request " << id << " preempted and scheduled";
    }
    // Work conservation: an idle step with unfinished requests would be a deadlock.
    if (scheduler_->has_unfinished_requests()) {
      EXPECT_FALSE(out.scheduled.empty());
    }
  }

  // Every block's reference count equals the number of block tables that hold it, and the free
  // count is what no table holds.
  void check_pool() {
    std::map<kv::BlockId, int> refs;
    for (const kv::RequestId id : scheduler_->running_request_ids()) {
      const Request* r = scheduler_->get(id);
      ASSERT_TRUE(kv_->has_request(id)) << "running request " << id << " holds no blocks";
      const std::span<const kv::BlockId> table = kv_->block_table(id);
      EXPECT_GE(static_cast<int64_t>(table.size()) * block_size_, r->num_computed_tokens());
      for (const kv::BlockId b : table) ++refs[b];
    }
    for (const kv::RequestId id : scheduler_->waiting_request_ids()) {
      EXPECT_FALSE(kv_->has_request(id)) << "waiting request " << id << " holds blocks";
      EXPECT_EQ(scheduler_->get(id)->num_computed_tokens(), 0);
    }
    EXPECT_EQ(kv_->num_requests(), scheduler_->num_running());
    EXPECT_EQ(scheduler_->num_running() + scheduler_->num_waiting(),
              static_cast<int>(live_.size()));
    const kv::BlockPool& pool = kv_->block_pool();
    for (kv::BlockId b = 1; b < pool.num_blocks(); ++b) {
      const auto it = refs.find(b);
      EXPECT_EQ(pool.block(b).ref_count, it == refs.end() ? 0 : it->second) << "block " << b;
    }
    EXPECT_EQ(kv_->num_free_blocks(), pool.num_blocks() - 1 - static_cast<int>(refs.size()));
  }

  std::mt19937 rng_;
  Coverage& coverage_;
  int block_size_ = 0;
  int max_model_len_ = 0;
  SchedulerConfig config_;
  std::optional<kv::KVCacheManager> kv_;
  std::optional<Scheduler> scheduler_;
  std::optional<FakeRunner> runner_;
  std::map<kv::RequestId, LiveRequest> live_;
  kv::RequestId next_id_ = 1;
};

TEST(SchedulerProperty, RandomWorkloadsKeepEveryInvariant) {
  Coverage coverage;
  for (uint32_t seed = 0; seed < kNumSeeds; ++seed) {
    SCOPED_TRACE("seed " + std::to_string(seed));
    Simulation(seed, coverage).run();
    if (::testing::Test::HasFailure()) return;
  }
  EXPECT_GT(coverage.preemptions, 0);
  EXPECT_GT(coverage.prefix_hits, 0);
  EXPECT_GT(coverage.forks_shared, 0);
  EXPECT_GT(coverage.aborts_running, 0);
  EXPECT_GT(coverage.aborts_waiting, 0);
  EXPECT_GT(coverage.finished_length, 0);
  EXPECT_GT(coverage.drafts_scheduled, 0);
  EXPECT_GT(coverage.chunks, 0);
  std::printf(
      "coverage: preemptions=%lld prefix_hits=%lld forks=%lld aborts=%lld/%lld "
      "finished=%lld drafts=%lld chunks=%lld\n",
      static_cast<long long>(coverage.preemptions), static_cast<long long>(coverage.prefix_hits),
      static_cast<long long>(coverage.forks_shared),
      static_cast<long long>(coverage.aborts_running),
      static_cast<long long>(coverage.aborts_waiting),
      static_cast<long long>(coverage.finished_length),
      static_cast<long long>(coverage.drafts_scheduled), static_cast<long long>(coverage.chunks));
}

}  // namespace
}  // namespace pagoda::scheduler
