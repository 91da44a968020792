#!/usr/bin/env bash
# Builds the `release` preset and a .deb with CPack into build/release/.
# Prints the package path on the last line.
source "$(dirname "${BASH_SOURCE[0]}")/common.sh"

fragscope_install_packages "${FRAGSCOPE_BUILD_PACKAGES[@]}" dpkg-dev file
fragscope_build release
cd "$FRAGSCOPE_ROOT/build/release"
cpack -G DEB >&2
ls -1 "$PWD"/fragscope_*_amd64.deb | tail -n 1
