"""fragscope-record: record a PyTorch script's CUDA memory the way FragScope needs it.

    python -m fragscope_record --out runs -- train.py ARGS...

or, in a notebook or launcher, before the first CUDA allocation::

    import fragscope_record
    fragscope_record.start(out="runs")
    ...
    fragscope_record.snapshot()      # a set now (NAME.manualN.*), optional
    fragscope_record.stop()          # the exit set now (also written at interpreter exit)

Importing this package does not import torch.
"""

from .naming import MANIFEST_NAME, job_name_for, process_identity  # noqa: F401

__version__ = "0.1.0"


def start(out="fragscope-recordings", name=None, max_entries=None, stacks="python", every_steps=0):
    """Starts recording: memory history from now on (call before the first CUDA allocation),
    a set at every out-of-memory error and at exit, and one every `every_steps` optimizer
    steps when that is positive. Returns the recorder."""
    from . import recorder

    return recorder.start(out=out, name=name,
                          max_entries=recorder.DEFAULT_MAX_ENTRIES if max_entries is None else max_entries,
                          stacks=stacks, every_steps=every_steps)


def _active():
    from . import recorder

    active = recorder.active()
    if active is None:
        raise RuntimeError("fragscope_record.start() was not called")
    return active


def snapshot():
    """Writes a set now (NAME.manual, NAME.manual2, ...); returns its files."""
    active = _active()
    active.manual_sets += 1
    return active.dump("manual", active.manual_sets)


def step():
    """Counts an optimizer step for --every-steps when the loop does not use torch.optim."""
    _active().optimizer_step()


def stop():
    """Writes the exit set now and stops recording."""
    _active().finish()
