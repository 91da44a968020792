#!/usr/bin/env python3
"""Compare the memory_stats() of two *.stats.json files (a torch_runner run and a fixture, say).

    compare_stats.py A.stats.json B.stats.json   -> prints every key whose value differs;
                                                    exit 0 when all 122 values are equal, else 1
"""
import json
import sys


def main(a_path, b_path):
    a = json.load(open(a_path))["memory_stats"]
    b = json.load(open(b_path))["memory_stats"]
    differ = [k for k in sorted(set(a) | set(b)) if a.get(k) != b.get(k)]
    for key in differ:
        print(f"{key}: {a.get(key)} vs {b.get(key)}")
    print(f"{len(set(a) | set(b)) - len(differ)} of {len(set(a) | set(b))} memory_stats equal")
    return 1 if differ else 0


if __name__ == "__main__":
    if len(sys.argv) != 3:
        print(__doc__, file=sys.stderr)
        sys.exit(2)
    sys.exit(main(sys.argv[1], sys.argv[2]))
