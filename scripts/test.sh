#!/usr/bin/env bash
# Fresh machine -> every test: installs the Debian packages, builds pagoda with its tests and
# benchmarks, checks formatting and layering, and runs ctest (all labels but `gpu`, which needs the
# device machine: see bench/device/run.sh).
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/install-deps.sh
scripts/build.sh -DPAGODA_BUILD_TESTS=ON -DPAGODA_BUILD_BENCH=ON
tools/check_format.sh
tools/check_layering.sh
cd build
ctest --output-on-failure --timeout 900 -j "$(nproc)" -LE gpu
