#!/usr/bin/env bash
# A/B of the whole engine in one device call: the working tree ("new") against another commit
# ("base", from .device/base.tar), both built with PAGODA_CUDA=ON, on the Llama-3.1-8B shape with
# dummy weights:
#  - bench_decode: batch-1, 16 and 64 decode at context 512 and a 512-token prefill, in the order
#    base, new, new, base (so that drift in the machine shows as a base-base difference);
#  - pagoda bench throughput 512/128, 128 prompts, 64 sequences, in the same order;
#  - pagoda serve + pagoda bench serve: 512/128 at concurrency 64 and 1000/1000 saturated, base
#    then new.
# Logs go to $OUT/; a summary is printed last.
#
#   git archive BASE CMakeLists.txt cmake src include bench > .device/base.tar   # here, first
#   bench/device/ab_engine.sh [--skip-serve | --prefill-only]  (carry .device: tools/prepare_device.sh)
# --prefill-only: six alternations of the 512-token prefill alone (bench_decode at batch 1).
set -uo pipefail
cd "$(dirname "$0")/../.."
out=${OUT:-/tmp/pagoda-device-out}
mkdir -p "$out"
serve=1 prefill_only=0
[ "${1:-}" = "--skip-serve" ] && serve=0
[ "${1:-}" = "--prefill-only" ] && serve=0 prefill_only=1
start=$(date +%s)
. bench/device/device_env.sh
rm -rf /tmp/ab-base-src && mkdir -p /tmp/ab-base-src
tar -C /tmp/ab-base-src -xf .device/base.tar
mkdir -p /tmp/ab-base-src/.device && cp -r .device/deps /tmp/ab-base-src/.device/
{ cmake -S . -B /tmp/ab-new "${flags[@]}" && ninja -C /tmp/ab-new pagoda bench_decode &&
  cmake -S /tmp/ab-base-src -B /tmp/ab-base "${flags[@]}" -DPAGODA_BUILD_TESTS=OFF &&
  ninja -C /tmp/ab-base pagoda bench_decode; } >"$out/build.log" 2>&1 ||
  { grep -E "error" "$out/build.log" | head -20; echo "ab_engine.sh: FAIL: build"; exit 1; }
echo "build: $(( $(date +%s) - start )) s"
cfg=configs/llama-3.1-8b
if [ $prefill_only -eq 1 ]; then
  for b in base new base new base new new base new base base new; do
    /tmp/ab-$b/bench/model/bench_decode $cfg --device cuda --dtype bfloat16 --batches 1 \
      --steps 4 --context 64 --prefill 512 2>&1 | grep -E "^prefill:" | sed "s|^|$b: |" \
      >>"$out/prefill.txt"
  done
  sort -s -k1,1 "$out/prefill.txt"
  exit 0
fi
for b in base new new base; do
  /tmp/ab-$b/bench/model/bench_decode $cfg --device cuda --dtype bfloat16 --batches 1,16,64 \
    --steps 64 --context 512 --prefill 512 2>&1 | grep -E "^(\| [0-9]|prefill:)" |
    sed "s|^|$b: |" >>"$out/decode.txt"
  timeout 200 /tmp/ab-$b/pagoda bench throughput --model $cfg --load-format dummy --dtype bfloat16 \
    --input-len 512 --output-len 128 --num-prompts 128 --max-num-seqs 64 \
    --max-num-batched-tokens 8192 --max-model-len 4096 2>&1 | grep -E "^Throughput" |
    sed "s|^|$b: |" >>"$out/throughput.txt"
done
echo "micro: $(( $(date +%s) - start )) s"

serve_and_bench() {  # which, name, serve flags..., -- bench flags...
  local which=$1 name=$2; shift 2
  local serve_flags=() bench=()
  while [ "$1" != "--" ]; do serve_flags+=("$1"); shift; done; shift
  bench=("$@")
  /tmp/ab-$which/pagoda serve "$cfg" --load-format dummy --dtype bfloat16 --port 8123 \
    --tokenizer tests/data/tokenizers/llama3 "${serve_flags[@]}" >"$out/serve_${which}_$name.log" 2>&1 &
  local pid=$!
  for _ in $(seq 1 120); do curl -sf http://127.0.0.1:8123/health >/dev/null 2>&1 && break; sleep 0.5; done
  timeout 240 /tmp/ab-new/pagoda bench serve --base-url http://127.0.0.1:8123 --tokenizer "$cfg" \
    --dataset random "${bench[@]}" >"$out/bench_${which}_$name.log" 2>&1
  grep -E "Output token throughput|Mean TTFT|Mean TPOT" "$out/bench_${which}_$name.log" |
    sed "s|^|$which $name: |" >>"$out/serve.txt"
  kill -TERM $pid; wait $pid
}
if [ $serve -eq 1 ]; then
  for b in base new; do
    serve_and_bench $b c64 --max-num-seqs 64 --max-num-batched-tokens 8192 --max-model-len 4096 -- \
      --random-input-len 512 --random-output-len 128 --num-prompts 128 --max-concurrency 64
    serve_and_bench $b saturated --max-num-seqs 256 --max-num-batched-tokens 8192 \
      --max-model-len 4096 -- --random-input-len 1000 --random-output-len 1000 --num-prompts 256 \
      --request-rate inf
  done
  echo "serve: $(( $(date +%s) - start )) s"
fi
echo "== decode (base new new base)"; sort -s -k1,1 "$out/decode.txt"
echo "== throughput"; cat "$out/throughput.txt"
[ -f "$out/serve.txt" ] && { echo "== serve"; cat "$out/serve.txt"; }
echo "total: $(( $(date +%s) - start )) s"
