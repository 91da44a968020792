#!/usr/bin/env python3
"""Figures per PyTorch version class over the real-world snapshots, from the CLI itself.

For every file listed in the folder's manifest.json: `fragscope-cli info` (opens), `import` of
every device into a scratch database (imports), and `replay --json` of every device with trace
entries (replays exactly = segment events and OOMs match the recording). Prints one row per
version class (the manifest's version_guess), the files that do not replay exactly with the first
divergence, and the CPU time the CLI used. Standard library only.

usage: real_world_figures.py FRAGSCOPE_CLI [FOLDER] [--jobs N]
  FOLDER defaults to ../shared/fixtures/real-world beside the repository.
"""
import argparse
import collections
import concurrent.futures
import json
import os
import pathlib
import resource
import subprocess
import sys
import tempfile

# The classes the issue reports by; the manifest's other guesses are state-only files whose
# format cannot tell the releases of a range apart and keep their own row.
CLASS_ORDER = ["2.0", "2.1", "2.2", "2.1-2.2", "2.3-2.4", "2.5-2.7", "2.5-2.8", "2.8", "2.9",
               "2.10", ">=2.1 (memory_snapshot() list)"]


def run(cli, *args):
    done = subprocess.run([cli, *args], capture_output=True, text=True)
    return done.returncode, done.stdout, done.stderr


def one_file(cli, folder, entry, scratch):
    name = entry["stored_as"]
    path = str(folder / name)
    per_device = entry["features"].get("trace_entries_per_device") or []
    result = {"name": name, "class": entry["version_guess"], "opens": False, "imports": False,
              "traced": 0, "replayed": 0, "exact": 0, "failures": []}
    code, out, err = run(cli, "info", path, "--json", "-")
    if code != 0:
        result["failures"].append("info: " + err.strip())
        return result
    result["opens"] = True
    devices = max(json.loads(out).get("device_count", 1), 1)
    database = os.path.join(scratch, name + ".db")
    imported = True
    for device in range(devices):
        code, _, err = run(cli, "import", path, "--db", database, "--device", str(device))
        if code != 0:
            imported = False
            result["failures"].append(f"import device {device}: " + err.strip())
    result["imports"] = imported
    if os.path.exists(database):
        os.remove(database)
    for device, entries in enumerate(per_device):
        if entries == 0:
            continue
        result["traced"] += 1
        code, out, err = run(cli, "replay", path, "--device", str(device), "--json", "-")
        if code != 0:
            result["failures"].append(f"replay device {device}: " + err.strip())
            continue
        result["replayed"] += 1
        recorded = json.loads(out)["recorded"]
        if recorded.get("segment_events_match") and recorded.get("ooms_match"):
            result["exact"] += 1
        else:
            divergence = recorded.get("first_divergence") or {}
            result["failures"].append(f"replay device {device}: " +
                                      divergence.get("description", "segment events or OOMs differ"))
    return result


def main():
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("cli")
    parser.add_argument("folder", nargs="?",
                        default=str(pathlib.Path(__file__).resolve().parents[3] /
                                    "shared/fixtures/real-world"))
    parser.add_argument("--jobs", type=int, default=1)
    args = parser.parse_args()
    folder = pathlib.Path(args.folder)
    manifest_path = folder / "manifest.json"
    if not manifest_path.exists():
        print(f"{manifest_path} is absent: nothing to measure")
        return 0
    manifest = json.loads(manifest_path.read_text())
    with tempfile.TemporaryDirectory() as scratch, \
            concurrent.futures.ThreadPoolExecutor(max_workers=args.jobs) as pool:
        results = list(pool.map(lambda e: one_file(args.cli, folder, e, scratch), manifest))

    rows = collections.OrderedDict((c, collections.Counter()) for c in CLASS_ORDER)
    for r in results:
        row = rows.setdefault(r["class"], collections.Counter())
        row["files"] += 1
        row["open"] += r["opens"]
        row["import"] += r["imports"]
        row["traced"] += r["traced"]
        row["replayed"] += r["replayed"]
        row["exact"] += r["exact"]
    print(f"{'class':<32} {'files':>5} {'open':>5} {'import':>6} {'traced devices':>14} "
          f"{'replay':>6} {'exact':>5}")
    total = collections.Counter()
    for name, row in rows.items():
        if row["files"] == 0:
            continue
        total.update(row)
        print(f"{name:<32} {row['files']:>5} {row['open']:>5} {row['import']:>6} "
              f"{row['traced']:>14} {row['replayed']:>6} {row['exact']:>5}")
    print(f"{'all':<32} {total['files']:>5} {total['open']:>5} {total['import']:>6} "
          f"{total['traced']:>14} {total['replayed']:>6} {total['exact']:>5}")
    for r in results:
        for failure in r["failures"]:
            print(f"  {r['name']}: {failure}")
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    print(f"CPU time of the CLI runs: {usage.ru_utime:.1f} s user + {usage.ru_stime:.1f} s sys; "
          f"load average {os.getloadavg()[0]:.1f}")
    return 0 if all(not r["failures"] for r in results) else 1


if __name__ == "__main__":
    sys.exit(main())
