#pragma once
// EngineArgs: everything that configures an engine, with vLLM's flag names in the comments.
#include <cstdint>
#include <functional>
#include <optional>
#include <string>

namespace pagoda {

/// How an engine is built: the model, its weights and the limits of the KV cache and scheduler.
struct EngineArgs {
  std::string model;                    // Hugging Face model directory
  std::string tokenizer;                // tokenizer.json or directory; default: the model's
  std::string load_format = "auto";     // --load-format: auto (safetensors) or dummy
  std::string dtype = "auto";           // --dtype: weights/activations (GPU) or dummy weights (CPU)
  std::string device = "auto";          // --device: auto (the GPU if present), cpu or cuda
  double gpu_memory_utilization = 0.9;  // --gpu-memory-utilization: GPU memory pagoda may use
  uint64_t seed = 0;                    // --seed: dummy weights, and requests without a seed
  int num_threads = 0;                  // CPU threads; 0 = all cores
  int block_size = 16;                  // --block-size, tokens per KV block
  /// --kv-cache-memory; 0 = automatic: 4 GiB on the CPU, on a GPU what --gpu-memory-utilization
  /// leaves after the weights and a reserve for activations.
  int64_t kv_cache_memory_bytes = 0;
  bool enable_prefix_caching = true;       // --[no-]enable-prefix-caching
  int max_num_batched_tokens = 2048;       // --max-num-batched-tokens
  int max_num_seqs = 256;                  // --max-num-seqs
  int64_t max_model_len = 0;               // --max-model-len; 0 = the model's maximum
  std::string scheduling_policy = "fcfs";  // --scheduling-policy: fcfs or priority
  bool enforce_eager = false;              // --enforce-eager: no CUDA graphs
  /// --cpu-bf16-matmul: exact (fp32 products, the reference) or round (activations rounded to bf16
  /// in the CPU's prefill matmuls with bf16 weights: about twice as fast without AMX).
  std::string cpu_bf16_matmul = "exact";
  /// Called with the fraction of the weights loaded (0..1) during the constructor; may be empty.
  std::function<void(double)> load_progress;
};

}  // namespace pagoda
