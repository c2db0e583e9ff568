#!/usr/bin/env bash
# A clone is self-contained: no tracked file outside docs/ may reach for data beside the checkout
# (a sibling shared folder, or the old CMake variable that pointed there). Tests, benchmarks and
# tools find their data in the repository: configs/, models/, tests/data/.
set -euo pipefail
cd "$(dirname "$0")/.."
# The patterns are assembled so that this script does not match itself.
sibling='\.\./'"shared"
variable='PAGODA_'"SHARED_DIR"
absolute='/work/'"shared"
if hits=$(git grep -n -I -E "$sibling|$variable|$absolute" -- . ':!docs/'); then
  echo "check_self_contained: these lines depend on a folder outside the repository:"
  echo "$hits"
  exit 1
fi
echo "check_self_contained: ok"
