#!/bin/bash
# Peak memory of `fragscope-cli import`, `replay` and `advise` against the size of the snapshot
# they read (issue #19's goal: at most 0.5x the pickle file at any size). For each entry count a
# snapshot is generated from a recorded trace (fragscope-gen-snapshot repeats gpt_varlen_default,
# each repetition ending in empty_cache's burst of segment_free entries, so replay infers those
# calls), imported once into a fresh database, replayed and advised on, each under /usr/bin/time,
# and each peak RSS is printed beside the plain pickle's size (the file as
# torch.cuda.memory._dump_snapshot writes it) and, for the import, its gzip -1 size. One command at
# a time; everything generated is deleted at exit. Not a test: a measurement to quote with the
# load.
#
# usage: tests/bench/import_peak_rss.sh BIN_DIR [ENTRIES ...]
#   BIN_DIR: holds fragscope-cli and fragscope-gen-snapshot (build/release/bin)
#   ENTRIES: default 1200000 5000000 10000000 (10M needs ~0.6 GB of disk under $TMPDIR)
set -euo pipefail
if [ $# -lt 1 ]; then
  sed -n '2,16p' "$0"
  exit 2
fi
bin=$1
shift
counts=("$@")
[ ${#counts[@]} -gt 0 ] || counts=(1200000 5000000 10000000)
here=$(cd "$(dirname "$0")/../.." && pwd)
source_trace=$here/tests/fixtures/torch-2.11-h200/gpt_varlen_default.pickle.gz
work=$(mktemp -d "${TMPDIR:-/tmp}/fragscope-rss.XXXXXX")
trap 'rm -rf "$work"' EXIT

mb() { awk -v b="$1" 'BEGIN { printf "%.1f", b / 1e6 }'; }
ratio() { awk -v a="$1" -v b="$2" 'BEGIN { printf "%.2f", a / b }'; }
printf '%-10s %-8s %-10s %-8s %-10s %-11s %-10s %-9s %-7s\n' entries command pickle_MB gzip_MB \
  peak_MB peak/pickle peak/gzip wall_s user_s
for count in "${counts[@]}"; do
  snapshot=$work/snap_$count.pickle
  "$bin/fragscope-gen-snapshot" "$source_trace" "$snapshot" --entries "$count" >/dev/null
  pickle_bytes=$(stat -c %s "$snapshot")
  gzip_bytes=$(gzip -1 -c "$snapshot" | wc -c)
  for command in import replay advise; do
    case $command in
      import) args=(import "$snapshot" --db "$work/runs.db") ;;
      *) args=("$command" "$snapshot" --json /dev/null) ;;
    esac
    /usr/bin/time -f '%M %e %U' -o "$work/time" "$bin/fragscope-cli" "${args[@]}" >/dev/null \
      2>&1
    read -r rss_kb wall user <"$work/time"
    peak_bytes=$((rss_kb * 1024))
    printf '%-10s %-8s %-10s %-8s %-10s %-11s %-10s %-9s %-7s\n' "$count" "$command" \
      "$(mb "$pickle_bytes")" "$(mb "$gzip_bytes")" "$(mb "$peak_bytes")" \
      "$(ratio "$peak_bytes" "$pickle_bytes")" "$(ratio "$peak_bytes" "$gzip_bytes")" "$wall" \
      "$user"
  done
  rm -f "$snapshot" "$work"/runs.db*
done
echo "load: $(uptime | sed 's/.*load average/load average/')"
