// Sizes of the engine's KV pools: the device pool's byte budget and the host tier.
#include "engine/kv_pool_sizing.h"

#include "core/logging.h"
#include "core/status.h"
#include "runtime/executor.h"

namespace pagoda {

// The host KV tier of --kv-offloading-size: as many blocks as fit in its bytes; none for 0.
std::unique_ptr<kv::HostKVTier> make_host_tier(const EngineArgs& args,
                                               const kv::KVCacheSpec& spec) {
  if (args.kv_offloading_bytes < 0) {
    throw InvalidArgument(
        fmt::format("--kv-offloading-size must be >= 0 (0: no host KV tier), got {} bytes",
                    args.kv_offloading_bytes));
  }
  if (args.kv_offloading_bytes == 0) return nullptr;
  if (!args.enable_prefix_caching) {
    throw InvalidArgument(
        "--kv-offloading-size needs prefix caching (the host tier is found by block hashes); drop "
        "--no-enable-prefix-caching or set --kv-offloading-size 0");
  }
  const int64_t block_bytes = spec.block_bytes(args.block_size);
  const int64_t num_blocks = args.kv_offloading_bytes / block_bytes;
  if (num_blocks < 1) {
    throw InvalidArgument(fmt::format(
        "--kv-offloading-size: {} bytes hold no KV block ({} bytes of {} tokens for this model)",
        args.kv_offloading_bytes, block_bytes, args.block_size));
  }
  auto tier = std::make_unique<kv::HostKVTier>(num_blocks, block_bytes);
  spdlog::info(
      "host KV tier (--kv-offloading-size): {} blocks of {} tokens = {} tokens ({:.1f} MiB)",
      num_blocks, args.block_size, num_blocks * args.block_size,
      static_cast<double>(num_blocks * block_bytes) / (1 << 20));
  return tier;
}

int64_t kv_pool_bytes(const EngineArgs& args, Executor& executor) {
  int64_t kv_memory = args.kv_cache_memory_bytes;
  if (kv_memory <= 0) {
    if (const auto memory = executor.device_memory()) {
      // vLLM's rule: the KV pool gets what the utilization budget leaves after what is in use now
      // (weights, and the activation, attention and logits buffers at the profile run's peak),
      // less a margin for the decode graphs and the sampler's buffers.
      const auto [free, total] = *memory;
      if (!(args.gpu_memory_utilization > 0 && args.gpu_memory_utilization <= 1)) {
        throw InvalidArgument(fmt::format("--gpu-memory-utilization must be in (0, 1], got {}",
                                          args.gpu_memory_utilization));
      }
      constexpr int64_t kGraphAndSamplerMargin = int64_t{512} << 20;
      kv_memory = static_cast<int64_t>(args.gpu_memory_utilization * static_cast<double>(total)) -
                  static_cast<int64_t>(total - free) - kGraphAndSamplerMargin;
      if (kv_memory <= 0) {
        throw InvalidArgument(
            fmt::format("--gpu-memory-utilization {} leaves no memory for the KV cache",
                        args.gpu_memory_utilization));
      }
    } else {
      kv_memory = int64_t{4} << 30;
    }
  }
  return kv_memory;
}

}  // namespace pagoda
