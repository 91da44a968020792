#!/bin/bash
# Peak memory of `fragscope-cli import` against the size of the snapshot it reads (issue #19's
# goal: at most 0.5x the pickle file at any size). For each entry count a snapshot is generated
# from a recorded trace (fragscope-gen-snapshot repeats gpt_varlen_default), imported once into a
# fresh database under /usr/bin/time, and the peak RSS is printed beside the plain pickle's size
# (the file as torch.cuda.memory._dump_snapshot writes it) and its gzip -1 size. One import at a
# time; everything generated is deleted at exit. Not a test: a measurement to quote with the load.
#
# usage: tests/bench/import_peak_rss.sh BIN_DIR [ENTRIES ...]
#   BIN_DIR: holds fragscope-cli and fragscope-gen-snapshot (build/release/bin)
#   ENTRIES: default 1200000 5000000 10000000 (10M needs ~0.6 GB of disk under $TMPDIR)
set -euo pipefail
if [ $# -lt 1 ]; then
  sed -n '2,13p' "$0"
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
printf '%-10s %-10s %-10s %-10s %-11s %-10s %-9s %-7s\n' entries pickle_MB gzip_MB peak_MB \
  peak/pickle peak/gzip wall_s user_s
for count in "${counts[@]}"; do
  snapshot=$work/snap_$count.pickle
  "$bin/fragscope-gen-snapshot" "$source_trace" "$snapshot" --entries "$count" >/dev/null
  pickle_bytes=$(stat -c %s "$snapshot")
  gzip_bytes=$(gzip -1 -c "$snapshot" | wc -c)
  /usr/bin/time -f '%M %e %U' -o "$work/time" "$bin/fragscope-cli" import "$snapshot" \
    --db "$work/runs.db" >/dev/null
  read -r rss_kb wall user <"$work/time"
  peak_bytes=$((rss_kb * 1024))
  printf '%-10s %-10s %-10s %-10s %-11s %-10s %-9s %-7s\n' "$count" "$(mb "$pickle_bytes")" \
    "$(mb "$gzip_bytes")" "$(mb "$peak_bytes")" \
    "$(awk -v a="$peak_bytes" -v b="$pickle_bytes" 'BEGIN { printf "%.2f", a / b }')" \
    "$(awk -v a="$peak_bytes" -v b="$gzip_bytes" 'BEGIN { printf "%.2f", a / b }')" "$wall" "$user"
  rm -f "$snapshot" "$work"/runs.db*
done
echo "load: $(uptime | sed 's/.*load average/load average/')"
