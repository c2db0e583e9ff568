#!/usr/bin/env bash
# The attention kernels in one device call: builds only the CUDA kernel tests and
# bench_kernels_cuda (into /tmp/build-attn), runs the paged-attention tests against the CPU
# reference, the attention benchmark (prefill cases on the Hopper kernel and on the
# FlashAttention-2 kernel, "(fa2)"), and PyTorch's flash attention on the same cases
# (bench/device/torch_attention.py). Logs go to $OUT/.
#
#   bench/device/attention_bench.sh [--skip-tests] [--filter GTEST_FILTER] [--case NAME]
#                                   [--profile NAME] [--ttft]
#
# --profile NAME: Nsight Compute's speed-of-light, warp-state and instruction sections for one Hopper launch of the case
# NAME, the kernel's SASS ($OUT/hopper.sass.gz) and its per-instruction stall samples
# ($OUT/source.csv.gz). --ttft: also builds pagoda and times one
# prompt of 8k, 32k and 120k tokens (Llama-3.1-8B shape, dummy weights, --max-model-len 131072,
# one output token: `pagoda bench throughput`'s elapsed time is the time to first token without
# HTTP) with the FlashAttention-2 kernel (PAGODA_DISABLE_HOPPER_ATTENTION=1) and the Hopper one.
#
# Carry `.device` (tools/prepare_device.sh).
set -uo pipefail
cd "$(dirname "$0")/../.."
out=${OUT:-/tmp/pagoda-device-out}
mkdir -p "$out"
tests=1 filter='CudaPagedAttention.*' case=prefill profile="" ttft=0
while [ $# -gt 0 ]; do
  case $1 in
    --skip-tests) tests=0 ;;
    --filter) filter=$2; shift ;;
    --case) case=$2; shift ;;
    --profile) profile=$2; shift ;;
    --ttft) ttft=1 ;;
  esac
  shift
done
. bench/device/device_env.sh
build=/tmp/build-attn
start=$(date +%s)
targets="kernels_cuda_test bench_kernels_cuda"
[ $ttft -eq 1 ] && targets="$targets pagoda"
{ cmake -S . -B $build "${flags[@]}" && ninja -C $build $targets; } \
  >"$out/build.log" 2>&1 || { grep -E "error" "$out/build.log" | head -20; echo "attention_bench.sh: FAIL: build"; exit 1; }
echo "build: $(( $(date +%s) - start )) s"
obj=$(find $build -name 'attention_hopper.cu.o' | head -1)
[ -n "$obj" ] && cuobjdump -sass "$obj" | grep -cE "HGMMA" | sed 's/^/HGMMA instructions in the Hopper kernel: /'
if [ $tests -eq 1 ]; then
  timeout 400 $build/tests/kernel/cuda/kernels_cuda_test --gtest_filter="$filter" >"$out/test.log" 2>&1
  echo "tests: rc=$? ($(( $(date +%s) - start )) s)"
  grep -E "^\[  (PASSED|FAILED) |Failure|normalised|Expected|Which is|variant=|bs=" "$out/test.log" | head -30
fi
timeout 200 $build/bench/kernels_cuda/bench_kernels_cuda attention "$case" 2>&1 | tee "$out/attention.txt" |
  grep -E "^(prefill|decode|case)"
if [ -n "$profile" ]; then
  [ -n "$obj" ] && cuobjdump -sass "$obj" | gzip >"$out/hopper.sass.gz"
  timeout 240 ncu --clock-control none --section SpeedOfLight --section WarpStateStats \
    --section ComputeWorkloadAnalysis --section InstructionStats -k regex:hopper_prefill \
    --launch-skip 2 --launch-count 1 $build/bench/kernels_cuda/bench_kernels_cuda attention \
    "$profile" >"$out/ncu.txt" 2>&1
  grep -E "Duration|Throughput|Stall|Warp Cycles Per|Issued Ipc|Executed Ipc|Pipe|SM Busy" "$out/ncu.txt" | head -40
  # Per-instruction warp-state samples (SourceCounters), as CSV over the SASS: $OUT/source.csv.gz.
  timeout 240 ncu --clock-control none --section SourceCounters --section WarpStateStats \
    -k regex:hopper_prefill --launch-skip 2 --launch-count 1 -f -o /tmp/hopper_source \
    $build/bench/kernels_cuda/bench_kernels_cuda attention "$profile" >/dev/null 2>&1 &&
    ncu -i /tmp/hopper_source.ncu-rep --page source --csv --print-source sass 2>&1 |
    gzip >"$out/source.csv.gz"
  echo "source page: $(zcat "$out/source.csv.gz" 2>/dev/null | wc -l) lines"
fi
if [ $ttft -eq 1 ]; then
  for len in 8192 32768 120000; do
    for mode in fa2 hopper; do
      disable=0
      [ $mode = fa2 ] && disable=1
      PAGODA_DISABLE_HOPPER_ATTENTION=$disable timeout 150 $build/pagoda bench throughput \
        --model configs/llama-3.1-8b --load-format dummy --dtype bfloat16 --input-len $len \
        --output-len 1 --num-prompts 1 --max-model-len 131072 >/tmp/ttft.log 2>&1
      { echo "== $len tokens, $mode"; cat /tmp/ttft.log; } >>"$out/ttft.log"
      echo "TTFT $len tokens ($mode): $(grep -oE "Elapsed: [0-9.]+ s" /tmp/ttft.log)"
    done
  done
fi
timeout 120 python3 bench/device/torch_attention.py 2>&1 | tee "$out/torch.txt" | tail -6
echo "total: $(( $(date +%s) - start )) s"
