#!/usr/bin/env python3
"""Writes small memory snapshots in every layout PyTorch 2.0 to 2.11 used (torch-allocator-spec
§10.2, §14.4) with the standard pickler, no torch: tests/fixtures/snapshot-variants/*.pickle.

Each file holds the same small, consistent history (one 2 MiB small segment; allocs of 500 and
1000 bytes; the first freed), written the way one release wrote it. The variants that real
files showed (../shared/fixtures/real-world) are reproduced here: shared frames lists, lines of
2^64-1, multi-device files, state-only snapshots, the bare memory_snapshot() list.

Run it again after changing it; the tests read the files it wrote (checked in, a few KB).
Usage: make_variants.py [OUTPUT_DIR]
"""
import os
import pickle
import sys

BASE = 0x7F0000000000
SEG = 2 * 1024 * 1024
T0 = 1_700_000_000_000_000


def frame(name, line, filename="train.py"):
    return {"filename": filename, "line": line, "name": name}


def make(version, devices=(0,), traced=True, time_us=True, **extra):
    """The snapshot dict of `version` ("2.0", "2.1", ..., "2.10"), `devices` with segments."""
    minor = int(version.split(".")[1])
    alloc_stack = [frame("forward", 12), frame("main", 40)]
    seg_stack = alloc_stack  # PyTorch hands the same list to the segment and its first block
    segments, traces = [], []
    for device in range(max(devices) + 1):
        traces.append([])
        if device not in devices:
            continue
        base = BASE + device * (1 << 36)
        blocks = [
            {"address": base, "size": 512, "requested_size": 500, "state": "inactive", "frames": []},
            {"address": base + 512, "size": 1024, "requested_size": 1000,
             "state": "active_allocated", "frames": alloc_stack},
            {"address": base + 1536, "size": SEG - 1536, "requested_size": 0, "state": "inactive",
             "frames": []},
        ]
        segment = {"device": device, "address": base, "total_size": SEG, "allocated_size": 1024,
                   "active_size": 1024, "requested_size": 1000, "stream": 0,
                   "segment_type": "small", "segment_pool_id": (0, 0), "is_expandable": False,
                   "frames": seg_stack, "blocks": blocks}
        if minor == 0:
            # 2.0: blocks carry history and no address/frames; segments no frames/is_expandable.
            for b in blocks:
                history = [{"addr": b["address"], "real_size": b["requested_size"],
                            "frames": b["frames"]}] if b["state"] != "inactive" else []
                del b["address"], b["frames"]
                b["history"] = history
            for key in ("frames", "is_expandable", "segment_pool_id"):
                del segment[key]
        segments.append(segment)
        if not traced:
            continue
        entries = [("segment_alloc", base, SEG), ("alloc", base, 500), ("alloc", base + 512, 1000),
                   ("free_requested", base, 500), ("free_completed", base, 500)]
        for i, (action, addr, size) in enumerate(entries):
            entry = {"action": action, "addr": addr, "size": size, "stream": 0}
            if time_us and minor >= 1:
                entry["time_us"] = T0 + 10 * i
            if minor >= 1 and action == "alloc":
                entry["frames"] = alloc_stack
            if minor >= 8:
                entry["compile_context"] = "N/A" if i != 2 else "0/1"
            if minor >= 10:
                entry["user_metadata"] = "" if i != 2 else "step 3"
            traces[device].append(entry)
    snap = {"segments": segments, "device_traces": traces}
    if minor >= 3:
        settings = {"PYTORCH_CUDA_ALLOC_CONF": "", "max_split_size": -1,
                    "garbage_collection_threshold": 0.0, "expandable_segments": False,
                    "pinned_num_register_threads": 1, "release_lock_on_cudamalloc": False,
                    "pinned_use_cuda_host_register": False,
                    "roundup_power2_divisions": {str(1 << i): 0 for i in range(16)}}
        if minor >= 9:
            settings["graph_capture_record_stream_reuse"] = False
        snap["allocator_settings"] = settings
    if minor >= 5:
        snap["external_annotations"] = [{"stage": "forward", "device": 0, "time_us": T0 + 15}]
    snap.update(extra)
    return snap


def variants():
    out = {}
    out["v2_0_history"] = make("2.0")
    out["v2_1_no_time_us"] = make("2.1", time_us=False)
    out["v2_2_no_settings"] = make("2.2")
    out["v2_3_settings"] = make("2.3")
    out["v2_5_annotations"] = make("2.5")
    out["v2_8_compile_context"] = make("2.8")
    out["v2_9_graph_capture_key"] = make("2.9")
    out["v2_10_user_metadata"] = make("2.10")
    out["v2_1_state_only"] = make("2.1", traced=False)
    out["v2_5_state_only_no_traces_key"] = {
        k: v for k, v in make("2.5", traced=False).items() if k != "device_traces"}
    out["memory_snapshot_list"] = make("2.1", traced=False)["segments"]
    out["multi_device"] = make("2.5", devices=(0, 2))  # device 1: an empty list
    multi_state = make("2.5", devices=(0, 1))
    multi_state["device_traces"][1] = []  # device 1 has segments but no entries
    out["multi_device_state_only_device"] = multi_state

    # Objects referenced again anywhere: a trace entry dict twice in one trace, a frames list in
    # two devices' entries, frame dicts shared between stacks, one trace list for two devices.
    shared = make("2.5", devices=(0, 1))
    shared["device_traces"][0].append({"action": "snapshot", "addr": 0, "size": 1024,
                                       "stream": 0, "time_us": T0 + 100,
                                       "frames": shared["segments"][0]["frames"]})
    stack = shared["segments"][0]["frames"]
    shared["segments"][1]["frames"] = [stack[1], stack[0]]  # same frame dicts, other order
    shared["segments"][1]["blocks"][1]["frames"] = shared["segments"][1]["frames"]
    shared["device_traces"][1][2]["frames"] = shared["segments"][1]["frames"]
    out["shared_objects"] = shared
    twice = make("2.5")
    marker = {"action": "snapshot", "addr": 0, "size": 1024, "stream": 0, "time_us": T0 + 50}
    twice["device_traces"][0] += [marker, marker]  # the same dict object twice
    out["shared_trace_entry"] = twice
    same_list = make("2.5", devices=(0, 1))
    same_list["device_traces"][1] = same_list["device_traces"][0]
    out["shared_trace_list"] = same_list

    # Frames with odd fields: a line of 2^64-1 (C++ size_t(-1)), missing keys, None, FX extras.
    odd = make("2.5")
    odd_stack = [frame("??", 2**64 - 1, "<unknown>"), {"filename": None, "name": "no_line"},
                 {"line": 7, "name": "no_file", "fx_node_op": "call_function",
                  "fx_node_name": "mm", "fx_original_trace": "x @ w"},
                 frame("big", 2**70)]
    odd["segments"][0]["blocks"][1]["frames"] = odd_stack
    odd["device_traces"][0][2]["frames"] = odd_stack
    out["odd_frames"] = odd

    # Keys and actions no release up to 2.11 writes: kept out of the way, never fatal.
    newer = make("2.10")
    newer["host_segments"] = []
    newer["segments"][0]["pool_name"] = "default"
    newer["segments"][0]["blocks"][0]["category"] = "activation"
    newer["allocator_settings"]["pinned_reserve_segment_size_mb"] = 0
    newer["device_traces"][0].append({"action": "annotate", "addr": 0, "size": 0, "stream": 0,
                                      "time_us": T0 + 99, "compile_context": "N/A",
                                      "user_metadata": "", "name": "step"})
    out["newer_keys"] = newer
    return out


def main():
    here = os.path.dirname(os.path.abspath(__file__))
    default = os.path.join(here, "..", "..", "fixtures", "snapshot-variants")
    target = sys.argv[1] if len(sys.argv) > 1 else default
    os.makedirs(target, exist_ok=True)
    for name, snap in variants().items():
        # Protocol 4 as _dump_snapshot writes it; the 2.0 file with protocol 2 like C++ writers.
        protocol = 2 if name == "v2_0_history" else 4
        with open(os.path.join(target, name + ".pickle"), "wb") as f:
            pickle.dump(snap, f, protocol=protocol)
    print(f"wrote {len(variants())} snapshots to {os.path.normpath(target)}")


if __name__ == "__main__":
    main()
