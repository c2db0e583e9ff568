#!/usr/bin/env bash
# Everything GPU in one device call: (optionally) regenerate the golden fixtures with transformers,
# build pagoda with PAGODA_CUDA=ON into /tmp/build-cuda, run every gpu-labelled test (the CUDA
# kernels against the CPU kernels; the golden checkpoints on the GPU) and the benchmarks (CUDA
# kernels against the H200 limits; the Llama-3.1-8B shape end to end: batch-1 decode, batched
# decode, 512-token prefill). Logs go to $OUT/; the summary is printed last.
#
#   bench/device/run.sh [--fixtures] [--skip-bench] [--skip-kernel-bench] [--gemv-sweep]
#
# Carry `.device` (make it with tools/prepare_device.sh): the headers and libraries the device image
# lacks (pcre2, xxhash). The model shapes the benchmarks read are the repository's configs/. The
# build has no oneDNN (PAGODA_ONEDNN=OFF, as bench/device/device_env.sh says why): the CPU
# reference the gpu tests compare against streams its matmuls, exact as oneDNN's default.
set -uo pipefail
cd "$(dirname "$0")/../.."
out=${OUT:-/tmp/pagoda-device-out}
mkdir -p "$out"
fixtures=0 bench=1 kernel_bench=1 sweep=0
for a in "$@"; do
  case $a in
    --gemv-sweep) sweep=1 ;;
    --fixtures) fixtures=1 ;;
    --skip-bench) bench=0 ;;
    --skip-kernel-bench) kernel_bench=0 ;;
  esac
done
start=$(date +%s)
export PATH=/usr/local/cuda/bin:$PATH
nvidia-smi --query-gpu=name,driver_version,memory.used,memory.total --format=csv,noheader | tee "$out/build.log"

if [ $fixtures -eq 1 ]; then
  work=$(mktemp -d)
  PYTHONUNBUFFERED=1 python3 tools/make_golden_fixtures.py "$work/tiny" >"$out/fixtures.log" 2>&1 || {
    tail -20 "$out/fixtures.log"; echo "run.sh: fixture generation failed"; }
  rm -rf tests/data/tiny && cp -r "$work/tiny" tests/data/tiny
  tar -C "$work" -czf "$out/tiny_fixtures.tar.gz" tiny
  echo "fixtures: $(ls tests/data/tiny | wc -l) written ($(( $(date +%s) - start )) s)"
fi

deps=$PWD/.device/deps
# The carried archive (tools/prepare_device.sh) unpacks here once per machine.
[ -d "$deps" ] || [ ! -f .device/deps.tar.xz ] || tar -C .device -xJf .device/deps.tar.xz
if [ -d "$deps" ]; then
  sed -i "s|^prefix=.*|prefix=$deps|" "$deps/lib/pkgconfig/libpcre2-8.pc"
  for pc in "$deps"/lib/pkgconfig/ucx*.pc; do [ -f "$pc" ] && sed -i "s|^prefix = .*|prefix = $deps|" "$pc"; done
  export PKG_CONFIG_PATH=$deps/lib/pkgconfig:${PKG_CONFIG_PATH:-}
  export LD_LIBRARY_PATH=$deps/lib:${LD_LIBRARY_PATH:-}
  dep_flags=(-DCMAKE_INCLUDE_PATH="$deps/include" -DCMAKE_LIBRARY_PATH="$deps/lib")
else
  dep_flags=()
fi
build=/tmp/build-cuda
# Everything: every gpu-labelled test must exist for ctest, and the benchmarks and pagoda itself.
if ! cmake -S . -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release -DPAGODA_CUDA=ON -DPAGODA_ONEDNN=OFF \
     -DPAGODA_BUILD_TESTS=ON -DPAGODA_BUILD_BENCH=ON "${dep_flags[@]}" >>"$out/build.log" 2>&1 ||
   ! ninja -C "$build" -j "$(nproc)" >>"$out/build.log" 2>&1; then
  grep -E "error|Error" "$out/build.log" | head -30
  echo "run.sh: FAIL: build (see build.log)"
  exit 1
fi
echo "build: $(( $(date +%s) - start )) s"

(cd "$build" && timeout 300 ctest -L gpu --output-on-failure --timeout 280) >"$out/test.log" 2>&1
test_rc=$?
grep -E "Failure|Expected|Which is|steps equal|FAILED|tests passed|tests failed|No CUDA" "$out/test.log" | head -40
echo "tests: exit $test_rc ($(( $(date +%s) - start )) s)"

if [ $sweep -eq 1 ]; then  # design variants of the decode GEMV (bench/kernels_cuda/gemv_sweep.cu)
  timeout 120 "$build/bench/kernels_cuda/gemv_sweep" >"$out/gemv_sweep.log" 2>&1
  echo "gemv sweep: exit $?"
  tail -60 "$out/gemv_sweep.log"
fi

if [ $bench -eq 1 ]; then
  if [ $kernel_bench -eq 1 ]; then
    timeout 200 "$build/bench/kernels_cuda/bench_kernels_cuda" >"$out/bench_kernels.log" 2>&1
    echo "kernel bench: exit $?"
    tail -40 "$out/bench_kernels.log"
  fi
  model=(configs/llama-3.1-8b --device cuda --dtype bfloat16 --batches 1,16,64 --steps 64
         --context 512 --prefill 512)
  timeout 150 "$build/bench/model/bench_decode" "${model[@]}" >"$out/bench_model.log" 2>&1
  echo "model bench (CUDA graphs for decode): exit $?"
  grep -v "^\[" "$out/bench_model.log" | tail -8
  # FP8 weights quantized at load (issue 17: batch-1 >= 440 tok/s, prefill 512 >= 55,000 tok/s);
  # bench/device/fp8_bench.sh adds the FP8 tests and compressed-tensors FP8.
  timeout 150 "$build/bench/model/bench_decode" "${model[@]}" --quantization fp8 \
    >"$out/bench_model_fp8.log" 2>&1
  echo "model bench, FP8 weights (--quantization fp8): exit $?"
  grep -v "^\[" "$out/bench_model_fp8.log" | tail -8
  # Programmatic dependent launch on (kernels/cuda/common.cuh; off by default), batch 1: its A/B.
  PAGODA_PDL=1 timeout 100 "$build/bench/model/bench_decode" \
    configs/llama-3.1-8b --device cuda --dtype bfloat16 --batches 1 --steps 64 \
    --context 512 >"$out/bench_model_nopdl.log" 2>&1
  echo "model bench (CUDA graphs, PDL on): exit $?"
  grep -v "^\[" "$out/bench_model_nopdl.log" | tail -3
  # The norms, residual adds and SiLU-and-mul folded into the batch-1 GEMVs (gemv.cu): its A/B.
  PAGODA_DISABLE_GEMV_FUSION=1 timeout 100 "$build/bench/model/bench_decode" \
    configs/llama-3.1-8b --device cuda --dtype bfloat16 --batches 1 --steps 64 \
    --context 512 >"$out/bench_model_nofusion.log" 2>&1
  echo "model bench (CUDA graphs, no GEMV fusion): exit $?"
  grep -v "^\[" "$out/bench_model_nofusion.log" | tail -3
  # Split-KV granularity (attention_plan.cc): batch 1 with splits down to one 64-key tile and
  # down to 128 keys, against the default above.
  for keys in 64 128; do
    PAGODA_ATTENTION_MIN_SPLIT_KEYS=$keys timeout 100 "$build/bench/model/bench_decode" \
      configs/llama-3.1-8b --device cuda --dtype bfloat16 --batches 1 --steps 64 \
      --context 512 >"$out/bench_model_split$keys.log" 2>&1
    echo "model bench (CUDA graphs, splits >= $keys keys): exit $?"
    grep -v "^\[" "$out/bench_model_split$keys.log" | tail -3
  done
  # A Qwen3 shape: per-head q/k norms inside the RoPE kernel (rope.cu).
  if [ -d configs/qwen3-8b ]; then
    timeout 100 "$build/bench/model/bench_decode" configs/qwen3-8b --device cuda \
      --dtype bfloat16 --batches 1,16 --steps 64 --context 512 >"$out/bench_model_qwen3.log" 2>&1
    echo "model bench Qwen3-8B (CUDA graphs): exit $?"
    grep -v "^\[" "$out/bench_model_qwen3.log" | tail -4
  fi
  PAGODA_ENFORCE_EAGER=1 timeout 150 "$build/bench/model/bench_decode" "${model[@]}" \
    >"$out/bench_model_eager.log" 2>&1
  echo "model bench (eager): exit $?"
  grep -v "^\[" "$out/bench_model_eager.log" | tail -5
  # The whole engine (scheduler, sampling on the CPU, detokenization) on the GPU, offline.
  if [ -x "$build/pagoda" ]; then
    timeout 200 "$build/pagoda" bench throughput --model configs/llama-3.1-8b \
      --load-format dummy --dtype bfloat16 --input-len 512 --output-len 128 --num-prompts 128 \
      --max-num-seqs 64 --max-num-batched-tokens 8192 --max-model-len 4096 \
      >"$out/bench_throughput.log" 2>&1
    echo "engine throughput 512/128, 128 prompts, 64 seqs: exit $?"
    grep -v "^\[" "$out/bench_throughput.log" | tail -7
  else
    echo "pagoda did not build (see build.log): no engine benchmark"
  fi
fi
echo "total: $(( $(date +%s) - start )) s"
[ $test_rc -eq 0 ]
