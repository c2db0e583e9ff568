#!/usr/bin/env bash
# Fails when a C++ source file is not clang-formatted (.clang-format at the root).
set -euo pipefail
cd "$(dirname "$0")/.."
mapfile -t files < <(git ls-files 'src/*.h' 'src/*.cc' 'src/*.cu' 'src/*.cuh' 'include/*.h' 'tests/*.h' 'tests/*.cc' 'bench/*.h' 'bench/*.cc')
[ ${#files[@]} -eq 0 ] && exit 0
if ! clang-format --dry-run --Werror "${files[@]}" 2>/tmp/pagoda-format.log; then
  grep -E '^[^ ].*: (error|warning)' /tmp/pagoda-format.log | cut -d: -f1 | sort -u | sed 's/^/needs clang-format: /'
  echo "check_format: run clang-format -i on the files above" >&2
  exit 1
fi
echo "check_format: ${#files[@]} files formatted"
