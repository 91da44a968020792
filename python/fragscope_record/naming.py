"""File names of a recording (pure: no torch).

One recording *set* is four files sharing a base name:
``BASE.pickle`` (the snapshot), ``BASE.stats.json``, ``BASE.summary.txt`` and ``BASE.env.json``.
FragScope's importer finds the companions of ``BASE.pickle`` by that base name.

The base is ``JOB`` for a single process and ``JOB.rankR`` under a multi-process launcher, followed
by the moment of the set: nothing at exit (the complete trace), ``.oom`` for the first
out-of-memory error (``.oom2``, ``.oom3`` ... for later ones) and ``.stepN`` for the periodic
snapshots.
"""

import os
import re

SNAPSHOT_SUFFIX = ".pickle"
STATS_SUFFIX = ".stats.json"
SUMMARY_SUFFIX = ".summary.txt"
ENV_SUFFIX = ".env.json"
MANIFEST_NAME = "fragscope-job.json"

_UNSAFE = re.compile(r"[^A-Za-z0-9._+-]+")


def sanitize(name):
    """A file-name-safe job name: runs of other characters become '_'; never empty."""
    cleaned = _UNSAFE.sub("_", str(name)).strip("._")
    return cleaned or "run"


def job_name_for(target, is_module=False):
    """The default job name: ``train`` for a script ``path/train.py`` or a module ``pkg.train``."""
    target = str(target)
    if is_module:
        return sanitize(target.split(".")[-1])
    base = os.path.basename(target.rstrip("/\\"))
    if base.endswith(".py"):
        base = base[: -len(".py")]
    return sanitize(base)


def int_env(environ, key):
    """An integer environment variable, or None when absent or not an integer."""
    value = environ.get(key)
    if value is None:
        return None
    try:
        return int(value.strip())
    except ValueError:
        return None


class ProcessIdentity:
    """Which process of a job this is, from the launcher's variables (torchrun, Slurm, MPI)."""

    def __init__(self, rank=None, local_rank=None, world_size=None):
        self.rank = rank
        self.local_rank = local_rank
        self.world_size = world_size

    @property
    def multi_process(self):
        return self.rank is not None or self.local_rank is not None or (
            self.world_size is not None and self.world_size > 1)

    @property
    def file_rank(self):
        """The rank that names this process's files: RANK, else LOCAL_RANK, else None."""
        return self.rank if self.rank is not None else self.local_rank

    def __repr__(self):
        return "ProcessIdentity(rank=%r, local_rank=%r, world_size=%r)" % (
            self.rank, self.local_rank, self.world_size)


def process_identity(environ=None):
    """RANK / LOCAL_RANK / WORLD_SIZE as torchrun sets them, with the Slurm and Open MPI
    equivalents as fallbacks. A lone process (none set, or WORLD_SIZE=1 without RANK) is not
    multi-process."""
    environ = os.environ if environ is None else environ
    rank = int_env(environ, "RANK")
    if rank is None:
        rank = int_env(environ, "OMPI_COMM_WORLD_RANK")
    if rank is None and int_env(environ, "SLURM_NTASKS") not in (None, 1):
        rank = int_env(environ, "SLURM_PROCID")
    local_rank = int_env(environ, "LOCAL_RANK")
    if local_rank is None:
        local_rank = int_env(environ, "OMPI_COMM_WORLD_LOCAL_RANK")
    if local_rank is None and rank is not None and int_env(environ, "SLURM_NTASKS") not in (None, 1):
        local_rank = int_env(environ, "SLURM_LOCALID")
    world_size = int_env(environ, "WORLD_SIZE")
    if world_size is None:
        world_size = int_env(environ, "OMPI_COMM_WORLD_SIZE")
    if world_size is None and rank is not None:
        world_size = int_env(environ, "SLURM_NTASKS")
    return ProcessIdentity(rank, local_rank, world_size)


def process_base(job, identity):
    """``JOB`` or ``JOB.rankR`` (R = RANK, else LOCAL_RANK)."""
    job = sanitize(job)
    if identity.multi_process and identity.file_rank is not None:
        return "%s.rank%d" % (job, identity.file_rank)
    return job


def moment_suffix(moment, index=None):
    """'' for the exit set, '.oom' / '.oomN' for the N-th OOM (N >= 2), '.stepN' for step N."""
    if moment == "exit":
        return ""
    if moment == "oom":
        return ".oom" if not index or index == 1 else ".oom%d" % index
    if moment == "step":
        if index is None:
            raise ValueError("a step snapshot needs its step number")
        return ".step%d" % index
    if moment == "manual":
        return ".manual" if not index or index == 1 else ".manual%d" % index
    raise ValueError("unknown moment %r" % (moment,))


def set_base(job, identity, moment, index=None):
    return process_base(job, identity) + moment_suffix(moment, index)


def set_files(base):
    """The four files of one set, by role."""
    return {
        "snapshot": base + SNAPSHOT_SUFFIX,
        "stats": base + STATS_SUFFIX,
        "summary": base + SUMMARY_SUFFIX,
        "env": base + ENV_SUFFIX,
    }
