#!/usr/bin/env bash
# Fails when a tracked C++ file differs from what clang-format (the repo's .clang-format) makes of it.
set -euo pipefail
cd "$1"
if ! command -v clang-format >/dev/null; then
  echo "clang-format not installed" >&2
  exit 1
fi
mapfile -t files < <(git ls-files '*.cpp' '*.h' '*.hpp' '*.cu' '*.cuh' 2>/dev/null || find engine storage gui tests -name '*.cpp' -o -name '*.h')
# One clang-format process for every file is the fast path; only a failure lists them one by one.
if clang-format --dry-run -Werror "${files[@]}" >/dev/null 2>&1; then
  echo "clang-format: ${#files[@]} files OK"
  exit 0
fi
status=0
for f in "${files[@]}"; do
  if ! clang-format --dry-run -Werror "$f" >/dev/null 2>&1; then
    echo "not clang-formatted: $f"
    status=1
  fi
done
[ $status -eq 0 ] && echo "clang-format: ${#files[@]} files OK"
exit $status
