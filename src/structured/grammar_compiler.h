#pragma once
// Compiles request constraints against one model's vocabulary, each distinct constraint once:
// compiled grammars are cached by content (and shared by the requests using them).
#include <cstddef>
#include <future>
#include <list>
#include <memory>
#include <mutex>
#include <string>
#include <unordered_map>

#include "core/thread_pool.h"
#include "structured/compiled_grammar.h"
#include "structured/constraint.h"
#include "structured/state_cache.h"

namespace pagoda::structured {

/// Thread-safe. Concurrent requests for the same constraint wait for one compilation.
class GrammarCompiler {
 public:
  /// num_threads: the threads of its own pool (0: up to 8, one per hardware thread); capacity:
  /// how many compiled grammars the cache keeps (least recently used ones go first).
  GrammarCompiler(std::shared_ptr<const Vocabulary> vocab, int num_threads = 0,
                  size_t capacity = 256);

  /// The compiled grammar of c. Throws InvalidArgument for a bad constraint (not cached).
  [[nodiscard]] std::shared_ptr<const CompiledGrammar> compile(const Constraint& c);
  [[nodiscard]] const std::shared_ptr<const Vocabulary>& vocab() const { return vocab_; }
  [[nodiscard]] size_t cache_size() const;

 private:
  using Result = std::shared_future<std::shared_ptr<const CompiledGrammar>>;
  struct Entry {
    Result result;
    std::list<std::string>::iterator lru;
    uint64_t id = 0;  // tells a failed compilation's entry from a later one
  };
  std::shared_ptr<const Vocabulary> vocab_;
  ThreadPool pool_;
  StateCache state_cache_;
  size_t capacity_;
  mutable std::mutex mutex_;
  std::unordered_map<std::string, Entry> entries_;
  std::list<std::string> lru_;  // most recent first
  uint64_t next_id_ = 0;
};

}  // namespace pagoda::structured
