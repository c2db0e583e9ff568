#!/usr/bin/env bash
# The engine's features on the GPU in one device call: build the gpu test targets and the pagoda
# binary, run `ctest -L gpu`, then greedy `pagoda generate` on stories260K plainly and with each
# feature that must not change greedy output (a draft model drafting for itself, n-gram
# speculation, the host KV tier behind a small pool) and with an fp8 KV cache (its output may
# differ); each prints the output's md5 and the engine's KV lines. Carry `.device`.
set -uo pipefail
cd "$(dirname "$0")/../.."
source bench/device/device_env.sh; b=/tmp/build-cuda
cmake -S . -B $b "${flags[@]}" > /tmp/cfg.log 2>&1 && ninja -C $b -j16 kernels_cuda_test golden_gpu_test runtime_gpu_test engine_gpu_test engine_gpu_worker_test weight_streamer_gpu_test pagoda > /tmp/b.log 2>&1 || { grep -E "error" -A3 /tmp/b.log | head -40; exit 1; }
(cd $b && ctest -L gpu -j1 2>&1 | grep -E "tests passed|Failed|\*\*\*" )
P=$b/pagoda; M=models/stories260K
g() { $P generate --model $M --device cuda --prompt "Once upon a time" --prompt "The little dog" --max-tokens 64 --temperature 0 "$@" 2>/tmp/err.log | md5sum; grep -iE "error|spec|host KV|KV cache" /tmp/err.log | head -4; }
echo plain; g
echo draft; g --speculative-config '{"model": "models/stories260K", "num_speculative_tokens": 4}'
echo ngram; g --speculative-config '{"method": "ngram", "num_speculative_tokens": 4, "prompt_lookup_max": 3, "prompt_lookup_min": 1}'
echo hosttier; g --kv-offloading-size 0.001 --kv-cache-memory 4M
echo fp8kv; g --kv-cache-dtype fp8
