#!/usr/bin/env bash
# Installs what is missing, builds `release`, creates the default database with the bundled case
# study already run (when the database is empty), and opens the GUI on it. Extra arguments go to
# `fragscope`.
source "$(dirname "${BASH_SOURCE[0]}")/common.sh"

fragscope_install_packages "${FRAGSCOPE_BUILD_PACKAGES[@]}"
fragscope_build release
cd "$FRAGSCOPE_ROOT"
BIN="$FRAGSCOPE_ROOT/build/release/bin"
DB="${XDG_DATA_HOME:-$HOME/.local/share}/fragscope/fragscope.db"
mkdir -p "$(dirname "$DB")"
if [ ! -s "$DB" ] || [ "$("$BIN/fragscope-cli" runs --db "$DB" --count 2>/dev/null || echo 0)" = "0" ]; then
  echo "fragscope: running the bundled case study into $DB" >&2
  "$BIN/fragscope-cli" run "$FRAGSCOPE_ROOT/experiments/case-study-1.2b-a100-40gb.json" --db "$DB" >/dev/null
fi
exec "$BIN/fragscope" --db "$DB" "$@"
