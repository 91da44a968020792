#!/usr/bin/env bash
# Fails when a tracked source file (C++, Python) has more than 1000 lines: a file that long holds
# more than one concern and is split by concern instead (fixtures and generated files aside).
set -euo pipefail
cd "$1"
limit=1000
mapfile -t files < <(git ls-files '*.cpp' '*.h' '*.py' ':!tests/fixtures/**' 2>/dev/null ||
  find engine storage usecases cli gui tests python -name '*.cpp' -o -name '*.h' -o -name '*.py')
status=0
for f in "${files[@]}"; do
  [ -f "$f" ] || continue
  lines=$(wc -l <"$f")
  if [ "$lines" -gt "$limit" ]; then
    echo "$f: $lines lines (at most $limit; split it by concern)"
    status=1
  fi
done
[ $status -eq 0 ] && echo "file length: ${#files[@]} files within $limit lines"
exit $status
