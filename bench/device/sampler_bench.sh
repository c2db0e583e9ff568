#!/usr/bin/env bash
# The GPU sampler (issue 24) in one device call: build the kernel tests and bench_kernels_cuda, run
# the sampler's tests (sample_logits against the CPU sampler: kept sets, logprobs, chi-square,
# seeds, the same bits for every team size) and its benchmark (vocab 151,936, bf16 logits, 1-256
# rows). Targets at 256 rows: T=1 top-k 50 top-p 0.9 <= 120 us, flat top-p 0.95 <= 150 us,
# greedy + 20 logprobs <= 100 us.
#
#   bench/device/sampler_bench.sh [--skip-tests]
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
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee "$out/build.log"
build=/tmp/build-cuda
if ! cmake -S . -B "$build" "${flags[@]}" >>"$out/build.log" 2>&1 ||
   ! ninja -C "$build" -j "$(nproc)" kernels_cuda_test bench_kernels_cuda >>"$out/build.log" 2>&1; then
  grep -E "error|Error" "$out/build.log" | head -30
  echo "sampler_bench.sh: FAIL: build (see build.log)"
  exit 1
fi
echo "build: $(( $(date +%s) - start )) s"
rc=0
if [ $tests -eq 1 ]; then
  timeout 300 "$build/tests/kernel/cuda/kernels_cuda_test" --gtest_filter='SampleLogits*:*Sampl*' \
    >"$out/sampler_test.log" 2>&1
  rc=$?
  grep -E "^\[  (PASSED|FAILED)|Failure|Expected|Which is|FAILED|OK \]" "$out/sampler_test.log" | head -40
  echo "tests: exit $rc ($(( $(date +%s) - start )) s)"
fi
timeout 200 "$build/bench/kernels_cuda/bench_kernels_cuda" sampling >"$out/bench_sampling.log" 2>&1
echo "sampling bench: exit $?"
cat "$out/bench_sampling.log"
echo "total: $(( $(date +%s) - start )) s"
[ $rc -eq 0 ]
