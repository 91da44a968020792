#!/usr/bin/env python3
"""Cut the head off a snapshot's trace while keeping its final segments.

The result is what a user gets when recording starts mid-run (or the ring buffer dropped the
oldest entries): a synthetic mid-run trace whose answer is known, because the full recording is.
Only the standard library is used (no torch).

usage: cut_trace_head.py IN.pickle[.gz] OUT.pickle[.gz] (--drop N | --keep-fraction F) [--device D]
"""
import argparse
import gzip
import pickle
import sys


def load(path):
    with open(path, "rb") as f:
        head = f.read(2)
    opener = gzip.open if head == b"\x1f\x8b" else open
    with opener(path, "rb") as f:
        return pickle.load(f)


def save(obj, path):
    opener = gzip.open if path.endswith(".gz") else open
    with opener(path, "wb") as f:
        pickle.dump(obj, f, protocol=4)


def main(argv):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("input")
    parser.add_argument("output")
    group = parser.add_mutually_exclusive_group(required=True)
    group.add_argument("--drop", type=int, help="trace entries to drop from the start")
    group.add_argument("--keep-fraction", type=float, help="share of the trace to keep (tail)")
    parser.add_argument("--device", type=int, default=0)
    args = parser.parse_args(argv)

    snapshot = load(args.input)
    if not isinstance(snapshot, dict) or "device_traces" not in snapshot:
        sys.exit(f"{args.input}: not a _dump_snapshot dict with device_traces")
    traces = snapshot["device_traces"]
    if args.device >= len(traces):
        sys.exit(f"{args.input}: no trace for device {args.device}")
    trace = traces[args.device]
    drop = args.drop if args.drop is not None else int(len(trace) * (1.0 - args.keep_fraction))
    if drop < 0 or drop > len(trace):
        sys.exit(f"cannot drop {drop} of {len(trace)} entries")
    traces[args.device] = trace[drop:]
    save(snapshot, args.output)
    print(f"{args.output}: dropped {drop} of {len(trace)} entries of device {args.device}")


if __name__ == "__main__":
    main(sys.argv[1:])
