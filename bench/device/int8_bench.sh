#!/usr/bin/env bash
# INT8 W8A8 weights (compressed-tensors int-quantized) on the GPU in one device call: build the
# INT8 tests and bench_decode, run the INT8 kernel tests (kernels/cuda/linear_int8.h against the
# CPU reference, kernels/cpu/quant_gemm.h), the GPU-vs-CPU dummy model test and the tiny-quant
# golden (ct-int8-dynamic against transformers), the dp4a GEMV on the batch-1..8 Llama-8B
# projections (bench_kernels_cuda int8), then the Llama-3.1-8B shape with dummy weights in
# bf16 and INT8 W8A8 (per-channel weights, dynamic per-token activations: llm-compressor's W8A8
# scheme, the tiny fixture's quantization_config on configs/llama-3.1-8b): batch 1, 16, 64 decode
# and a 512-token prefill. The byte bound of batch-1 decode is FP8's (one byte per weight):
# ~522 tok/s at the measured 4.19 TB/s (docs/engine.md).
#
#   bench/device/int8_bench.sh [--skip-tests]
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
device_build int8_bench.sh kernels_cuda_test golden_gpu_test bench_kernels_cuda bench_decode

if [ $tests -eq 1 ]; then
  timeout 300 "$build/tests/kernel/cuda/kernels_cuda_test" --gtest_filter='CudaInt8.*' \
    >"$out/test_int8_kernels.log" 2>&1
  echo "INT8 kernel tests: exit $?"
  grep -E "Failure|Expected|Which is|error|FAILED|PASSED|OK \]" "$out/test_int8_kernels.log" | head -30
  timeout 300 "$build/tests/golden/golden_gpu_test" \
    --gtest_filter='Int8Gpu.*:*QuantGoldenGpu*ct_int8*' >"$out/test_int8_model.log" 2>&1
  echo "INT8 model tests (GPU vs CPU, golden): exit $?"
  grep -E "Failure|Expected|Which is|error|distance|FAILED|PASSED|OK \]" "$out/test_int8_model.log" | head -30
fi

timeout 120 "$build/bench/kernels_cuda/bench_kernels_cuda" int8 >"$out/bench_int8_gemv.log" 2>&1
echo "bench_kernels_cuda int8: exit $?"
grep -E "^#|^##|^qkv|^o |^gate_up|^down|FAIL" "$out/bench_int8_gemv.log"

# The 8B shape with the fixture's W8A8 quantization_config.
int8_dir=/tmp/llama-3.1-8b-w8a8-int8
mkdir -p "$int8_dir"
python3 - "$int8_dir" <<'PY'
import json, sys
config = json.load(open("configs/llama-3.1-8b/config.json"))
fixture = json.load(open("tests/data/tiny-quant/ct-int8-dynamic/config.json"))
config["quantization_config"] = fixture["quantization_config"]
json.dump(config, open(sys.argv[1] + "/config.json", "w"), indent=2)
PY
shape=(--device cuda --dtype bfloat16 --batches 1,16,64 --steps 64 --context 512 --prefill 512)
for model in configs/llama-3.1-8b "$int8_dir"; do
  name=$(basename "$model")
  timeout 200 "$build/bench/model/bench_decode" "$model" "${shape[@]}" >"$out/bench_int8_$name.log" 2>&1
  echo "bench_decode, $name: exit $?"
  grep -E "^model|^weights|^prefill|^\|" "$out/bench_int8_$name.log" | tail -8
done
echo "total: $(( $(date +%s) - start )) s"
