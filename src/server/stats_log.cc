#include "server/stats_log.h"

#include <fmt/format.h>
#include <spdlog/spdlog.h>

namespace pagoda::server {

std::optional<std::string> stats_line(const EngineStats& before, const EngineStats& now,
                                      double seconds) {
  const int64_t prompt = now.prompt_tokens - before.prompt_tokens;
  const int64_t generated = now.generation_tokens - before.generation_tokens;
  const bool busy = now.num_running > 0 || now.num_waiting > 0 || before.num_running > 0 ||
                    before.num_waiting > 0;
  if (prompt == 0 && generated == 0 && !busy) return std::nullopt;
  const double span = seconds > 0 ? seconds : 1.0;
  const int64_t queries = now.prefix_cache_queries_tokens - before.prefix_cache_queries_tokens;
  const int64_t hits = now.prefix_cache_hits_tokens - before.prefix_cache_hits_tokens;
  std::string line = fmt::format(
      "Avg prompt throughput: {:.1f} tokens/s, Avg generation throughput: {:.1f} tokens/s, "
      "Running: {} reqs, Waiting: {} reqs, KV cache usage: {:.1f}%, Prefix cache hit rate: "
      "{:.1f}%",
      static_cast<double>(prompt) / span, static_cast<double>(generated) / span, now.num_running,
      now.num_waiting, 100.0 * now.kv_cache_usage,
      queries > 0 ? 100.0 * static_cast<double>(hits) / static_cast<double>(queries) : 0.0);
  // vLLM's SpecDecoding line, over the interval: drafts accepted of those verified, and the
  // tokens per verification (1 + accepted drafts per draft).
  const int64_t drafts = now.spec_decode_num_drafts - before.spec_decode_num_drafts;
  const int64_t draft_tokens =
      now.spec_decode_num_draft_tokens - before.spec_decode_num_draft_tokens;
  const int64_t accepted =
      now.spec_decode_num_accepted_tokens - before.spec_decode_num_accepted_tokens;
  if (drafts > 0) {
    line += fmt::format(
        ", SpecDecoding: mean acceptance length {:.2f}, accepted {}/{} draft tokens ({:.1f}%)",
        1.0 + static_cast<double>(accepted) / static_cast<double>(drafts), accepted, draft_tokens,
        100.0 * static_cast<double>(accepted) / static_cast<double>(draft_tokens));
  }
  return line;
}

StatsLogger::StatsLogger(const EngineCore& engine, std::chrono::milliseconds interval)
    : engine_(engine), interval_(interval), thread_([this] { run(); }) {}

StatsLogger::~StatsLogger() {
  {
    std::lock_guard lock(mutex_);
    stop_ = true;
  }
  wake_.notify_all();
  thread_.join();
}

void StatsLogger::run() {
  using Clock = std::chrono::steady_clock;
  EngineStats last = engine_.stats();
  Clock::time_point last_time = Clock::now();
  std::unique_lock lock(mutex_);
  while (!wake_.wait_for(lock, interval_, [this] { return stop_; })) {
    lock.unlock();
    const EngineStats now = engine_.stats();
    const Clock::time_point t = Clock::now();
    if (auto line = stats_line(last, now, std::chrono::duration<double>(t - last_time).count()))
      spdlog::info("{}", *line);
    last = now;
    last_time = t;
    lock.lock();
  }
}

}  // namespace pagoda::server
