#!/usr/bin/env python3
"""Run one point of a FragScope experiment file as a real PyTorch training loop on a GPU.

    torch_runner.py EXPERIMENT.json --out DIR [--variant NAME] [--set KEY=JSON ...]
                    [--capacity-bytes N] [--micro-batches FILE] [--stacks] [--name NAME]
    torch_runner.py EXPERIMENT.json --plan [--variant NAME] [--set KEY=JSON ...]

Writes, like tests/fixtures/torch-2.11-h200 (NAME defaults to "run"):
  DIR/NAME.pickle      torch.cuda.memory._dump_snapshot(), history recorded from CUDA init
  DIR/NAME.stats.json  memory_stats() after the run, the config, params, outcome, model,
                       micro_batches, plus "environment" (versions, GPU, driver, host) and
                       "steps" (per optimizer step: wall and CUDA-event milliseconds, allocated
                       and reserved bytes at the end of the step, empty_cache() cost)
  DIR/NAME.summary.txt memory_summary()
--plan prints the resolved run (config, model, training, micro-batch shapes) as JSON and exits
without importing torch. Exit status: 0 ran (an OOM is a result: outcome "oom: ..."), 2 bad
input or no usable GPU.

PYTORCH_CUDA_ALLOC_CONF is taken from the experiment's allocator.alloc_conf and must be set
before CUDA starts, so this script sets it before importing torch; one run per process.
"""
import argparse
import gc
import json
import os
import platform
import socket
import subprocess
import sys
import time

import experiment as exp


def parse_args(argv):
    p = argparse.ArgumentParser(description=__doc__.split("\n")[1])
    p.add_argument("experiment")
    p.add_argument("--out", help="output folder (created)")
    p.add_argument("--name", default="run", help="file name stem of the outputs")
    p.add_argument("--variant", help="variant or sweep point name to apply")
    p.add_argument("--set", action="append", default=[], metavar="KEY=JSON",
                   help="override a dotted key, e.g. training.batch_size=4")
    p.add_argument("--capacity-bytes", type=int,
                   help="bytes the allocator may use (set_per_process_memory_fraction); "
                        "overrides device.capacity_bytes")
    p.add_argument("--micro-batches", help="JSON list of {batch_size, seq_len}, one per "
                   "micro-batch, to use instead of drawing them (the simulator's own shapes)")
    p.add_argument("--stacks", action="store_true", help="record Python stacks in the history")
    p.add_argument("--max-entries", type=int, default=2_000_000,
                   help="memory-history ring buffer size")
    p.add_argument("--plan", action="store_true", help="print the resolved run and exit")
    return p.parse_args(argv)


def fail(message):
    print(f"torch_runner: {message}", file=sys.stderr)
    sys.exit(2)


def resolve_run(args):
    try:
        run = exp.resolve(exp.load(args.experiment), args.experiment, args.variant, args.set)
        if args.micro_batches:
            with open(args.micro_batches, encoding="utf-8") as f:
                run["micro_batches"] = json.load(f)
            expected = run["training"]["steps"] * run["training"]["grad_accum"]
            if (not isinstance(run["micro_batches"], list)
                    or len(run["micro_batches"]) != expected):
                raise exp.ExperimentError(
                    f"{args.micro_batches}: expected a list of {expected} micro-batches "
                    "(steps x grad_accum)")
        else:
            run["micro_batches"] = exp.micro_batches(run["training"])
    except OSError as e:
        fail(f"{e.filename}: {e.strerror}")
    except (exp.ExperimentError, json.JSONDecodeError) as e:
        fail(str(e))
    device = run["device"]
    run["capacity_bytes"] = args.capacity_bytes or device.get("capacity_bytes")
    return run


def check_runnable(run, args):
    """What --plan can show but a real run cannot do."""
    device = run["device"]
    if run["capacity_bytes"] is None and device.get("preset"):
        fail(f"{args.experiment}: device.preset '{device['preset']}' needs --capacity-bytes "
             "(fragscope-cli torch-run passes the preset's capacity)")
    shards = run["parallel"].get("fsdp_shards", 1)
    if shards != 1:
        fail(f"{args.experiment}: parallel.fsdp_shards {shards}: the runner trains on one GPU "
             "only (FSDP needs several processes)")


def environment(torch):
    props = torch.cuda.get_device_properties(0)
    env = dict(torch=torch.__version__, cuda=torch.version.cuda,
               cudnn=torch.backends.cudnn.version(), python=platform.python_version(),
               gpu_name=torch.cuda.get_device_name(0), gpu_memory=props.total_memory,
               compute_capability=f"{props.major}.{props.minor}",
               multiprocessors=props.multi_processor_count, host=socket.gethostname(),
               platform=platform.platform(), driver=driver_version())
    return env


def driver_version():
    try:
        import pynvml
        pynvml.nvmlInit()
        version = pynvml.nvmlSystemGetDriverVersion()
        return version.decode() if isinstance(version, bytes) else version
    except Exception:  # NVML missing or not usable: fall back to the command line tool
        pass
    try:
        out = subprocess.run(["nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader"],
                             capture_output=True, text=True, timeout=20)
        return out.stdout.strip().splitlines()[0] if out.returncode == 0 else ""
    except (OSError, IndexError, subprocess.TimeoutExpired):
        return ""


def train(run, torch, steps_log):
    """The training loop of record_torch_traces.py's gpt(), driven by the experiment's knobs."""
    import torch.nn.functional as F
    from model import GPT, apply_compile

    m, t = run["model"], run["training"]
    # No manual_seed: the fixtures ran with PyTorch's fixed default seeds, and the token values
    # matter to memory (the embedding backward's buffers depend on how many tokens are unique).
    model = GPT(m, t).cuda()
    if t["precision"] == "bf16":
        model = model.to(torch.bfloat16)
    if any(t["compile"].values()):
        apply_compile(model, t["compile"])
    opt_kwargs = dict(lr=1e-4)
    if t["fused"]:
        opt_kwargs["fused"] = True
    opt = dict(sgd=torch.optim.SGD, adam=torch.optim.Adam,
               adamw=torch.optim.AdamW)[t["optimizer"]](model.parameters(), **opt_kwargs)
    autocast_dtype = {"bf16-autocast": torch.bfloat16, "fp16-autocast": torch.float16}.get(
        t["precision"])
    vocab, accum = m["vocab"], t["grad_accum"]

    def loss_of(logits, idx):
        return F.cross_entropy(logits.float().view(-1, vocab), idx.view(-1)) / accum

    if t["compile"]["loss"]:
        loss_of = torch.compile(loss_of)
    shapes = iter(run["micro_batches"])
    done = 0
    for step in range(t["steps"]):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        wall0 = time.perf_counter()
        start.record()
        for _ in range(accum):
            shape = next(shapes)
            idx = torch.randint(0, vocab, (shape["batch_size"], shape["seq_len"]), device="cuda")
            with torch.autocast("cuda", dtype=autocast_dtype, enabled=autocast_dtype is not None):
                logits = model(idx)
            loss = loss_of(logits, idx)
            if not t["hold_logits"]:
                logits = None  # the loop drops its reference before backward
            loss.backward()
            del logits, loss, idx
        opt.step()
        opt.zero_grad(set_to_none=True)
        end.record()
        torch.cuda.synchronize()
        entry = dict(step=step, wall_ms=(time.perf_counter() - wall0) * 1e3,
                     cuda_ms=start.elapsed_time(end),
                     allocated=torch.cuda.memory_allocated(),
                     reserved=torch.cuda.memory_reserved())
        done += 1
        if t["empty_cache_every"] and (step + 1) % t["empty_cache_every"] == 0:
            e0 = time.perf_counter()
            torch.cuda.empty_cache()
            entry["empty_cache_ms"] = (time.perf_counter() - e0) * 1e3
            entry["reserved_after_empty_cache"] = torch.cuda.memory_reserved()
        steps_log.append(entry)
    return done


def main(argv):
    args = parse_args(argv)
    run = resolve_run(args)
    if args.plan:
        json.dump(run, sys.stdout, indent=1)
        print()
        return 0
    if not args.out:
        fail("--out DIR is required (or --plan)")
    check_runnable(run, args)
    os.makedirs(args.out, exist_ok=True)
    if run["alloc_conf"]:
        os.environ["PYTORCH_CUDA_ALLOC_CONF"] = run["alloc_conf"]
    else:
        os.environ.pop("PYTORCH_CUDA_ALLOC_CONF", None)
    try:
        import torch
    except ImportError as e:
        fail(f"cannot import torch with {sys.executable}: {e} (pass --python to fragscope-cli)")
    if not torch.cuda.is_available():
        fail(f"PyTorch {torch.__version__} sees no CUDA GPU")
    torch.cuda.init()
    total = torch.cuda.get_device_properties(0).total_memory
    if run["capacity_bytes"]:
        if run["capacity_bytes"] > total:
            fail(f"capacity {run['capacity_bytes']} bytes is more than the GPU's {total}")
        torch.cuda.set_per_process_memory_fraction(run["capacity_bytes"] / total)
    torch.cuda.memory._record_memory_history(
        max_entries=args.max_entries, stacks="python", context="all" if args.stacks else None)
    steps_log, outcome, t0 = [], "ok", time.time()
    try:
        done = train(run, torch, steps_log)
    except torch.OutOfMemoryError as e:
        outcome = "oom: " + str(e).splitlines()[0][:1000]
        done = len(steps_log)
    if any(run["training"]["compile"].values()):
        gc.collect()  # compiled modules hold reference cycles (see model.apply_compile)
    torch.cuda.synchronize()
    wall = time.time() - t0
    stem = os.path.join(args.out, args.name)
    torch.cuda.memory._dump_snapshot(stem + ".pickle")
    torch.cuda.memory._record_memory_history(enabled=None)
    t = run["training"]
    params = dict(steps=t["steps"], bs=t["batch_size"], accum=t["grad_accum"],
                  ckpt=t["checkpointing"] != "none", varlen=t["seq_len"]["kind"] != "fixed")
    if run["capacity_bytes"]:
        params["capacity_bytes"] = run["capacity_bytes"]
    stats = dict(name=run["name"], alloc_conf=run["alloc_conf"], kind="gpt", params=params,
                 outcome=outcome, wall_s=wall, torch=torch.__version__, cuda=torch.version.cuda,
                 device=torch.cuda.get_device_name(0), total_memory=total,
                 memory_stats=torch.cuda.memory_stats(), model=run["model"],
                 training=run["training"], micro_batches=run["micro_batches"],
                 steps_completed=done, capacity_bytes=run["capacity_bytes"],
                 environment=environment(torch), steps=steps_log,
                 command=[sys.executable] + sys.argv)
    with open(stem + ".stats.json", "w", encoding="utf-8") as f:
        json.dump(stats, f, indent=1, default=str)
    with open(stem + ".summary.txt", "w", encoding="utf-8") as f:
        f.write(torch.cuda.memory_summary())
    peak = stats["memory_stats"]
    print(f"{run['name']}: {outcome[:120]} steps {done} peak allocated "
          f"{peak.get('allocated_bytes.all.peak', 0)} reserved "
          f"{peak.get('reserved_bytes.all.peak', 0)} wall {wall:.1f}s", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
