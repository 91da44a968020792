"""The recording itself: memory history from CUDA init, sets at OOM / exit / every K steps."""

import atexit
import gc
import importlib
import json
import os
import pickle
import signal
import socket
import sys
import threading
import time

from . import fingerprint, manifest, naming

VERSION = "0.1.0"
DEFAULT_MAX_ENTRIES = 1000000
STACK_MODES = ("python", "all", "none")
# Sets written at out-of-memory errors, at most (a script that retries on OOM can hit many).
MAX_OOM_SETS = 8


def _warn(message):
    sys.stderr.write("fragscope-record: %s\n" % message)
    sys.stderr.flush()


def _json_default(value):
    try:
        return int(value)
    except (TypeError, ValueError):
        return str(value)


def _write_atomic(path, data, binary):
    tmp = "%s.%d.tmp" % (path, os.getpid())
    with open(tmp, "wb" if binary else "w", **({} if binary else {"encoding": "utf-8"})) as out:
        out.write(data)
    os.replace(tmp, path)


class Recorder:
    def __init__(self, torch, out, job, max_entries=DEFAULT_MAX_ENTRIES, stacks="python",
                 every_steps=0, command=None):
        if stacks not in STACK_MODES:
            raise ValueError("stacks must be one of %s, got %r" % (", ".join(STACK_MODES), stacks))
        if max_entries < 1:
            raise ValueError("max_entries must be at least 1")
        if every_steps < 0:
            raise ValueError("every_steps must not be negative")
        self.torch = torch
        self.out = os.path.abspath(out)
        self.job = naming.sanitize(job)
        self.identity = naming.process_identity()
        self.max_entries = max_entries
        self.stacks = stacks
        self.every_steps = every_steps
        self.command = list(command) if command is not None else list(sys.argv)
        self.started = time.time()
        self.steps = 0
        self.step_ends_us = []  # optimizer-step end times, in the trace's clock (µs since epoch)
        self.oom_sets = 0
        self.manual_sets = 0
        self.fractions = {}  # device -> fraction given to set_per_process_memory_fraction
        self.outcome = "ok"
        self.oom_message = None
        self.last_oom = None
        self.last_oom_base = None
        self.finished = False
        self._env = None
        self._lock = threading.RLock()
        self._in_dump = False
        self._history_context = None

    # --- starting ---------------------------------------------------------------------------
    def start(self):
        torch = self.torch
        os.makedirs(self.out, exist_ok=True)
        # The allocator of every device exists after init; recording begins before the script's
        # first allocation, so the trace starts from an empty allocator and replays exactly.
        torch.cuda.init()
        self._patch_fraction()
        context = None if self.stacks == "none" else "all"
        stacks = "all" if self.stacks == "all" else "python"
        record = torch.cuda.memory._record_memory_history
        try:
            record(enabled="all", context=context, stacks=stacks, max_entries=self.max_entries)
        except TypeError:  # PyTorch 2.0's signature
            record(True, record_context=context is not None, trace_alloc_max_entries=self.max_entries,
                   trace_alloc_record_context=context is not None)
        self._history_context = context
        attach = getattr(torch._C, "_cuda_attach_out_of_memory_observer", None)
        if attach is not None:
            attach(self._on_oom)
        else:
            _warn("this PyTorch has no out-of-memory observer: no set at the moment of an OOM")
        # Always hooked: the step end times let a job's ranks be lined up by step.
        self._hook_optimizer()
        return self

    def _patch_fraction(self):
        """Remembers the per-process memory fraction the script sets (older PyTorch releases
        have no getter for it); the cap is what a replay needs to fail where PyTorch failed."""
        cuda = self.torch.cuda
        original = cuda.set_per_process_memory_fraction
        recorder = self

        def set_per_process_memory_fraction(fraction, device=None):
            result = original(fraction, device)
            try:
                index = cuda.current_device() if device is None else cuda._utils._get_device_index(device)
            except Exception:  # noqa: BLE001
                index = 0
            recorder.fractions[int(index)] = float(fraction)
            return result

        set_per_process_memory_fraction.__wrapped__ = original
        set_per_process_memory_fraction.__doc__ = original.__doc__
        cuda.set_per_process_memory_fraction = set_per_process_memory_fraction
        if hasattr(cuda, "memory") and hasattr(cuda.memory, "set_per_process_memory_fraction"):
            cuda.memory.set_per_process_memory_fraction = set_per_process_memory_fraction

    def _hook_optimizer(self):
        # torch.optim deletes its submodule names, so the module is looked up, not an attribute.
        module = sys.modules.get("torch.optim.optimizer")
        if module is None:
            try:
                module = importlib.import_module("torch.optim.optimizer")
            except ImportError:
                module = None
        register = getattr(module, "register_optimizer_step_post_hook", None)
        if register is not None:
            register(lambda optimizer, args, kwargs: self.optimizer_step())
            return
        # PyTorch < 2.0: every optimizer class overrides step, so wrap each instance's step.
        optimizer_class = self.torch.optim.Optimizer
        original_init = optimizer_class.__init__
        recorder = self

        def __init__(self_, *args, **kwargs):  # pragma: no cover - PyTorch < 2.0
            original_init(self_, *args, **kwargs)
            step = self_.step

            def counted_step(*a, **k):
                result = step(*a, **k)
                recorder.optimizer_step()
                return result

            self_.step = counted_step

        optimizer_class.__init__ = __init__

    def optimizer_step(self):
        """Counts one optimizer step; every `every_steps`-th writes a set. Call it yourself when
        your loop does not use torch.optim."""
        self.steps += 1
        self.step_ends_us.append(int(time.time() * 1e6))
        if self.every_steps and self.steps % self.every_steps == 0:
            self.dump("step", self.steps)

    # --- the moments ------------------------------------------------------------------------
    def _on_oom(self, device, alloc, device_allocated, device_free):
        # Called by the allocator (its lock released, GIL held) just before it raises.
        self.last_oom = {"device": int(device), "requested": int(alloc),
                         "device_limit": int(device_allocated), "device_free": int(device_free)}
        if self.oom_sets >= MAX_OOM_SETS:
            return
        self.oom_sets += 1
        self.dump("oom", self.oom_sets, device=int(device))

    def note_exception(self, error):
        """What ended the run: an OutOfMemoryError's full message goes into the OOM set's
        stats too (the observer runs before PyTorch builds the message)."""
        oom_type = getattr(self.torch, "OutOfMemoryError", None) or getattr(
            self.torch.cuda, "OutOfMemoryError", None)
        text = str(error)
        if oom_type is not None and isinstance(error, oom_type):
            self.outcome = "oom: " + text.splitlines()[0] if text else "oom"
            self.oom_message = text
            if self.last_oom_base is not None:
                self._add_oom_message(self.last_oom_base, text)
        elif isinstance(error, KeyboardInterrupt):
            self.outcome = "interrupted"
        elif isinstance(error, SystemExit):
            code = error.code
            if code not in (None, 0):
                self.outcome = "exit status %s" % (code,)
        else:
            self.outcome = "exception: %s: %s" % (type(error).__name__, text.splitlines()[0] if text else "")

    def _add_oom_message(self, base, text):
        path = os.path.join(self.out, base + naming.STATS_SUFFIX)
        try:
            with open(path, encoding="utf-8") as f:
                stats = json.load(f)
            stats["oom_message"] = text
            stats["outcome"] = "oom: " + text.splitlines()[0]
            _write_atomic(path, json.dumps(stats, indent=1, default=_json_default), binary=False)
        except (OSError, ValueError) as error:
            _warn("could not add the OOM message to %s: %s" % (path, error))

    def finish(self):
        """The exit set; recording stops. Safe to call more than once."""
        with self._lock:
            if self.finished:
                return
            self.finished = True
        try:
            self.dump("exit")
        finally:
            try:
                self.torch.cuda.memory._record_memory_history(enabled=None)
            except Exception:  # noqa: BLE001 - shutting down anyway
                pass

    # --- writing ----------------------------------------------------------------------------
    def environment(self):
        if self._env is None:
            self._env = fingerprint.collect(self.torch)
        return self._env

    def _busiest_device(self, snapshot):
        traces = snapshot.get("device_traces") or []
        if not traces:
            return self.torch.cuda.current_device()
        return max(range(len(traces)), key=lambda d: (len(traces[d]), -d))

    def _allowed_bytes(self, device, total, moment):
        """The cap the allocator enforced: the observer's limit at an OOM (it passes the allowed
        maximum when a fraction is set), else fraction x total as the allocator computes it."""
        if moment == "oom" and self.last_oom is not None and self.last_oom["device"] == device:
            if self.last_oom["device_limit"] != total:
                return self.last_oom["device_limit"]
        fraction = self.fractions.get(device)
        if fraction is None:
            getter = getattr(self.torch.cuda, "get_per_process_memory_fraction", None)
            if getter is not None:
                try:
                    fraction = float(getter(device))
                except Exception:  # noqa: BLE001
                    fraction = None
        if fraction is None or fraction >= 1.0:
            return None
        return int(fraction * float(total))

    def dump(self, moment, index=None, device=None):
        """Writes one set (snapshot, stats, summary, env). Never raises: a failed write is
        reported and the script goes on."""
        with self._lock:
            if self._in_dump:
                return None
            self._in_dump = True
            try:
                return self._dump(moment, index, device)
            except Exception as error:  # noqa: BLE001 - recording must not kill the run
                _warn("writing the %s set failed: %s: %s" % (moment, type(error).__name__, error))
                return None
            finally:
                self._in_dump = False

    def _dump(self, moment, index, device):
        torch = self.torch
        base = naming.set_base(self.job, self.identity, moment, index)
        files = {role: os.path.join(self.out, name) for role, name in naming.set_files(base).items()}
        if moment == "exit":
            gc.collect()  # the script's garbage cycles are freed inside the trace, not after it
        # The snapshot, memory_stats() and memory_summary() must describe the same instant: no
        # garbage collection (which frees tensors) between them.
        gc_was_enabled = gc.isenabled()
        gc.disable()
        try:
            snapshot = torch.cuda.memory._snapshot()
            if device is None:
                device = self._busiest_device(snapshot)
            memory_stats = torch.cuda.memory_stats(device)
            memory_summary = torch.cuda.memory_summary(device)
        finally:
            if gc_was_enabled:
                gc.enable()
        _write_atomic(files["snapshot"], pickle.dumps(snapshot), binary=True)
        traces = snapshot.get("device_traces") or []
        trace_entries = len(traces[device]) if device < len(traces) else 0
        total = None
        try:
            total = int(torch.cuda.mem_get_info(device)[1])
        except Exception:  # noqa: BLE001
            total = int(torch.cuda.get_device_properties(device).total_memory)
        props = torch.cuda.get_device_properties(device)
        fraction = self.fractions.get(device)
        alloc_conf = os.environ.get("PYTORCH_CUDA_ALLOC_CONF", os.environ.get("PYTORCH_ALLOC_CONF", ""))
        backend = None
        try:
            backend = torch.cuda.get_allocator_backend()
        except Exception:  # noqa: BLE001
            backend = None
        outcome = self.outcome
        if moment == "oom":
            outcome = "oom"
        stats = {
            "format": "fragscope-record-stats/1",
            "name": base,
            "job": self.job,
            "moment": moment,
            "step": self.steps,
            "step_ends_us": list(self.step_ends_us),
            "outcome": outcome,
            "oom_message": self.oom_message if moment == "exit" else None,
            "oom": self.last_oom if moment == "oom" else None,
            "alloc_conf": alloc_conf,
            "allocator_backend": backend,
            "allocator_settings": snapshot.get("allocator_settings"),
            "torch": str(torch.__version__),
            "cuda": torch.version.cuda,
            "device": props.name,
            "device_index": device,
            "total_memory": total,
            "per_process_memory_fraction": fraction,
            "allowed_bytes": self._allowed_bytes(device, total, moment),
            "memory_stats": memory_stats,
            "history": {
                "stacks": self.stacks,
                "context": self._history_context,
                "max_entries": self.max_entries,
                "started": "right after torch.cuda.init(), before the script ran",
                "trace_entries": trace_entries,
                "trace_full": trace_entries >= self.max_entries,
            },
            "rank": self.identity.rank,
            "local_rank": self.identity.local_rank,
            "world_size": self.identity.world_size,
            "command": self.command,
            "wall_s": time.time() - self.started,
            "pid": os.getpid(),
            "host": socket.gethostname(),
            "recorder": "fragscope-record %s" % VERSION,
        }
        if trace_entries >= self.max_entries:
            _warn("%s: the trace filled its %d entries; the start of the run is lost and it will "
                  "not replay exactly (raise --max-entries)" % (base, self.max_entries))
        _write_atomic(files["stats"], json.dumps(stats, indent=1, default=_json_default), binary=False)
        _write_atomic(files["summary"], memory_summary, binary=False)
        _write_atomic(files["env"], json.dumps(self.environment(), indent=1, default=_json_default),
                      binary=False)
        if moment == "oom":
            self.last_oom_base = base
        if self.identity.multi_process and self.identity.file_rank is not None and moment in ("exit", "oom"):
            self._publish(files, outcome, moment)
        return files

    def _publish(self, files, outcome, moment):
        # The manifest points at the exit set; until there is one, at the latest OOM set.
        if moment == "oom" and self.finished:
            return
        entry = manifest.rank_entry(self.identity.file_rank, self.identity.local_rank, files, self.out,
                                    outcome=outcome, host=socket.gethostname())
        manifest.publish_rank(self.out, self.job, self.identity.world_size, entry)


_ACTIVE = None


def active():
    return _ACTIVE


def _on_sigterm(signum, frame):
    recorder = _ACTIVE
    if recorder is not None and not recorder.finished:
        recorder.outcome = "terminated by signal %d" % signum
        recorder.finish()
    signal.signal(signum, signal.SIG_DFL)
    os.kill(os.getpid(), signum)


def start(out="fragscope-recordings", name=None, max_entries=DEFAULT_MAX_ENTRIES, stacks="python",
          every_steps=0, command=None, at_exit=True):
    """Starts recording in this process (call it before the first CUDA allocation)."""
    global _ACTIVE
    if _ACTIVE is not None:
        return _ACTIVE
    import torch  # only here: argument parsing and --help work without torch

    if not torch.cuda.is_available():
        raise RuntimeError("fragscope-record: CUDA is not available to this PyTorch; nothing to record")
    if name is None:
        main = sys.modules.get("__main__")
        name = naming.job_name_for(getattr(main, "__file__", None) or "run")
    recorder = Recorder(torch, out, name, max_entries=max_entries, stacks=stacks,
                        every_steps=every_steps, command=command)
    recorder.start()
    _ACTIVE = recorder
    if at_exit:
        atexit.register(recorder.finish)
        previous_hook = sys.excepthook

        def excepthook(kind, value, traceback):
            recorder.note_exception(value)
            previous_hook(kind, value, traceback)

        sys.excepthook = excepthook
    if threading.current_thread() is threading.main_thread():
        if signal.getsignal(signal.SIGTERM) in (signal.SIG_DFL, None):
            signal.signal(signal.SIGTERM, _on_sigterm)
    return recorder
