#!/usr/bin/env python3
"""Writes a large, self-consistent PyTorch-style memory snapshot for benchmarks.

The layout is exactly what torch.cuda.memory._dump_snapshot() writes (a dict pickled with
protocol 4: segments, device_traces, allocator_settings, external_annotations; trace entries
with action/addr/size/stream/time_us/compile_context/user_metadata/frames, frames shared between
entries). The allocation pattern is a long training-like run on one 64 GiB segment: tensors are
allocated and freed in stack order, so every address PyTorch's allocator would pick is known
without running it, and a replay of the trace must land on the final segments.

usage: gen_large_snapshot.py OUT.pickle [--entries 1200000] [--seed 1]
"""
import argparse
import pickle
import random

MIB = 1 << 20


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("out")
    ap.add_argument("--entries", type=int, default=1_200_000)
    ap.add_argument("--seed", type=int, default=1)
    args = ap.parse_args()
    rng = random.Random(args.seed)

    base = 0x7F0000000000
    seg_size = 64 << 30
    frames = [{"name": f"fn_{i}", "filename": f"/src/model/layer_{i % 7}.py", "line": 10 + i}
              for i in range(64)]
    stacks = [[frames[(s * 7 + k) % len(frames)] for k in range(6)] for s in range(200)]
    t = 1_700_000_000_000_000
    trace = []

    def entry(action, addr, size, stack):
        nonlocal t
        t += rng.randint(1, 40)
        trace.append({"action": action, "addr": addr, "size": size, "stream": 0, "time_us": t,
                      "compile_context": "N/A", "user_metadata": "", "frames": stack})

    entry("segment_alloc", base, seg_size, stacks[0])
    live = []  # (addr, block_size, requested, stack)
    top = base
    while len(trace) < args.entries - 3:
        grow = not live or (rng.random() < 0.52 and top - base < seg_size - 600 * MIB)
        if grow:
            blocks = rng.randint(2 * 1024 + 1, 256 * 1024) * 512  # > 1 MiB: large pool
            requested = blocks - rng.randint(0, 511)
            stack = stacks[rng.randrange(len(stacks))]
            entry("alloc", top, requested, stack)
            live.append((top, blocks, requested, stack))
            top += blocks
        else:
            addr, blocks, requested, stack = live.pop()
            entry("free_requested", addr, requested, stack)
            entry("free_completed", addr, requested, stack)
            top = addr

    blocks = []
    for addr, size, requested, stack in live:
        blocks.append({"address": addr, "size": size, "requested_size": requested,
                       "state": "active_allocated", "frames": stack})
    if top < base + seg_size:
        blocks.append({"address": top, "size": base + seg_size - top, "requested_size": 0,
                       "state": "inactive", "frames": []})
    allocated = sum(b["size"] for b in blocks if b["state"] != "inactive")
    requested = sum(b["requested_size"] for b in blocks if b["state"] != "inactive")
    segment = {"device": 0, "address": base, "total_size": seg_size, "allocated_size": allocated,
               "active_size": allocated, "requested_size": requested, "stream": 0,
               "segment_type": "large", "segment_pool_id": (0, 0), "is_expandable": False,
               "frames": stacks[0], "blocks": blocks}
    settings = {"PYTORCH_CUDA_ALLOC_CONF": "", "max_split_size": -1,
                "garbage_collection_threshold": 0.0, "expandable_segments": False,
                "pinned_num_register_threads": 1, "release_lock_on_cudamalloc": False,
                "pinned_use_cuda_host_register": False,
                "graph_capture_record_stream_reuse": False,
                "roundup_power2_divisions": {str(1 << i): 0 for i in range(16)}}
    snapshot = {"segments": [segment], "device_traces": [trace], "allocator_settings": settings,
                "external_annotations": []}
    with open(args.out, "wb") as f:
        pickle.dump(snapshot, f, protocol=4)
    print(f"{args.out}: {len(trace)} entries, {len(blocks)} final blocks")


if __name__ == "__main__":
    main()
