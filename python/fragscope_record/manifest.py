"""The job manifest of a multi-process recording (pure: no torch).

Every rank writes its own entry file (``.fragscope-job/JOB.rankR.json`` in the output folder)
and then, holding an exclusive lock on ``.fragscope-job/JOB.lock``, rebuilds ``fragscope-job.json``
from all entry files present. Whatever order the ranks finish in, the last one to take the lock
sees every entry, and each write replaces the manifest atomically (temporary file + rename), so a
reader never sees half a manifest.

Format (``fragscope-job/1``)::

    {"format": "fragscope-job/1", "job": "train", "world_size": 2,
     "ranks": [{"rank": 0, "local_rank": 0, "snapshot": "train.rank0.pickle",
                "stats": "train.rank0.stats.json", "summary": "train.rank0.summary.txt",
                "env": "train.rank0.env.json", "outcome": "ok", "host": "node1"}, ...]}

Paths are relative to the manifest. ``ranks`` is sorted by rank. The manifest of one output
folder describes one job: a rank of another job name is refused rather than mixed in.
"""

import json
import os

from . import naming

FORMAT = "fragscope-job/1"
ENTRY_DIR = ".fragscope-job"

try:  # POSIX; elsewhere the manifest is still written, without the lock
    import fcntl
except ImportError:  # pragma: no cover - Windows
    fcntl = None


class ManifestError(ValueError):
    """A manifest or entry file that cannot be used, naming the file and what is wrong."""


def write_json_atomic(path, value):
    """Writes JSON to a temporary file beside `path`, then renames it over `path`."""
    folder = os.path.dirname(os.path.abspath(path))
    tmp = os.path.join(folder, ".%s.%d.tmp" % (os.path.basename(path), os.getpid()))
    with open(tmp, "w", encoding="utf-8") as out:
        json.dump(value, out, indent=1, sort_keys=False)
        out.write("\n")
        out.flush()
        os.fsync(out.fileno())
    os.replace(tmp, path)


def rank_entry(rank, local_rank, files, out_dir, outcome=None, host=None):
    """One rank's entry: its files relative to the output folder (where the manifest lies)."""
    entry = {"rank": rank, "local_rank": local_rank}
    for role in ("snapshot", "stats", "summary", "env"):
        entry[role] = os.path.relpath(files[role], out_dir).replace(os.sep, "/")
    if outcome is not None:
        entry["outcome"] = outcome
    if host is not None:
        entry["host"] = host
    return entry


def _entry_path(out_dir, job, rank):
    return os.path.join(out_dir, ENTRY_DIR, "%s.rank%d.json" % (naming.sanitize(job), rank))


def _read_entries(out_dir, job):
    prefix = naming.sanitize(job) + ".rank"
    folder = os.path.join(out_dir, ENTRY_DIR)
    entries = []
    for name in sorted(os.listdir(folder)):
        if not (name.startswith(prefix) and name.endswith(".json")):
            continue
        path = os.path.join(folder, name)
        try:
            with open(path, encoding="utf-8") as f:
                entry = json.load(f)
        except (OSError, ValueError) as error:
            raise ManifestError("%s: unreadable rank entry: %s" % (path, error))
        if not isinstance(entry, dict) or not isinstance(entry.get("rank"), int):
            raise ManifestError("%s: expected an object with an integer \"rank\"" % path)
        entries.append(entry)
    entries.sort(key=lambda e: e["rank"])
    return entries


def assemble(job, world_size, entries):
    """The manifest object for `entries` (sorted by rank, one per rank: the latest wins)."""
    by_rank = {}
    for entry in entries:
        by_rank[entry["rank"]] = entry
    ranks = [by_rank[r] for r in sorted(by_rank)]
    if world_size is None:
        world_size = len(ranks)
    return {"format": FORMAT, "job": job, "world_size": world_size, "ranks": ranks}


def publish_rank(out_dir, job, world_size, entry):
    """Writes this rank's entry and rebuilds the manifest under the job's lock.
    Returns the manifest as written."""
    folder = os.path.join(out_dir, ENTRY_DIR)
    os.makedirs(folder, exist_ok=True)
    lock_path = os.path.join(folder, naming.sanitize(job) + ".lock")
    with open(lock_path, "a") as lock:
        if fcntl is not None:
            fcntl.flock(lock.fileno(), fcntl.LOCK_EX)
        try:
            manifest_path = os.path.join(out_dir, naming.MANIFEST_NAME)
            if os.path.exists(manifest_path):
                existing = read_manifest(manifest_path)
                if existing["job"] != job:
                    raise ManifestError(
                        "%s: belongs to job %r, not %r: give each job its own --out folder"
                        % (manifest_path, existing["job"], job))
            write_json_atomic(_entry_path(out_dir, job, entry["rank"]), entry)
            manifest = assemble(job, world_size, _read_entries(out_dir, job))
            write_json_atomic(manifest_path, manifest)
            return manifest
        finally:
            if fcntl is not None:
                fcntl.flock(lock.fileno(), fcntl.LOCK_UN)


def read_manifest(path):
    """A manifest, checked: ManifestError naming the file and the place otherwise."""
    try:
        with open(path, encoding="utf-8") as f:
            manifest = json.load(f)
    except (OSError, ValueError) as error:
        raise ManifestError("%s: cannot read the job manifest: %s" % (path, error))
    if not isinstance(manifest, dict):
        raise ManifestError("%s: expected a JSON object" % path)
    if manifest.get("format") != FORMAT:
        raise ManifestError("%s: format: expected %r, got %r" % (path, FORMAT, manifest.get("format")))
    if not isinstance(manifest.get("job"), str):
        raise ManifestError("%s: job: expected a string" % path)
    if not isinstance(manifest.get("world_size"), int):
        raise ManifestError("%s: world_size: expected an integer" % path)
    ranks = manifest.get("ranks")
    if not isinstance(ranks, list):
        raise ManifestError("%s: ranks: expected a list" % path)
    for i, entry in enumerate(ranks):
        if not isinstance(entry, dict) or not isinstance(entry.get("rank"), int):
            raise ManifestError("%s: ranks[%d].rank: expected an integer" % (path, i))
        for role in ("snapshot", "stats", "summary", "env"):
            if not isinstance(entry.get(role), str):
                raise ManifestError("%s: ranks[%d].%s: expected a path" % (path, i, role))
    return manifest
