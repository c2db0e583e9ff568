#include "cli/engine_flags.h"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>

#include "cli/runtime_env.h"
#include "cli/speculative_config.h"
#include "core/status.h"
#include "kv/kv_cache_spec.h"
#include "kv/memory_size.h"

namespace pagoda::cli {

int64_t parse_kv_offloading_size(const std::string& text) {
  const bool plain_number = !text.empty() &&
                            text.find_first_not_of("0123456789.") == std::string::npos &&
                            std::count(text.begin(), text.end(), '.') <= 1 && text != ".";
  if (plain_number) {
    const double gib = std::strtod(text.c_str(), nullptr);
    const double bytes = std::floor(gib * static_cast<double>(int64_t{1} << 30));
    if (!(bytes < 9.2e18)) {
      throw InvalidArgument(fmt::format("--kv-offloading-size: {} GiB is too large", text));
    }
    return static_cast<int64_t>(bytes);
  }
  try {
    return kv::parse_memory_size(text);
  } catch (const InvalidArgument& e) {
    throw InvalidArgument(fmt::format(
        "--kv-offloading-size: {} (a number of GiB such as 8 or 0.5, or a size such as 512M; 0: "
        "off)",
        e.what()));
  }
}

EngineArgs EngineFlags::to_engine_args() const {
  if (pipeline_parallel_size != 1) {
    throw InvalidArgument(fmt::format(
        "--pipeline-parallel-size {}: pagoda splits a model by tensor parallelism only (only 1)",
        pipeline_parallel_size));
  }
  if (data_parallel_size != 1) {
    throw InvalidArgument(
        fmt::format("--data-parallel-size {}: engine replicas are `pagoda serve`'s (only 1 here)",
                    data_parallel_size));
  }
  if (tensor_parallel_size < 1 || tensor_parallel_size > 64) {
    throw InvalidArgument(
        fmt::format("--tensor-parallel-size {}: must be in [1, 64]", tensor_parallel_size));
  }
  if (decode_context_parallel_size < 1 ||
      tensor_parallel_size % decode_context_parallel_size != 0) {
    throw InvalidArgument(
        fmt::format("--decode-context-parallel-size {}: must divide --tensor-parallel-size {}",
                    decode_context_parallel_size, tensor_parallel_size));
  }
  (void)kv::parse_kv_cache_dtype(args.kv_cache_dtype);  // a bad name fails here, by its flag
  if (tokenizer_mode != "auto" && tokenizer_mode != "hf" && tokenizer_mode != "slow") {
    throw InvalidArgument(fmt::format(
        "--tokenizer-mode {}: only auto, hf or slow (all read tokenizer.json)", tokenizer_mode));
  }
  if (no_enable_chunked_prefill) {
    spdlog::warn(
        "--no-enable-chunked-prefill is ignored: long prompts are always prefilled in "
        "chunks of --max-num-batched-tokens");
  }
  if (swap_space >= 0) {
    spdlog::warn("--swap-space is ignored: a preempted request is recomputed, not swapped");
  }
  EngineArgs a = args;
  a.tensor_parallel_size = tensor_parallel_size;
  a.decode_context_parallel_size = decode_context_parallel_size;
  // -tp N runs a worker process per rank: mp unless the flag says otherwise (then the executor
  // refuses uni by name).
  a.distributed_executor_backend = !distributed_executor_backend.empty()
                                       ? distributed_executor_backend
                                   : tensor_parallel_size > 1 ? "mp"
                                                              : "uni";
  if (kv_cache_memory != "auto") {
    try {
      a.kv_cache_memory_bytes = kv::parse_memory_size(kv_cache_memory);
    } catch (const InvalidArgument& e) {
      throw InvalidArgument(fmt::format("--kv-cache-memory: {}", e.what()));
    }
  }
  a.kv_offloading_bytes = parse_kv_offloading_size(kv_offloading_size);
  if (kv_offloading_backend != "native") {
    throw InvalidArgument(fmt::format(
        "--kv-offloading-backend {}: only native (pagoda's host KV tier)", kv_offloading_backend));
  }
  if (!speculative_config.empty()) {
    try {
      a.speculative_config = parse_speculative_config(speculative_config);
    } catch (const InvalidArgument& e) {
      throw InvalidArgument(fmt::format("--speculative-config: {}", e.what()));
    }
  }
  a.enable_prefix_caching = !no_prefix_caching;
  a.quantization = quantization;  // checked against the checkpoint at load (model/quant/)
  a.runtime = runtime_options_from_env(a.runtime);
  return a;
}

void add_engine_flags(CLI::App* cmd, EngineFlags& f, bool model_flag) {
  if (model_flag)
    cmd->add_option("--model", f.args.model,
                    "Hugging Face model directory, or a Hub repo id (org/name) to take from the "
                    "Hugging Face cache or download into it")
        ->required();
  cmd->add_option("--tokenizer", f.args.tokenizer,
                  "tokenizer.json, a directory or a Hub repo id (default: the model's)");
  cmd->add_option("--load-format", f.args.load_format,
                  "auto (safetensors) or dummy (random weights)")
      ->check(CLI::IsMember({"auto", "safetensors", "dummy"}));
  cmd->add_option("--dtype", f.args.dtype,
                  "weights' dtype: auto (the checkpoint's), float32, bfloat16, float16; the CPU "
                  "converts a checkpoint of another dtype at load");
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
  cmd->add_option("--kv-offloading-size", f.kv_offloading_size,
                  "host-memory KV tier behind the KV cache, in GiB (vLLM's; or a size such as "
                  "512M): evicted blocks are kept there and loaded back on a prefix hit (default "
                  "0: off)");
  cmd->add_option("--kv-offloading-backend", f.kv_offloading_backend,
                  "native (the host KV tier; vLLM's lmcache is not available)");
  cmd->add_option("--max-num-batched-tokens", f.args.max_num_batched_tokens,
                  "token budget per step")
      ->check(CLI::PositiveNumber);
  cmd->add_option("--max-num-seqs", f.args.max_num_seqs, "requests per step at most")
      ->check(CLI::PositiveNumber);
  cmd->add_option("--max-model-len", f.args.max_model_len,
                  "prompt + output length limit (default: the model's)");
  cmd->add_option("--scheduling-policy", f.args.scheduling_policy, "fcfs or priority")
      ->check(CLI::IsMember({"fcfs", "priority"}));
  cmd->add_flag("--enforce-eager", f.args.enforce_eager, "no CUDA graphs (GPU)");
  cmd->add_option("--cpu-bf16-matmul", f.args.cpu_bf16_matmul,
                  "CPU prefill matmuls with bf16 weights: exact (fp32 products, default) or round "
                  "(activations rounded to bf16, about twice as fast without AMX)")
      ->check(CLI::IsMember({"exact", "round"}));
  cmd->add_option("--cpu-matmul", f.args.cpu_matmul,
                  "CPU matmuls past the decode sizes: batch-invariant (default: a request's "
                  "log-probabilities have the same bits alone and in any batch) or onednn (faster "
                  "prefill; the last bits depend on the batch)")
      ->check(CLI::IsMember({"batch-invariant", "onednn"}));
  cmd->add_option("--distributed-executor-backend", f.distributed_executor_backend,
                  "uni: the model on the engine's thread (default with one rank); mp: in a worker "
                  "process per rank (default with --tensor-parallel-size > 1)")
      ->check(CLI::IsMember({"uni", "mp"}));
  cmd->add_option("--structured-outputs-jump-forward", f.args.structured_outputs_jump_forward,
                  "tokens of grammar-forced text a greedy constrained request may take per step "
                  "when it runs alone (0: off)")
      ->check(CLI::NonNegativeNumber);

  cmd->add_option(
      "--kv-cache-dtype", f.args.kv_cache_dtype,
      "KV cache element type: auto (the checkpoint's, else fp32 on the CPU and the "
      "activation dtype on a GPU), fp8 (= fp8_e4m3), fp8_e4m3, fp8_e5m2, int8, bfloat16, "
      "float16; fp8/int8 use per-layer k/v scales (the checkpoint's, else 1.0). A GPU keeps "
      "16-bit caches in its activation dtype");
  cmd->add_flag("--calculate-kv-scales", f.args.calculate_kv_scales,
                "fp8/int8 KV cache: each layer's k/v scales from the first forward's K/V maxima "
                "(vLLM's rule) instead of the checkpoint's; CPU only for now");
  cmd->add_option("--speculative-config", f.speculative_config,
                  "speculative decoding, vLLM's JSON: {\"method\": \"ngram\", "
                  "\"num_speculative_tokens\": 4, \"prompt_lookup_min\": 2, "
                  "\"prompt_lookup_max\": 5}");

  // vLLM's flags that launch scripts carry (see EngineFlags).
  auto* vllm = "vLLM compatibility";
  // -tp, -pp, -dp and -dcp are spelled out before parsing (main.cc).
  cmd->add_option("--tensor-parallel-size", f.tensor_parallel_size,
                  "ranks of tensor parallelism, one worker process each (CPU)")
      ->group(vllm);
  cmd->add_option("--decode-context-parallel-size", f.decode_context_parallel_size,
                  "groups of this many tensor-parallel ranks spread each sequence's KV cache "
                  "over their members by position (CPU; divides --tensor-parallel-size)")
      ->group(vllm);
  cmd->add_option("--pipeline-parallel-size", f.pipeline_parallel_size, "only 1")->group(vllm);
  cmd->add_option("--data-parallel-size", f.data_parallel_size,
                  "serve: engine replicas behind one balancer, each with its own KV pool")
      ->group(vllm);
  cmd->add_option("--quantization,-q", f.quantization,
                  "fp8, gptq, awq, compressed-tensors, modelopt, modelopt_fp4 (default: the "
                  "checkpoint's; fp8 on a float checkpoint quantizes at load)")
      ->group(vllm);
  cmd->add_option("--tokenizer-mode", f.tokenizer_mode, "auto, hf or slow")->group(vllm);
  cmd->add_flag("--trust-remote-code", f.trust_remote_code,
                "accepted; pagoda never runs code from a model directory")
      ->group(vllm);
  cmd->add_flag("--enable-chunked-prefill", f.enable_chunked_prefill, "always on")->group(vllm);
  cmd->add_flag("--no-enable-chunked-prefill", f.no_enable_chunked_prefill, "ignored (warns)")
      ->group(vllm);
  cmd->add_option("--swap-space", f.swap_space, "ignored (warns)")->group(vllm);
  cmd->add_option("--revision", f.revision, "branch, tag or commit of a Hub model (default main)")
      ->group(vllm);
  cmd->add_option("--tokenizer-revision", f.tokenizer_revision,
                  "branch, tag or commit of a Hub --tokenizer (default main)")
      ->group(vllm);
  cmd->add_option("--download-dir", f.download_dir,
                  "the Hugging Face cache directory (default: HF_HUB_CACHE, $HF_HOME/hub or "
                  "~/.cache/huggingface/hub)")
      ->group(vllm);
}

}  // namespace pagoda::cli
