#!/usr/bin/env bash
# Installs what is missing, builds the `dev` preset and runs every test with ctest.
# Exits non-zero on any failure. Extra arguments go to ctest (e.g. -R allocator).
source "$(dirname "${BASH_SOURCE[0]}")/common.sh"

fragscope_install_packages "${FRAGSCOPE_BUILD_PACKAGES[@]}"
fragscope_build dev
cd "$FRAGSCOPE_ROOT"
export QT_QPA_PLATFORM=offscreen
ctest --preset dev --parallel "$(nproc)" --timeout 600 "$@"
