#!/usr/bin/env bash
# Where a decode step of the Llama-3.1-8B shape spends its time, kernel by kernel: Nsight
# Compute times every kernel of a few eager steps (clocks and caches left alone), and the table
# gives each kernel's mean duration, its launches per step and its share of the step. Run after
# bench/device/run.sh has built /tmp/build-cuda (same device call; carry `.device`).
#
#   [BATCH=64] bench/device/profile_decode.sh [extra env for pagoda, e.g. PAGODA_PDL=1]
#
# BATCH (default 1) is the decode batch; cuBLASLt's kernels (batches above 8) are counted too.
set -uo pipefail
cd "$(dirname "$0")/../.."
out=${OUT:-/tmp/pagoda-device-out}
build=${BUILD:-/tmp/build-cuda}
export PATH=/usr/local/cuda/bin:$PATH
csv=$out/profile_decode.csv
# Skip the dummy-weight fills and the warm-up; the kernels of the model only.
env PAGODA_ENFORCE_EAGER=1 "$@" timeout 300 ncu --clock-control none --cache-control none \
  --metrics gpu__time_duration.sum --csv --print-units base --kernel-name-base function \
  -k regex:'gemv|rope|attention|combine|norm|silu|embedding|gather|prefetch|sample|argmax|gemm|nvjet|xmma|splitK' \
  --launch-skip 2000 --launch-count 1000 \
  "$build/bench/model/bench_decode" configs/llama-3.1-8b --device cuda --dtype bfloat16 \
  --batches "${BATCH:-1}" --steps 16 --context 512 >"$csv" 2>"$out/profile_decode.err"
echo "ncu: exit $?"
python3 - "$csv" <<'PY'
import csv, sys, collections
rows = [r for r in csv.reader(open(sys.argv[1])) if len(r) > 10]
head = rows[0]; name_i = head.index("Kernel Name"); val_i = head.index("Metric Value")
total = collections.defaultdict(float); count = collections.Counter()
for r in rows[1:]:
    name = r[name_i][:60]
    total[name] += float(r[val_i].replace(",", "")); count[name] += 1
steps = max(1, count.get("embedding_kernel", 0))
all_ns = sum(total.values())
print(f"{'kernel':60s} {'mean us':>8s} {'per step':>8s} {'us/step':>8s} {'share':>6s}")
for name, ns in sorted(total.items(), key=lambda kv: -kv[1]):
    print(f"{name:60s} {ns / count[name] / 1e3:8.2f} {count[name] / steps:8.1f} "
          f"{ns / steps / 1e3:8.1f} {100 * ns / all_ns:5.1f}%")
print(f"sum of kernel times per step: {all_ns / steps / 1e3:.1f} us over {steps} steps")
PY
