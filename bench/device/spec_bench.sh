#!/usr/bin/env bash
# Speculative decoding on the GPU (issue 18): the Llama-3.1-8B shape as the target and the
# Llama-3.2-1B shape as its draft, dummy weights, `pagoda bench throughput` at batch 1 (and larger
# batches with --batches), plain against drafting with the benchmark switch
# `bench_acceptance_rate` (the verifier runs in full; each draft is kept with probability a).
# Prints output tok/s per run and the speed-up over plain. Carry `.device`.
#
#   bench/device/spec_bench.sh [--rates 0,0.5,0.7,0.8,0.9] [--k 4] [--batches 1] [--adaptive true|false]
#                              [--output-len 256] [--nsys] [--test] [--draft-quant fp8] [--eagle]
#                              [--unchained]
# --test also builds and runs the GPU tests of the drafter (draft_model_gpu_test, or eagle_gpu_test
# with --eagle) first.
# --eagle drafts with a dummy EAGLE-3 head of the 8B shape instead of the 1B draft model (method
# eagle3; one layer of hidden 4096 over 2 x 4096 inputs, fc over three target layers, a draft
# vocabulary of 32,000 ids), its config.json written to $out/eagle3-head.
# --draft-quant fp8 quantizes the draft model at load (speculative_config's quantization).
# --unchained adds, after each speculative run, the same run with PAGODA_UNCHAINED_DRAFTS=1 (an
# EAGLE head's greedy passes each send their drafts to the host: the A/B of chained passes).
set -uo pipefail
cd "$(dirname "$0")/../.."
source bench/device/device_env.sh; b=/tmp/build-cuda
out=${OUT:-/tmp/spec-out}; mkdir -p "$out"
rates=0,0.8 k=4 batches=1 adaptive=true olen=256 nsys=0 test=0 eagle=0 dq= unchained=0
while [ $# -gt 0 ]; do
  case $1 in
    --rates) rates=$2; shift ;; --k) k=$2; shift ;; --batches) batches=$2; shift ;;
    --adaptive) adaptive=$2; shift ;; --output-len) olen=$2; shift ;; --nsys) nsys=1 ;; --test) test=1 ;;
    --eagle) eagle=1 ;; --draft-quant) dq=$2; shift ;; --unchained) unchained=1 ;;
    *) echo "unknown option $1"; exit 2 ;;
  esac
  shift
done
start=$(date +%s)
# The drafter of the speculative runs: the 1B draft model, or (--eagle) a dummy EAGLE-3 head.
drafter='"model": "configs/llama-3.2-1b"' tests=draft_model_gpu_test
if [ $eagle -eq 1 ]; then
  mkdir -p "$out/eagle3-head"
  cat >"$out/eagle3-head/config.json" <<'JSON'
{
  "architectures": ["LlamaForCausalLMEagle3"],
  "model_type": "llama",
  "hidden_act": "silu",
  "attention_bias": false,
  "mlp_bias": false,
  "bos_token_id": 128000,
  "eos_token_id": 128001,
  "rms_norm_eps": 1e-05,
  "torch_dtype": "bfloat16",
  "vocab_size": 128256,
  "draft_vocab_size": 32000,
  "rope_theta": 500000.0,
  "hidden_size": 4096,
  "intermediate_size": 14336,
  "num_hidden_layers": 1,
  "num_attention_heads": 32,
  "num_key_value_heads": 8,
  "max_position_embeddings": 131072,
  "rope_scaling": {"factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
                   "original_max_position_embeddings": 8192, "rope_type": "llama3"},
  "tie_word_embeddings": false
}
JSON
  drafter="\"method\": \"eagle3\", \"model\": \"$out/eagle3-head\"" tests=eagle_gpu_test
fi
targets=(pagoda bench_decode); [ $test -eq 1 ] && targets+=($tests)
cmake -S . -B $b "${flags[@]}" >/tmp/cfg.log 2>&1 && ninja -C $b -j16 "${targets[@]}" >/tmp/b.log 2>&1 ||
  { grep -E "error" -A3 /tmp/b.log | head -40; exit 1; }
echo "build: $(( $(date +%s) - start )) s"
if [ $test -eq 1 ]; then
  timeout 300 $b/tests/unit/engine/$tests >"$out/test.log" 2>&1
  echo "$tests: exit $? ($(( $(date +%s) - start )) s)"
  grep -E "^\[  |OK \]|FAILED|Failure|Expected|Which is|verifications|chi-square" "$out/test.log" | head -40
fi
envs=()  # environment of the next runs (env VAR=value ...)
run() {  # name, batch, extra flags...
  local name=$1 bs=$2; shift 2
  env "${envs[@]}" timeout 200 $b/pagoda bench throughput --model configs/llama-3.1-8b --load-format dummy \
    --dtype bfloat16 --input-len 128 --output-len "$olen" --num-prompts $(( bs * 2 )) \
    --max-num-seqs "$bs" --max-model-len 2048 "$@" >"$out/$name.log" 2>&1
  local rc=$?
  local tps; tps=$(grep -oE "[0-9.]+ output tokens/s" "$out/$name.log" | head -1)
  echo "$name (bs $bs): rc $rc: $tps"
  grep -E "Speculative|Engine thread|of which|rror" "$out/$name.log" | tail -4
}
# The draft alone: its decode step at the batch sizes (a draft pass's floor).
if [ $eagle -eq 0 ]; then
  timeout 100 $b/bench/model/bench_decode configs/llama-3.2-1b --device cuda --dtype bfloat16 \
    --batches "$batches" --steps 64 --context 512 >"$out/draft_decode.log" 2>&1
  echo "draft (Llama-3.2-1B shape) decode: exit $?"; grep -v "^\[" "$out/draft_decode.log" | tail -4
fi
IFS=, read -ra R <<<"$rates"; IFS=, read -ra B <<<"$batches"
for bs in "${B[@]}"; do
  run "plain_b$bs" "$bs"
  for a in "${R[@]}"; do
    cfg="{$drafter, \"num_speculative_tokens\": $k, \"adaptive\": $adaptive, \"bench_acceptance_rate\": $a${dq:+, \"quantization\": \"$dq\"}}"
    run "spec_b${bs}_a$a${dq:+_$dq}" "$bs" --speculative-config "$cfg"
    if [ $unchained -eq 1 ]; then
      envs=(PAGODA_UNCHAINED_DRAFTS=1)
      run "spec_b${bs}_a$a${dq:+_$dq}_unchained" "$bs" --speculative-config "$cfg"
      envs=()
    fi
  done
done
if [ $nsys -eq 1 ] && command -v nsys >/dev/null; then
  cfg="{$drafter, \"num_speculative_tokens\": $k, \"adaptive\": false, \"bench_acceptance_rate\": 0.8}"
  nsys profile -o "$out/spec" --force-overwrite true -t cuda,nvtx $b/pagoda bench throughput \
    --model configs/llama-3.1-8b --load-format dummy --dtype bfloat16 --input-len 128 \
    --output-len 64 --num-prompts 1 --max-num-seqs 1 --max-model-len 2048 \
    --speculative-config "$cfg" >/dev/null 2>&1
  nsys stats -r cuda_gpu_kern_sum,cuda_api_sum "$out/spec.nsys-rep" 2>/dev/null | head -60
fi
echo "total: $(( $(date +%s) - start )) s"
