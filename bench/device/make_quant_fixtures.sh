#!/usr/bin/env bash
# On the device machine: write the quantized golden fixtures of tests/data/tiny-quant
# (tools/make_quant_fixtures.py: compressed-tensors FP8 / INT8 W8A8, GPTQ, AWQ, ModelOpt NVFP4, an
# FP8 KV cache) and pack them into $OUT/tiny_quant_fixtures.tar.gz. Arguments go to the tool (e.g.
# --only gptq-g32-asym,awq-g64). A fixture that fails (its layout cross-check included) is reported
# and left out; the others are packed all the same, and the exit status is 1.
# Then, on the development machine: tar -C tests/data -xzf tiny_quant_fixtures.tar.gz
set -euo pipefail
work=$(mktemp -d)
rc=0
python3 -c "import torch, transformers, safetensors; print('torch', torch.__version__, 'transformers', transformers.__version__, 'safetensors', safetensors.__version__)"
PYTHONUNBUFFERED=1 python3 tools/make_quant_fixtures.py "$work/tiny-quant" "$@" || rc=$?
tar -C "$work" -czf "${OUT:-/tmp}/tiny_quant_fixtures.tar.gz" tiny-quant
du -sh "$work/tiny-quant"/* "${OUT:-/tmp}/tiny_quant_fixtures.tar.gz"
exit "$rc"
