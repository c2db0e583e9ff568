#!/usr/bin/env bash
# Enforces the downward-only dependency direction of docs/architecture.md: a file in src/<layer>
# may include only headers of the layers listed for it below (and third-party headers).
set -euo pipefail
cd "$(dirname "$0")/.."
declare -A allowed=(
  [core]="core"
  [hub]="core hub"
  [kernels/cpu]="core kernels/cpu"
  [kernels/cuda]="core kernels/cuda"
  [ops]="core kernels/cpu kernels/cuda ops"
  [model]="core kernels/cpu ops kv model"
  [kv]="core kv"
  [kv_transfer]="core kv_transfer"
  [scheduler]="core kv scheduler"
  [sampling]="core sampling"
  [template]="core template"
  [tokenizer]="core tokenizer"
  [structured]="core tokenizer structured"
  [runtime]="core kernels/cpu kernels/cuda ops model kv scheduler sampling runtime"
  [engine]="core kernels/cpu ops model kv kv_transfer scheduler sampling tokenizer template structured runtime engine"
  [server]="core kv scheduler sampling tokenizer template structured engine server"
  [router]="core server router"
  [cli]="core hub kernels/cpu ops model kv kv_transfer scheduler sampling tokenizer template structured runtime engine server router cli"
)
status=0
for layer in "${!allowed[@]}"; do
  [ -d "src/$layer" ] || continue
  while IFS= read -r line; do
    file=${line%%:*}
    inc=$(sed -E 's/.*#include "([^"]+)".*/\1/' <<<"${line#*:}")
    # The layer of an include is the longest known layer prefix of its path.
    target=""
    for l in "${!allowed[@]}"; do
      if [[ $inc == "$l/"* ]] && [ ${#l} -gt ${#target} ]; then target=$l; fi
    done
    [ -z "$target" ] && continue  # not a pagoda layer (e.g. a same-folder or generated header)
    if ! grep -qw -- "$target" <<<"${allowed[$layer]}"; then
      echo "layering: $file includes $inc ($target is not below $layer)"
      status=1
    fi
  done < <(grep -rn --include='*.h' --include='*.cc' --include='*.cu' --include='*.cuh' -E '^#include "' "src/$layer" | sed -E 's/^([^:]+):[0-9]+:/\1:/')
done
# A nested layer (kernels/cpu) is checked under its own entry; files directly in src/kernels have none.
[ $status -eq 0 ] && echo "check_layering: ok"
exit $status
