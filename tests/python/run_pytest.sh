#!/usr/bin/env bash
# Runs python/tests (fragscope-record) with pytest for ctest: one ctest result, pytest's own
# output only in the log. Exit 0 on success, 1 on failures, 77 (ctest: skipped) when no Python
# with pytest is installed. pytest's exit 5 ("no tests collected") is a pass, so an all-skipped
# run cannot fail CI.
set -u
root="$1"
for candidate in "${FRAGSCOPE_PYTHON:-}" python3 /usr/bin/python3; do
  [ -n "$candidate" ] || continue
  if "$candidate" -c "import pytest" >/dev/null 2>&1; then
    python="$candidate"
    break
  fi
done
if [ -z "${python:-}" ]; then
  echo "no python3 with pytest (Debian: python3-pytest); skipping the fragscope-record tests"
  exit 77
fi
cd "$root/python" || exit 1
export PYTHONDONTWRITEBYTECODE=1
"$python" -m pytest -q -p no:cacheprovider tests
status=$?
if [ "$status" -eq 5 ]; then
  echo "pytest collected no tests (exit 5): counted as a pass"
  exit 0
fi
exit "$status"
