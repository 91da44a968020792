#!/usr/bin/env bash
# A simulated sweep through a real Slurm: `run --slurm` submits one array task per point, the
# test waits for them, `collect` imports them (while they run, then again: nothing twice), and
# the collected runs must equal a local `run` of the same experiment point by point (outcome,
# peaks, event count, memory_stats). Then a copy of the batch script, edited to read a broken
# experiment and resubmitted with plain sbatch, must be reported as failed with its Slurm state
# and log tail.
#
# usage: slurm_sweep_test.sh FRAGSCOPE_CLI EXPERIMENT.json
# Exit 77 (ctest: skipped) when no Slurm cluster is reachable (sinfo/scontrol ping fail): start
# one with installer/slurm-localhost.sh and export the SLURM_CONF it prints.
set -euo pipefail
cli="$1"
experiment="$2"
export PATH="$PATH:/usr/sbin"

if ! command -v sbatch >/dev/null 2>&1; then
  echo "SKIPPED: Slurm is not installed (sbatch not found)"
  exit 77
fi
if ! scontrol ping >/dev/null 2>&1 || ! sinfo -h >/dev/null 2>&1; then
  echo "SKIPPED: no Slurm controller reachable (scontrol ping failed; SLURM_CONF=${SLURM_CONF:-unset})."
  echo "         installer/slurm-localhost.sh start DIR starts a one-node cluster."
  exit 77
fi

work="$(mktemp -d "${TMPDIR:-/tmp}/fragscope-slurm-test-XXXXXX")"
trap 'rm -rf "$work"' EXIT
sweep="$work/sweep"
db="$work/collected.db"

"$cli" run "$experiment" --slurm --out "$sweep" --json "$work/submitted.json"
job="$(python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["slurm_job_id"])' "$work/submitted.json")"
tasks="$(python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["tasks"])' "$work/submitted.json")"
echo "submitted job array $job with $tasks tasks"
[ -f "$sweep/fragscope-sweep.sbatch" ] || { echo "FAIL: no batch script beside the results"; exit 1; }

# Collect while tasks are queued or running: must import only finished ones, and never fail.
deadline=$((SECONDS + 120))
while :; do
  status=0
  "$cli" collect "$sweep" --db "$db" --json "$work/collect.json" || status=$?
  [ "$status" -eq 0 ] || { cat "$work/collect.json"; echo "FAIL: collect reported failed tasks"; exit 1; }
  read -r done waiting < <(python3 -c '
import json, sys
r = json.load(open(sys.argv[1]))
print(r["collected"] + r["already_collected"], r["waiting"])' "$work/collect.json")
  echo "collect: $done of $tasks imported, $waiting waiting"
  [ "$done" -eq "$tasks" ] && break
  if [ "$SECONDS" -ge "$deadline" ]; then
    squeue || true
    echo "FAIL: the sweep did not finish within 120 s"
    exit 1
  fi
  sleep 1
done

# Idempotent: a second collect imports nothing.
"$cli" collect "$sweep" --db "$db" --json "$work/again.json"
python3 - "$work/again.json" "$tasks" <<'PY'
import json, sys
r = json.load(open(sys.argv[1]))
assert r["collected"] == 0 and r["already_collected"] == int(sys.argv[2]), r
PY

# The same experiment run here.
"$cli" run "$experiment" --db "$work/local.db" --json "$work/local.json" 2>/dev/null
"$cli" runs --db "$db" --json "$work/collected-runs.json"
"$cli" runs --db "$work/local.db" --json "$work/local-runs.json"
python3 - "$work/collected-runs.json" "$work/local-runs.json" <<'PY'
import json, sys
collected = {r["name"]: r for r in json.load(open(sys.argv[1]))}
local = {r["name"]: r for r in json.load(open(sys.argv[2]))}
assert sorted(collected) == sorted(local), (sorted(collected), sorted(local))
experiments = {r["experiment_id"] for r in collected.values()}
assert len(experiments) == 1, experiments
for name, l in local.items():
    c = collected[name]
    for key in ("status", "event_count", "alloc_conf", "capacity", "source"):
        assert c[key] == l[key], (name, key, c[key], l[key])
    for key in ("peak_allocated", "peak_reserved", "outcome", "memory_stats", "peaks"):
        assert c["summary"].get(key) == l["summary"].get(key), (name, key)
    print("equal to the local run: %s (%s, peak allocated %d, peak reserved %d, %d events)" % (
        name, c["status"], c["summary"]["peak_allocated"], c["summary"]["peak_reserved"],
        c["event_count"]))
PY

# An edited copy of the script, resubmitted by hand, whose tasks fail: reported with their
# Slurm state and the end of their log.
broken="$work/broken"
mkdir -p "$broken/logs" "$broken/tasks"
cp "$sweep/sweep.json" "$broken/"
echo '{"name": "broken", "training": {"batch_size": -1}}' >"$broken/experiment.json"
sed "s#$sweep#$broken#g" "$sweep/fragscope-sweep.sbatch" >"$broken/fragscope-sweep.sbatch"
sbatch --parsable "$broken/fragscope-sweep.sbatch" >/dev/null
deadline=$((SECONDS + 60))
while :; do
  status=0
  "$cli" collect "$broken" --db "$db" --json "$work/broken.json" || status=$?
  failed="$(python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["failed"])' "$work/broken.json")"
  [ "$failed" -eq "$tasks" ] && break
  [ "$SECONDS" -lt "$deadline" ] || { cat "$work/broken.json"; echo "FAIL: failed tasks not reported"; exit 1; }
  sleep 1
done
[ "$status" -eq 3 ] || { echo "FAIL: collect with failed tasks exited $status, expected 3"; exit 1; }
python3 - "$work/broken.json" <<'PY'
import json, sys
r = json.load(open(sys.argv[1]))
t = r["tasks"][0]
assert t["state"] == "failed" and t["exit_status"] == 2, t
assert t.get("slurm_state", "").startswith("FAILED"), t
assert "broken/experiment.json" in t["log_tail"], t["log_tail"]
print("failed task reported: Slurm %s, exit %d, log: %s" % (
    t["slurm_state"], t["exit_status"], t["log_tail"].strip().splitlines()[-1]))
PY
echo "PASS"
