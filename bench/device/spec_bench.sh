#!/usr/bin/env bash
# Speculative decoding on the GPU (issue 18): the Llama-3.1-8B shape as the target and the
# Llama-3.2-1B shape as its draft, dummy weights, `pagoda bench throughput` at batch 1 (and larger
# batches with --batches), plain against drafting with the benchmark switch
# `bench_acceptance_rate` (the verifier runs in full; each draft is kept with probability a).
# Prints output tok/s per run and the speed-up over plain. Carry `.device`.
#
#   bench/device/spec_bench.sh [--rates 0,0.5,0.7,0.8,0.9] [--k 4] [--batches 1] [--adaptive true|false]
#                              [--output-len 256] [--nsys] [--test] [--draft-quant fp8]
# --test also builds and runs the draft-model GPU tests (draft_model_gpu_test) first.
set -uo pipefail
cd "$(dirname "$0")/../.."
source bench/device/device_env.sh; b=/tmp/build-cuda
out=${OUT:-/tmp/spec-out}; mkdir -p "$out"
rates=0,0.8 k=4 batches=1 adaptive=true olen=256 nsys=0 test=0 dq=
while [ $# -gt 0 ]; do
  case $1 in
    --rates) rates=$2; shift ;; --k) k=$2; shift ;; --batches) batches=$2; shift ;;
    --adaptive) adaptive=$2; shift ;; --output-len) olen=$2; shift ;; --nsys) nsys=1 ;; --test) test=1 ;; --draft-quant) dq=$2; shift ;;
  esac
  shift
done
start=$(date +%s)
targets=(pagoda bench_decode); [ $test -eq 1 ] && targets+=(draft_model_gpu_test)
cmake -S . -B $b "${flags[@]}" >/tmp/cfg.log 2>&1 && ninja -C $b -j16 "${targets[@]}" >/tmp/b.log 2>&1 ||
  { grep -E "error" -A3 /tmp/b.log | head -40; exit 1; }
echo "build: $(( $(date +%s) - start )) s"
if [ $test -eq 1 ]; then
  timeout 300 $b/tests/unit/engine/draft_model_gpu_test >"$out/test.log" 2>&1
  echo "draft_model_gpu_test: exit $? ($(( $(date +%s) - start )) s)"
  grep -E "^\[  |OK \]|FAILED|Failure|Expected|Which is|verifications|chi-square" "$out/test.log" | head -40
fi
run() {  # name, batch, extra flags...
  local name=$1 bs=$2; shift 2
  timeout 200 $b/pagoda bench throughput --model configs/llama-3.1-8b --load-format dummy \
    --dtype bfloat16 --input-len 128 --output-len "$olen" --num-prompts $(( bs * 2 )) \
    --max-num-seqs "$bs" --max-model-len 2048 "$@" >"$out/$name.log" 2>&1
  local rc=$?
  local tps; tps=$(grep -oE "[0-9.]+ output tokens/s" "$out/$name.log" | head -1)
  echo "$name (bs $bs): rc $rc: $tps"
  grep -E "Speculative|Engine thread|of which|rror" "$out/$name.log" | tail -4
}
# The draft alone: its decode step at the batch sizes (a draft pass's floor).
timeout 100 $b/bench/model/bench_decode configs/llama-3.2-1b --device cuda --dtype bfloat16 \
  --batches "$batches" --steps 64 --context 512 >"$out/draft_decode.log" 2>&1
echo "draft (Llama-3.2-1B shape) decode: exit $?"; grep -v "^\[" "$out/draft_decode.log" | tail -4
IFS=, read -ra R <<<"$rates"; IFS=, read -ra B <<<"$batches"
for bs in "${B[@]}"; do
  run "plain_b$bs" "$bs"
  for a in "${R[@]}"; do
    cfg="{\"model\": \"configs/llama-3.2-1b\", \"num_speculative_tokens\": $k, \"adaptive\": $adaptive, \"bench_acceptance_rate\": $a${dq:+, \"quantization\": \"$dq\"}}"
    run "spec_b${bs}_a$a${dq:+_$dq}" "$bs" --speculative-config "$cfg"
  done
done
if [ $nsys -eq 1 ] && command -v nsys >/dev/null; then
  cfg="{\"model\": \"configs/llama-3.2-1b\", \"num_speculative_tokens\": $k, \"adaptive\": false, \"bench_acceptance_rate\": 0.8}"
  nsys profile -o "$out/spec" --force-overwrite true -t cuda,nvtx $b/pagoda bench throughput \
    --model configs/llama-3.1-8b --load-format dummy --dtype bfloat16 --input-len 128 \
    --output-len 64 --num-prompts 1 --max-num-seqs 1 --max-model-len 2048 \
    --speculative-config "$cfg" >/dev/null 2>&1
  nsys stats -r cuda_gpu_kern_sum,cuda_api_sum "$out/spec.nsys-rep" 2>/dev/null | head -60
fi
echo "total: $(( $(date +%s) - start )) s"
