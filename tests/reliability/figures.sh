#!/usr/bin/env bash
# The reliability figures of issue #18, measured on this machine: inputs tried, fuzz executions per
# target, imports under concurrent readers, faults injected (kill -9 during imports, a full disk)
# and what survived. Prints one line per figure, with the load average, so a rerun can be compared.
#
# Usage: tests/reliability/figures.sh [DEV_BUILD] [ASAN_BUILD]   (defaults build/dev, build/asan)
#   DEV_BUILD needs fragscope-cli and storage_test; ASAN_BUILD the fuzz_* targets (fuzz_all).
# Environment: FUZZ_SECONDS (60 per target), STRESS_IMPORTS (20), KILLS (20; kill -9 during an
# import), FULL_DISK_MB (4: the tmpfs the full-disk imports write to; needs root, else skipped).
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
dev="$(cd "${1:-$root/build/dev}" && pwd)"
asan="$(cd "${2:-$root/build/asan}" && pwd)"
fuzz_seconds="${FUZZ_SECONDS:-60}"
stress_imports="${STRESS_IMPORTS:-20}"
kills="${KILLS:-20}"
full_disk_mb="${FULL_DISK_MB:-4}"
cli="$dev/bin/fragscope-cli"
fixtures="$root/tests/fixtures/torch-2.11-h200"
shared="$root/../shared/fixtures"
work="$(mktemp -d "${TMPDIR:-/tmp}/fragscope-figures-XXXXXX")"
mounted=""
cleanup() {
  if [ -n "$mounted" ]; then umount "$mounted" || true; fi
  rm -rf "$work"
}
trap cleanup EXIT

load() { cut -d' ' -f1-3 /proc/loadavg; }
count_files() { if [ -d "$1" ]; then find "$1" -type f | wc -l; else echo 0; fi; }
integrity() { sqlite3 "$1" "PRAGMA integrity_check" 2>&1 | tr '\n' ' '; }
run_count() { sqlite3 "$1" "SELECT count(*) FROM runs" 2>&1; }
echo "figures: $(nproc) cores, load $(load) at $(date -u +%H:%M:%S) UTC"

# 1. Inputs: the kept corpora and fixtures every test and fuzz run starts from.
corpus_total=0
for dir in "$root"/tests/fuzz/corpus/*/; do
  n=$(count_files "$dir")
  corpus_total=$((corpus_total + n))
  echo "inputs: fuzz corpus $(basename "$dir"): $n files"
done
echo "inputs: fuzz corpora $corpus_total files; snapshot variants" \
  "$(count_files "$root/tests/fixtures/snapshot-variants"), HF configs" \
  "$(count_files "$root/tests/fixtures/hf-configs"), env.json $(count_files "$root/tests/fixtures/env")," \
  "experiments $(count_files "$root/experiments"), shared hostile reproductions" \
  "$(count_files "$shared/hostile")"
hostile_tests=$(cat "$root"/tests/engine/snapshot/{hostile,bombs,segment_state}_test.cpp \
  "$root"/tests/engine/core/input_file_test.cpp "$root"/tests/engine/workload/experiment_limits_test.cpp \
  "$root"/tests/cli/hostile_input_test.cpp "$root"/tests/storage/{durability,reliability,extreme_values,import_cancel}_test.cpp |
  grep -cE '^TEST(_F|_P)?\(')
echo "inputs: $hostile_tests hostile-input and fault tests (gtest cases in the hostile, bomb, limit, durability files)"

# 2. Fuzzing: each target for FUZZ_SECONDS from a copy of its kept corpus (the corpus is not grown).
for fuzzer in "$asan"/bin/fuzz_*; do
  [ -x "$fuzzer" ] || continue
  name="$(basename "$fuzzer")"
  scratch="$work/corpus-$name"
  mkdir -p "$scratch"
  seeds="$root/tests/fuzz/corpus/${name#fuzz_}"
  status=0
  (cd "$work" && "$fuzzer" -max_total_time="$fuzz_seconds" -rss_limit_mb=2048 -timeout=10 \
    -print_final_stats=1 "$scratch" "$seeds" >"$work/$name.log" 2>&1) || status=$?
  execs=$(grep -o 'stat::number_of_executed_units: *[0-9]*' "$work/$name.log" | grep -o '[0-9]*$' || echo "?")
  cov=$(grep -oE 'cov: [0-9]+' "$work/$name.log" | tail -1 | grep -oE '[0-9]+' || echo "?")
  verdict="no crash"
  [ "$status" -eq 0 ] || verdict="FAILED (exit $status; $work/$name.log)"
  echo "fuzz: $name: $execs executions in ${fuzz_seconds} s, coverage $cov edges, $verdict, load $(load)"
  [ "$status" -eq 0 ] || { tail -30 "$work/$name.log"; trap - EXIT; exit 1; }
done

# 3. Imports beside concurrent readers, checkpoints, vacuums and mmap readers (the stress test).
FRAGSCOPE_STRESS_IMPORTS="$stress_imports" "$dev/bin/storage_test" \
  --gtest_filter='ConcurrencyStress.*' 2>&1 | grep -E '^stress:|FAILED' || true
echo "stress: load $(load)"

# 4. kill -9 during an import: the database stays intact and holds only whole runs. A kill can land
# after the import's commit (the process still exits, or adds keyframes); that run is whole and is
# counted as such: every run must hold all of its file's events, in chunks that add up to them.
db="$work/killed.db"
"$cli" import "$fixtures/random_split64_round4.pickle.gz" --db "$db" >/dev/null
file_events="$(sqlite3 "$db" "SELECT event_count FROM runs")"
partial_runs() {
  sqlite3 "$1" "SELECT count(*) FROM runs r WHERE r.status != 'ok' OR r.event_count != $file_events
    OR r.event_count != (SELECT coalesce(sum(c.event_count), 0) FROM event_chunks c WHERE c.run_id = r.id)"
}
finished=0
intact=0
for i in $(seq 1 "$kills"); do
  before="$(run_count "$db")"
  "$cli" import "$fixtures/random_split64_round4.pickle.gz" --db "$db" >/dev/null 2>&1 &
  pid=$!
  sleep "$(awk -v seed="$i" 'BEGIN { srand(seed); printf "%.2f", rand() * 3 }')"
  if kill -9 "$pid" 2>/dev/null; then :; fi
  wait "$pid" 2>/dev/null && finished=$((finished + 1)) || true
  result="$(integrity "$db")"
  runs="$(run_count "$db")"
  if [ "$result" = "ok " ] && [ "$(partial_runs "$db")" -eq 0 ] && [ "$runs" -ge "$before" ] &&
    [ "$runs" -le $((before + 1)) ]; then
    intact=$((intact + 1))
  else
    echo "kill: after kill $i: integrity '$result', $runs runs (before $before), $(partial_runs "$db") partial"
  fi
done
killed_after_commit=$(($(run_count "$db") - 1 - finished))
# And the database still takes an import after the last kill.
"$cli" import "$fixtures/gpt_oom_cap.pickle.gz" --db "$db" >/dev/null && after="imports again" || after="REFUSES imports"
echo "kill: $kills kill -9 during imports ($finished finished before the kill, $killed_after_commit killed" \
  "after their commit): database intact with only whole runs after $intact of $kills; then $after;" \
  "load $(load)"

# 5. A full disk: imports into a small tmpfs until it is full.
if [ "$(id -u)" -eq 0 ] && mkdir -p "$work/full" && mount -t tmpfs -o size="${full_disk_mb}m" tmpfs "$work/full" 2>/dev/null; then
  mounted="$work/full"
  db="$work/full/full.db"
  stored=0
  message=""
  for i in $(seq 1 50); do
    if out="$("$cli" import "$fixtures/random_split64_round4.pickle.gz" --db "$db" 2>&1)"; then
      stored=$((stored + 1))
    else
      message="$(printf '%s' "$out" | tail -1)"
      break
    fi
  done
  result="$(integrity "$db")"
  echo "full disk: ${full_disk_mb} MiB: $stored imports stored, then: '$message'; integrity '$result'," \
    "$(run_count "$db") runs kept"
  case "$message" in *"disk is full"*) ;; *) echo "full disk: the message does not say the disk is full"; exit 1 ;; esac
else
  echo "full disk: SKIPPED (needs root to mount a small tmpfs)"
fi
echo "figures: done, load $(load) at $(date -u +%H:%M:%S) UTC"
