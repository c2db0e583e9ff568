#!/usr/bin/env bash
# Fresh machine -> a story: installs the Debian packages, builds pagoda, and generates with the
# embedded stories260K model on the CPU.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/install-deps.sh
scripts/build.sh -DPAGODA_BUILD_TESTS=OFF -DPAGODA_BUILD_BENCH=OFF
./build/pagoda generate --model models/stories260K --prompt "Once upon a time" --max-tokens 256 --seed 7
