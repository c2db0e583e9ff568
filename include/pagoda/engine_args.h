#pragma once
// EngineArgs: everything that configures an engine, with vLLM's flag names in the comments.
#include <cstdint>
#include <optional>
#include <string>

namespace pagoda {

/// How an engine is built: the model, its weights and the limits of the KV cache and scheduler.
struct EngineArgs {
  std::string model;                 // Hugging Face model directory
  std::string tokenizer;             // tokenizer.json or directory; default: the model's
  std::string load_format = "auto";  // --load-format: auto (safetensors) or dummy
  std::string dtype = "auto";        // --dtype of dummy weights
  uint64_t seed = 0;                 // --seed: dummy weights, and requests without a seed
  int num_threads = 0;               // CPU threads; 0 = all cores
  int block_size = 16;               // --block-size, tokens per KV block
  int64_t kv_cache_memory_bytes = int64_t{1} << 30;  // --kv-cache-memory
  bool enable_prefix_caching = true;                 // --[no-]enable-prefix-caching
  int max_num_batched_tokens = 2048;                 // --max-num-batched-tokens
  int max_num_seqs = 256;                            // --max-num-seqs
  int64_t max_model_len = 0;                         // --max-model-len; 0 = the model's maximum
  std::string scheduling_policy = "fcfs";            // --scheduling-policy: fcfs or priority
};

}  // namespace pagoda
