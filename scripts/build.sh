#!/usr/bin/env bash
# Configures and builds pagoda into build/ (Release). Extra arguments go to CMake, e.g.
# scripts/build.sh -DPAGODA_BUILD_TESTS=OFF.
set -euo pipefail
cd "$(dirname "$0")/.."
jobs=$(nproc)
cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=Release "$@" >/dev/null
cmake --build build -j "$jobs"
