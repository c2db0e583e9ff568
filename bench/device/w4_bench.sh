#!/usr/bin/env bash
# GPTQ / AWQ 4-bit weights on the GPU in one device call: build the W4 tests and benchmarks, run the
# W4 kernel tests (kernels/cuda/linear_w4.h against the CPU reference dequantization) and the
# GPU-vs-CPU GPTQ / AWQ model tests, the W4 GEMV on the batch-1 Llama-8B projections
# (bench_kernels_cuda w4), then the Llama-3.1-8B shape with dummy weights in bf16, GPTQ and AWQ
# (4-bit, group 128): batch 1, 16, 64 decode and a 512-token prefill. Issue 17's target: batch-1
# decode >= 650 tok/s (the byte bound is ~880 tok/s at the measured 4.19 TB/s: docs/engine.md).
#
#   bench/device/w4_bench.sh [--skip-tests]
#
# Carry `.device` as for run.sh. Logs go to $OUT/; the summary is printed.
set -uo pipefail
cd "$(dirname "$0")/../.."
out=${OUT:-/tmp/pagoda-device-out}
mkdir -p "$out"
tests=1
for a in "$@"; do
  case $a in
    --skip-tests) tests=0 ;;
  esac
done
start=$(date +%s)
source bench/device/device_env.sh
device_build w4_bench.sh kernels_cuda_test golden_gpu_test bench_kernels_cuda bench_decode

if [ $tests -eq 1 ]; then
  timeout 300 "$build/tests/kernel/cuda/kernels_cuda_test" --gtest_filter='CudaW4.*' \
    >"$out/test_w4_kernels.log" 2>&1
  echo "W4 kernel tests: exit $?"
  grep -E "Failure|Expected|Which is|error|FAILED|PASSED|OK \]" "$out/test_w4_kernels.log" | head -30
  timeout 240 "$build/tests/golden/golden_gpu_test" --gtest_filter='W4Gpu.*' \
    >"$out/test_w4_model.log" 2>&1
  echo "W4 model tests (GPU vs CPU): exit $?"
  grep -E "Failure|Expected|Which is|error|FAILED|PASSED|OK \]" "$out/test_w4_model.log" | head -30
fi

timeout 120 "$build/bench/kernels_cuda/bench_kernels_cuda" w4 >"$out/bench_w4_gemv.log" 2>&1
echo "bench_kernels_cuda w4: exit $?"
grep -E "^#|^##|^qkv|^o |^gate_up|^down|FAIL" "$out/bench_w4_gemv.log"

shape=(configs/llama-3.1-8b --device cuda --dtype bfloat16 --batches 1,16,64 --steps 64
       --context 512 --prefill 512)
for q in ${W4_QUANTS:-none gptq awq}; do  # W4_QUANTS="gptq awq": skip bf16
  args=("${shape[@]}")
  [ "$q" != none ] && args+=(--quantization "$q")
  timeout 200 "$build/bench/model/bench_decode" "${args[@]}" >"$out/bench_w4_$q.log" 2>&1
  echo "bench_decode, weights $q: exit $?"
  grep -E "^model|^weights|^prefill|^\|" "$out/bench_w4_$q.log" | tail -8
done
echo "total: $(( $(date +%s) - start )) s"
