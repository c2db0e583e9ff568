#!/usr/bin/env bash
# On the device machine: regenerate the golden fixtures of tests/data/tiny and pack them into $OUT.
# Arguments go to tools/make_golden_fixtures.py (e.g. --only phi3-hd64,gemma2-hd64-softcap). A
# fixture that fails is reported and left out; the others are packed all the same.
set -euo pipefail
work=$(mktemp -d)
rc=0
PYTHONUNBUFFERED=1 python3 tools/make_golden_fixtures.py "$work/tiny" "$@" || rc=$?
tar -C "$work" -czf "${OUT:-/tmp}/tiny_fixtures.tar.gz" tiny
python3 -c "import torch, transformers; print('torch', torch.__version__, 'transformers', transformers.__version__)"
exit "$rc"
