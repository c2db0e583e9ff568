#!/usr/bin/env bash
# A/B of the attention kernels in one device call: the working tree ("new", built whole into
# /tmp/ab-new, gpu-labelled tests run unless --skip-tests) against the same tree with src/ and bench/ taken
# from another commit ("base", benchmarks only, /tmp/ab-base), in two alternating passes of the
# attention cases of bench_kernels_cuda (decode and prefill) and of bench_decode on the
# Llama-3.1-8B shape (batches 16 and 64 at contexts 512 and 2048, and one 512-token prefill).
# Logs go to $OUT/.
#
#   git archive REV src bench > .device/base-src.tar   # here, before the device call
#   bench/device/ab_attention.sh [--skip-tests]
#
# Carry `.device` (tools/prepare_device.sh).
set -uo pipefail
cd "$(dirname "$0")/../.."
out=${OUT:-/tmp/pagoda-device-out}
mkdir -p "$out"
tests=1
[ "${1:-}" = "--skip-tests" ] && tests=0
. bench/device/device_env.sh
rm -rf /tmp/ab-base-src && mkdir -p /tmp/ab-base-src
tar --exclude=.device --exclude=./src --exclude=./bench -cf - . | tar -C /tmp/ab-base-src -xf -
tar -C /tmp/ab-base-src -xf .device/base-src.tar
{ cmake -S . -B /tmp/ab-new "${flags[@]}" && ninja -C /tmp/ab-new &&
  cmake -S /tmp/ab-base-src -B /tmp/ab-base "${flags[@]}" &&
  ninja -C /tmp/ab-base bench_kernels_cuda bench_decode; } >"$out/build.log" 2>&1 ||
  { grep -E "error" "$out/build.log" | head -20; echo "ab_attention.sh: FAIL: build"; exit 1; }
if [ $tests -eq 1 ]; then
  (cd /tmp/ab-new && timeout 300 ctest -L gpu --output-on-failure --timeout 280) >"$out/test.log" 2>&1
  grep -E "Failure|Expected|Which is|FAILED|tests passed|tests failed" "$out/test.log" | head -20
fi
cfg=configs/llama-3.1-8b
for pass in 1 2; do
  for b in base new; do
    /tmp/ab-$b/bench/kernels_cuda/bench_kernels_cuda attention 2>&1 |
      grep -E "^(decode|prefill|  splits)" | sed "s|^|$b pass $pass: |" >>"$out/attention.txt"
    for ctx in 512 2048; do
      extra=()
      [ $ctx = 512 ] && extra=(--prefill 512)
      /tmp/ab-$b/bench/model/bench_decode $cfg --device cuda --dtype bfloat16 --batches 16,64 \
        --steps 32 --context $ctx "${extra[@]}" 2>&1 | grep -E "^(\| [0-9]|prefill:)" |
        sed "s|^|$b pass $pass: |" >>"$out/decode.txt"
    done
  done
done
sort -s -k1,1 "$out/attention.txt" | sed 's/   items.*//'
sort -s -k1,1 "$out/decode.txt"
