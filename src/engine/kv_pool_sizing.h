#pragma once
// Sizes of the engine's KV pools (kv_pool_sizing.cc): the device pool's bytes from
// --kv-cache-memory or, on a GPU, vLLM's --gpu-memory-utilization rule after the profile run; the
// host tier of --kv-offloading-size.
#include <cstdint>
#include <memory>

#include "kv/host_kv_tier.h"
#include "kv/kv_cache_spec.h"
#include "pagoda/engine_args.h"

namespace pagoda {

class Executor;

/// The host KV tier of --kv-offloading-size: as many blocks as fit in its bytes; none for 0.
/// InvalidArgument for a negative size, one without prefix caching, or one holding no block.
std::unique_ptr<kv::HostKVTier> make_host_tier(const EngineArgs& args, const kv::KVCacheSpec& spec);

/// Bytes of the device KV pool: --kv-cache-memory when given; else on a GPU the utilization
/// budget less what is in use after the profile run and a margin for graphs and the sampler;
/// else (CPU) 4 GiB. InvalidArgument when the utilization is out of (0, 1] or leaves nothing.
int64_t kv_pool_bytes(const EngineArgs& args, Executor& executor);

}  // namespace pagoda
