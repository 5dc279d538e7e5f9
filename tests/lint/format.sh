#!/usr/bin/env bash
# The C++ (and the tests' C) in the layout .clang-format describes: checked by the `format` test,
# applied by `make format` (--fix). BPF programs keep the kernel's style (bpf/.clang-format).
set -euo pipefail
root=${1:?usage: format.sh SOURCE_DIR [--fix]}
mode=${2:-}
fmt=$(command -v clang-format-14 || command -v clang-format)
cd "$root"
mapfile -t files < <(find agent include tests -type f \( -name '*.cpp' -o -name '*.h' -o -name '*.c' -o -name '*.cu' \) \
  ! -name '*.bpf.c' ! -path 'tests/fixtures/*' ! -path 'tests/bpf/*' | sort)
if [ "$mode" = --fix ]; then
  "$fmt" -i "${files[@]}"
  echo "formatted ${#files[@]} files"
else
  "$fmt" --dry-run -Werror "${files[@]}"
  echo "format holds: ${#files[@]} files"
fi
