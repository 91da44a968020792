#!/usr/bin/env python3
"""fragscope-cli's info, import and replay of one snapshot against python's pickle.load of it.

Issue #19's goals are ratios against the peer users run today: import <= 0.5x pickle.load,
info <= 0.3x, replay <= 0.5x, and PyTorch's own `_memory_viz.py trace_plot` (where torch is
installed) kept at >= 10x our import. Each round runs every command once, one at a time, in
the same order (so a noisy machine spreads over all of them); the medians over the rounds and
their ratios to pickle.load's are printed, wall and CPU (user + sys) seconds apart, with the
load average before and after.

pickle.load is timed inside its interpreter, around the load alone. trace_plot is timed twice:
inside its interpreter around the load, trace_plot and the HTML's write ("trace_plot"), and as
the whole command users run, `python3 -m torch.cuda._memory_viz trace_plot FILE -o OUT.html`,
torch's import included ("trace_plot_cmd"). fragscope-cli is timed as the whole process, start
included. Not a test: a measurement to quote with the load.

usage: vs_pickle_load.py CLI SNAPSHOT [--rounds N] [--json OUT.json] [--no-trace-plot]
  CLI: fragscope-cli (build/release/bin/fragscope-cli)
  SNAPSHOT: a plain or gzipped pickle (pickle.load reads it through gzip when it ends in .gz)
"""

import argparse
import gzip
import json
import os
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

# The peer, timed from inside: prints "wall cpu" of the work alone.
PICKLE_LOAD = r"""
import gzip, pickle, sys, time
path = sys.argv[1]
opener = gzip.open if path.endswith('.gz') else open
wall, cpu = time.perf_counter(), time.process_time()
with opener(path, 'rb') as f:
    pickle.load(f)
print(time.perf_counter() - wall, time.process_time() - cpu)
"""

TRACE_PLOT = r"""
import gzip, pickle, sys, time
from torch.cuda import _memory_viz
path, out = sys.argv[1], sys.argv[2]
opener = gzip.open if path.endswith('.gz') else open
wall, cpu = time.perf_counter(), time.process_time()
with opener(path, 'rb') as f:
    data = pickle.load(f)
with open(out, 'w') as f:
    f.write(_memory_viz.trace_plot(data))
print(time.perf_counter() - wall, time.process_time() - cpu)
"""


def children_cpu():
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def run_process(argv):
    """Wall and CPU seconds of one whole process, or None and why it failed."""
    cpu = children_cpu()
    wall = time.perf_counter()
    done = subprocess.run(argv, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    wall = time.perf_counter() - wall
    cpu = children_cpu() - cpu
    if done.returncode != 0:
        lines = done.stderr.strip().splitlines()
        return None, f"{' '.join(argv)} failed ({done.returncode}): {lines[-1] if lines else ''}"
    return (wall, cpu), None


def run_cli(argv):
    """Wall and CPU seconds of one fragscope-cli process; its failure ends the measurement."""
    measured, error = run_process(argv)
    if error:
        sys.exit(error)
    return measured


def run_peer(script, args):
    """Wall and CPU seconds the peer's script prints for its own work, or None and why not."""
    done = subprocess.run([sys.executable, "-c", script, *args], capture_output=True, text=True)
    if done.returncode != 0:
        lines = done.stderr.strip().splitlines()
        return None, lines[-1] if lines else "failed"
    wall, cpu = (float(x) for x in done.stdout.split())
    return (wall, cpu), None


def time_trace_plot(snapshot, plain, html):
    """A round's two trace_plot samples (inside the interpreter, the whole command), or None and
    why one failed."""
    inside, error = run_peer(TRACE_PLOT, [snapshot, html])
    if error:
        return None, error
    command = [sys.executable, "-m", "torch.cuda._memory_viz", "trace_plot", plain, "-o", html]
    whole, error = run_process(command)
    if error:
        return None, error
    return (inside, whole), None


def has_trace_plot():
    probe = subprocess.run([sys.executable, "-c", "from torch.cuda import _memory_viz"],
                           capture_output=True)
    return probe.returncode == 0


def load_average():
    return " ".join(f"{x:.2f}" for x in os.getloadavg())


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("cli")
    parser.add_argument("snapshot")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--json", help="also write every sample and median here")
    parser.add_argument("--no-trace-plot", action="store_true")
    args = parser.parse_args()
    if args.rounds < 1:
        sys.exit("--rounds must be at least 1")
    for path, what in ((args.cli, "fragscope-cli"), (args.snapshot, "the snapshot")):
        if not os.path.isfile(path):
            sys.exit(f"{path}: not a file ({what} was expected)")
    trace_plot = not args.no_trace_plot and has_trace_plot()

    samples = {}
    load_before = load_average()
    with tempfile.TemporaryDirectory(prefix="fragscope-vs-pickle.") as work:
        # _memory_viz's command reads a plain pickle: it is given one decompressed here, once.
        plain = args.snapshot
        if trace_plot and args.snapshot.endswith(".gz"):
            plain = os.path.join(work, "snapshot.pickle")
            with gzip.open(args.snapshot, "rb") as source, open(plain, "wb") as target:
                shutil.copyfileobj(source, target)
        for round_index in range(args.rounds):
            measured, error = run_peer(PICKLE_LOAD, [args.snapshot])
            if error:
                sys.exit(f"pickle.load of {args.snapshot} failed: {error}")
            samples.setdefault("pickle.load", []).append(measured)
            db = os.path.join(work, f"round{round_index}.db")
            commands = {
                "info": [args.cli, "info", args.snapshot],
                "import": [args.cli, "import", args.snapshot, "--db", db],
                "replay": [args.cli, "replay", args.snapshot],
            }
            for name, argv in commands.items():
                samples.setdefault(name, []).append(run_cli(argv))
            for leftover in (db, db + "-wal", db + "-shm"):
                if os.path.exists(leftover):
                    os.remove(leftover)
            if trace_plot:
                html = os.path.join(work, "trace_plot.html")
                measured, error = time_trace_plot(args.snapshot, plain, html)
                if error:
                    print(f"trace_plot left out: {error}", file=sys.stderr)
                    trace_plot = False
                    samples.pop("trace_plot", None)
                    samples.pop("trace_plot_cmd", None)
                else:
                    samples.setdefault("trace_plot", []).append(measured[0])
                    samples.setdefault("trace_plot_cmd", []).append(measured[1])
    load_after = load_average()

    medians = {name: (statistics.median(w for w, _ in runs), statistics.median(c for _, c in runs))
               for name, runs in samples.items()}
    base_wall, base_cpu = medians["pickle.load"]
    size_mb = os.path.getsize(args.snapshot) / 1e6
    print(f"{args.snapshot}: {size_mb:.1f} MB, {args.rounds} rounds, medians; "
          f"load {load_before} before, {load_after} after; python {sys.version.split()[0]}")
    print(f"{'command':<15} {'wall_s':>8} {'cpu_s':>8} {'wall/pickle':>12} {'cpu/pickle':>11}")
    for name, (wall, cpu) in medians.items():
        print(f"{name:<15} {wall:8.3f} {cpu:8.3f} {wall / base_wall:12.3f} {cpu / base_cpu:11.3f}")
    import_wall, import_cpu = medians["import"]
    for peer in ("trace_plot", "trace_plot_cmd"):
        if peer in medians:
            plot_wall, plot_cpu = medians[peer]
            print(f"import / {peer}: wall {import_wall / plot_wall:.3f}, "
                  f"cpu {import_cpu / plot_cpu:.3f}")
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"snapshot": args.snapshot, "bytes": os.path.getsize(args.snapshot),
                       "python": sys.version.split()[0],
                       "load_before": load_before, "load_after": load_after,
                       "samples": samples, "medians": medians}, f, indent=1)


if __name__ == "__main__":
    main()
