#!/usr/bin/env python3
"""Markdown tables from the JSON that `fragscope-cli gpu-run --json` and `torch-run --json` wrote.

    summarize_results.py FILE.json ...   -> markdown on stdout, one section per file
"""
import json
import statistics
import sys


def gib(b):
    return f"{b / 2**30:.2f}"


def pct(x):
    return f"{x * 100:+.2f}%"


def steady(steps, key):
    """Median of a per-step value over the training steps after the first (warm-up) step."""
    values = [s[key] for s in steps if s.get("step", 0) >= 1 and key in s]
    return statistics.median(values) if values else float("nan")


def gpu_run(doc):
    env = doc["environment"]
    driver = env.get("driver_release") or "(release not reported)"
    out = [f"GPU: {env['gpu_name']}, {gib(env['total_memory'])} GiB, driver {driver} (CUDA "
           f"{env['driver_cuda_version']}), runtime {env['runtime_cuda_version']}", ""]
    out.append("| point | allocator | outcome | peak allocated GiB | peak reserved GiB | "
               "device used at step ends, max GiB | device calls | device call ms | mallocs | malloc mean us "
               "| free mean us | median step ms (host / GPU) | empty_cache calls, total ms |")
    out.append("|" + "---|" * 13)
    for r in doc["runs"]:
        calls = sum(c["count"] for c in r["device_calls"].values())
        call_ms = sum(c["total_ms"] for c in r["device_calls"].values())
        ec = r["empty_cache_calls"]
        out.append(
            f"| {r['point']} | {r['allocator']} | {r['outcome']} | {gib(r['peak_allocated'])} | "
            f"{gib(r['peak_reserved'])} | {gib(r['peak_device_used'])} | {calls} | {call_ms:.1f} | "
            f"{r['mallocs']} | {r['malloc_calls']['mean_us']:.2f} | "
            f"{r['free_calls']['mean_us']:.2f} | {steady(r['steps'], 'host_ms'):.2f} / "
            f"{steady(r['steps'], 'gpu_ms'):.2f} | {ec['count']}, {ec['total_ms']:.1f} |")
    model = [r for r in doc["runs"] if "model" in r]
    if model:
        out.append("")
        out.append("Model runs, reserved bytes against the bytes CudaDevice held after every "
                   "request: " + ", ".join(
                       f"{r['point']}: {'equal' if r['model']['reserved_matches_device'] else 'DIFFER'}"
                       for r in model))
    return out


def torch_run(doc):
    out = ["| point | real outcome | model outcome | peak allocated real / model GiB | error | "
           "peak reserved real / model GiB | error | segments real / model | median step ms "
           "(CUDA events) | wall s |", "|" + "---|" * 10]
    for r in doc["runs"]:
        out.append(
            f"| {r['point']} | {r['real_outcome']} | {r['simulated_outcome']} | "
            f"{gib(r['real_peak_allocated'])} / {gib(r['simulated_peak_allocated'])} | "
            f"{pct(r['peak_allocated_error'])} | {gib(r['real_peak_reserved'])} / "
            f"{gib(r['simulated_peak_reserved'])} | {pct(r['peak_reserved_error'])} | "
            f"{r['real_segment_allocs']} / {r['simulated_segment_allocs']} | "
            f"{steady(r['steps'], 'cuda_ms'):.1f} | {r['wall_s']:.1f} |")
    return out


def main(paths):
    for path in paths:
        doc = json.load(open(path))
        print(f"### {path}\n")
        lines = gpu_run(doc) if "environment" in doc else torch_run(doc)
        print("\n".join(lines))
        print()


if __name__ == "__main__":
    main(sys.argv[1:])
