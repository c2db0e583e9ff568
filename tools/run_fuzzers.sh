#!/usr/bin/env bash
# Builds the libFuzzer targets of tests/fuzz with clang (ASan + UBSan) in build-fuzz/ and runs
# each for SECONDS seconds from a seed corpus: the bodies of tests/server/malformed_requests.json
# plus a few valid requests (fuzz_openai_request), and the chat templates of
# tests/data/chat_templates (fuzz_jinja).
#
#   tools/run_fuzzers.sh [SECONDS=60] [TARGET...]
#
# Findings (crash-*, leak-*, timeout-*) land in build-fuzz/findings/<target>/; the script exits
# non-zero when any fuzzer fails. Needs clang and libclang-rt-14-dev (scripts/install-deps.sh).
set -euo pipefail
cd "$(dirname "$0")/.."
seconds=${1:-60}
shift || true
targets=("$@")
[ ${#targets[@]} -gt 0 ] || targets=(fuzz_openai_request fuzz_jinja)
build=${PAGODA_FUZZ_BUILD_DIR:-build-fuzz}
jobs=${PAGODA_FUZZ_JOBS:-2}

sanitize="-fsanitize=fuzzer-no-link,address,undefined -fno-sanitize-recover=undefined -fno-omit-frame-pointer"
if [ ! -f "$build/build.ninja" ]; then
  cmake -S . -B "$build" -G Ninja \
    -DCMAKE_CXX_COMPILER=clang++ -DCMAKE_BUILD_TYPE=RelWithDebInfo \
    -DCMAKE_CXX_FLAGS="$sanitize" -DCMAKE_EXE_LINKER_FLAGS="-fsanitize=address,undefined" \
    -DPAGODA_FUZZ=ON -DPAGODA_BUILD_TESTS=ON -DPAGODA_BUILD_BENCH=OFF >/dev/null
fi
ninja -C "$build" -j"$jobs" "${targets[@]}"

# Seed corpora, rebuilt each run (the fuzzers' own corpora under $build/corpus persist).
seeds=$build/seeds
rm -rf "$seeds"
mkdir -p "$seeds/fuzz_openai_request" "$seeds/fuzz_jinja"
python3 - "$seeds/fuzz_openai_request" <<'PY'
import base64, json, os, sys
out = sys.argv[1]
entries = json.load(open("tests/server/malformed_requests.json"))
valid = [
    '{"prompt": "Once upon a time", "max_tokens": 8, "logprobs": 2, "echo": true}',
    '{"prompt": [[1, 2, 3], "Hi"], "n": 2, "stream": true, "stream_options": {"include_usage": true}, "stop": ["."]}',
    '{"messages": [{"role": "user", "content": "Hello"}], "logprobs": true, "top_logprobs": 2}',
    '{"messages": [{"role": "user", "content": [{"type": "text", "text": "Hi"}]}, {"role": "assistant", "content": "Hel"}], "continue_final_message": true, "max_tokens": 4}',
    '{"messages": [{"role": "user", "content": "Hi"}], "chat_template": "{% for m in messages %}{{ m.role }}: {{ m.content }}\\n{% endfor %}", "chat_template_kwargs": {"x": 1}}',
    '{"messages": [{"role": "user", "content": "w?"}, {"role": "assistant", "content": null, "tool_calls": [{"id": "a", "type": "function", "function": {"name": "f", "arguments": "{\\"a\\": 1}"}}]}], "tools": [{"type": "function", "function": {"name": "f", "parameters": {"type": "object"}}}], "tool_choice": "required"}',
    '{"tokens": [1, 2, 3]}',
]
bodies = [base64.b64decode(e["body_base64"]) if "body_base64" in e else e["body"].encode()
          for e in entries] + [v.encode() for v in valid]
for i, body in enumerate(bodies):
    if len(body) <= 65536:  # the 100k-bracket bodies are cut by -max_len anyway
        open(os.path.join(out, "seed-%03d.json" % i), "wb").write(body)
PY
cp tests/data/chat_templates/templates/*.jinja "$seeds/fuzz_jinja/"

status=0
for target in "${targets[@]}"; do
  corpus=$build/corpus/$target
  findings=$build/findings/$target
  mkdir -p "$corpus" "$findings"
  dict=tests/fuzz/openai.dict
  [ "$target" = fuzz_jinja ] && dict=tests/fuzz/jinja.dict
  echo "run_fuzzers: $target for ${seconds}s"
  if ! ASAN_OPTIONS=detect_leaks=1 UBSAN_OPTIONS=print_stacktrace=1 \
      "$build/tests/fuzz/$target" -max_total_time="$seconds" -max_len=65536 -timeout=10 \
      -rss_limit_mb=4096 -dict="$dict" -artifact_prefix="$findings/" -print_final_stats=1 \
      "$corpus" "$seeds/$target" 2>"$build/$target.log"; then
    echo "run_fuzzers: $target FAILED (see $build/$target.log and $findings/)"
    tail -40 "$build/$target.log"
    status=1
  else
    grep -E "^(stat::number_of_executed_units|stat::peak_rss_mb)|^Done" "$build/$target.log" || true
  fi
done
exit $status
