#!/usr/bin/env bash
# `pagoda serve -tp 2`: a rank killed while the engine is idle ends the server with status 1, the
# rank named in its log (the executor looks at its ranks' exits without waiting for a step).
#
#   serve_dead_rank.sh PAGODA MODEL_DIR
set -u
pagoda=$1 model=$2
log=$(mktemp)
trap 'rm -f "$log"' EXIT
"$pagoda" serve "$model" -tp 2 --host 127.0.0.1 --port 0 >"$log" 2>&1 &
serve=$!
# Until the server listens (or ends).
while ! grep -q "serving " "$log"; do
  if ! kill -0 "$serve" 2>/dev/null; then
    cat "$log"
    echo "FAIL: serve ended before it listened"
    exit 1
  fi
  sleep 0.1
done
# Its children are the two ranks' worker processes (parent pid: field 4 of /proc/PID/stat).
ranks=()
for stat in /proc/[0-9]*/stat; do
  read -r pid _ _ ppid _ <"$stat" 2>/dev/null || continue
  [ "$ppid" = "$serve" ] && ranks+=("$pid")
done
if [ ${#ranks[@]} -ne 2 ]; then
  kill "$serve"
  echo "FAIL: ${#ranks[@]} rank processes, want 2"
  exit 1
fi
victim=$(printf '%s\n' "${ranks[@]}" | sort -n | tail -1)
kill -9 "$victim"
wait "$serve"
status=$?
cat "$log"
if [ $status -ne 1 ]; then
  echo "FAIL: serve exited with status $status, want 1"
  exit 1
fi
if ! grep -q "tensor-parallel rank [01] (pid $victim) exited, killed by signal 9" "$log"; then
  echo "FAIL: the log does not name the rank"
  exit 1
fi
echo "PASS"
