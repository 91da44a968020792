#!/usr/bin/env bash
# Builds the .deb from this build tree with CPack and checks its file list and control data.
# Usage: check_deb.sh BINARY_DIR
set -euo pipefail
binary_dir="$1"
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
cd "$binary_dir"
cpack -G DEB -B "$work" >"$work/cpack.log" 2>&1 || { cat "$work/cpack.log"; exit 1; }
deb="$(ls "$work"/fragscope_*_amd64.deb)"
dpkg-deb -c "$deb" | awk '{print $NF}' | sed 's|^\./|/|' >"$work/files"
dpkg-deb -f "$deb" Package Depends >"$work/control"

status=0
expect_file() {
  if ! grep -qx -- "$1" "$work/files"; then
    echo "missing from package: $1"
    status=1
  fi
}
expect_file /usr/bin/fragscope
expect_file /usr/bin/fragscope-cli
expect_file /usr/share/applications/io.github.fragscope.FragScope.desktop
expect_file /usr/share/metainfo/io.github.fragscope.FragScope.metainfo.xml
expect_file /usr/share/mime/packages/io.github.fragscope.FragScope.xml
expect_file /usr/share/icons/hicolor/scalable/apps/io.github.fragscope.FragScope.svg
for size in 16 32 48 64 128 256 512; do
  expect_file "/usr/share/icons/hicolor/${size}x${size}/apps/io.github.fragscope.FragScope.png"
done
expect_file /usr/share/fragscope/experiments/case-study-1.2b-a100-40gb.json
expect_file /usr/share/fragscope/experiments/torch_runner/torch_runner.py
grep -q '^Package: fragscope$' "$work/control" || { echo "wrong package name"; status=1; }
for dep in libqt6widgets6 libsqlite3-0 zlib1g; do
  grep -q "$dep" "$work/control" || { echo "Depends lacks $dep: $(cat "$work/control")"; status=1; }
done
if [ $status -eq 0 ]; then
  echo "package OK: $(wc -l <"$work/files") entries"
fi
exit $status
