#!/usr/bin/env bash
# clang-tidy (the checks in .clang-tidy) over the use cases and the CLI, the layers the GUI and the
# CLI share, with the engine and storage headers they include. Usage: check_clang_tidy.sh SOURCE_DIR
# BUILD_DIR (BUILD_DIR holds compile_commands.json). Exits 77 (ctest: skipped) without
# clang-tidy-14.
#
# Why these files: clang-tidy parses every file it checks the way a compiler does, ~5 CPU-s per
# file here (nlohmann/json dominates), and CI allows this test about 200 CPU-s. usecases/ and cli/
# (27 files) fit; their includes bring most engine and storage headers under the checks too.
set -euo pipefail
source_dir=$1
build_dir=$2
tidy=$(command -v clang-tidy-14 || true)
if [ -z "$tidy" ]; then
  echo "clang-tidy-14 is not installed (Debian package clang-tidy-14): skipped"
  exit 77
fi
if [ ! -f "$build_dir/compile_commands.json" ]; then
  echo "$build_dir/compile_commands.json is missing (configure with CMAKE_EXPORT_COMPILE_COMMANDS)"
  exit 1
fi
# A build with precompiled headers (FRAGSCOPE_PCH) has each file -include its target's
# cmake_pch.hxx, whose .gch clang cannot read: clang-tidy reads a copy of the compile database
# without it (every file includes what it uses).
compile_db="$(mktemp -d "${TMPDIR:-/tmp}/fragscope-tidy-XXXXXX")"
trap 'rm -rf "$compile_db"' EXIT
sed -E 's# -include [^ "]*/cmake_pch\.hxx##g' "$build_dir/compile_commands.json" \
  >"$compile_db/compile_commands.json"
cd "$source_dir"
files=$(git ls-files 'usecases/*.cpp' 'cli/*.cpp' 2>/dev/null || ls usecases/*.cpp cli/*.cpp)
# The dev build's flags are gcc's: clang must not stop at a warning option it does not know.
# shellcheck disable=SC2086
if ! printf '%s\n' $files | xargs -P 2 -n 4 "$tidy" -p "$compile_db" --quiet \
  --extra-arg=-Wno-unknown-warning-option >"$build_dir/clang-tidy.log" 2>&1; then
  grep -E "(warning|error):" "$build_dir/clang-tidy.log" | sort -u
  echo "clang-tidy: findings above (full output: $build_dir/clang-tidy.log)"
  exit 1
fi
echo "clang-tidy: $(printf '%s\n' $files | wc -l) files clean"
