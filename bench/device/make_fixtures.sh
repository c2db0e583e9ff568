#!/usr/bin/env bash
# On the device machine: regenerate the golden fixtures of tests/data/tiny and pack them into $OUT.
# Arguments go to tools/make_golden_fixtures.py (e.g. --only phi3-hd64,gemma2-hd64-softcap). A
# fixture that fails is reported and left out; the others are packed all the same. With
# --add-beam-search, only the beam_search entries of tests/data/tiny/*/golden.json are (re)made.
set -euo pipefail
work=$(mktemp -d)
rc=0
# --add-beam-search adds beam_search entries to the committed fixtures (weights unchanged).
if [[ " $* " == *" --add-beam-search "* ]]; then cp -r tests/data/tiny "$work/tiny"; fi
PYTHONUNBUFFERED=1 python3 tools/make_golden_fixtures.py "$work/tiny" "$@" || rc=$?
if [[ " $* " == *" --add-beam-search "* ]]; then
  # Only the golden.json files changed: the weights would not fit what a device call brings back.
  (cd "$work" && tar -czf "${OUT:-/tmp}/tiny_golden_json.tar.gz" tiny/*/golden.json)
else
  tar -C "$work" -czf "${OUT:-/tmp}/tiny_fixtures.tar.gz" tiny
fi
python3 -c "import torch, transformers; print('torch', torch.__version__, 'transformers', transformers.__version__)"
exit "$rc"
