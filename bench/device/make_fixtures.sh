#!/usr/bin/env bash
# On the device machine: regenerate the golden fixtures of tests/data/tiny and pack them into $OUT.
set -euo pipefail
work=$(mktemp -d)
PYTHONUNBUFFERED=1 python3 tools/make_golden_fixtures.py "$work/tiny"
tar -C "$work" -czf "${OUT:-/tmp}/tiny_fixtures.tar.gz" tiny
python3 -c "import torch, transformers; print('torch', torch.__version__, 'transformers', transformers.__version__)"
