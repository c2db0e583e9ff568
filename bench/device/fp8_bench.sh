#!/usr/bin/env bash
# FP8 weights on the GPU in one device call: build the FP8 tests and bench_decode, run the FP8
# kernel tests (kernels/cuda/linear_fp8.h against the CPU references) and the GPU-vs-CPU FP8 model
# test, then the Llama-3.1-8B shape with dummy weights in bf16, FP8 quantized at load
# (--quantization fp8) and compressed-tensors FP8_DYNAMIC: batch 1, 16, 64 decode and a 512-token
# prefill. Issue 17's targets: batch-1 decode >= 440 tok/s, 512-token prefill >= 55,000 tok/s.
#
#   bench/device/fp8_bench.sh [--skip-tests]
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
device_build fp8_bench.sh kernels_cuda_test golden_gpu_test bench_decode

if [ $tests -eq 1 ]; then
  timeout 240 "$build/tests/kernel/cuda/kernels_cuda_test" --gtest_filter='CudaFp8.*' \
    >"$out/test_fp8_kernels.log" 2>&1
  echo "FP8 kernel tests: exit $?"
  grep -E "Failure|Expected|Which is|error|FAILED|PASSED|OK \]" "$out/test_fp8_kernels.log" | head -30
  timeout 240 "$build/tests/golden/golden_gpu_test" --gtest_filter='Fp8Gpu.*' \
    >"$out/test_fp8_model.log" 2>&1
  echo "FP8 model tests (GPU vs CPU): exit $?"
  grep -E "Failure|Expected|Which is|error|FAILED|PASSED|OK \]" "$out/test_fp8_model.log" | head -30
fi

shape=(configs/llama-3.1-8b --device cuda --dtype bfloat16 --batches 1,16,64 --steps 64
       --context 512 --prefill 512)
for q in none fp8 compressed-tensors; do
  args=("${shape[@]}")
  [ "$q" != none ] && args+=(--quantization "$q")
  timeout 200 "$build/bench/model/bench_decode" "${args[@]}" >"$out/bench_fp8_$q.log" 2>&1
  echo "bench_decode, weights $q: exit $?"
  grep -E "^model|^weights|^prefill|^\|" "$out/bench_fp8_$q.log" | tail -8
done
echo "total: $(( $(date +%s) - start )) s"
