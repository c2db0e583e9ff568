#include "cli/engine_flags.h"

#include "core/status.h"
#include "kv/memory_size.h"

namespace pagoda::cli {

EngineArgs EngineFlags::to_engine_args() const {
  EngineArgs a = args;
  if (kv_cache_memory != "auto") {
    try {
      a.kv_cache_memory_bytes = kv::parse_memory_size(kv_cache_memory);
    } catch (const InvalidArgument& e) {
      throw InvalidArgument(fmt::format("--kv-cache-memory: {}", e.what()));
    }
  }
  a.enable_prefix_caching = !no_prefix_caching;
  return a;
}

void add_engine_flags(CLI::App* cmd, EngineFlags& f, bool model_flag) {
  if (model_flag)
    cmd->add_option("--model", f.args.model, "Hugging Face model directory")->required();
  cmd->add_option("--tokenizer", f.args.tokenizer,
                  "tokenizer.json or directory (default: the model's)");
  cmd->add_option("--load-format", f.args.load_format,
                  "auto (safetensors) or dummy (random weights)")
      ->check(CLI::IsMember({"auto", "safetensors", "dummy"}));
  cmd->add_option("--dtype", f.args.dtype,
                  "dummy weights' dtype: auto, float32, bfloat16, float16");
  cmd->add_option("--threads", f.args.num_threads, "CPU threads (default: all cores)");
  cmd->add_option("--block-size", f.args.block_size, "tokens per KV cache block")
      ->check(CLI::Range(1, 1024));
  cmd->add_option("--kv-cache-memory", f.kv_cache_memory,
                  "KV cache size, e.g. 4G, 512M (default auto: 4G on the CPU; on a GPU what "
                  "--gpu-memory-utilization leaves)");
  cmd->add_option("--device", f.args.device, "auto (a GPU if present), cpu or cuda")
      ->check(CLI::IsMember({"auto", "cpu", "cuda"}));
  cmd->add_option("--gpu-memory-utilization", f.args.gpu_memory_utilization,
                  "fraction of GPU memory for weights, activations and KV cache (default 0.9)");
  cmd->add_flag("--enable-prefix-caching", f.prefix_caching,
                "reuse KV blocks of shared prefixes (default)");
  cmd->add_flag("--no-enable-prefix-caching", f.no_prefix_caching, "turn prefix caching off");
  cmd->add_option("--max-num-batched-tokens", f.args.max_num_batched_tokens,
                  "token budget per step")
      ->check(CLI::PositiveNumber);
  cmd->add_option("--max-num-seqs", f.args.max_num_seqs, "requests per step at most")
      ->check(CLI::PositiveNumber);
  cmd->add_option("--max-model-len", f.args.max_model_len,
                  "prompt + output length limit (default: the model's)");
  cmd->add_option("--scheduling-policy", f.args.scheduling_policy, "fcfs or priority")
      ->check(CLI::IsMember({"fcfs", "priority"}));
}

}  // namespace pagoda::cli
