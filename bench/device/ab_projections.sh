#!/usr/bin/env bash
# A/B of the small-m projections in one device call: builds everything into /tmp/ab-a (and the
# benchmarks into /tmp/ab-b with the CUDA flags in $AB_B_FLAGS, when given), runs the gpu-labelled
# tests, the GEMV section of bench_kernels_cuda in each build, and bench_decode on the Llama-3.1-8B
# shape at batches 2, 4 and 8 in two alternating passes: the tensor-core GEMV with the fused layers
# (the default), unfused (PAGODA_DISABLE_GEMV_FUSION=1) and off (PAGODA_GEMV_MMA_MAX_M=0: cuBLASLt
# and the separate kernels). Logs go to $OUT/.
#
#   [AB_B_FLAGS=-DSOME_SWITCH] bench/device/ab_projections.sh
#
# Carry `.device` (tools/prepare_device.sh).
set -uo pipefail
cd "$(dirname "$0")/../.."
out=${OUT:-/tmp/pagoda-device-out}
mkdir -p "$out"
. bench/device/device_env.sh
{ cmake -S . -B /tmp/ab-a "${flags[@]}" && ninja -C /tmp/ab-a; } >"$out/build.log" 2>&1 ||
  { grep -E "error" "$out/build.log" | head -20; exit 1; }
if [ -n "${AB_B_FLAGS:-}" ]; then
  { cmake -S . -B /tmp/ab-b "${flags[@]}" -DCMAKE_CUDA_FLAGS="$AB_B_FLAGS" &&
    ninja -C /tmp/ab-b bench_kernels_cuda bench_decode; } >>"$out/build.log" 2>&1 ||
    { grep -E "error" "$out/build.log" | head -20; exit 1; }
fi
(cd /tmp/ab-a && timeout 300 ctest -L gpu --output-on-failure --timeout 280) >"$out/test.log" 2>&1
grep -E "Failure|Expected|Which is|FAILED|tests passed|tests failed" "$out/test.log" | head -20
/tmp/ab-a/bench/kernels_cuda/bench_kernels_cuda gemv >"$out/gemv_a.txt" 2>&1
[ -n "${AB_B_FLAGS:-}" ] && /tmp/ab-b/bench/kernels_cuda/bench_kernels_cuda gemv >"$out/gemv_b.txt" 2>&1
cfg=configs/llama-3.1-8b
decode() {  # build, max m of the tensor-core GEMV, batches
  PAGODA_GEMV_MMA_MAX_M=$2 "$1"/bench/model/bench_decode $cfg --device cuda --dtype bfloat16 \
    --batches "$3" --steps 64 --context 512 2>&1 | grep -E "^\| [0-9]" | sed "s|^|$(basename "$1") mma<=$2 rows ${PAGODA_GEMV_MMA_ROWS:-2} steps ${PAGODA_GEMV_MMA_STEPS:-2} unfused ${PAGODA_DISABLE_GEMV_FUSION:-0}: |"
}
{
  decode /tmp/ab-a 0 1,2,4,8,16
  for pass in 1 2; do
    decode /tmp/ab-a 8 2,4,8
    PAGODA_DISABLE_GEMV_FUSION=1 decode /tmp/ab-a 8 2,4,8
    decode /tmp/ab-a 0 2,4,8
  done
  if [ -n "${AB_B_FLAGS:-}" ]; then decode /tmp/ab-b 0 1; decode /tmp/ab-a 0 1; decode /tmp/ab-b 0 1; fi
} | tee "$out/decode.txt"
