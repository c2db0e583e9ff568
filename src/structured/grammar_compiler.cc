#include "structured/grammar_compiler.h"

#include <algorithm>
#include <thread>

namespace pagoda::structured {
namespace {

int pool_size(int requested) {
  if (requested > 0) return requested;
  return std::clamp(static_cast<int>(std::thread::hardware_concurrency()), 1, 8);
}

}  // namespace

GrammarCompiler::GrammarCompiler(std::shared_ptr<const Vocabulary> vocab, int num_threads,
                                 size_t capacity)
    : vocab_(std::move(vocab)),
      pool_(pool_size(num_threads)),
      capacity_(std::max<size_t>(capacity, 1)) {}

size_t GrammarCompiler::cache_size() const {
  std::lock_guard lock(mutex_);
  return entries_.size();
}

std::shared_ptr<const CompiledGrammar> GrammarCompiler::compile(const Constraint& c) {
  const std::string key = c.cache_key();
  std::promise<std::shared_ptr<const CompiledGrammar>> promise;
  Result result;
  uint64_t id = 0;
  {
    std::lock_guard lock(mutex_);
    auto it = entries_.find(key);
    if (it != entries_.end()) {
      lru_.splice(lru_.begin(), lru_, it->second.lru);
      result = it->second.result;
    } else {
      result = promise.get_future().share();
      id = ++next_id_;
      lru_.push_front(key);
      entries_.emplace(key, Entry{result, lru_.begin(), id});
      while (entries_.size() > capacity_) {
        entries_.erase(lru_.back());
        lru_.pop_back();
      }
    }
  }
  if (id == 0) return result.get();  // compiled (or being compiled) by another request
  try {
    std::shared_ptr<const CompiledGrammar> g =
        compile_grammar(build_grammar(c), vocab_, &pool_, &state_cache_);
    promise.set_value(g);
    return g;
  } catch (...) {
    promise.set_exception(std::current_exception());
    std::lock_guard lock(mutex_);
    auto it = entries_.find(key);
    if (it != entries_.end() && it->second.id == id) {  // errors are not kept
      lru_.erase(it->second.lru);
      entries_.erase(it);
    }
    throw;
  }
}

}  // namespace pagoda::structured
