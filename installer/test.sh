#!/usr/bin/env bash
# Installs what is missing, builds the pickle reader's libFuzzer target (preset `fuzz`, clang) and
# fuzzes it briefly from the real PyTorch recordings, then builds the `dev` preset and runs every
# test with ctest (engine, storage, CLI, GUI offscreen, packaging, style, and python/tests with
# pytest as the one ctest test python.fragscope_record: its exit 5 "no tests" counts as a pass).
# Exits non-zero on any failure. Extra arguments go to the dev ctest (e.g. -L engine).
source "$(dirname "${BASH_SOURCE[0]}")/common.sh"

fragscope_install_packages "${FRAGSCOPE_BUILD_PACKAGES[@]}"
cd "$FRAGSCOPE_ROOT"
if [ ! -f build/fuzz/CMakeCache.txt ]; then
  cmake --preset fuzz >/dev/null
fi
cmake --build build/fuzz --target fuzz_snapshot_reader --parallel "$(nproc)"
ctest --test-dir build/fuzz -L fuzz --output-on-failure

fragscope_build dev
cd "$FRAGSCOPE_ROOT"
export QT_QPA_PLATFORM=offscreen
ctest --preset dev --parallel "$(nproc)" --timeout 600 "$@"
