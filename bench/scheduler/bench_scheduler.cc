// Host cost of the scheduler per engine step: schedule() + update_from_output() with 256 running
// decode requests, and under a mixed prefill/decode load with arrivals and completions. Prints the
// median and p99 in microseconds and as a share of a 5 ms GPU step (the target: well under 1%).
// Not a test. Usage: bench_scheduler [num_steps]
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <random>
#include <utility>
#include <vector>

#include "kv/kv_cache_manager.h"
#include "scheduler/scheduler.h"

namespace {

using pagoda::kv::RequestId;
using pagoda::scheduler::Request;
using pagoda::scheduler::Scheduler;
using pagoda::scheduler::SchedulerOutput;
using Clock = std::chrono::steady_clock;
using NewTokens = std::vector<std::pair<RequestId, std::vector<int32_t>>>;

constexpr double kGpuStepUs = 5000.0;

std::vector<int32_t> make_prompt(int length, std::mt19937& rng) {
  std::vector<int32_t> tokens(length);
  for (int32_t& t : tokens) t = static_cast<int32_t>(rng() % 32000);
  return tokens;
}

// What the engine would hand back: one token for every request whose step sampled.
NewTokens sample(const SchedulerOutput& output, std::mt19937& rng) {
  NewTokens tokens;
  tokens.reserve(output.scheduled.size());
  for (const auto& s : output.scheduled) {
    if (s.samples)
      tokens.emplace_back(s.id, std::vector<int32_t>{static_cast<int32_t>(rng() % 32000)});
  }
  return tokens;
}

struct Timing {
  std::vector<double> schedule_us, update_us, total_us;
  double avg_batch = 0, avg_tokens = 0;
};

double percentile(std::vector<double> v, double p) {
  std::sort(v.begin(), v.end());
  return v[std::min(v.size() - 1, static_cast<size_t>(p * static_cast<double>(v.size())))];
}

void report(const char* name, const Timing& t) {
  const double med = percentile(t.total_us, 0.5), p99 = percentile(t.total_us, 0.99);
  std::printf(
      "%-34s batch %6.1f reqs %7.1f tokens | schedule %6.2f us  update %6.2f us | "
      "total median %6.2f us (%.3f%% of 5 ms)  p99 %6.2f us (%.3f%%)\n",
      name, t.avg_batch, t.avg_tokens, percentile(t.schedule_us, 0.5), percentile(t.update_us, 0.5),
      med, 100 * med / kGpuStepUs, p99, 100 * p99 / kGpuStepUs);
}

// Times `num_steps` steps; `between` runs untimed after each one (arrivals, as the engine's
// input queue would add them).
template <typename Between>
Timing run(Scheduler& scheduler, int num_steps, std::mt19937& rng, Between between) {
  Timing t;
  for (int i = 0; i < num_steps; ++i) {
    const auto t0 = Clock::now();
    const SchedulerOutput output = scheduler.schedule();
    const auto t1 = Clock::now();
    const NewTokens tokens = sample(output, rng);
    const auto t2 = Clock::now();
    const std::vector<RequestId> finished = scheduler.update_from_output(output, tokens);
    const auto t3 = Clock::now();
    const double s = std::chrono::duration<double, std::micro>(t1 - t0).count();
    const double u = std::chrono::duration<double, std::micro>(t3 - t2).count();
    t.schedule_us.push_back(s);
    t.update_us.push_back(u);
    t.total_us.push_back(s + u);
    t.avg_batch += static_cast<double>(output.scheduled.size()) / num_steps;
    t.avg_tokens += static_cast<double>(output.total_num_scheduled_tokens) / num_steps;
    between(finished);
  }
  return t;
}

void bench_decode(int num_steps) {
  pagoda::kv::KVCacheManager kv({.num_blocks = 256 * 160 + 1, .block_size = 16});
  Scheduler scheduler({.max_num_batched_tokens = 2048, .max_num_seqs = 256, .max_model_len = 2560},
                      kv);
  std::mt19937 rng(1);
  for (RequestId id = 0; id < 256; ++id) {
    scheduler.add_request(std::make_unique<Request>(id, make_prompt(512, rng), 2000));
  }
  // Prefill everything first (256 x 512 tokens in 2048-token steps), untimed.
  while (true) {
    const SchedulerOutput output = scheduler.schedule();
    scheduler.update_from_output(output, sample(output, rng));
    bool all_decoding = scheduler.num_waiting() == 0;
    for (const auto& s : output.scheduled) all_decoding &= s.num_new_tokens == 1;
    if (all_decoding) break;
  }
  report("256 running decodes", run(scheduler, num_steps, rng, [](const auto&) {}));
}

void bench_mixed(int num_steps, bool small_pool) {
  // A steady state of arrivals and completions: prompts of 64..1024 tokens, 16..256 outputs,
  // half of them sharing a 256-token system prompt.
  const int num_blocks = small_pool ? 4096 : 256 * 90 + 1;
  pagoda::kv::KVCacheManager kv({.num_blocks = num_blocks, .block_size = 16});
  Scheduler scheduler({.max_num_batched_tokens = 2048, .max_num_seqs = 256, .max_model_len = 1280},
                      kv);
  std::mt19937 rng(2);
  const std::vector<int32_t> system_prompt = make_prompt(256, rng);
  RequestId next_id = 0;
  auto submit = [&] {
    std::vector<int32_t> prompt = make_prompt(64 + static_cast<int>(rng() % 961), rng);
    if (rng() % 2 == 0)
      std::copy_n(system_prompt.begin(), std::min<size_t>(256, prompt.size()), prompt.begin());
    scheduler.add_request(std::make_unique<Request>(next_id++, std::move(prompt),
                                                    16 + static_cast<int>(rng() % 241)));
  };
  for (int i = 0; i < 300; ++i) submit();
  auto keep_full = [&](const std::vector<RequestId>& finished) {
    for (size_t i = 0; i < finished.size(); ++i) submit();
  };
  run(scheduler, 300, rng, keep_full);  // warm up into the steady state, untimed
  const int64_t preemptions_before = scheduler.num_preemptions_total();
  const Timing t = run(scheduler, num_steps, rng, keep_full);
  report(small_pool ? "mixed prefill/decode, small pool" : "mixed prefill/decode", t);
  if (small_pool) {
    std::printf("%-34s %lld preemptions in %d steps\n", "",
                static_cast<long long>(scheduler.num_preemptions_total() - preemptions_before),
                num_steps);
  }
}

}  // namespace

int main(int argc, char** argv) {
  const int num_steps = argc > 1 ? std::atoi(argv[1]) : 2000;
  bench_decode(std::min(num_steps, 1400));  // past ~1480 steps requests start finishing
  bench_mixed(num_steps, /*small_pool=*/false);
  bench_mixed(num_steps, /*small_pool=*/true);
  return 0;
}
