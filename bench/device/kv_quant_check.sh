#!/usr/bin/env bash
# The quantized KV cache on the GPU in one short device call: its kernel tests (attention over
# code caches against the CPU, rope_and_cache's codes) and the 8B shape's decode at batch 64 and
# context 4096 with --kv-cache-dtype auto and fp8. Carry `.device`.
set -uo pipefail
cd "$(dirname "$0")/../.."
source bench/device/device_env.sh
b=/tmp/build-cuda
cmake -S . -B $b "${flags[@]}" >/tmp/cfg.log 2>&1 &&
  ninja -C $b -j "$(nproc)" kernels_cuda_test bench_decode >/tmp/b.log 2>&1 ||
  { grep -E "error" -A3 /tmp/b.log | head -40; exit 1; }
$b/tests/kernel/cuda/kernels_cuda_test --gtest_filter='*Quantized*' 2>&1 | grep -E "PASSED|FAILED|Failure" | head
for kv in ${KV_DTYPES:-auto fp8}; do
  echo "== --kv-cache-dtype $kv"
  $b/bench/model/bench_decode configs/llama-3.1-8b --device cuda --batches 64 --steps 16 \
    --context 4096 --kv-cache-dtype "$kv" 2>&1 | grep "^| 64"
done
