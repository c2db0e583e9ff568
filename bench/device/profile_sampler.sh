#!/usr/bin/env bash
# Nsight Compute's speed-of-light, warp-stall, instruction and source-counter sections for the
# sampling kernel at 256 rows of a 151,936 vocabulary (bench_kernels_cuda's sampling section), once
# per configuration name given (a substring of the bench's names; default: flat, peaked,
# logprobs): where a sampling configuration spends its time. Builds bench_kernels_cuda into
# /tmp/build-cuda. Carry `.device`.
#
#   bench/device/profile_sampler.sh [--sass] [name ...]
#
# --sass: also the kernel's 40 most executed SASS instructions (with their addresses: the hot loops)
# and its branch/local-memory counts, for the first name.
set -uo pipefail
cd "$(dirname "$0")/../.."
out=${OUT:-/tmp/pagoda-device-out}
mkdir -p "$out"
source bench/device/device_env.sh
sass=0
if [ "${1:-}" = --sass ]; then sass=1; shift; fi
build=/tmp/build-cuda
cmake -S . -B "$build" "${flags[@]}" >"$out/build.log" 2>&1 &&
  ninja -C "$build" -j "$(nproc)" bench_kernels_cuda >>"$out/build.log" 2>&1 ||
  { grep -E "error" -A3 "$out/build.log" | head -30; exit 1; }
# Each (rows, team) column launches the kernel 5 + 15 x 5 = 80 times; 256 rows is the fifth.
for name in "${@:-flat peaked logprobs}"; do
  for n in $name; do
    echo "== $n (256 rows)"
    timeout 200 ncu --clock-control none --section SpeedOfLight --section WarpStateStats \
      --section Occupancy --section InstructionStats --section SourceCounters \
      -k regex:sample_logits_kernel --launch-skip 325 --launch-count 1 \
      "$build/bench/kernels_cuda/bench_kernels_cuda" sampling "$n" >"$out/ncu_$n.txt" 2>&1
    grep -E "sample_logits_kernel|Duration|Memory Throughput|DRAM Throughput|Compute \(SM\)|Achieved Occupancy|Registers|Local|Stall|Warp Cycles Per Issued|Executed Ipc|Issue Slots|Executed Instructions " \
      "$out/ncu_$n.txt" | head -40
    if [ $sass -eq 1 ]; then
      sass=0
      timeout 200 ncu --clock-control none --section SourceCounters --section InstructionStats \
        -k regex:sample_logits_kernel --launch-skip 325 --launch-count 1 --page source \
        --print-source sass --csv "$build/bench/kernels_cuda/bench_kernels_cuda" sampling "$n" \
        >"$out/sass_$n.csv" 2>&1
      python3 - "$out/sass_$n.csv" <<'PY'
import csv, sys
rows = [r for r in csv.reader(open(sys.argv[1])) if len(r) > 4]
head = rows[0]
print(head)
col = next((i for i, h in enumerate(head) if h.strip() == "Instructions Executed"), None)
if col is None:
    sys.exit("no 'Instructions Executed' column")
def num(x):
    try:
        return float(x.replace(",", ""))
    except ValueError:
        return 0.0
body = rows[1:]
total = sum(num(r[col]) for r in body)
print("total instructions executed", total)
for r in sorted(body, key=lambda r: -num(r[col]))[:40]:
    print(f"{num(r[col]):>12.0f} {r[0]:>6} {r[1][:90]}")
PY
    fi
  done
done
