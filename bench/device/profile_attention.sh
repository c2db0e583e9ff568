#!/usr/bin/env bash
# Nsight Compute's speed-of-light and warp-stall sections for the paged-attention decode kernel of
# the Llama-3.1-8B shape (batch 64, context 4096), once per --kv-cache-dtype given (default: auto
# fp8): where a cache dtype's attention spends its time. Builds bench_decode into /tmp/build-cuda.
# Carry `.device`.
#
#   bench/device/profile_attention.sh [kv-dtype ...]
set -uo pipefail
cd "$(dirname "$0")/../.."
out=${OUT:-/tmp/pagoda-device-out}
mkdir -p "$out"
source bench/device/device_env.sh
build=/tmp/build-cuda
cmake -S . -B "$build" "${flags[@]}" >"$out/build.log" 2>&1 &&
  ninja -C "$build" -j "$(nproc)" bench_decode >>"$out/build.log" 2>&1 ||
  { grep -E "error" -A3 "$out/build.log" | head -30; exit 1; }
for kv in "${@:-auto fp8}"; do
  for dtype in $kv; do
    echo "== --kv-cache-dtype $dtype"
    PAGODA_ENFORCE_EAGER=1 timeout 240 ncu --clock-control none --section SpeedOfLight \
      --section WarpStateStats --section Occupancy -k regex:attention_kernel --launch-skip 40 \
      --launch-count 1 "$build/bench/model/bench_decode" configs/llama-3.1-8b --device cuda \
      --batches 64 --steps 4 --context 4096 --kv-cache-dtype "$dtype" >"$out/ncu_$dtype.txt" 2>&1
    grep -E "attention_kernel|Duration|Memory Throughput|DRAM Throughput|Compute \(SM\)|Achieved Occupancy|Theoretical Occupancy|Stall|Warp Cycles Per Issued|Block Limit" \
      "$out/ncu_$dtype.txt" | head -30
  done
done
