#!/usr/bin/env bash
# Runs one end-to-end suite: run.sh PAGODA_BIN MODEL_DIR SUITE.test.mjs
# Installs the pinned npm packages (npm ci into tests/server/node_modules, once per lockfile and
# serialised across parallel ctest jobs), then runs the suite with `node --test`. The suites start
# `pagoda serve` themselves (lib/harness.mjs): a free loopback port, /health, SIGTERM -> exit 0.
set -euo pipefail
if [[ $# -ne 3 ]]; then
  echo "usage: $0 PAGODA_BIN MODEL_DIR SUITE.test.mjs" >&2
  exit 2
fi
here=$(cd "$(dirname "$0")" && pwd)
export PAGODA_BIN=$(realpath "$1") PAGODA_MODEL_DIR=$(realpath "$2")
suite=$3

(
  flock 9
  stamp="$here/node_modules/.pagoda-package-lock"
  if [[ ! -f $stamp ]] || ! cmp -s "$here/package-lock.json" "$stamp"; then
    (cd "$here" && npm ci --no-audit --no-fund --loglevel=error)
    cp "$here/package-lock.json" "$stamp"
  fi
) 9>"${TMPDIR:-/tmp}/pagoda-server-tests-npm.lock"

cd "$here"
exec node --test --test-reporter=spec "$suite"
