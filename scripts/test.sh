#!/usr/bin/env bash
# Fresh machine -> every test: installs the Debian packages, builds pagoda with its tests and
# benchmarks, checks formatting, layering and that the clone needs no folder beside it, runs ctest
# (all labels but `gpu`, which needs the device machine: see bench/device/run.sh) and runs each
# fuzzer for a bounded time.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/install-deps.sh
# With the CUDA toolkit present the CUDA backend is compiled too (sm_90), so that a broken CUDA build
# never lands; its tests carry the label gpu and run on the device machine (bench/device/run.sh).
cuda=OFF
if [ -x /usr/local/cuda/bin/nvcc ] || command -v nvcc >/dev/null 2>&1; then cuda=ON; fi
scripts/build.sh -DPAGODA_BUILD_TESTS=ON -DPAGODA_BUILD_BENCH=ON -DPAGODA_CUDA=$cuda
tools/check_format.sh
tools/check_layering.sh
tools/check_self_contained.sh
(cd build && ctest --output-on-failure --timeout 900 -j "$(nproc)" -LE gpu)
# The request-parser and Jinja fuzzers (libFuzzer, ASan + UBSan), a bounded run each.
tools/run_fuzzers.sh "${PAGODA_FUZZ_SECONDS:-30}"
